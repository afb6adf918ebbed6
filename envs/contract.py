"""The agentrl env contract as checks: what the trainer, credit and evaluation rely on.

:func:`check_contract` runs every rule on an env factory and returns one :class:`RuleResult` per
rule (pass or fail, with the offending case). ``python -m agentrl.check_env ID`` prints them;
env authors run it before training (README, "Add your own environment").

The rules (``RULES``):

- ``gymnasium``: Gymnasium's own ``check_env`` passes (spaces, seeding, API shapes);
- ``info``: every ``reset``/``step`` info has the agentrl keys with valid values (``make_info``'s
  checks), ``action_valid`` is true on reset;
- ``seed``: two fresh envs reset with the same seed start in the same state (observation,
  ``state_key``, ``task_id``): a group of rollouts starts from one task;
- ``replay``: ``reset(options={"task_id": id})`` replays the task a seed drew, and the ids listed
  by ``task_ids(split)`` replay identically in a fresh env (the held-out set is fixed);
- ``state_key``: the same actions from the same reset reach the same ``state_key`` sequence in a
  fresh env, and an action that changes nothing keeps the key (GiGPO groups by it);
- ``invalid``: junk actions never raise, are marked ``action_valid=False`` and leave the state
  unchanged;
- ``admissible``: ``admissible_actions`` (where listed) are accepted when taken;
- ``tools``: where the reset info declares tools (``info["tools"]``, the tool-call action
  format; :mod:`.tools`), the declaration is valid, every admissible action seen is written by
  a call of a declared tool (and that call maps back to the same action) along the path of the
  expert's actions sent as calls; skipped where none is declared;
- ``expert``: ``expert_action()`` leaves the env unchanged and following it wins every checked
  task within the step limit (the evaluation's expert agent and its upper bound);
- ``budget``: every admissible action seen fits the model's response budget, given a
  ``token_count`` (the model's tokens for the rendered action, stop token included) and
  ``max_new_tokens``; skipped without them. Under constrained decoding a longer action can
  never be produced.
- ``agents`` (multi-agent envs, :mod:`.multiagent`; skipped otherwise): every info has valid
  multi-agent keys, the scalar reward is the acting agent's share of ``info["rewards"]``, the
  returns add up the rewards, a junk action leaves the turn with the same agent, and the episode
  ends with ``agent`` ``None``;
- ``hidden`` (multi-agent envs): no agent is shown what its information state does not hold:
  over random games from many seeds (other deals, other bot moves), equal ``state_key`` (the
  acting agent's information state) always comes with the same observation and the same
  admissible actions, so nothing hidden (another agent's cards, a pending simultaneous move)
  reaches an observation.

A multi-agent env has no expert that wins every game: ``expert`` is skipped for it where the env
has none.

This module imports nothing from agentrl beyond ``envs`` (the token count is passed in).
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env

from .base import INFO_KEYS, make_info
from .multiagent import agent_problem, is_multiagent
from .tools import TOOL_ACTIONS_KEY, TOOLS_KEY, action_to_call, call_to_action, tools_problem

__all__ = [
    "JUNK_ACTIONS",
    "RULES",
    "RuleResult",
    "actions_seen",
    "budget_failure",
    "check_contract",
]

RULES = (
    "gymnasium",
    "info",
    "seed",
    "replay",
    "state_key",
    "invalid",
    "admissible",
    "tools",
    "expert",
    "budget",
    "agents",
    "hidden",
)

#: Actions no env should accept (empty, whitespace, control bytes, markup, a long string).
JUNK_ACTIONS = ("", "   ", "\x00\x01", "<action></action>", "?!#%", "zz" * 300)


@dataclass(frozen=True)
class RuleResult:
    """One rule's outcome: ``ok`` (``None``: skipped), what was checked and the offending case."""

    rule: str
    ok: bool | None
    detail: str

    def line(self) -> str:
        mark = {True: "PASS", False: "FAIL", None: "SKIP"}[self.ok]
        return f"{mark}  {self.rule:<10} {self.detail}"


