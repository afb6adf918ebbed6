"""OpenSpiel games as multi-agent text envs (the contract of :mod:`agentrl.envs.multiagent`).

An adapter, not a re-implementation: the game, its legal actions, their names
(``state.action_to_string``), every agent's view (``observation_string`` /
``information_state_string``), chance, rewards and returns are OpenSpiel's. The adapter adds the
text (a role line over the library's rendering; a few games get a plainer one), seeding, task ids,
the agentrl info keys per agent, and seats played by OpenSpiel's own bots (:mod:`.bots`).

Tasks: ``reset(seed=s)`` is a training game: chance (cards, dice) drawn from ``s``, and every
seat played by the caller (self-play), or, with ``opponent`` set, seat ``s % players`` played by
the caller and the others by that bot; ``reset(seed=s, options={"opponent": spec})`` plays it
against ``spec`` (a bot spec, or ``"self"``) instead of the env's own draw (the trainer's
``rollout.opponents``). ``task_ids("test")`` lists held-out games against each of
``eval_opponents``, the caller's seat alternating; an id is ``"<opponent>@<seat>#<seed>"``
(``"self#<seed>"`` for self-play) and ``reset(options={"task_id": id})`` replays it.

``state_key`` is the acting agent's information state: OpenSpiel's information-state string
where the game has one and hides something, else the observation string (perfect information:
the state itself), prefixed with the agent. Simultaneous rounds (goofspiel) are collected seat by
seat (each sees only its own observation) and applied together with ``apply_actions``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..base import TextEnv, make_info
from ..multiagent import agent_info
from ..tools import fresh, tool, tool_info
from .bots import make_bot, parse_bot

__all__ = ["GAMES", "OpenSpielEnv", "agent_name"]

#: The built-in games: registered env id -> (OpenSpiel game string, title).
GAMES: dict[str, tuple[str, str]] = {
    "TicTacToe-v0": ("tic_tac_toe", "Tic-tac-toe"),
    "ConnectFour-v0": ("connect_four", "Connect four"),
    "KuhnPoker-v0": ("kuhn_poker", "Kuhn poker"),
    "LeducPoker-v0": ("leduc_poker", "Leduc poker"),
    "Hanabi-v0": (
        "hanabi(players=2,colors=2,ranks=2,hand_size=2,max_information_tokens=3,max_life_tokens=1)",
        "Hanabi (2 colours, 2 ranks)",
    ),
    "TinyHanabi-v0": ("tiny_hanabi", "Tiny Hanabi"),
    "Goofspiel-v0": (
        "goofspiel(num_cards=4,imp_info=True,points_order=descending)",
        "Goofspiel (4 cards)",
    ),
}

#: First seed of the held-out games (training seeds stay below it).
TEST_SEED_BASE = 1_000_000_000


def agent_name(player: int) -> str:
    """The agent name of OpenSpiel player ``player`` (PettingZoo's naming)."""
    return f"player_{player}"


def _kuhn(state: Any, player: int) -> str:
    info = state.information_state_string(player)  # "<card><history>", e.g. "2pb"
    card = "JQK"[int(info[0])]
    moves = {"p": "pass", "b": "bet"}
    history = ", ".join(f"{moves[c]}" for c in info[1:]) or "none yet"
    return f"Your card: {card}\nBetting so far: {history}"


def _tic_tac_toe(state: Any, player: int) -> str:
    return f"You play {'xo'[player]}.\n{state.observation_string(player)}"


#: Plainer text than the library's for a few games (the library's string otherwise).
DESCRIBE: dict[str, Callable[[Any, int], str]] = {
    "kuhn_poker": _kuhn,
    "tic_tac_toe": _tic_tac_toe,
}


class OpenSpielEnv(TextEnv):
    """One OpenSpiel game as a multi-agent text env.

    Args:
        game: an OpenSpiel game string (``"tic_tac_toe"``, ``"leduc_poker"``,
            ``"goofspiel(num_cards=4)"``...).
        opponent: ``None`` (self-play: the caller plays every seat) or a bot spec (``"random"``,
            ``"mcts:N"``) that plays every seat but the caller's in training games; or a list of
            them (``"self"`` for self-play), one drawn per training game from its seed (a pool
            of opponents).
        eval_opponents: the bots of the held-out split (``task_ids("test")``).
        title: the game's name in the text (default: OpenSpiel's long name).
    """

    def __init__(
        self,
        game: str = "tic_tac_toe",
        *,
        opponent: str | Sequence[str] | None = None,
        eval_opponents: Sequence[str] = ("random",),
        title: str | None = None,
        render_mode: str | None = None,
    ):
        super().__init__(render_mode)
        import pyspiel

        self._pyspiel = pyspiel
        try:
            self.game = pyspiel.load_game(game)
        except pyspiel.SpielError as exc:
            raise ValueError(f"OpenSpiel has no game {game!r}: {exc}") from None
        gt = self.game.get_type()
        if gt.dynamics not in (gt.Dynamics.SEQUENTIAL, gt.Dynamics.SIMULTANEOUS):
            raise ValueError(f"{game}: only sequential and simultaneous games are supported")
        self.game_string, self.short_name = game, gt.short_name
        self.title = title or gt.long_name
        self.n = self.game.num_players()
        self.agents = [agent_name(p) for p in range(self.n)]
        pool = [opponent] if opponent is None or isinstance(opponent, str) else list(opponent)
        self.opponents = [None if o in (None, "self") else str(o) for o in pool]
        if not self.opponents:
            raise ValueError("opponent: an empty list of opponents")
        for o in self.opponents:
            if o is not None:
                parse_bot(o, self.game)
        self.eval_opponents = list(eval_opponents)
        for spec in self.eval_opponents:
            parse_bot(spec, self.game)
        hides = gt.information != gt.Information.PERFECT_INFORMATION
        self._use_info_state = hides and gt.provides_information_state_string
        self._describe = DESCRIBE.get(gt.short_name, self._library_text)
        self._lo, self._hi = float(self.game.min_utility()), float(self.game.max_utility())
        self._identical = gt.utility == gt.Utility.IDENTICAL
        self.tools = tool_info([tool("play", "Make your move.", action=self._action_schema())],
                               {"play": "{action}"})  # fmt: skip
        self.state: Any = None

    def _action_schema(self) -> dict[str, Any]:
        """The ``play`` tool's argument: every action name of the game (an enum) where OpenSpiel
        names them without a state in play, else any string."""
        names: dict[str, None] = {}
        try:
            state = self.game.new_initial_state()
            for p in range(self.n):
                for a in range(self.game.num_distinct_actions()):
                    names.setdefault(state.action_to_string(p, a), None)
        except Exception:  # noqa: BLE001 - a game that names actions only in play
            return {"type": "string", "description": "one of the admissible actions"}
        return {"type": "string", "enum": list(names)}

    # -- tasks -------------------------------------------------------------------------------
    def task_ids(self, split: str, limit: int | None = None) -> list[str]:
        if split != "test":
            raise ValueError(f"{self.short_name}: the only split is 'test', got {split!r}")
        n = 200 if limit is None else int(limit)
        ids = []
        for i in range(n):
            spec = self.eval_opponents[i % len(self.eval_opponents)]
            seat = (i // len(self.eval_opponents)) % self.n
            ids.append(f"{spec}@{seat}#{TEST_SEED_BASE + i}")
        return ids

    def _parse_task(self, task_id: str) -> tuple[str | None, int | None, int]:
        try:
            head, seed_text = task_id.rsplit("#", 1)
            seed = int(seed_text)
            if head == "self":
                return None, None, seed
            spec, seat_text = head.rsplit("@", 1)
            seat = int(seat_text)
        except ValueError:
            raise ValueError(
                f"task id {task_id!r} is not '<opponent>@<seat>#<seed>' or 'self#<seed>'"
            ) from None
        parse_bot(spec, self.game)
        if not 0 <= seat < self.n:
            raise ValueError(f"task id {task_id!r}: seat {seat} of a {self.n}-player game")
        return spec, seat, seed

    # -- gymnasium ---------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        task_id = (options or {}).get("task_id")
        if task_id is None:
            s = int(seed) if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
            chosen = (options or {}).get("opponent")
            if chosen is None:  # the env's own draw from ``opponent``
                pick = np.random.default_rng([s, 1]).integers(len(self.opponents))
                spec = self.opponents[int(pick)]
            else:  # the caller's choice (the trainer's rollout.opponents)
                spec = None if chosen == "self" else str(chosen)
            task_id = f"self#{s}" if spec is None else f"{spec}@{s % self.n}#{s}"
        spec, seat, s = self._parse_task(str(task_id))
        self.task_id = str(task_id)
        self._chance = np.random.default_rng(s)
        self.state = self.game.new_initial_state()
        self.seats = list(range(self.n)) if spec is None else [seat]
        self.bots = {
            p: make_bot(spec, self.game, p, s * 7919 + 104729 * (p + 1))
            for p in range(self.n)
            if p not in self.seats
        }
        self._pending: dict[int, int] = {}  # a simultaneous round's actions chosen so far
        self._advance()
        zero = dict.fromkeys(self.agents, 0.0)
        return self.current_observation(), {**self._info(True, zero), **fresh(self.tools)}

    def step(self, action: str):
        if self.state is None:
            raise RuntimeError("call reset() before step()")
        player = self._acting()
        if player is None:  # the game is over: nothing to apply
            zero = dict.fromkeys(self.agents, 0.0)
            return self.current_observation(), 0.0, True, False, self._info(False, zero)
        legal = self._legal(player)
        chosen = legal.get(str(action).strip().lower()) if isinstance(action, str) else None
        before = self._returns()
        if chosen is None:
            zero = dict.fromkeys(self.agents, 0.0)
            obs, info = self.current_observation(), self._info(False, zero)
            return obs, 0.0, False, False, info
        if self.state.is_simultaneous_node():
            self._pending[player] = chosen
        else:
            self.state.apply_action(chosen)
        self._advance()
        after = self._returns()
        rewards = {a: after[a] - before[a] for a in self.agents}
        info = self._info(True, rewards)
        terminated = bool(self.state.is_terminal())
        return self.current_observation(), rewards[agent_name(player)], terminated, False, info

    # -- the game ----------------------------------------------------------------------------
    def _advance(self) -> None:
        """Play chance and the bots until a seat of the caller must act or the game ends."""
        st = self.state
        while not st.is_terminal():
            if st.is_chance_node():
                outcomes, probs = zip(*st.chance_outcomes())
                st.apply_action(int(self._chance.choice(outcomes, p=np.asarray(probs))))
            elif st.is_simultaneous_node():
                for p, bot in self.bots.items():
                    if p not in self._pending:
                        self._pending[p] = int(bot.step(st))
                if any(p not in self._pending for p in self.seats if st.legal_actions(p)):
                    return
                st.apply_actions([self._pending.get(p, 0) for p in range(self.n)])
                self._pending = {}
            elif st.current_player() in self.bots:
                st.apply_action(int(self.bots[st.current_player()].step(st)))
            else:
                return

    def _acting(self) -> int | None:
        """The OpenSpiel player the caller must move for now (``None``: the game is over)."""
        st = self.state
        if st.is_terminal():
            return None
        if st.is_simultaneous_node():
            return next(p for p in self.seats if p not in self._pending and st.legal_actions(p))
        return int(st.current_player())

    def _legal(self, player: int) -> dict[str, int]:
        return {
            self.state.action_to_string(player, a).strip().lower(): a
            for a in self.state.legal_actions(player)
        }

    def _returns(self) -> dict[str, float]:
        return {a: float(r) for a, r in zip(self.agents, self.state.returns())}

    def _library_text(self, state: Any, player: int) -> str:
        gt = self.game.get_type()
        if gt.provides_observation_string:
            return state.observation_string(player)
        return state.information_state_string(player)

    def information_state(self, player: int) -> str:
        """What ``player`` knows now (the key of its anchor groups)."""
        if self._use_info_state:
            return self.state.information_state_string(player)
        return self._library_text(self.state, player)

    def current_observation(self) -> str:
        player = self._acting()
        if player is None:
            lines = [f"{self.title}: the game is over."]
            lines += [f"{a}: {r:+g}" for a, r in self._returns().items()]
            return "\n".join(lines)
        return self.view(self.state, player)[0]

    def view(self, state: Any, player: int) -> tuple[str, str, list[str]]:
        """What ``player`` is shown at ``state`` (any state of this game, e.g. one of OpenSpiel's
        tabular policy): the observation text, the role instruction and the admissible actions."""
        observation = f"{self.title}, player {player}.\n{self._describe(state, player)}"
        role = (
            f"You are player {player} of {self.n} in {self.title}. "
            "Answer with one of the admissible actions."
        )
        actions = [state.action_to_string(player, a) for a in state.legal_actions(player)]
        return observation, role, actions

    def _outcome(self) -> tuple[dict[str, bool], dict[str, float]]:
        ret = self._returns()
        span = max(self._hi - self._lo, 1e-12)
        score = {a: min(1.0, max(0.0, (ret[a] - self._lo) / span)) for a in self.agents}
        if not self.state.is_terminal():
            return dict.fromkeys(self.agents, False), score
        if self._identical:  # a team: won when it reached the best outcome the game allows
            return {a: ret[a] >= self._hi - 1e-9 for a in self.agents}, score
        best = max(ret.values())
        leaders = [a for a in self.agents if ret[a] >= best - 1e-9]
        return {a: len(leaders) < self.n and a in leaders for a in self.agents}, score

    def _info(self, valid: bool, rewards: dict[str, float]) -> dict[str, Any]:
        player = self._acting()
        won, score = self._outcome()
        focus = agent_name(self.seats[0])
        if player is None:
            key: Any = ("end", self.state.history_str())
            actions: list[str] | None = []
            role = f"You played {self.title}."
        else:
            key = (agent_name(player), self.information_state(player))
            _obs, role, actions = self.view(self.state, player)
        return {
            **make_info(
                instruction=role,
                task_id=self.task_id,
                category=self.short_name,
                admissible_actions=actions,
                state_key=key,
                action_valid=valid,
                won=won[focus],
                score=score[focus],
            ),
            **agent_info(
                agent=None if player is None else agent_name(player),
                agents=self.agents,
                seats=[agent_name(p) for p in self.seats],
                rewards=rewards,
                returns=self._returns(),
                agent_won=won,
                agent_score=score,
            ),
        }


def make_game(env_id: str) -> Callable[..., OpenSpielEnv]:
    """The entry point of a built-in game id (``TicTacToe-v0``...): its game string and title."""
    game, title = GAMES[env_id]

    def make(**kwargs: Any) -> OpenSpielEnv:
        kwargs.setdefault("game", game)
        kwargs.setdefault("title", title)
        return OpenSpielEnv(**kwargs)

    return make


def _game_maker(env_id: str) -> Callable[..., OpenSpielEnv]:
    """``make_game`` with the env's keyword arguments in its signature (for ``envs.registry``'s
    option check)."""
    import inspect

    make = make_game(env_id)
    game, title = GAMES[env_id]
    sig = inspect.signature(OpenSpielEnv.__init__)
    params = [
        p.replace(
            kind=p.KEYWORD_ONLY, default={"game": game, "title": title}.get(p.name, p.default)
        )
        for p in list(sig.parameters.values())[1:]
    ]
    make.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    make.__name__ = make.__qualname__ = env_id.split("-")[0].lower()
    return make


tic_tac_toe = _game_maker("TicTacToe-v0")
connect_four = _game_maker("ConnectFour-v0")
kuhn_poker = _game_maker("KuhnPoker-v0")
leduc_poker = _game_maker("LeducPoker-v0")
hanabi = _game_maker("Hanabi-v0")
tiny_hanabi = _game_maker("TinyHanabi-v0")
goofspiel = _game_maker("Goofspiel-v0")
