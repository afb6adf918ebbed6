"""Multi-process helpers for the distributed tests: launch N CPU ranks (gloo) with a deadline,
and the scenarios the ranks run (shared with the single-process side of each comparison)."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrl.learner import Learner, LearnerConfig, StepSequence

#: Global rows held by rank 0 of 2 (the rest by rank 1): an uneven split on purpose.
SPLIT = 14
N_ROWS = 24


#: The environment when the test process collected this module: spawned ranks get it back, so no
#: variable an earlier test set in this process (engine or cluster settings) reaches them.
_ENV_AT_IMPORT = dict(os.environ)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(local_rank: int, fn, world: int, port: int, args: tuple) -> None:
    os.environ.update(
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(local_rank),
            "LOCAL_RANK": str(local_rank),
            "WORLD_SIZE": str(world),
        }
    )
    torch.set_num_threads(1)
    from agentrl.distributed import close_distributed, init_distributed

    init_distributed("cpu", timeout_s=120)
    clean = False
    try:
        fn(*args)
        clean = True
    finally:
        close_distributed(wait=clean)


class RankAborted(RuntimeError):
    """A rank died by a signal (no Python exception): see :func:`launch_or_skip`."""


def abort_skip_reason(what: str) -> str:
    return (
        f"{what}: a gloo rank was killed by SIGABRT twice with no Python error (seen only in "
        "the CI sandbox: 'terminate called without an active exception'); the multi-rank "
        "checks pass on the development machine (docs/distributed.md)"
    )


def launch_or_skip(fn, world: int, *args: Any, timeout: float = 240.0) -> None:
    """:func:`launch`, once more if a rank is killed by a signal; skip the test if it happens
    again. A rank's Python exception, a wrong result or a timeout still fails the test."""
    import pytest

    for attempt in range(2):
        try:
            launch(fn, world, *args, timeout=timeout)
            return
        except RankAborted as exc:
            print(f"attempt {attempt + 1}: {exc}")
    pytest.skip(abort_skip_reason(f"{world} spawned ranks"))


def launch(fn, world: int, *args: Any, timeout: float = 240.0) -> None:
    """Run ``fn(*args)`` on ``world`` spawned CPU ranks; raise if one fails or the deadline passes."""
    import torch.multiprocessing as mp

    current = dict(os.environ)
    os.environ.clear()
    os.environ.update(_ENV_AT_IMPORT)
    try:
        ctx = mp.start_processes(
            _entry, args=(fn, world, free_port(), args), nprocs=world, join=False,
            start_method="spawn",
        )  # fmt: skip
    finally:
        os.environ.clear()
        os.environ.update(current)
    deadline = time.monotonic() + timeout
    while True:
        try:
            if ctx.join(timeout=1.0):
                return
        except mp.ProcessExitedException as exc:
            if exc.signal_name is None:
                raise
            raise RankAborted(str(exc)) from exc  # killed by a signal, not a Python error
        if time.monotonic() > deadline:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
            raise TimeoutError(f"{world} ranks did not finish within {timeout} s")


# -- the scenarios -----------------------------------------------------------------------------
SCENARIOS: dict[str, dict[str, Any]] = {
    # every loss term: entropy bonus, KL to a frozen reference copy, a value head
    "full": {
        "lora": False,
        "value_head": True,
        "cfg": {"entropy_coef": 0.01, "kl_coef": 0.05},
    },
    # LoRA (the reference is the base with adapters off), zero-advantage rows skipped
    "lora": {"lora": True, "value_head": False, "cfg": {"kl_coef": 0.05}},
    # several optimiser steps (2 epochs of mini-batches of 10), zero-advantage rows skipped
    "steps": {
        "lora": False,
        "value_head": False,
        "cfg": {"epochs": 2, "minibatch_size": 10, "entropy_coef": 0.0},
    },
    # pi_old recomputed by the (sharded) learner, IcePop's mask against the noisy engine
    # log-probs, the mismatch's percentiles over every rank's tokens
    "offpolicy": {
        "lora": False,
        "value_head": False,
        "cfg": {
            "epochs": 2,
            "minibatch_size": 10,
            "old_logprobs": "learner",
            "correction": "icepop",
            "icepop_low": 0.7,
            "icepop_high": 1.5,
        },  # fmt: skip
    },
}

BASE = LearnerConfig(
    lr=1e-3,
    epochs=1,
    minibatch_size=N_ROWS,  # one optimiser step
    micro_batch_size=4,
    entropy_coef=0.0,
    max_grad_norm=1.0,
)


