"""The two experiments of the lab: advantage fidelity, and learning efficiency.

Fidelity: for each env, seed and policy, draw a batch of tasks, sample N rollouts per task, run
every estimator and compare its advantages with the exact A^pi (under each discount asked for)
over all steps of the batch. Learning: train a tabular softmax policy on a fixed set of tasks
by policy gradient with each estimator's advantages; track the exact success probability.

All randomness comes from ``numpy.random.SeedSequence([seed, ...])`` children, one stream per
(env, seed) and per (env, seed, estimator), so every run is reproducible and adding an
estimator does not change the others' numbers.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .mdp import success_probability
from .metrics import agreement
from .modules import Inputs, ModuleSpec, run_module_spec, state_embedding
from .policies import preference_logits, softmax_policy, uniform_policy
from .sampler import sample_groups
from .tasks import draw_tasks

__all__ = [
    "POLICIES",
    "FidelityConfig",
    "LearnConfig",
    "adam_step",
    "make_policy",
    "run_fidelity",
    "run_learning",
    "train_tabular",
]

#: Softmax preferences: progress bonus 2, Gaussian noise 1 (see ``preference_logits``).
POLICIES = {
    "uniform": "uniform over admissible actions",
    "softmax": "softmax of fixed preferences: 2 x [action brings a win closer] + N(0, 1) noise per (state, action)",
}


def _env_code(env: str) -> int:
    """A stable per-env seed component (independent of which other envs exist)."""
    return zlib.crc32(env.encode())


def _note(status: dict[str, str], label: str, st: str) -> None:
    """Keep the first non-ok status of an estimator (``"ok"`` if it never failed)."""
    if status.get(label, "ok") == "ok":
        status[label] = st


@dataclass(frozen=True)
class FidelityConfig:
    envs: Sequence[str] = ("sokoban", "sokoban-2box", "pickplace")
    policies: Sequence[str] = ("uniform", "softmax")
    group_sizes: Sequence[int] = (4, 8, 16)
    tasks_per_batch: int = 16
    seeds: int = 10
    gammas: Sequence[float] = (1.0, 0.95)
    seed: int = 0


def make_policy(name: str, mdp: Any, rng: np.random.Generator) -> np.ndarray:
    if name == "uniform":
        return uniform_policy(mdp)
    if name == "softmax":
        return softmax_policy(preference_logits(mdp, rng, progress_bonus=2.0, noise=1.0), mdp.mask)
    raise ValueError(f"unknown policy {name!r}; valid: {', '.join(POLICIES)}")


def run_fidelity(
    cfg: FidelityConfig,
    specs: Sequence[ModuleSpec],
    progress: Callable[[str], None] = lambda s: None,
) -> tuple[list[dict], list[dict], dict[str, str]]:
    """(metric records, batch context records, status per estimator label).

    One metric record per (env, policy, N, seed, estimator, gamma); the context records give
    each sampled batch's success rate and the share of groups whose returns are all equal.
    """
    records: list[dict] = []
    context: list[dict] = []
    status: dict[str, str] = {}
    for env in cfg.envs:
        for seed in range(cfg.seeds):
            ss = np.random.SeedSequence([cfg.seed, _env_code(env), seed])
            task_rng, policy_rng, embed_rng, sample_rng = (
                np.random.default_rng(s) for s in ss.spawn(4)
            )
            mdp = draw_tasks(env, cfg.tasks_per_batch, task_rng)
            embedding = state_embedding(mdp.num_states, embed_rng)
            for pname in cfg.policies:
                policy = make_policy(pname, mdp, policy_rng)
                for n in cfg.group_sizes:
                    rollouts = sample_groups(mdp, policy, n, sample_rng)
                    inputs = Inputs(mdp, policy, rollouts, embedding)
                    R = rollouts.traj_return.reshape(-1, n)
                    context.append(
                        {
                            "env": env,
                            "policy": pname,
                            "n": n,
                            "seed": seed,
                            "success": float(rollouts.traj_won.mean()),
                            "all_equal_groups": float(np.mean(np.ptp(R, axis=1) == 0)),
                            "steps": len(rollouts),
                        }
                    )
                    truths = {g: inputs.true_advantage(g) for g in cfg.gammas}
                    for spec in specs:
                        if spec.name == "ref:true-advantage":
                            continue
                        adv, st = run_module_spec(spec, inputs)
                        _note(status, spec.label, st)
                        if adv is None:
                            continue
                        for g, truth in truths.items():
                            records.append(
                                {
                                    "env": env,
                                    "policy": pname,
                                    "n": n,
                                    "seed": seed,
                                    "label": spec.label,
                                    "gamma": g,
                                    **agreement(adv, truth),
                                }
                            )
                progress(f"fidelity {env} seed {seed} {pname} done")
    return records, context, status


@dataclass(frozen=True)
class LearnConfig:
    envs: Sequence[str] = ("sokoban", "sokoban-2box", "pickplace")
    tasks: int = 8
    group_size: int = 8
    iterations: int = 60
    seeds: int = 5
    lr: float = 0.1
    seed: int = 0


def adam_step(
    theta: np.ndarray, grad: np.ndarray, state: dict, lr: float, betas=(0.9, 0.999), eps=1e-8
) -> None:
    """One Adam ascent step on ``theta`` in place (numpy; the trainer's optimiser family)."""
    state["t"] = state.get("t", 0) + 1
    m = state.setdefault("m", np.zeros_like(theta))
    v = state.setdefault("v", np.zeros_like(theta))
    m *= betas[0]
    m += (1 - betas[0]) * grad
    v *= betas[1]
    v += (1 - betas[1]) * grad * grad
    mhat = m / (1 - betas[0] ** state["t"])
    vhat = v / (1 - betas[1] ** state["t"])
    theta += lr * mhat / (np.sqrt(vhat) + eps)


def train_tabular(
    mdp: Any,
    spec: ModuleSpec,
    group_size: int,
    iterations: int,
    lr: float,
    rng: np.random.Generator,
    embedding: np.ndarray,
) -> tuple[np.ndarray, str]:
    """Policy gradient on a tabular softmax policy (logits per (state, action), from zero).

    Each iteration samples ``group_size`` rollouts per task with the current policy, computes the
    estimator's advantages, and takes one Adam step along
    mean over steps of A_t * grad log pi(a_t | s_t) (on-policy, so PPO's ratio is 1 and its clip
    inactive). Returns the exact success probability (mean over tasks) before each iteration and
    after the last (length ``iterations + 1``), and the estimator's status.
    """
    theta = np.zeros(mdp.mask.shape)
    opt: dict = {}
    curve = np.empty(iterations + 1)
    status = "ok"
    for it in range(iterations):
        policy = softmax_policy(theta, mdp.mask)
        curve[it] = success_probability(mdp, policy).mean()
        rollouts = sample_groups(mdp, policy, group_size, rng)
        adv, status = run_module_spec(spec, Inputs(mdp, policy, rollouts, embedding))
        if adv is None:
            return np.full(iterations + 1, np.nan), status
        grad = np.zeros_like(theta)
        np.add.at(grad, (rollouts.state, rollouts.action), adv)
        np.add.at(grad, rollouts.state, -adv[:, None] * policy[rollouts.state])
        adam_step(theta, grad / len(rollouts), opt, lr)
    curve[iterations] = success_probability(mdp, softmax_policy(theta, mdp.mask)).mean()
    return curve, status


def run_learning(
    cfg: LearnConfig, specs: Sequence[ModuleSpec], progress: Callable[[str], None] = lambda s: None
) -> tuple[list[dict], dict[str, str]]:
    """One record per (env, estimator, seed) with its success curve; and status per label."""
    records: list[dict] = []
    status: dict[str, str] = {}
    for env in cfg.envs:
        for seed in range(cfg.seeds):
            ss = np.random.SeedSequence([cfg.seed, _env_code(env), seed, 1])
            task_rng, embed_rng = (np.random.default_rng(s) for s in ss.spawn(2))
            mdp = draw_tasks(env, cfg.tasks, task_rng)
            embedding = state_embedding(mdp.num_states, embed_rng)
            for spec in specs:
                # Common random numbers: every estimator gets the same sampling stream, so runs
                # start from identical first batches and adding an estimator changes no other.
                rng = np.random.default_rng(
                    np.random.SeedSequence([cfg.seed, _env_code(env), seed, 2])
                )
                curve, st = train_tabular(
                    mdp, spec, cfg.group_size, cfg.iterations, cfg.lr, rng, embedding
                )
                _note(status, spec.label, st)
                records.append(
                    {
                        "env": env,
                        "seed": seed,
                        "label": spec.label,
                        "curve": curve,
                        "episodes_per_iteration": cfg.tasks * cfg.group_size,
                    }
                )
            progress(f"learning {env} seed {seed} done")
    return records, status
