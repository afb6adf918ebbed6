"""Update-time overhead of the token shapers on the default run, measured in one process.

    PYTHONPATH=. python scripts/bench_token_update.py [--repeats 3] [--checkpoint RUN] [key=value ...]

Builds the default run (``python -m agentrl.train`` with no overrides: tiny model, Sokoban, GiGPO,
16 tasks x 8 rollouts), plays one training iteration and computes its credit, then times step 4
of the recipe (``token_credit.update_inputs`` + ``Learner.update``) on that same batch: the
baseline (``credit.token=null``, the step advantage broadcast) and each shaper, interleaved, every
timed update starting from the same weights and optimiser state. Reports the median CPU time
(``time.process_time``) and wall time per variant and the ratio to the baseline. Extra arguments
are config overrides (e.g. ``rollout.tasks_per_iter=4`` for a quick check). ``--checkpoint`` (a run
folder or checkpoint, as ``trainer.resume`` takes) plays the batch with a trained policy: a sharper
policy repeats more (state, response) rows, which the learner's no-grad passes score once.
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np
from agentrl.credit import token_shapers

from agentrl import credit
from agentrl.config import load_config
from agentrl.learner.sequences import distinct_rows
from agentrl.recipe import build
from agentrl.rollout import RolloutStats, to_step_batch
from agentrl.training.checkpoint import find_checkpoint, load_checkpoint
from agentrl.training.iteration import credit_options, features, play_iteration
from agentrl.training.sharded_checkpoint import load_run_checkpoint
from agentrl.training.token_credit import hindsight_sequences, update_inputs


def _tokens(rows: list[tuple[int, ...]]) -> tuple[int, int]:
    """(tokens in the distinct rows, tokens a forward pass must still compute if rows sharing a
    prefix shared its KV cache: the nodes of their prefix trie, from sorted rows' common prefixes)."""
    rows = sorted(set(rows))
    nodes, prev = 0, ()
    for r in rows:
        k = 0
        while k < min(len(r), len(prev)) and r[k] == prev[k]:
            k += 1
        nodes, prev = nodes + len(r) - k, r
    return sum(len(r) for r in rows), nodes


def teacher_tokens(tokenizer, eps, seqs, step_adv) -> None:
    """Forward-pass sizes of StepOPSD's teacher pass against the student's rows: what the no-grad
    pass scores (distinct rows; the teacher's on steps with a non-zero advantage only) and a lower
    bound for any prefix-sharing scheme (trie nodes)."""
    student = _tokens([tuple(s.prompt_ids) + tuple(s.response_ids) for s in seqs])
    teacher = hindsight_sequences(tokenizer, eps, seqs)
    rows = [tuple(t.prompt_ids) + tuple(t.response_ids) for t in teacher]
    t = _tokens(rows)
    nz = _tokens([r for r, s in zip(rows, seqs) if step_adv[s.step_row] != 0])
    print(f"tokens scored, distinct rows / prefix-trie bound: student {student[0]} / {student[1]}, "
          f"stepopsd teacher {t[0]} / {t[1]}, of which on non-zero-advantage steps (scored) "
          f"{nz[0]} / {nz[1]}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--checkpoint", default=None, help="a run folder or checkpoint to start from")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    from hydra import compose, initialize_config_module

    with initialize_config_module("agentrl.configs", version_base=None):
        # progress needs the reference policy: build with it (the baseline ignores it)
        raw = compose("train", overrides=["credit.token=progress", *args.overrides])
    cfg = load_config(raw)
    parts = build(cfg)
    it = 0
    if args.checkpoint:
        ck = find_checkpoint(args.checkpoint)
        state = load_checkpoint(ck)
        load_run_checkpoint(parts.learner, ck, state["learner"])
        it = int(state["iteration"])
        print(f"policy of {ck} (iteration {it})")
    try:
        t0 = time.perf_counter()
        eps, _ = play_iteration(cfg, it, parts.train_ids, parts.runner, RolloutStats())
        print(f"rollout: {len(eps)} episodes in {time.perf_counter() - t0:.1f} s")
    finally:
        parts.runner.close()
    values, embs = features(
        parts.learner, parts.model, eps, parts.hooks.prompt_features, cfg.credit.embedding_layer
    )
    batch, seqs = to_step_batch(eps, values=values, embeddings=embs)
    res = credit.compute(batch, cfg.credit.name, **credit_options(cfg))
    n_tok = sum(len(s.response_ids) for s in seqs)
    n_distinct = len(distinct_rows(seqs)[0])
    print(f"batch: {len(seqs)} steps ({n_distinct} distinct), {n_tok} response tokens, "
          f"credit={cfg.credit.name}")  # fmt: skip
    teacher_tokens(parts.tokenizer, eps, seqs, res.advantages)
    learner = parts.learner
    start = copy.deepcopy(learner.state_dict())
    variants = [None, *token_shapers.available()]
    cpu: dict[str | None, list[float]] = {v: [] for v in variants}
    wall: dict[str | None, list[float]] = {v: [] for v in variants}
    for rep in range(args.repeats + 1):  # the first round warms up and is not counted
        for v in variants:
            learner.load_state_dict(copy.deepcopy(start))
            cfg.credit.token = v
            c0, w0 = time.process_time(), time.perf_counter()
            kw, _ = update_inputs(cfg, learner, parts.tokenizer, eps, batch, seqs, res, parts.hooks)
            learner.update(seqs, res.advantages, seed=3, **kw)
            if rep:
                cpu[v].append(time.process_time() - c0)
                wall[v].append(time.perf_counter() - w0)
    base_c, base_w = np.median(cpu[None]), np.median(wall[None])
    print("| credit.token | update CPU s | ratio | update wall s | ratio |")
    print("|---|---|---|---|---|")
    for v in variants:
        c, w = np.median(cpu[v]), np.median(wall[v])
        print(
            f"| {v or 'null (baseline)'} | {c:.2f} | {c / base_c:.3f} | {w:.2f} | {w / base_w:.3f} |"
        )


if __name__ == "__main__":
    main()