def build_model(tiny_path: str, lora: bool):
    from agentrl.models import apply_lora, load_model

    torch.manual_seed(0)
    model, tok, _ = load_model(tiny_path)
    if lora:
        torch.manual_seed(1)
        model = apply_lora(model, r=4, alpha=8)
    return model, tok


def batch(vocab: int) -> tuple[list[StepSequence], np.ndarray, np.ndarray]:
    """Global rows: random prompts and responses, noisy old log-probs, advantages (some 0),
    returns for the value head."""
    rng = np.random.default_rng(0)
    seqs = []
    for row in range(N_ROWS):
        p = rng.integers(5, vocab, int(rng.integers(3, 12))).tolist()
        r = rng.integers(5, vocab, int(rng.integers(1, 6))).tolist()
        lp = (-np.log(vocab) + rng.normal(0, 0.3, len(r))).tolist()
        seqs.append(StepSequence(p, r, lp, row))
    adv = rng.normal(0, 1, N_ROWS).astype(np.float32)
    adv[rng.random(N_ROWS) < 0.25] = 0.0
    returns = rng.normal(0, 1, N_ROWS)
    return seqs, adv, returns


def local_rows(rank: int, world: int) -> range:
    if world == 1:
        return range(N_ROWS)
    return range(0, SPLIT) if rank == 0 else range(SPLIT, N_ROWS)


def make_learner(tiny_path: str, name: str, sharded: bool):
    sc = SCENARIOS[name]
    model, tok = build_model(tiny_path, sc["lora"])
    cfg = replace(BASE, **sc["cfg"])
    cls = Learner
    if sharded:
        from agentrl.learner.fsdp import FSDPLearner

        cls = FSDPLearner
    return cls(model, cfg, tok.pad_token_id, value_head=sc["value_head"]), tok


def run_update(learner, tok, rank: int, world: int, seed: int = 0) -> dict[str, float]:
    seqs, adv, returns = batch(len(tok))
    mine = [seqs[r] for r in local_rows(rank, world)]
    return learner.update(
        mine,
        adv,
        returns=returns if learner.value_head is not None else None,
        seed=seed,
    )


def full_params(learner) -> dict[str, torch.Tensor]:
    """Every trainable tensor, gathered whole (all ranks must call this)."""
    out = {}
    mods = [("policy", learner.model)]
    if learner.value_head is not None:
        mods.append(("value_head", learner.value_head))
    for prefix, m in mods:
        for k, p in m.named_parameters():
            if p.requires_grad:
                t = p.full_tensor() if hasattr(p, "full_tensor") else p
                out[f"{prefix}.{k}"] = t.detach().cpu().clone()
    return out


def ranks_main(tiny_path: str, out: str) -> None:
    """On each of 2 ranks: every scenario's update, a DCP save, and a resume of the 1-process
    checkpoint ``out/ckpt1`` followed by one more update. Rank 0 writes ``out/ranks.pt``."""
    from agentrl.distributed import rank, world_size
    from agentrl.training import sharded_checkpoint as checkpoint

    rk, world = rank(), world_size()
    res: dict[str, Any] = {}
    for name in SCENARIOS:
        learner, tok = make_learner(tiny_path, name, sharded=True)
        metrics = run_update(learner, tok, rk, world)
        res[name] = {"params": full_params(learner), "metrics": metrics}
        if name == "full":
            checkpoint.save_learner(learner, Path(out) / "ckpt2", {"iteration": 1})
            # a sharded learner's weights reach an unsharded rollout replica
            replica, _ = build_model(tiny_path, False)
            learner.sync_to(replica)
            res["replica"] = {k: v.detach().clone() for k, v in replica.named_parameters()}
    # 1 -> 2: resume the single-process checkpoint on two ranks, then update once more
    learner, tok = make_learner(tiny_path, "full", sharded=True)
    meta = checkpoint.load_learner(learner, Path(out) / "ckpt1")
    res["resumed"] = {"params": full_params(learner), "meta": meta, "updates": learner.updates}
    run_update(learner, tok, rk, world, seed=1)
    res["resumed_next"] = full_params(learner)
    # 1 -> 2 from a one-process Learner.state_dict() (the recipe's torch.save checkpoints)
    learner, tok = make_learner(tiny_path, "full", sharded=True)
    learner.load_state_dict(torch.load(Path(out) / "plain.pt", weights_only=False))
    res["plain"] = {"params": full_params(learner), "updates": learner.updates}
    run_update(learner, tok, rk, world, seed=1)
    res["plain_next"] = full_params(learner)
    if rk == 0:
        torch.save(res, Path(out) / "ranks.pt")


