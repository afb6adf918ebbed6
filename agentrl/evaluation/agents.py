"""Baseline agents: ``random`` (uniform over the admissible actions) and ``expert``.

Both answer a batch of live episodes at once (see :class:`agentrl.evaluation.runner.Agent`).
The random agent draws from each episode's own generator, seeded with the episode's
``agent_seed``, so its choices do not depend on which other episodes share the batch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..episodes import Episode
from ..pool import EnvPool
from .runner import Action

__all__ = ["ExpertAgent", "RandomAgent"]


_PLACEHOLDER = re.compile(r"<[^<>]*>")


class RandomAgent:
    """Uniform over ``info["admissible_actions"]``.

    - An admissible action with a ``<placeholder>`` is a template (WebShop lists
      ``search[<your query>]``): the placeholder is filled with the episode's instruction (the
      reference's rule baseline searches with the instruction), unless ``fill_templates`` is off.
    - Where the env lists no actions (``admissible_actions is None``: an open action space),
      ``open_action`` is sent, with ``{instruction}`` replaced by the instruction; without one,
      the agent raises a ``ValueError`` naming the task and step.
    """

    name = "random"

    def __init__(self, open_action: str | None = None, fill_templates: bool = True):
        self.open_action = open_action
        self.fill_templates = fill_templates

    def act(self, episodes: Sequence[Episode], pool: EnvPool) -> list[Action | str]:
        out: list[Action | str] = []
        for ep in episodes:
            actions = ep.admissible_actions
            if actions:
                action = actions[int(ep.rng.integers(len(actions)))]
                if self.fill_templates and (m := _PLACEHOLDER.search(action)):
                    action = action[: m.start()] + ep.instruction + action[m.end() :]
                out.append(action)
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