class _Broken(Exception):
    """A rule's offending case (its message is the result's detail)."""


def _info_problem(info: Any) -> str | None:
    if not isinstance(info, dict):
        return f"info is {type(info).__name__}, not dict"
    missing = [k for k in INFO_KEYS if k not in info]
    if missing:
        return f"info lacks {', '.join(missing)}"
    try:
        make_info(**{k: info[k] for k in INFO_KEYS})
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def _snapshot(obs: str, info: dict) -> tuple[str, Hashable, str]:
    return obs, info["state_key"], info["task_id"]


class _Checker:
    """The rules over one env factory (a fresh env per rule, so rules do not interfere).

    At most one env is open at a time: :meth:`fresh` closes the one it made before, so an env
    that holds a scarce resource (a session of a one-session server) passes as well as any."""

    def __init__(self, make_env, seeds, max_steps, split, token_count, max_new_tokens):
        self.make_env, self.seeds, self.max_steps, self.split = make_env, seeds, max_steps, split
        self.token_count, self.max_new_tokens = token_count, max_new_tokens
        self.seen_actions: dict[str, None] = {}  # admissible actions met, in order
        self._open: gym.Env | None = None

    def fresh(self) -> gym.Env:
        self.close()
        self._open = self.make_env()
        return self._open

    def close(self) -> None:
        env, self._open = self._open, None
        if env is not None:
            with contextlib.suppress(Exception):  # a close that fails is not the rule's verdict
                env.close()

    def reset(self, env: gym.Env, **kw) -> tuple[str, dict]:
        obs, info = env.reset(**kw)
        problem = _info_problem(info)
        if problem:
            raise _Broken(f"reset({kw}): {problem}")
        self._note(info)
        return obs, info

    def step(self, env: gym.Env, action: str, where: str):
        try:
            out = env.step(action)
        except Exception as exc:  # noqa: BLE001 - any raise breaks the contract
            raise _Broken(
                f"{where}: step({action[:40]!r}) raised {type(exc).__name__}: {exc}"
            ) from exc
        problem = _info_problem(out[4])
        if problem:
            raise _Broken(f"{where}: step({action[:40]!r}): {problem}")
        self._note(out[4])
        return out

    def _note(self, info: dict) -> None:
        for a in info.get("admissible_actions") or ():
            self.seen_actions.setdefault(a, None)

    # -- rules ------------------------------------------------------------------------------
    def gymnasium(self) -> str:
        """Gymnasium's checker; its warnings (an observation outside the space...) fail too."""
        env = self.fresh()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                check_env(env, skip_render_check=True)
            except Exception as exc:  # noqa: BLE001 - the checker's verdict, whatever it raises
                raise _Broken(f"gymnasium check_env: {type(exc).__name__}: {exc}") from exc
        if caught:
            text = re.sub(r"\x1b\[[0-9;]*m", "", str(caught[0].message))  # no colour codes
            raise _Broken(f"gymnasium check_env warns: {text}")
        return "gymnasium.utils.env_checker.check_env passes without a warning"

    def info(self) -> str:
        env, steps = self.fresh(), 0
        for seed in self.seeds:
            _obs, info = self.reset(env, seed=seed)
            if info["action_valid"] is not True:
                raise _Broken(f"reset(seed={seed}): action_valid is {info['action_valid']!r}")
            for _ in range(self.max_steps):
                action = _some_action(env, info)
                _o, _r, term, trunc, info = self.step(env, action, f"seed {seed}")
                steps += 1
                if term or trunc:
                    break
        return (
            f"every info has {len(INFO_KEYS)} valid keys ({len(self.seeds)} resets, {steps} steps)"
        )

    def seed(self) -> str:
        for seed in self.seeds:
            sa = _snapshot(*self.reset(self.fresh(), seed=seed))
            sb = _snapshot(*self.reset(self.fresh(), seed=seed))
            if sa != sb:
                raise _Broken(f"seed {seed}: two fresh envs start apart: {_diff(sa, sb)}")
        return f"same seed, same start ({len(self.seeds)} seeds)"

    def replay(self) -> str:
        checked = 0
        for seed in self.seeds:
            start = _snapshot(*self.reset(self.fresh(), seed=seed))
            again = _snapshot(*self.reset(self.fresh(), options={"task_id": start[2]}))
            if again[:2] != start[:2]:
                raise _Broken(
                    f"task_id {start[2]!r} (drawn by seed {seed}) does not replay: {_diff(start, again)}"
                )
            checked += 1
        try:
            ids = self.fresh().task_ids(self.split, 3)
        except NotImplementedError:
            return f"{checked} drawn tasks replay by task_id (the env lists no task ids)"
        for tid in ids:
            a = _snapshot(*self.reset(self.fresh(), options={"task_id": tid}))
            b = _snapshot(*self.reset(self.fresh(), options={"task_id": tid}))
            if a != b or a[2] != tid:
                raise _Broken(f"listed task {tid!r} of split {self.split!r}: {_diff(a, b)}")
            checked += 1
        return f"{checked} tasks replay by task_id (split {self.split!r} included)"

    def state_key(self) -> str:
        for seed in self.seeds:
            env = self.fresh()
            _obs, info = self.reset(env, seed=seed)
            keys, actions = [info["state_key"]], []
            for _ in range(self.max_steps):
                actions.append(_some_action(env, info))
                _o, _r, term, trunc, info = self.step(env, actions[-1], f"seed {seed}")
                keys.append(info["state_key"])
                if term or trunc:
                    break
            twin = self.fresh()
            _obs, info = self.reset(twin, seed=seed)
            replayed = [info["state_key"]]
            for a in actions:
                replayed.append(self.step(twin, a, f"seed {seed} replay")[4]["state_key"])
            if replayed != keys:
                t = next(i for i, (x, y) in enumerate(zip(keys, replayed)) if x != y)
                raise _Broken(
                    f"seed {seed}: the same actions reach another state_key at step {t}: "
                    f"{keys[t]!r} then {replayed[t]!r}"
                )
        return f"state_key sequences replay ({len(self.seeds)} seeds)"

    def invalid(self) -> str:
        env = self.fresh()
        for seed in self.seeds:
            _obs, info = self.reset(env, seed=seed)
            for junk in JUNK_ACTIONS:
                key = info["state_key"]
                _o, _r, term, trunc, info = self.step(env, junk, f"seed {seed}")
                if info["action_valid"]:
                    raise _Broken(f"seed {seed}: junk action {junk[:40]!r} is marked valid")
                if info["state_key"] != key:
                    raise _Broken(f"seed {seed}: junk action {junk[:40]!r} changed the state")
                if term or trunc:
                    break
        return f"{len(JUNK_ACTIONS)} junk actions rejected without a state change"

    def admissible(self) -> str:
        env, taken, listed = self.fresh(), 0, False
        for seed in self.seeds:
            _obs, info = self.reset(env, seed=seed)
            for t in range(self.max_steps):
                acts = info["admissible_actions"]
                if not acts:
                    break
                listed = True
                action = acts[(seed + t) % len(acts)]
                _o, _r, term, trunc, info = self.step(env, action, f"seed {seed}")
                taken += 1
                if not info["action_valid"]:
                    raise _Broken(f"seed {seed} step {t}: admissible {action!r} marked invalid")
                if term or trunc:
                    break
        if not listed:
            return "the env lists no admissible actions (open action space)"
        return f"{taken} admissible actions accepted"

    def tools(self) -> str | None:
        """``None``: skipped (the env declares no tools)."""
        checked, declared = 0, False
        for seed in self.seeds:
            env = self.fresh()
            _obs, info = self.reset(env, seed=seed)
            tools, actions = info.get(TOOLS_KEY), info.get(TOOL_ACTIONS_KEY)
            if tools is None and actions is None:
                continue
            declared = True
            problem = tools_problem(tools, actions)
            if problem:
                raise _Broken(f"reset(seed={seed}): {problem}")
            for t in range(self.max_steps):
                for a in info["admissible_actions"] or ():
                    call = action_to_call(a, tools, actions)
                    if call is None:
                        raise _Broken(
                            f"seed {seed} step {t}: no declared tool writes the admissible "
                            f"action {a[:60]!r} (add a tool or a tool_actions template)"
                        )
                    if call_to_action(*call, actions) != a:
                        raise _Broken(f"seed {seed} step {t}: {a[:60]!r} does not round-trip")
                    checked += 1
                action = _some_action(env, info)
                call = action_to_call(action, tools, actions)
                if call is None:
                    break  # not an action a call can write (e.g. junk where there is no expert)
                _o, _r, term, trunc, info = self.step(env, call_to_action(*call, actions), "tools")
                if term or trunc:
                    break
        if not declared:
            return None
        return f"the tool declaration is valid; {checked} admissible actions are written by calls"

    def expert(self) -> str | None:
        """``None``: skipped (a multi-agent env without an expert)."""
        for seed in self.seeds:
            twin = self.fresh()
            obs, info = self.reset(twin, seed=seed)
            if is_multiagent(info):
                try:
                    twin.expert_action()
                except NotImplementedError:
                    return None
            try:
                path, keys, won = self._expert_path(twin, info)
            except NotImplementedError as exc:
                raise _Broken(f"no expert: {exc}") from exc
            if not won:
                raise _Broken(
                    f"seed {seed}: the expert did not win in {self.max_steps} steps "
                    f"(actions: {', '.join(map(repr, path[:8]))}{' ...' if len(path) > 8 else ''})"
                )
            env = self.fresh()  # asking the expert twice more before each step changes nothing
            _obs, info = self.reset(env, seed=seed)
            for t, action in enumerate(path):
                env.expert_action()
                env.expert_action()
                info = self.step(env, action, f"seed {seed}")[4]
                if info["state_key"] != keys[t]:
                    raise _Broken(
                        f"seed {seed}: calling expert_action() changed the env (step {t})"
                    )
            for a in path:  # the expert's actions count as seen actions for the budget
                self.seen_actions.setdefault(a, None)
        return f"the expert wins every checked task ({len(self.seeds)} seeds)"

    def _expert_path(self, env: gym.Env, info: dict) -> tuple[list[str], list, bool]:
        """The expert's actions from the current state, the state keys they reach, and whether
        they won within ``max_steps``."""
        actions: list[str] = []
        keys: list = []
        for _ in range(self.max_steps):
            actions.append(env.expert_action())
            _o, _r, terminated, truncated, info = self.step(env, actions[-1], "expert")
            keys.append(info["state_key"])
            if info["won"]:
                return actions, keys, True
            if terminated or truncated:
                break
        return actions, keys, False

    def agents(self) -> str | None:
        """``None``: skipped (a single-agent env)."""
        env, steps = self.fresh(), 0
        for seed in self.seeds:
            _obs, info = self.reset(env, seed=seed)
            if not is_multiagent(info):
                return None
            self._agent_info(info, f"reset(seed={seed})")
            returns = dict(info["returns"])
            rng = np.random.default_rng(seed)
            for t in range(self.max_steps):
                acting = info["agent"]
                junk = self.step(env, JUNK_ACTIONS[t % len(JUNK_ACTIONS)], f"seed {seed}")[4]
                self._agent_info(junk, f"seed {seed} step {t} (junk)")
                if junk["agent"] != acting:
                    raise _Broken(
                        f"seed {seed} step {t}: a junk action passed the turn from {acting!r} "
                        f"to {junk['agent']!r}"
                    )
                acts = junk["admissible_actions"] or []
                if not acts:
                    break
                action = acts[int(rng.integers(len(acts)))]
                _o, r, term, trunc, info = self.step(env, action, f"seed {seed}")
                steps += 1
                where = f"seed {seed} step {t}"
                self._agent_info(info, where)
                if abs(float(r) - info["rewards"][acting]) > 1e-9:
                    raise _Broken(
                        f"{where}: reward {r!r} is not the acting agent {acting!r}'s "
                        f"info['rewards'] {info['rewards'][acting]!r}"
                    )
                for a, v in info["rewards"].items():
                    returns[a] += v
                bad = [a for a in returns if abs(returns[a] - info["returns"][a]) > 1e-6]
                if bad:
                    raise _Broken(f"{where}: info['returns'] of {bad} do not add up the rewards")
                if term or trunc:
                    if term and info["agent"] is not None:
                        raise _Broken(f"{where}: the game ended with agent {info['agent']!r}")
                    break
        return f"agent keys, rewards, returns and turns hold ({steps} moves)"

    def _agent_info(self, info: dict, where: str) -> None:
        problem = agent_problem(info)
        if problem:
            raise _Broken(f"{where}: {problem}")

    def hidden(self) -> str | None:
        """``None``: skipped (a single-agent env)."""
        seen: dict[Hashable, tuple[str, tuple, int]] = {}
        env, games = self.fresh(), 0
        for seed in [*self.seeds, *range(1000, 1000 + max(20, 4 * len(self.seeds)))]:
            obs, info = self.reset(env, seed=seed)
            if not is_multiagent(info):
                return None
            rng = np.random.default_rng(seed + 1)
            games += 1
            for _ in range(self.max_steps):
                if info["agent"] is None:
                    break
                key, acts = info["state_key"], tuple(info["admissible_actions"] or ())
                if key in seen and seen[key][:2] != (obs, acts):
                    first_obs, first_acts, first_seed = seen[key]
                    what = "observation" if first_obs != obs else "admissible actions"
                    raise _Broken(
                        f"agent {info['agent']!r} at one information state {_short(key)} is shown "
                        f"two {what} (seeds {first_seed} and {seed}): {first_obs!r:.80} vs "
                        f"{obs!r:.80}: the observation reveals what the agent cannot know"
                    )
                seen.setdefault(key, (obs, acts, seed))
                if not acts:
                    break
                obs, _r, term, trunc, info = self.step(
                    env, acts[int(rng.integers(len(acts)))], "hidden"
                )
                if term or trunc:
                    break
        return f"{len(seen)} information states, each with one view ({games} games)"

    def budget(self) -> str | None:
        """``None``: skipped (no model given, or no action listed or taken)."""
        if self.token_count is None or self.max_new_tokens is None or not self.seen_actions:
            return None
        counts = {a: self.token_count(a) for a in self.seen_actions}
        failure = budget_failure(counts, self.max_new_tokens)
        if failure is not None:
            raise _Broken(failure)
        need = max(counts.values())
        return f"{len(counts)} actions fit max_new_tokens={self.max_new_tokens} (longest {need})"