def episodes(n_groups: int = 5, group_size: int = 3):
    """Deterministic global episodes (ids as a single process numbers them) and their resets."""
    from agentrl.rollout import EpisodeResult, ResetSpec, StepRecord

    rng = np.random.default_rng(3)
    resets, eps = [], []
    for g in range(n_groups):
        resets += [ResetSpec(g, seed=100 + g)] * group_size
        for k in range(group_size):
            traj = g * group_size + k
            ep = EpisodeResult(g, traj, f"task{g}", "cat", 100 + g)
            for t in range(int(rng.integers(1, 5))):
                ep.steps.append(
                    StepRecord(
                        prompt_ids=[1, 2, t + 3],
                        response_ids=[7, 8],
                        logprobs=[-0.5, -0.25],
                        allowed=None,
                        response="<action>up</action>",
                        action="up" if rng.random() < 0.8 else None,
                        parse_error="",
                        finish_reason="stop",
                        observation=f"obs {g} {t}",
                        state_key=(g, t, int(rng.integers(2))),
                        reward=float(rng.normal()),
                        valid=bool(rng.random() < 0.8),
                        milestones_new=0,
                    )
                )
            ep.won = bool(rng.random() < 0.5)
            eps.append(ep)
    return resets, eps


def data_parallel_main(out: str) -> None:
    """Each rank plays its share of :func:`episodes`; rank 0 writes what the helpers made."""
    from agentrl.distributed import rank
    from agentrl.rollout import RolloutStats
    from agentrl.training import data_parallel as P

    resets, eps = episodes()
    mine, start = P.local_share(resets, 3)
    local = eps[start : start + len(mine)]
    batch, seqs, offset = P.global_step_batch(
        local, values=np.arange(sum(len(e.steps) for e in local), dtype=float) + 1000 * rank()
    )
    stats = P.reduce_stats(RolloutStats(generate_s=1.0 + rank(), prompt_tokens=10 * (rank() + 1)))
    gathered = P.gather_episodes(local)
    parts = __import__("agentrl.distributed", fromlist=["x"]).all_gather_objects(
        {"rank": rank(), "resets": mine, "start": start, "rows": [s.step_row for s in seqs],
         "offset": offset}
    )  # fmt: skip
    if rank() == 0:
        torch.save(
            {"batch": batch, "stats": stats, "episodes": gathered, "parts": parts},
            Path(out) / "dp.pt",
        )


SOKOBAN = ("Sokoban-v0", {"dim_room": 5, "open_room": True, "search_depth": 1, "max_steps": 10})


def _runner(tiny_path: str, n_envs: int):
    """An episode runner with the tiny model on ``n_envs`` short Sokoban envs."""
    from agentrl.backends.hf import HFBackend
    from agentrl.models import load_model
    from agentrl.pool import EnvPool, EnvSpec
    from agentrl.rollout import (
        ActionFormat,
        EpisodeRunner,
        PromptBuilder,
        PromptConfig,
        RunnerSettings,
    )

    torch.manual_seed(0)
    model, tok, _ = load_model(tiny_path)
    builder = PromptBuilder(
        tok,
        PromptConfig(instruction=False, history=0, admissible_actions=False, observation_prefix=""),
    )
    return EpisodeRunner(
        EnvPool([EnvSpec(*SOKOBAN)] * n_envs),
        HFBackend(model, tok.pad_token_id),
        builder,
        ActionFormat(),
        tok,
        RunnerSettings(max_steps=10, max_new_tokens=8, constrained=True),
    )


def play_share(tiny_path: str, groups: int, group_size: int, seed: int):
    """Play ``groups`` Sokoban groups with the tiny model: all of them in one process, or this
    rank's share in lockstep under a process group. Returns the episodes (global ids)."""
    from agentrl.rollout import ResetSpec
    from agentrl.training import data_parallel as P

    resets = [ResetSpec(g, seed=40 + g) for g in range(groups) for _ in range(group_size)]
    mine, start = P.local_share(resets, group_size)
    runner = _runner(tiny_path, len(mine))
    try:
        return runner.play(
            mine, temperature=1.0, seed=seed, traj_offset=start, step_sync=P.lockstep()
        )
    finally:
        runner.close()


def play_as_one(tiny_path: str, seed: int):
    """20 resets sampled at temperature 1 with :func:`agentrl.training.data_parallel.play_as_one_process`
    on pools of this rank's share of 3 groups of 4 envs (one process: 12; 2 ranks: 8 and 4), i.e.
    chunks of 12 and 8 resets, the second played by rank 0 alone. Returns every episode."""
    from agentrl.distributed import shard_groups
    from agentrl.rollout import ResetSpec
    from agentrl.training import data_parallel as P

    runner = _runner(tiny_path, len(shard_groups(3)) * 4)
    try:
        resets = [ResetSpec(i, seed=60 + i) for i in range(20)]
        return P.play_as_one_process(runner, resets, temperature=1.0, seed=seed)
    finally:
        runner.close()


