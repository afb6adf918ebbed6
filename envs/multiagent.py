"""The multi-agent text-env contract: several agents in one episode, one Gymnasium env.

A multi-agent env is a :class:`~agentrl.envs.TextEnv` whose episode is played by several agents
in turn, modelled on PettingZoo's AEC API (``agent_selection``, ``last()``, per-agent rewards),
so the env pool, replay and the single-agent checks work unchanged:

- ``reset``/``step`` return the observation of the agent that acts next, as that agent sees it
  (hidden information stays hidden), and an ``info`` whose agentrl keys are that agent's:
  ``state_key`` is its information state, ``admissible_actions`` its legal actions,
  ``instruction`` its role. ``step(action)`` applies the action of ``info["agent"]``.
- Simultaneous moves (PettingZoo's Parallel API) are collected the same way: each agent of a
  simultaneous round acts in turn and sees nothing of the others' choices in that round; the
  round resolves when the last one has chosen.
- The multi-agent keys, on every info (:data:`AGENT_KEYS`):

  ============== ======================================================================
  ``agent``      the agent that acts next (``None`` once the episode is over)
  ``agents``     every agent of the episode, in seat order
  ``seats``      the agents the caller plays (the others are the env's own bots)
  ``rewards``    ``{agent: reward}`` of this step (what each got from it)
  ``returns``    ``{agent: return}`` so far
  ``agent_won``  ``{agent: bool}``: won (at the end; cooperative games: the team's best outcome)
  ``agent_score`` ``{agent: float in [0, 1]}``: the return scaled to the game's utility range
  ============== ======================================================================

- The scalar ``reward`` of ``step`` is the acting agent's own reward of that step; ``won`` and
  ``score`` are those of ``seats[0]`` (the learner's seat when bots play the others).
- A reward reaches an agent between its turns (the opponent's winning move ends the game): the
  trainer credits ``rewards[a]`` to agent ``a``'s last action, as PettingZoo's cumulative
  rewards do.

This module imports nothing else from agentrl; :func:`agent_info` checks the keys like
:func:`~agentrl.envs.make_info` checks the single-agent ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["AGENT_KEYS", "agent_info", "agent_problem", "is_multiagent"]

AGENT_KEYS: tuple[str, ...] = (
    "agent",
    "agents",
    "seats",
    "rewards",
    "returns",
    "agent_won",
    "agent_score",
)


def is_multiagent(info: Mapping[str, Any]) -> bool:
    """Whether an info comes from a multi-agent env (it names the agents)."""
    return isinstance(info, Mapping) and "agents" in info and "agent" in info


def agent_problem(info: Mapping[str, Any]) -> str | None:
    """The first way ``info`` breaks the multi-agent keys, or ``None``."""
    missing = [k for k in AGENT_KEYS if k not in info]
    if missing:
        return f"info lacks {', '.join(missing)}"
    agents = info["agents"]
    if not isinstance(agents, list | tuple) or not agents:
        return "info['agents'] must be a non-empty list of agent names"
    if not all(isinstance(a, str) for a in agents) or len(set(agents)) != len(agents):
        return "info['agents'] must hold distinct strings"
    if info["agent"] is not None and info["agent"] not in agents:
        return f"info['agent'] {info['agent']!r} is not one of info['agents'] {list(agents)}"
    seats = info["seats"]
    if not isinstance(seats, list | tuple) or not seats or any(s not in agents for s in seats):
        return "info['seats'] must be a non-empty list of agents from info['agents']"
    for key, _kind in (("rewards", float), ("returns", float), ("agent_score", float)):
        d = info[key]
        if not isinstance(d, Mapping) or set(d) != set(agents):
            return f"info[{key!r}] must map every agent to a number"
        for a, v in d.items():
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                return f"info[{key!r}][{a!r}] must be a finite number, got {v!r}"
            if key == "agent_score" and not 0.0 <= float(v) <= 1.0:
                return f"info['agent_score'][{a!r}] must lie in [0, 1], got {v!r}"
    won = info["agent_won"]
    if not isinstance(won, Mapping) or set(won) != set(agents):
        return "info['agent_won'] must map every agent to a bool"
    if not all(isinstance(v, bool) for v in won.values()):
        return "info['agent_won'] values must be bool"
    return None


def agent_info(
    *,
    agent: str | None,
    agents: Sequence[str],
    seats: Sequence[str],
    rewards: Mapping[str, float],
    returns: Mapping[str, float],
    agent_won: Mapping[str, bool],
    agent_score: Mapping[str, float],
) -> dict[str, Any]:
    """The multi-agent info keys, checked (``ValueError`` naming the key); merge them into a
    :func:`~agentrl.envs.make_info` dict."""
    info = {
        "agent": agent,
        "agents": list(agents),
        "seats": list(seats),
        "rewards": {a: float(rewards[a]) for a in agents},
        "returns": {a: float(returns[a]) for a in agents},
        "agent_won": {a: bool(agent_won[a]) for a in agents},
        "agent_score": {a: float(agent_score[a]) for a in agents},
    }
    problem = agent_problem(info)
    if problem:
        raise ValueError(problem)
    return info
