"""HiPER in the fidelity lab: its three advantage streams against the exact option advantages.

A fixed option policy (:mod:`.options`) plays the pick-and-place tasks, whose plan has four
subgoals (go to the object, take it, go to the target, put it there). Groups of rollouts are
sampled as training samples them; ``credit.hiper`` runs on them with critic values read from a
critic table, and each of its streams is compared with its exact counterpart:

- ``action`` (every turn) with A_low(k, s_t, g_t, a_t);
- ``subgoal`` (segment starts) with A_sub(k, s_t, g_t);
- ``switch`` (turns t >= 1; turn 0's SWITCH is forced, so it has no decision and no truth) with
  A_sw(k, s_t, g_{t-1}, b_t).

Critics: ``exact`` reads V_low, V_high and U from the dynamic programme (the oracle: the lab then
measures the estimator alone, not a learned critic); ``noisy`` adds fixed Gaussian noise per
table entry (a critic with a given error); ``zero`` is no critic at all. The flat step-level
modules (GRPO, GiGPO) see the same rollouts (state key = the env state and the current subgoal,
what HiPER's prompt shows; action key = the whole response) and are compared with A_low and with
the exact advantage of the whole response, A_turn = Q_low - U.

HiPER runs with the authors' ALFWorld defaults except ``keep_penalty=0``: its normalised form
(-0.3/T per KEEP turn, T the episode's length) is no Markov reward, so no value function of the
state has it as target; the truths are for the env reward. The KEEP-consistency penalty never
fires (a KEEP turn here keeps its subgoal). Truncation at the horizon is an episode end in the
lab's rollouts (``done``), so the estimator bootstraps 0 there, as the exact values (V_0 = 0) do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentrl import credit
from agentrl.credit import StepBatch

from .experiment import _env_code
from .mdp import TabularMDP, stack
from .metrics import agreement
from .modules import parse_module_spec
from .options import (
    OptionPolicy,
    OptionValues,
    Subgoals,
    evaluate_options,
    option_policy,
    stack_subgoals,
)
from .pickplace import make_task, pickplace_mdp, pickplace_subgoals
from .report import _fmt, aggregate_fidelity
from .sampler import rows_in_order

__all__ = [
    "CRITICS",
    "HIPER_OPTIONS",
    "OPTION_POLICIES",
    "HiperConfig",
    "OptionRollouts",
    "critic_tables",
    "draw_option_tasks",
    "hiper_step_batch",
    "make_option_policy",
    "paper_switch_advantage",
    "render_hiper",
    "run_hiper_fidelity",
    "sample_option_groups",
]

ENV = "pickplace-options"
ENV_DESCRIPTION = (
    "the pickplace tasks (3 receptacles, 15 steps, reward 10 x won) with four subgoals: go to the "
    "object, take the object, go to the target, put the object in the target"
)
OPTION_POLICIES = {
    "uniform-manager": "action: softmax of 2 x [brings the current subgoal closer] + N(0, 1) "
    "(noise drawn once per entry); subgoal uniform; switch with probability 0.3",
    "softmax": "action as above; subgoal: softmax of 2 x [useful: some action brings it and a "
    "win closer] + N(0, 1); switch 0.8 where the current subgoal is achieved, 0.1 elsewhere",
}
CRITICS = {
    "exact": "V_low, V_high, V_term = the exact values (oracle critic: measures the estimator)",
    "noisy": "the exact values + N(0, 1) noise fixed per table entry (the success reward is 10)",
    "zero": "all three heads 0 (no critic)",
}
#: HiPER's options in the lab: the authors' ALFWorld defaults but the (non-Markov) KEEP penalty.
HIPER_OPTIONS: dict[str, Any] = {"keep_penalty": 0.0}


@dataclass(frozen=True)
class OptionRollouts:
    """Per-turn arrays ordered by (trajectory, turn), as :class:`.sampler.Rollouts`, plus the
    turn's decisions: ``prev_goal`` (-1 at turn 0), ``switch`` and ``goal``."""

    task: np.ndarray
    traj: np.ndarray
    t: np.ndarray
    state: np.ndarray
    next_state: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    done: np.ndarray
    milestone: np.ndarray
    steps_left: np.ndarray
    prev_goal: np.ndarray
    switch: np.ndarray
    goal: np.ndarray
    traj_won: np.ndarray
    traj_return: np.ndarray

    def __len__(self) -> int:
        return len(self.task)


