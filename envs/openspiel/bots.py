"""Opponents from OpenSpiel's own bots, built from a short spec string.

``random``: :class:`open_spiel.python.bots.uniform_random.UniformRandomBot` (any game, also at
simultaneous nodes). ``mcts:N``: :class:`open_spiel.python.algorithms.mcts.MCTSBot` with ``N``
simulations, UCT constant 2 and one random rollout per leaf
(:class:`~open_spiel.python.algorithms.mcts.RandomRolloutEvaluator`), for sequential
perfect-information games (it searches the true state, so it would cheat at poker). Every bot
draws from its own ``numpy.random.RandomState`` seeded by the env, so a task replays exactly.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

__all__ = ["BOT_SPEC", "make_bot", "parse_bot"]

#: What a bot spec looks like (``random``, ``mcts:25``).
BOT_SPEC = re.compile(r"^(random|mcts:(\d{1,6}))$")


def parse_bot(spec: str, game: Any) -> tuple[str, int]:
    """``(kind, budget)`` of a bot spec; ``ValueError`` naming the spec when it is malformed or
    the game cannot host the bot."""
    m = BOT_SPEC.match(str(spec))
    if not m:
        raise ValueError(f"unknown opponent {spec!r}: use 'random' or 'mcts:N' (N simulations)")
    if m.group(1) == "random":
        return "random", 0
    budget = int(m.group(2))
    if budget < 1:
        raise ValueError(f"opponent {spec!r}: MCTS needs at least one simulation")
    import pyspiel

    gt = game.get_type()
    if (
        gt.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL
        or gt.information != pyspiel.GameType.Information.PERFECT_INFORMATION
    ):
        raise ValueError(
            f"opponent {spec!r}: OpenSpiel's MCTS bot plays sequential perfect-information "
            f"games only, and {gt.short_name} is not one (use 'random')"
        )
    return "mcts", budget


def make_bot(spec: str, game: Any, player: int, seed: int) -> Any:
    """An OpenSpiel bot for ``player`` with its own seeded random state."""
    kind, budget = parse_bot(spec, game)
    rng = np.random.RandomState(seed & 0x7FFFFFFF)
    if kind == "random":
        from open_spiel.python.bots.uniform_random import UniformRandomBot

        return UniformRandomBot(player, rng)
    from open_spiel.python.algorithms import mcts

    evaluator = mcts.RandomRolloutEvaluator(n_rollouts=1, random_state=rng)
    return mcts.MCTSBot(game, 2.0, budget, evaluator, solve=True, random_state=rng)
