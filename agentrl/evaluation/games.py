"""Evaluating game-playing policies: win/draw/loss per opponent, exploitability, ratings.

- :func:`outcome` reads one finished multi-agent episode from one agent's side (win, draw or
  loss from the returns; a cooperative game's win is the team's best outcome), and
  :func:`wdl_table` counts them per (game, opponent) with 95 % Wilson intervals; the opponent is
  read from the task id (``"mcts:25@1#1000000003"``: OpenSpiel's MCTS with 25 simulations, the
  policy in seat 1).
- :class:`SeatPolicy` plays each agent of an episode with its own policy of the episode loop
  (a model against an earlier checkpoint of itself: two :class:`~agentrl.rollout.ModelPolicy`).
- :func:`action_probabilities` gives a model's probabilities of the admissible actions of a
  prompt exactly as constrained sampling draws them (the trie renormalisation per position, the
  sampling temperature), and :func:`exploitability` fills an OpenSpiel
  :class:`~open_spiel.python.policy.TabularPolicy` with them at every information state and asks
  OpenSpiel's ``exploitability`` (exact, by best response over the game tree).
- :func:`one_move_tactics` measures, in a two-player game of perfect information, how much of
  the policy's probability goes to an immediate win where one exists, and to a move that leaves
  the opponent no immediate win where some moves do (a block): the tactics a policy can have
  while its win rate still says little about why it loses.
- :func:`ratings` rates players (checkpoints, bots) from their match results with OpenSkill's
  Plackett-Luce model (the ``openskill`` package).

The win/draw/loss part needs no torch; the model parts import it when called.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..backends.trie import allowed_per_position
from ..episodes import Episode, EpisodeResult, Move, Policy
from .stats import wilson_interval

__all__ = [
    "Outcome",
    "SeatPolicy",
    "action_probabilities",
    "exploitability",
    "one_move_tactics",
    "opponent_of",
    "outcome",
    "ratings",
    "wdl_table",
]


def opponent_of(task_id: str) -> str:
    """The opponent a task id names (``"mcts:25@1#7"`` -> ``"mcts:25"``; self-play: ``"self"``)."""
    head = task_id.rsplit("#", 1)[0]
    return head.rsplit("@", 1)[0] if "@" in head else head


def outcome(ep: EpisodeResult, agent: str | None = None) -> str:
    """``"win"``, ``"draw"`` or ``"loss"`` of ``agent`` (default: the first seat the policy
    played) in a finished multi-agent episode; an episode cut by an error is a loss."""
    agent = agent or (ep.seats[0] if ep.seats else ep.agent)
    if agent is None or not ep.agent_return or ep.error is not None:
        return "win" if ep.won else "loss"
    others = [r for a, r in ep.agent_return.items() if a != agent]
    mine = ep.agent_return[agent]
    if ep.agent_won.get(agent):
        return "win"
    if others and all(abs(r - mine) < 1e-9 for r in others):  # equal returns: a draw (or a team)
        return "draw"
    best = max(others) if others else mine
    return "win" if mine > best + 1e-9 else ("loss" if mine < best - 1e-9 else "draw")


@dataclass(frozen=True)
class Outcome:
    """Win/draw/loss counts of one (game, opponent) with 95 % Wilson intervals."""

    wins: int
    draws: int
    losses: int

    @property
    def n(self) -> int:
        return self.wins + self.draws + self.losses

    def rate(self, kind: str) -> tuple[float, float, float]:
        """``(rate, low, high)`` of ``"win"``, ``"draw"``, ``"loss"`` or ``"non_loss"``."""
        k = {
            "win": self.wins,
            "draw": self.draws,
            "loss": self.losses,
            "non_loss": self.wins + self.draws,
        }[kind]
        lo, hi = wilson_interval(k, self.n)
        return (k / self.n if self.n else 0.0), lo, hi

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"wins": self.wins, "draws": self.draws, "losses": self.losses}
        for kind in ("win", "draw", "loss", "non_loss"):
            out[kind] = list(self.rate(kind))
        return out


def wdl_table(episodes: Sequence[EpisodeResult]) -> dict[tuple[str, str], Outcome]:
    """Win/draw/loss of the policy's seat per (game category, opponent)."""
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for ep in episodes:
        k = {"win": 0, "draw": 1, "loss": 2}[outcome(ep)]
        counts[(ep.category, opponent_of(ep.task_id))][k] += 1
    return {key: Outcome(*c) for key, c in sorted(counts.items())}


