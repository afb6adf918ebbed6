"""scripts/tactics_bar.py: loss rates of policies with set one-move tactics against the random bot."""

from __future__ import annotations

import pytest

from tests.bench import load_script

pyspiel = pytest.importorskip("pyspiel")


@pytest.fixture(scope="module")
def bar():
    return load_script("tactics_bar")


def test_perfect_tactics_with_the_centre_rarely_lose(bar):
    game = pyspiel.load_game("tic_tac_toe")
    perfect = bar.losses(game, 1.0, 1.0, 1.0, games=1000, seed=0) / 1000
    none = bar.losses(game, 0.0, 0.0, 0.0, games=1000, seed=0) / 1000
    # taking every win and every block with the centre: a few losses in a hundred (1.8 % over
    # 20,000 games); never taking them: more than random play's 44 %
    assert perfect < 0.05
    assert none > 0.5


def test_a_policy_that_cannot_choose_loses_as_random_play(bar):
    """With the good moves' mass a uniform policy puts on them (0.43, 0.24) and no centre rule
    the policy is close to uniform: it loses about as often as random play (44 %)."""
    game = pyspiel.load_game("tic_tac_toe")
    assert 0.37 < bar.losses(game, 0.43, 0.24, 0.0, games=2000, seed=1) / 2000 < 0.50


def test_bad_arguments_get_one_line(bar, capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", ["tactics_bar.py", "--policy", "1,2"])
    with pytest.raises(SystemExit) as exc:
        bar.main()
    assert exc.value.code == 2
    assert "--policy takes three numbers" in capsys.readouterr().err
