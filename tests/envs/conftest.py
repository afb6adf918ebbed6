"""Fixtures shared by the env tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def textworld_games(tmp_path_factory) -> list[Path]:
    """Two games made by TextWorld's own generator (seeds 1 and 2; ~15 s each, made once)."""
    pytest.importorskip("textworld")
    from agentrl.envs.textworld import make_game_file
    from agentrl.envs.textworld.games import MakeSettings

    out = tmp_path_factory.mktemp("tw_games")
    return [make_game_file(out, seed, MakeSettings(3, 6, 3)) for seed in (1, 2)]