class SeatPolicy:
    """A policy of the episode loop that plays each agent with its own policy (``policies[agent]``;
    ``default`` for the others): each step, the live episodes are split by acting agent, each
    policy answers its share, and the moves come back in order."""

    def __init__(self, policies: Mapping[str, Policy], default: Policy | None = None):
        self.policies, self.default = dict(policies), default

    def _of(self, ep: Episode) -> Policy:
        policy = self.policies.get(ep.agent or "", self.default)
        if policy is None:
            raise ValueError(f"no policy plays agent {ep.agent!r}")
        return policy

    def start(self, episodes: Sequence[Episode]) -> None:
        for policy in {id(p): p for p in [*self.policies.values(), self.default] if p}.values():
            policy.start(episodes)

    def act(self, episodes: Sequence[Episode], step: int, first_request: int | None) -> list[Move]:
        moves: list[Move | None] = [None] * len(episodes)
        by_policy: dict[int, tuple[Policy, list[int]]] = {}
        for i, ep in enumerate(episodes):
            p = self._of(ep)
            by_policy.setdefault(id(p), (p, []))[1].append(i)
        for policy, idx in by_policy.values():
            for i, move in zip(idx, policy.act([episodes[i] for i in idx], step, None)):
                moves[i] = move
        return moves  # type: ignore[return-value]


def action_probabilities(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[list[int]],
    choices: Sequence[Sequence[tuple[str, tuple[int, ...]]]],
    temperature: float = 1.0,
) -> list[dict[str, float]]:
    """Per prompt, the probability of each choice ``(action, response token ids)`` under
    constrained sampling at ``temperature``: at every response position the next-token
    distribution is renormalised over the tokens that continue some choice (the trie the rollout
    restricts sampling to), and a choice's probability is the product along its tokens."""
    import torch

    out: list[dict[str, float]] = []
    device = next(model.parameters()).device
    for prompt, options in zip(prompts, choices):
        seqs = [ids for _, ids in options]
        probs: dict[str, float] = {}
        for action, ids in options:
            allowed = allowed_per_position(seqs, list(ids))
            x = torch.tensor([list(prompt) + list(ids)], device=device)
            with torch.no_grad():
                logits = model(input_ids=x).logits[0].float() / temperature
            logp = 0.0
            for t, tok in enumerate(ids):
                row = logits[len(prompt) + t - 1]
                ok = torch.tensor(list(allowed[t]), device=device)
                lse = torch.logsumexp(row[ok], dim=0)
                logp += float(row[tok] - lse)
            probs[action] = probs.get(action, 0.0) + float(torch.exp(torch.tensor(logp)))
        total = sum(probs.values()) or 1.0
        out.append({a: p / total for a, p in probs.items()})
    return out


def exploitability(
    game: Any,
    probabilities: Callable[[Any, int, list[int]], Mapping[int, float]],
) -> float:
    """OpenSpiel's exact exploitability (mean over players of the best response's gain; 0 at a
    Nash equilibrium) of the policy whose action probabilities at a state are
    ``probabilities(state, player, legal_actions) -> {action: p}`` (read once per information
    state, from one state of it)."""
    from open_spiel.python import policy as os_policy
    from open_spiel.python.algorithms import exploitability as os_exploitability

    table = os_policy.TabularPolicy(game)
    for key, row in table.state_lookup.items():
        state = table.states[row] if hasattr(table, "states") else None
        if state is None:
            raise RuntimeError(f"OpenSpiel's tabular policy keeps no state for {key!r}")
        player = state.current_player()
        legal = state.legal_actions(player)
        p = probabilities(state, player, legal)
        vec = table.action_probability_array[row]
        vec[:] = 0.0
        total = sum(max(0.0, float(p.get(a, 0.0))) for a in legal)
        for a in legal:
            vec[a] = (max(0.0, float(p.get(a, 0.0))) / total) if total > 0 else 1.0 / len(legal)
    return float(os_exploitability.exploitability(game, table))


def _wins_now(state: Any, player: int) -> list[int]:
    """The legal actions of ``player`` at ``state`` that end the game with ``player`` ahead."""
    out = []
    for a in state.legal_actions(player):
        child = state.child(a)
        if child.is_terminal() and child.returns()[player] > max(
            r for i, r in enumerate(child.returns()) if i != player
        ):
            out.append(a)
    return out


def _tactic(state: Any) -> tuple[str, list[int]] | None:
    """``("win", winning actions)``, ``("defend", the actions after which the opponent has no
    immediate win)`` where only some actions are safe, else ``None``."""
    player = state.current_player()
    wins = _wins_now(state, player)
    if wins:
        return "win", wins
    legal = state.legal_actions(player)
    safe = []
    for a in legal:
        child = state.child(a)
        if (
            child.is_terminal()
            or child.is_chance_node()  # a deal or a roll comes first: no immediate win
            or not _wins_now(child, child.current_player())
        ):
            safe.append(a)
    return ("defend", safe) if safe and len(safe) < len(legal) else None