def budget_failure(
    counts: Mapping[str, int], max_new_tokens: int, key: str = "max_new_tokens"
) -> str | None:
    """The budget rule on measured actions: ``None`` when every action's token count (stop token
    included) fits ``max_new_tokens``, else one line naming the longest action and the budget it
    needs (``key`` is the setting the line names: the trainer says ``rollout.max_new_tokens``).
    ``python -m agentrl.check_env`` and the trainer's config check both apply it."""
    if not counts:
        return None
    longest = max(counts, key=counts.get)
    need = counts[longest]
    if need <= max_new_tokens:
        return None
    over = sum(n > max_new_tokens for n in counts.values())
    return (
        f"{over} of {len(counts)} actions do not fit {key}={max_new_tokens}: "
        f"the longest, {longest!r}, takes {need} tokens (stop token included); "
        f"set {key} >= {need}"
    )


def actions_seen(env: gym.Env, seeds: Sequence[int] = (0,), max_steps: int = 10) -> list[str]:
    """The admissible actions an env lists from ``reset(seed=s)`` along its expert's path (at most
    ``max_steps`` steps; the expert's own actions included), in the order met: the actions the
    budget rule measures when a caller has no time for the whole contract. An env without an
    expert gives its reset's actions; one that raises gives what was met before."""
    seen: dict[str, None] = {}

    def note(info: Any) -> None:
        acts = info.get("admissible_actions") if isinstance(info, dict) else None
        for a in acts or ():
            if isinstance(a, str):
                seen.setdefault(a, None)

    for seed in seeds:
        try:
            _obs, info = env.reset(seed=seed)
            note(info)
            for _ in range(max_steps):
                action = env.expert_action()
                seen.setdefault(action, None)
                _o, _r, terminated, truncated, info = env.step(action)
                note(info)
                if terminated or truncated:
                    break
        except Exception:  # noqa: BLE001 - no expert, or a broken one: measure what was met
            continue
    return list(seen)