def _draw(cum: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One index per row of cumulative probabilities ``cum`` (never a zero-mass entry)."""
    u = (1.0 - rng.random(len(cum))) * cum[:, -1]
    return np.argmax(cum >= u[:, None], axis=1)


def sample_option_groups(
    mdp: TabularMDP, policy: OptionPolicy, n: int, rng: np.random.Generator
) -> OptionRollouts:
    """``n`` rollouts of the option policy from each task's start, all in lock-step."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    traj_task = np.repeat(np.arange(mdp.num_tasks), n)
    num = len(traj_task)
    state = mdp.start[traj_task].copy()
    goal = np.full(num, -1)
    alive = np.ones(num, dtype=bool)
    cum_sub = np.cumsum(policy.subgoal, axis=1)
    cum_act = np.cumsum(policy.action, axis=2)
    names = ("traj", "t", "state", "next_state", "action", "reward", "done", "milestone")
    cols: dict[str, list[np.ndarray]] = {k: [] for k in (*names, "prev_goal", "switch", "goal")}
    ret = np.zeros(num)
    won = np.zeros(num, dtype=bool)
    H = mdp.horizon
    for t in range(H):
        idx = np.flatnonzero(alive)
        if len(idx) == 0:
            break
        s, gp = state[idx], goal[idx]
        if t == 0:
            sw = np.ones(len(idx), dtype=bool)
        else:
            sw = rng.random(len(idx)) < policy.switch[s, gp]
        g = gp.copy()
        if sw.any():
            g[sw] = _draw(cum_sub[s[sw]], rng)
        a = _draw(cum_act[s, g], rng)
        r = mdp.reward[s, a]
        d = mdp.done[s, a] | (t == H - 1)
        row = (idx, np.full(len(idx), t), s, mdp.next_state[s, a], a, r, d, mdp.milestone[s, a])
        for k, v in zip((*names, "prev_goal", "switch", "goal"), (*row, gp, sw, g), strict=True):
            cols[k].append(v)
        ret[idx] += r
        won[idx] |= mdp.won[s, a]
        state[idx] = mdp.next_state[s, a]
        goal[idx] = g
        alive[idx[d]] = False
    flat = rows_in_order(cols)
    return OptionRollouts(
        task=traj_task[flat["traj"]],
        steps_left=H - flat["t"],
        traj_won=won,
        traj_return=ret,
        **flat,
    )


def critic_tables(
    values: OptionValues, kind: str, rng: np.random.Generator, scale: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(V_low, V_high, U) tables a critic of ``kind`` reads (see :data:`CRITICS`)."""
    if kind == "exact":
        return values.low, values.high, values.term
    if kind == "zero":
        return (np.zeros_like(values.low), np.zeros_like(values.high), np.zeros_like(values.term))
    if kind == "noisy":
        return tuple(  # type: ignore[return-value]
            v + scale * rng.standard_normal(v.shape) for v in (values.low, values.high, values.term)
        )
    raise ValueError(f"unknown critic {kind!r}; valid: {', '.join(CRITICS)}")


def hiper_step_batch(
    ro: OptionRollouts,
    names: Sequence[str],
    tables: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> StepBatch:
    """The step batch HiPER's learner would build: values read from the critic ``tables``
    (V_low after the subgoal; V_high and V_term before the response), the switch decisions and
    subgoal texts. State key = (env state, current subgoal before the turn); action key = the
    whole response (switch, subgoal, action). Without ``tables``: no value columns (flat modules).
    """
    G = len(names)
    state_key = ro.state * (G + 1) + (ro.prev_goal + 1)
    action_key = (ro.switch.astype(np.int64) * G + ro.goal) * (int(ro.action.max()) + 1) + ro.action
    extras: dict[str, Any] = {
        "switch": ro.switch,
        "subgoal": np.array([names[g] for g in ro.goal], dtype=object),
        "switch_span": np.ones(len(ro), dtype=bool),
    }
    value = None
    if tables is not None:
        low, high, term = tables
        k, s = ro.steps_left, ro.state
        value = low[k, s, ro.goal]
        extras["value_high"] = high[k, s]
        gp = np.maximum(ro.prev_goal, 0)
        extras["value_term"] = np.where(ro.prev_goal < 0, high[k, s], term[k, s, gp])
    return StepBatch(
        group=ro.task,
        traj=ro.traj,
        t=ro.t,
        reward=ro.reward,
        done=ro.done,
        state_key=state_key,
        action_key=action_key,
        valid=np.ones(len(ro), dtype=bool),
        milestone=ro.milestone,
        value=value,
        success=ro.traj_won[ro.traj],
        extras=extras,
    )


def truths(values: OptionValues, ro: OptionRollouts) -> dict[str, np.ndarray]:
    """Per turn, the exact advantage of each decision (:mod:`.options`) and of the whole turn."""
    k, s = ro.steps_left, ro.state
    low = values.low_advantage(s, ro.goal, ro.action, k)
    sub = values.subgoal_advantage(s, ro.goal, k)
    sw = values.switch_advantage(s, ro.prev_goal, ro.switch, k)
    turn = values.q_low(s, ro.goal, ro.action, k) - values.value_before(s, ro.prev_goal, k)
    return {"A_low": low, "A_sub": sub, "A_sw": sw, "A_turn": turn}


def paper_switch_advantage(
    tables: tuple[np.ndarray, np.ndarray, np.ndarray], policy: OptionPolicy, ro: OptionRollouts
) -> np.ndarray:
    """The paper's closed-form termination advantage (q - beta)(V_high - V_low), per turn, from a
    critic's tables and the policy's switch probability (0 at turn 0). Not what the authors' code
    or ``credit/hiper.py`` computes (they use the segment return minus V_term); with the exact
    values it equals A_sw, so the lab shows it only with the noisy critic, as a reference."""
    low, high, _ = tables
    k, s = ro.steps_left, ro.state
    g = np.maximum(ro.prev_goal, 0)
    beta = policy.switch[s, g]
    adv = (ro.switch - beta) * (high[k, s] - low[k, s, g])
    return np.where(ro.prev_goal < 0, 0.0, adv)


def draw_option_tasks(
    num_tasks: int, rng: np.random.Generator, n_receptacles: int = 3, horizon: int = 15
) -> tuple[TabularMDP, Subgoals]:
    """``num_tasks`` pick-and-place tasks (seeds drawn as :func:`.tasks.draw_tasks` draws them)
    stacked into one table, with their subgoal sets."""
    seeds = [int(s) for s in rng.choice(1_000_000_000, size=num_tasks, replace=False)]
    mdps, subs = [], []
    for seed in seeds:
        task = make_task(np.random.default_rng(seed), n_receptacles)
        mdp = pickplace_mdp(task, horizon, name=f"pickplace:{seed}")
        mdps.append(mdp)
        subs.append(pickplace_subgoals(task, mdp))
    return stack(mdps), stack_subgoals(subs)


def make_option_policy(
    name: str, mdp: TabularMDP, subgoals: Subgoals, rng: np.random.Generator
) -> OptionPolicy:
    if name == "uniform-manager":
        return option_policy(mdp, subgoals, rng, manager="uniform")
    if name == "softmax":
        return option_policy(mdp, subgoals, rng)
    raise ValueError(f"unknown option policy {name!r}; valid: {', '.join(OPTION_POLICIES)}")


@dataclass(frozen=True)
class HiperConfig:
    policies: Sequence[str] = ("uniform-manager", "softmax")
    group_sizes: Sequence[int] = (4, 8, 16)
    tasks_per_batch: int = 16
    seeds: int = 10
    #: (critic, HiPER options beyond :data:`HIPER_OPTIONS`) per HiPER row
    hiper_rows: Sequence[tuple[str, dict[str, Any]]] = (
        ("exact", {}),
        ("exact", {"lam_seg": 0.0}),
        ("exact", {"lam_turn": 0.0}),
        ("noisy", {}),
        ("zero", {}),
    )
    flat: Sequence[str] = ("grpo", "gigpo", "gigpo:mode=mean")
    seed: int = 0


#: (HiPER component, truth, rows it is compared on)
STREAMS = (
    ("action", "A_low", "all"),
    ("subgoal", "A_sub", "start"),
    ("switch", "A_sw", "decision"),
)


def _flat_specs(names: Sequence[str]) -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    for text in names:
        spec = parse_module_spec(text)
        if spec.name not in credit.available():
            continue
        out.append((spec.label, spec.name, spec.options))
    return out


def run_hiper_fidelity(
    cfg: HiperConfig, progress: Callable[[str], None] = lambda s: None
) -> tuple[list[dict], list[dict]]:
    """(metric records, batch context records). A record per (policy, N, seed, estimator row,
    truth); its ``label`` names the estimator and stream, e.g. ``hiper[exact] action``."""
    records: list[dict] = []
    context: list[dict] = []
    flat = _flat_specs(cfg.flat)
    for seed in range(cfg.seeds):
        ss = np.random.SeedSequence([cfg.seed, _env_code(ENV), seed])
        task_rng, policy_rng, critic_rng, sample_rng = (
            np.random.default_rng(s) for s in ss.spawn(4)
        )
        mdp, subgoals = draw_option_tasks(cfg.tasks_per_batch, task_rng)
        for pname in cfg.policies:
            policy = make_option_policy(pname, mdp, subgoals, policy_rng)
            values = evaluate_options(mdp, policy, gamma=1.0)
            tables = {c: critic_tables(values, c, critic_rng) for c, _ in cfg.hiper_rows}
            for n in cfg.group_sizes:
                ro = sample_option_groups(mdp, policy, n, sample_rng)
                tru = truths(values, ro)
                rows = {
                    "all": np.ones(len(ro), dtype=bool),
                    "start": ro.switch,  # turn 0 always switches: segment starts
                    "decision": ro.t > 0,
                }
                base = {"env": ENV, "policy": pname, "n": n, "seed": seed, "gamma": 1.0}
                context.append(
                    {
                        **base,
                        "success": float(ro.traj_won.mean()),
                        "steps": len(ro),
                        "segments_per_traj": float(ro.switch.sum() / len(ro.traj_won)),
                    }
                )
                for critic, opts in cfg.hiper_rows:
                    result = credit.compute(
                        hiper_step_batch(ro, subgoals.names, tables[critic]),
                        "hiper",
                        **{**HIPER_OPTIONS, **opts},
                    )
                    tag = ",".join([critic, *(f"{k}={v:g}" for k, v in opts.items())])
                    for comp, truth, where in STREAMS:
                        sel = rows[where]
                        est = np.asarray(result.components[comp], dtype=np.float64)[sel]
                        records.append(
                            {
                                **base,
                                "label": f"hiper[{tag}] {comp}",
                                "truth": truth,
                                **agreement(est, tru[truth][sel]),
                            }
                        )
                if "noisy" in tables:
                    dec = rows["decision"]
                    est = paper_switch_advantage(tables["noisy"], policy, ro)[dec]
                    records.append(
                        {
                            **base,
                            "label": "ref:paper-switch[noisy]",
                            "truth": "A_sw",
                            **agreement(est, tru["A_sw"][dec]),
                        }
                    )
                batch = hiper_step_batch(ro, subgoals.names)
                for label, name, opts in flat:
                    adv = np.asarray(credit.compute(batch, name, **opts).advantages)
                    for truth in ("A_low", "A_turn"):
                        records.append(
                            {**base, "label": label, "truth": truth, **agreement(adv, tru[truth])}
                        )
            progress(f"hiper fidelity seed {seed} {pname} done")
    return records, context


def render_hiper(records: list[dict], context: list[dict], cfg: HiperConfig, seed: int = 0) -> str:
    """The report's HiPER section: setup, sampled batches, and one agreement table per policy."""
    # aggregate_fidelity keys on (env, policy, n, label, gamma); fold the truth into the label.
    agg = aggregate_fidelity([{**r, "label": (r["label"], r["truth"])} for r in records], seed)
    labels: list[tuple[str, str]] = []
    for r in records:
        if (r["label"], r["truth"]) not in labels:
            labels.append((r["label"], r["truth"]))
    ns = sorted({r["n"] for r in records})
    lines = [
        f"- **{ENV}**: {ENV_DESCRIPTION}.",
        *[f"- option policy **{p}**: {OPTION_POLICIES[p]}." for p in cfg.policies],
        *[f"- critic **{c}**: {CRITICS[c]}." for c in dict(cfg.hiper_rows)],
        f"- {cfg.seeds} seeds; each draws {cfg.tasks_per_batch} tasks and samples "
        f"N = {', '.join(map(str, cfg.group_sizes))} rollouts per task. HiPER runs with "
        f"`{', '.join(f'{k}={v}' for k, v in HIPER_OPTIONS.items())}` and otherwise its defaults "
        "(γ = 1, λ_turn = 1, λ_seg = 0.95, batch standardisation). Truths at γ = 1. "
        "Brackets: 95 % bootstrap intervals over seeds.",
        "- Rows compared: `action` and the flat modules on every turn, `subgoal` on segment "
        "starts, `switch` on turns t ≥ 1 (turn 0's SWITCH is forced: no decision, no truth). "
        "`ref:paper-switch[noisy]`: the paper's closed-form termination advantage "
        "(q − β)(V_high − V_low) from the noisy critic and the policy's β (a reference, not a "
        "module: the authors' code and `credit/hiper.py` use the segment return minus V_term).",
        "",
        "| policy | N | rollout success | segments per rollout | turns per batch |",
        "|---|---|---|---|---|",
    ]
    for p in cfg.policies:
        for n in ns:
            cs = [c for c in context if c["policy"] == p and c["n"] == n]
            lines.append(
                f"| {p} | {n} | {np.mean([c['success'] for c in cs]):.3f} | "
                f"{np.mean([c['segments_per_traj'] for c in cs]):.2f} | "
                f"{np.mean([c['steps'] for c in cs]):.0f} |"
            )
    for p in cfg.policies:
        head = ["estimator (stream)", "exact counterpart"]
        for n in ns:
            head += [f"Pearson N={n}", f"Spearman N={n}"]
        n_mid = 8 if 8 in ns else ns[len(ns) // 2]
        head.append(f"sign N={n_mid}")
        lines += [
            "",
            f"#### {ENV} / {p}",
            "",
            "| " + " | ".join(head) + " |",
            "|---|---|" + "---|" * (len(head) - 2),
        ]
        for label, truth in labels:
            cells = [label, truth]
            for n in ns:
                a = agg.get((ENV, p, n, (label, truth), 1.0), {})
                cells += [_fmt(a.get("pearson")), _fmt(a.get("spearman"))]
            cells.append(_fmt(agg.get((ENV, p, n_mid, (label, truth), 1.0), {}).get("sign")))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