def one_move_tactics(
    game: Any,
    probabilities: Callable[[Any, int, list[int]], Mapping[int, float]],
    positions: int = 200,
    seed: int = 0,
    states: Sequence[Any] | None = None,
) -> dict[str, dict[str, float]]:
    """One-move tactics of a policy in a two-player, sequential game of perfect information
    (tic-tac-toe, connect four), per kind of position:

    - ``win``: the player to move can win at once; the good actions are the winning ones.
    - ``defend``: it cannot, and some of its moves (not all) let the opponent win at once; the
      good actions are the others (a block).

    Positions are ``states`` where given, else the first ``positions`` distinct positions of each
    kind met along uniformly random games (``seed``; at most ``100 * positions`` games, so a
    kind a game rarely has may come with fewer). Per kind: ``positions`` found, ``mass``
    (the mean probability ``probabilities(state, player, legal) -> {action: p}`` puts on good
    actions), ``greedy`` (how often its most probable action is good) and ``uniform`` (the mass
    a uniform random policy puts on them, the baseline)."""
    import random

    gt = game.get_type()
    if (
        game.num_players() != 2
        or gt.information != gt.Information.PERFECT_INFORMATION
        or gt.dynamics != gt.Dynamics.SEQUENTIAL
    ):
        raise ValueError(f"one-move tactics need a two-player sequential game of perfect "
                         f"information, not {gt.short_name}")  # fmt: skip
    found: dict[str, list[tuple[Any, list[int]]]] = {"win": [], "defend": []}
    if states is not None:
        for st in states:
            t = _tactic(st)
            if t is not None:
                found[t[0]].append((st, t[1]))
    else:
        rng, seen = random.Random(seed), set()
        for _ in range(max(2000, 100 * positions)):  # games; a rare kind may come up short
            if all(len(v) >= positions for v in found.values()):
                break
            st = game.new_initial_state()
            while not st.is_terminal():
                if st.is_chance_node():  # perfect-information games may still deal (none here)
                    acts, probs = zip(*st.chance_outcomes())
                    st.apply_action(rng.choices(acts, probs)[0])
                    continue
                key = str(st)
                if key not in seen:
                    seen.add(key)
                    t = _tactic(st)
                    if t is not None and len(found[t[0]]) < positions:
                        found[t[0]].append((st.clone(), t[1]))
                st.apply_action(rng.choice(st.legal_actions()))
    out: dict[str, dict[str, float]] = {}
    for kind, items in found.items():
        mass = greedy = uniform = 0.0
        for st, good in items:
            player = st.current_player()
            legal = st.legal_actions(player)
            p = {a: max(0.0, float(v)) for a, v in probabilities(st, player, legal).items()}
            total = sum(p.get(a, 0.0) for a in legal) or 1.0
            mass += sum(p.get(a, 0.0) for a in good) / total
            greedy += float(max(legal, key=lambda a: p.get(a, 0.0)) in good)
            uniform += len(good) / len(legal)
        n = len(items)
        out[kind] = {
            "positions": float(n),
            "mass": mass / n if n else float("nan"),
            "greedy": greedy / n if n else float("nan"),
            "uniform": uniform / n if n else float("nan"),
        }
    return out


def ratings(
    matches: Sequence[tuple[str, str, str]], *, seed_ratings: Mapping[str, float] | None = None
) -> dict[str, dict[str, float]]:
    """OpenSkill (Plackett-Luce) ratings from ``(player_a, player_b, result)`` matches, result
    ``"win"``/``"draw"``/``"loss"`` from ``player_a``'s side, rated in the given order. Returns
    ``{player: {"mu", "sigma", "ordinal"}}`` (``ordinal = mu - 3 sigma``, a conservative skill)."""
    from openskill.models import PlackettLuce

    model = PlackettLuce()
    table: dict[str, Any] = {}

    def get(name: str) -> Any:
        if name not in table:
            mu = (seed_ratings or {}).get(name)
            table[name] = model.rating(name=name) if mu is None else model.rating(mu=mu, name=name)
        return table[name]

    for a, b, result in matches:
        ra, rb = get(a), get(b)
        ranks = {"win": [1, 2], "loss": [2, 1], "draw": [1, 1]}[result]
        (na,), (nb,) = model.rate([[ra], [rb]], ranks=ranks)
        table[a], table[b] = na, nb
    return {
        n: {"mu": float(r.mu), "sigma": float(r.sigma), "ordinal": float(r.ordinal())}
        for n, r in sorted(table.items())
    }