def _some_action(env: gym.Env, info: dict) -> str:
    """The expert's action where there is one, else the first admissible one, else a junk one."""
    try:
        return env.expert_action()
    except NotImplementedError:
        acts = info.get("admissible_actions")
        return acts[0] if acts else JUNK_ACTIONS[-1]


def _short(key: Any) -> str:
    text = repr(key)
    return text if len(text) <= 60 else text[:57] + "..."


def _diff(a: tuple, b: tuple) -> str:
    names = ("observation", "state_key", "task_id")
    parts = [f"{n} {x!r:.60} vs {y!r:.60}" for n, x, y in zip(names, a, b) if x != y]
    return "; ".join(parts) or "same"


def check_contract(
    make_env: Callable[[], gym.Env],
    *,
    seeds: Sequence[int] = (0, 1, 2),
    max_steps: int = 50,
    split: str = "test",
    token_count: Callable[[str], int] | None = None,
    max_new_tokens: int | None = None,
    rules: Sequence[str] = RULES,
) -> list[RuleResult]:
    """Run ``rules`` on envs made by ``make_env``; one result per rule, in ``RULES`` order.

    ``token_count(action)`` is the model's token count of the rendered action (stop token
    included) and ``max_new_tokens`` its response budget; without them ``budget`` is skipped. A
    rule that meets a broken reset or step (an exception, a bad info) fails with that case.
    """
    unknown = [r for r in rules if r not in RULES]
    if unknown:
        raise ValueError(f"unknown rule(s) {', '.join(unknown)}; rules: {', '.join(RULES)}")
    checker = _Checker(make_env, tuple(seeds), max_steps, split, token_count, max_new_tokens)
    results = []
    order = [r for r in RULES if r in rules]
    if "budget" in order and "expert" not in order:  # the budget also covers the expert's path
        order.insert(order.index("budget"), "expert")
    for rule in order:
        try:
            detail = getattr(checker, rule)()
            skipped = {
                "budget": "skipped: needs a model (--model) and actions to measure",
                "tools": "skipped: the env declares no tools (info['tools'])",
                "expert": "skipped: a multi-agent env without an expert (play its bots instead)",
                "agents": "skipped: a single-agent env",
                "hidden": "skipped: a single-agent env",
            }
            result = (
                RuleResult(rule, True, detail)
                if detail is not None
                else RuleResult(rule, None, skipped[rule])
            )
        except _Broken as exc:
            result = RuleResult(rule, False, str(exc))
        except Exception as exc:  # noqa: BLE001 - an env that raises fails the rule, named
            result = RuleResult(rule, False, f"raised {type(exc).__name__}: {exc}")
        finally:
            checker.close()
        if rule in rules:
            results.append(result)
    return results
