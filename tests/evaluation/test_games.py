"""Game evaluation: win/draw/loss per opponent, two policies in one episode, OpenSkill ratings,
OpenSpiel's exact exploitability, and the model's action probabilities (checked against the
log-probs constrained sampling reports for the same prompt)."""

from __future__ import annotations

import math

import pytest

from agentrl.episodes import Move, play_episodes
from agentrl.evaluation.games import (
    SeatPolicy,
    exploitability,
    one_move_tactics,
    opponent_of,
    outcome,
    ratings,
    wdl_table,
)
from agentrl.pool import EnvPool, EnvSpec, ResetSpec

pytest.importorskip("pyspiel")


class First:
    """Always the first admissible action; counts the moves it made per agent."""

    def __init__(self):
        self.moves: dict[str, int] = {}

    def start(self, episodes):
        pass

    def act(self, episodes, step, first_request):
        out = []
        for ep in episodes:
            self.moves[ep.agent] = self.moves.get(ep.agent, 0) + 1
            a = ep.admissible_actions[0]
            out.append(Move(a, a))
        return out


class Last(First):
    def act(self, episodes, step, first_request):
        for ep in episodes:
            self.moves[ep.agent] = self.moves.get(ep.agent, 0) + 1
        return [Move(ep.admissible_actions[-1], ep.admissible_actions[-1]) for ep in episodes]


def test_wdl_per_opponent_against_openspiel_bots():
    pool = EnvPool(
        [EnvSpec("TicTacToe-v0", {"eval_opponents": ["random", "mcts:20"]})] * 4, num_workers=0
    )
    ids = pool.call([0], "task_ids", "test", 8)[0]
    eps = play_episodes(
        pool,
        First(),
        [ResetSpec(i, None, {"task_id": t}) for i, t in enumerate(ids)],
        max_steps=12,
        width=4,
    )
    table = wdl_table(eps)
    assert set(table) == {("tic_tac_toe", "random"), ("tic_tac_toe", "mcts:20")}
    for o in table.values():
        assert o.n == 4
        rate, lo, hi = o.rate("non_loss")
        assert lo <= rate <= hi and rate == (o.wins + o.draws) / 4
    assert opponent_of("mcts:20@1#7") == "mcts:20" and opponent_of("self#3") == "self"


def test_seat_policy_plays_each_agent_with_its_own_policy():
    pool = EnvPool([EnvSpec("TicTacToe-v0", {})] * 2, num_workers=0)
    a, b = First(), Last()
    eps = play_episodes(
        pool,
        SeatPolicy({"player_0": a}, default=b),
        [ResetSpec(0, 1), ResetSpec(1, 2)],
        max_steps=12,
    )
    assert set(a.moves) == {"player_0"} and set(b.moves) == {"player_1"}
    # x fills the top row from the left, o the bottom row from the right: x wins on move 5
    assert [outcome(ep, "player_0") for ep in eps] == ["win", "win"]
    assert [outcome(ep, "player_1") for ep in eps] == ["loss", "loss"]


def test_ratings_order_players_by_results():
    matches = [("strong", "weak", "win")] * 10 + [("weak", "strong", "draw")] * 2
    r = ratings(matches)
    assert r["strong"]["mu"] > r["weak"]["mu"] and r["strong"]["ordinal"] > r["weak"]["ordinal"]


def test_exploitability_of_known_kuhn_policies():
    import pyspiel

    game = pyspiel.load_game("kuhn_poker")
    uniform = exploitability(game, lambda s, p, legal: dict.fromkeys(legal, 1.0))
    assert uniform == pytest.approx(0.458333, abs=1e-5)  # OpenSpiel's value for uniform Kuhn

    # a Nash equilibrium (alpha = 0): exploitability 0
    def nash(state, player, legal):
        info = state.information_state_string(player)
        card, hist = int(info[0]), info[1:]
        bet = {  # P(bet) of the alpha=0 equilibrium
            (0, ""): 0.0,
            (1, ""): 0.0,
            (2, ""): 0.0,
            (0, "p"): 1 / 3,
            (1, "p"): 0.0,
            (2, "p"): 1.0,
            (0, "b"): 0.0,
            (1, "b"): 1 / 3,
            (2, "b"): 1.0,
            (0, "pb"): 0.0,
            (1, "pb"): 1 / 3,
            (2, "pb"): 1.0,
        }[(card, hist)]
        return {0: 1 - bet, 1: bet}

    assert exploitability(game, nash) == pytest.approx(0.0, abs=1e-9)


