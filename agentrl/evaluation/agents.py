"""Baseline agents: ``random`` (uniform over the admissible actions) and ``expert``.

Both answer a batch of live episodes at once (see :class:`agentrl.evaluation.runner.Agent`).
The random agent draws from each episode's own generator, seeded with the episode's
``agent_seed``, so its choices do not depend on which other episodes share the batch.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..pool import EnvPool
from .runner import Action, Episode

__all__ = ["ExpertAgent", "RandomAgent"]


class RandomAgent:
    """Uniform over ``info["admissible_actions"]``.

    Where an env leaves the action space open (``admissible_actions is None``, e.g. WebShop's
    search box), ``open_action`` is sent instead: by default ``search[<instruction>]`` is not
    assumed; the agent raises a ``ValueError`` naming the env state, unless ``open_action`` is
    set (a fixed string, with ``{instruction}`` replaced by the episode's instruction).
    """

    name = "random"

    def __init__(self, open_action: str | None = None):
        self.open_action = open_action

    def act(self, episodes: Sequence[Episode], pool: EnvPool) -> list[Action | str]:
        out: list[Action | str] = []
        for ep in episodes:
            actions = ep.admissible_actions
            if actions:
                out.append(actions[int(ep.rng.integers(len(actions)))])
            elif self.open_action is not None:
                out.append(self.open_action.replace("{instruction}", ep.instruction))
            else:
                raise ValueError(
                    f"task {ep.task.task_id}: the env lists no admissible actions at step {ep.steps} "
                    "(open action space); give the random agent an open_action"
                )
        return out

    def close(self) -> None:
        pass


class ExpertAgent:
    """The env's own expert: ``env.expert_action()``, called in the env's worker."""

    name = "expert"

    def act(self, episodes: Sequence[Episode], pool: EnvPool) -> list[Action | str]:
        return list(pool.call([ep.slot for ep in episodes], "expert_action"))

    def close(self) -> None:
        pass