def rollout_main(tiny_path: str, out: str) -> list:
    """Rank 0 writes every rank's episodes; returns this rank's."""
    from agentrl.distributed import rank
    from agentrl.training.data_parallel import gather_episodes

    local = play_share(tiny_path, 3, 4, seed=11)
    eps = gather_episodes(local)
    if rank() == 0:
        torch.save(eps, Path(out) / "eps.pt")
    return local


#: The token shapers (``credit.token``) the sharded learner is checked with.
SHAPERS = ("ucas", "less", "progress", "stepopsd")
SIGNALS = ("entropy", "self_certainty", "token_logit", "ref_logprob", "logprob", "token_id")


def token_step_advantages(n_rows: int) -> np.ndarray:
    """Step advantages of the token tests: random, 30 % of the rows exactly 0."""
    rng = np.random.default_rng(5)
    adv = rng.normal(0, 1, n_rows).astype(np.float32)
    adv[rng.random(n_rows) < 0.3] = 0.0
    return adv


def fixed_token_advantages(seqs: list) -> list[np.ndarray]:
    """Token advantages drawn per global row (the same on any rank); every 5th row all 0, so the
    rows an update skips differ from those with a zero step advantage."""
    return [
        np.zeros(len(s.response_ids), np.float32)
        if s.step_row % 5 == 0
        else np.random.default_rng(1000 + s.step_row).normal(0, 1, len(s.response_ids))
        for s in seqs
    ]


def shape_and_update(tiny_path: str, eps: list, sharded: bool) -> dict[str, Any]:
    """For ``eps`` (this rank's episodes, global ids) under the initial tiny model: the token
    signals (``"signals"``, with StepOPSD's ``teacher_logprob``), every shaper's token advantages
    (``"shaped"``), each ``{name: {global row: per-token array}}`` of this rank's rows; then the
    weights after one update with :func:`fixed_token_advantages` (``"params"``)."""
    from types import SimpleNamespace

    from agentrl.training.data_parallel import global_step_batch
    from agentrl.training.token_credit import hindsight_sequences, shaped_token_advantages

    model, tok = build_model(tiny_path, False)
    cls = Learner
    if sharded:
        from agentrl.learner.fsdp import FSDPLearner

        cls = FSDPLearner
    learner = cls(model, BASE, tok.pad_token_id, keep_reference=True)
    batch, seqs, _ = global_step_batch(eps)
    step_adv = token_step_advantages(len(batch.group))
    signals = learner.token_signals(seqs, set(SIGNALS))
    signals["teacher_logprob"] = learner.logprobs(hindsight_sequences(tok, eps, seqs))
    res: dict[str, Any] = {"signals": {}, "shaped": {}}
    for name, arrays in signals.items():
        res["signals"][name] = {s.step_row: a for s, a in zip(seqs, arrays)}
    for name in SHAPERS:
        cfg = SimpleNamespace(credit=SimpleNamespace(token=name, token_options={}))
        adv = shaped_token_advantages(cfg, learner, tok, eps, batch, seqs, step_adv)
        res["shaped"][name] = {s.step_row: a for s, a in zip(seqs, adv)}
    learner.update(seqs, step_adv, token_advantages=fixed_token_advantages(seqs))
    res["params"] = full_params(learner)
    return res


def token_main(tiny_path: str, out: str, eps: list) -> None:
    from agentrl.distributed import all_gather_objects, rank

    res = shape_and_update(tiny_path, eps, sharded=True)
    params = res.pop("params")
    parts = all_gather_objects(res)
    if rank() == 0:
        merged = {
            kind: {n: {k: v for p in parts for k, v in p[kind][n].items()} for n in res[kind]}
            for kind in res
        }
        torch.save({**merged, "params": params}, Path(out) / "tokens.pt")


#: Dynamic sampling on 3 groups of 4 short Sokoban episodes (ranks hold 2 and 1): the untrained
#: model mostly fails alike, so groups are dropped, and a budget of 6 extra groups lets one draw
#: exceed the 3 groups of a single process's pool (a draw of several chunks).
DYNAMIC = (
    "trainer=smoke",
    "rollout.tasks_per_iter=3",
    "rollout.group_size=4",
    "env.max_steps=4",
    "rollout.dynamic_sampling=true",
    "rollout.max_extra_rollouts=24",
)