def _ttt(moves):
    """A tic-tac-toe state after ``moves`` (cells 0-8, row by row)."""
    import pyspiel

    state = pyspiel.load_game("tic_tac_toe").new_initial_state()
    for a in moves:
        state.apply_action(a)
    return state


def test_one_move_tactics_by_hand():
    import pyspiel

    game = pyspiel.load_game("tic_tac_toe")
    # x: 0, 1; o: 3, 4; x to move: 2 wins (5 would block o, 6-8 lose nothing at once) -> "win"
    win = _ttt([0, 3, 1, 4])
    # x: 0, 8; o: 4, 1; x to move, no win; o threatens 7 (1-4-7): only 7 is safe -> "defend"
    defend = _ttt([0, 4, 8, 1])
    quiet = _ttt([4])  # o to move, nothing at stake: counted in neither kind
    first = lambda s, p, legal: {legal[0]: 1.0}  # noqa: E731
    r = one_move_tactics(game, first, states=[win, defend, quiet])
    assert r["win"]["positions"] == 1 and r["defend"]["positions"] == 1
    # legal at `win`: 2, 5, 6, 7, 8 -> one good of 5; `first` plays 2 (a win)
    assert r["win"]["uniform"] == pytest.approx(1 / 5) and r["win"]["greedy"] == 1.0
    assert r["win"]["mass"] == 1.0
    # legal at `defend`: 2, 3, 5, 6, 7 -> only 7 is safe; `first` plays 2 (o then wins at 7)
    assert r["defend"]["uniform"] == pytest.approx(1 / 5)
    assert r["defend"]["greedy"] == 0.0 and r["defend"]["mass"] == 0.0
    half = lambda s, p, legal: {7: 1.0, 2: 1.0} if 7 in legal else {legal[0]: 1.0}  # noqa: E731
    assert one_move_tactics(game, half, states=[defend])["defend"]["mass"] == pytest.approx(0.5)


def test_one_move_tactics_of_uniform_and_perfect_policies():
    import pyspiel

    from agentrl.evaluation.games import _tactic

    game = pyspiel.load_game("tic_tac_toe")
    uniform = one_move_tactics(game, lambda s, p, legal: dict.fromkeys(legal, 1.0), positions=50)
    for kind in ("win", "defend"):
        assert uniform[kind]["positions"] == 50
        assert uniform[kind]["mass"] == pytest.approx(uniform[kind]["uniform"])
        assert 0.0 < uniform[kind]["uniform"] < 1.0

    def perfect(state, player, legal):
        t = _tactic(state)
        return dict.fromkeys(t[1] if t else legal, 1.0)

    best = one_move_tactics(game, perfect, positions=50)
    assert best["win"]["mass"] == best["defend"]["mass"] == 1.0
    assert best["win"]["greedy"] == best["defend"]["greedy"] == 1.0
    with pytest.raises(ValueError, match="perfect information"):
        one_move_tactics(pyspiel.load_game("kuhn_poker"), perfect)


def test_action_probabilities_match_constrained_sampling():
    from agentrl.backends.base import SamplingParams
    from agentrl.backends.hf import HFBackend
    from agentrl.evaluation.games import action_probabilities
    from agentrl.models import load_model
    from agentrl.rollout import ActionFormat, PromptBuilder, PromptConfig
    from agentrl.rollout.loop import ModelPolicy

    model, tok, _ = load_model("tiny")
    pool = EnvPool([EnvSpec("KuhnPoker-v0", {})], num_workers=0)
    backend = HFBackend(model, pad_token_id=tok.pad_token_id, seed=0)
    sampling = SamplingParams(
        max_new_tokens=8, temperature=1.0, seed=3, stop_token_ids=(tok.eos_token_id,)
    )
    policy = ModelPolicy(
        backend, PromptBuilder(tok, PromptConfig()), ActionFormat(), sampling, constrained=True
    )
    eps = play_episodes(pool, policy, [ResetSpec(0, seed=4)], max_steps=1)
    step = eps[0].steps[0]
    fmt = ActionFormat()
    choices = [(a, policy._action_tokens(fmt.render(a))) for a in ("Pass", "Bet")]
    probs = action_probabilities(model, tok, [step.prompt_ids], [choices])[0]
    assert sum(probs.values()) == pytest.approx(1.0)
    assert math.log(probs[step.action]) == pytest.approx(sum(step.logprobs), abs=1e-4)
