"""The PPO update with equal rows sharing one forward pass, against one pass per row, in one process.

    PYTHONPATH=. python scripts/bench_shared_rows.py [--repeats 3] [--checkpoint RUN] [key=value ...]

Builds the run the overrides describe (none: the default, tiny model on Sokoban, GiGPO, 16 tasks x
8 rollouts), plays one training iteration, computes its credit, then times ``Learner.update`` on
that batch twice per round, interleaved: with equal (prompt, response, constraint) rows sharing a
forward pass (the learner's behaviour) and with one pass per row (the behaviour before). Every
timed update starts from the same weights and optimiser state. Prints the median CPU
(``time.process_time``) and wall time of each, their ratio, the share of rows the forward passes
ran, and the largest difference between the two updates' weights (float summation order only).
``--checkpoint`` (a run folder or checkpoint, as ``trainer.resume`` takes) plays the batch with a
trained policy, which repeats more rows.
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch

from agentrl import credit
from agentrl.config import load_config
from agentrl.learner.sequences import distinct_rows
from agentrl.recipe import build
from agentrl.rollout import RolloutStats, to_step_batch
from agentrl.training.checkpoint import find_checkpoint, load_checkpoint
from agentrl.training.iteration import credit_options, features, play_iteration
from agentrl.training.sharded_checkpoint import load_run_checkpoint


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--checkpoint", default=None, help="a run folder or checkpoint to start from")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    from hydra import compose, initialize_config_module

    with initialize_config_module("agentrl.configs", version_base=None):
        cfg = load_config(compose("train", overrides=args.overrides))
    torch.set_num_threads(cfg.trainer.num_threads)
    parts = build(cfg)
    it = 0
    if args.checkpoint:
        ck = find_checkpoint(args.checkpoint)
        state = load_checkpoint(ck)
        load_run_checkpoint(parts.learner, ck, state["learner"])
        it = int(state["iteration"])
        print(f"policy of {ck} (iteration {it})")
    try:
        eps, _ = play_iteration(cfg, it, parts.train_ids, parts.runner, RolloutStats())
    finally:
        parts.runner.close()
    values, embs = features(
        parts.learner, parts.model, eps, parts.hooks.prompt_features, cfg.credit.embedding_layer
    )
    batch, seqs = to_step_batch(eps, values=values, embeddings=embs)
    res = credit.compute(batch, cfg.credit.name, **credit_options(cfg))
    n_distinct = len(distinct_rows(seqs)[0])
    print(
        f"batch: {len(eps)} episodes, {len(seqs)} step rows ({n_distinct} distinct in the "
        f"batch), {cfg.trainer.epochs} epochs of mini-batches of {cfg.trainer.minibatch_size}"
    )
    learner = parts.learner
    learner.update(seqs, res.advantages, seed=2)  # warms up and gives the optimiser its state
    start = copy.deepcopy(learner.state_dict())
    cpu: dict[bool, list[float]] = {True: [], False: []}
    wall: dict[bool, list[float]] = {True: [], False: []}
    frac, weights = {}, {}
    for rep in range(args.repeats + 1):  # the first round is not counted either
        for shared in (True, False):
            learner.load_state_dict(copy.deepcopy(start))
            learner._shares_rows = shared
            c0, w0 = time.process_time(), time.perf_counter()
            out = learner.update(seqs, res.advantages, seed=3)
            if rep:
                cpu[shared].append(time.process_time() - c0)
                wall[shared].append(time.perf_counter() - w0)
            frac[shared] = out["forward_row_fraction"]
            weights[shared] = {k: p.detach().clone()
                               for k, p in learner.model.named_parameters() if p.requires_grad}  # fmt: skip
    diff = max(float((weights[True][k] - w).abs().max()) for k, w in weights[False].items())
    scale = max(float((w - start["model"][k]).abs().max()) for k, w in weights[False].items())
    c_s, c_o = np.median(cpu[True]), np.median(cpu[False])
    w_s, w_o = np.median(wall[True]), np.median(wall[False])
    print("| update | forward rows / rows | CPU s | wall s |")
    print("|---|---|---|---|")
    print(f"| one pass per row (baseline) | {frac[False]:.3f} | {c_o:.2f} | {w_o:.2f} |")
    print(f"| equal rows share a pass | {frac[True]:.3f} | {c_s:.2f} | {w_s:.2f} |")
    print(f"speed-up (baseline / shared): CPU {c_o / c_s:.2f}x, wall {w_o / w_s:.2f}x")
    print(
        f"largest weight difference between the two updates: {diff:.2e} "
        f"(the update itself moved weights by up to {scale:.2e})"
    )


if __name__ == "__main__":
    main()