def dynamic_iteration() -> tuple[list, dict[str, float]]:
    """Iteration 0's episodes (this rank's) and metrics with :data:`DYNAMIC`, built as the
    recipe builds them (one process, or this rank under the process group)."""
    from agentrl.config import load_config
    from agentrl.recipe import build
    from agentrl.rollout import RolloutStats
    from agentrl.training.iteration import play_iteration

    from .helpers import make_cfg

    cfg = load_config(make_cfg(*DYNAMIC))
    parts = build(cfg)
    try:
        return play_iteration(cfg, 0, parts.train_ids, parts.runner, RolloutStats())
    finally:
        parts.runner.close()


def dynamic_main(out: str) -> None:
    from agentrl.distributed import all_gather_objects, rank
    from agentrl.training.data_parallel import gather_episodes

    eps, metrics = dynamic_iteration()
    gathered = gather_episodes(eps)
    counts = all_gather_objects(len(eps))
    if rank() == 0:
        torch.save({"episodes": gathered, "metrics": metrics, "counts": counts},
                   Path(out) / "dynamic.pt")  # fmt: skip


def hiper_update(tiny_path: str, rk: int, world: int, sharded: bool) -> dict[str, Any]:
    """HiPER's learner inputs on the rows of :func:`batch` (this rank's share): the three-head
    critic's values, then an update (2 epochs of mini-batches of 10) with routed token
    advantages, loss masks, (N, 3) value targets, head weights and V_low positions. Returns
    ``{"values": {global row: (3,)}, "params": ..., "metrics": ...}``."""
    model, tok = build_model(tiny_path, False)
    cls = Learner
    if sharded:
        from agentrl.learner.fsdp import FSDPLearner

        cls = FSDPLearner
    cfg = replace(BASE, epochs=2, minibatch_size=10)
    learner = cls(model, cfg, tok.pad_token_id, value_head=True, value_outputs=3)
    seqs, adv, _ = batch(len(tok))
    rng = np.random.default_rng(7)
    pos = [int(rng.integers(0, len(s.response_ids))) for s in seqs]
    returns, old = rng.normal(0, 1, (N_ROWS, 3)), rng.normal(0, 1, (N_ROWS, 3))
    weights = (rng.random((N_ROWS, 3)) < 0.6).astype(np.float32)
    tok_adv = [rng.normal(0, 1, len(s.response_ids)) for s in seqs]
    masks = [rng.random(len(s.response_ids)) < 0.7 for s in seqs]
    mine = [seqs[r] for r in local_rows(rk, world)]
    rows = [s.step_row for s in mine]
    values = learner.head_values(mine, [pos[r] for r in rows])
    metrics = learner.update(
        mine,
        adv,
        returns=returns,
        old_values=old,
        token_advantages=[tok_adv[r] for r in rows],
        loss_masks=[masks[r] for r in rows],
        value_weights=weights,
        value_pos=[pos[r] for r in rows],
    )
    return {"values": dict(zip(rows, values)), "params": full_params(learner), "metrics": metrics}


def hiper_main(tiny_path: str, out: str) -> None:
    from agentrl.distributed import all_gather_objects, rank

    res = hiper_update(tiny_path, rank(), 2, sharded=True)
    values = {k: v for part in all_gather_objects(res["values"]) for k, v in part.items()}
    if rank() == 0:
        torch.save({**res, "values": values}, Path(out) / "hiper.pt")


def all_main(tiny_path: str, out: str) -> None:
    """Everything the 2-rank tests check, in one launch (starting ranks is the slow part)."""
    from agentrl.distributed import rank

    ranks_main(tiny_path, out)
    data_parallel_main(out)
    eps = rollout_main(tiny_path, out)
    token_main(tiny_path, out, eps)
    as_one = play_as_one(tiny_path, seed=13)
    if rank() == 0:
        torch.save(as_one, Path(out) / "as_one.pt")
    dynamic_main(out)
    hiper_main(tiny_path, out)


def failing_main(out: str) -> None:
    """Rank 1 raises while rank 0 waits in a collective."""
    import torch.distributed as dist

    from agentrl.distributed import rank

    if rank() == 1:
        raise ValueError("rank 1 cannot read its shard of tasks (test)")
    t = torch.zeros(1)
    dist.all_reduce(t)


def aborting_main() -> None:
    """Rank 1 dies by SIGABRT (as a C++ std::terminate would end it); rank 0 ends normally."""
    from agentrl.distributed import rank

    if rank() == 1:
        os.abort()
