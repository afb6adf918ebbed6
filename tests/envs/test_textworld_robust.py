"""TextWorld-v0 against model garbage and broken game files.

The validity rule: only admissible commands reach the game; everything else is invalid, not sent,
and leaves the state unchanged. Broken story files are errors naming the file, never a dead
process. ``scripts/fuzz_textworld.py`` runs the same checks at scale (10,000 commands).
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest
from agentrl.envs.textworld import TextWorldEnv
from agentrl.envs.textworld import probe as probe_mod
from agentrl.envs.textworld.env import NOTHING, command_key
from agentrl.envs.textworld.probe import GameLoadError, probe_game
from agentrl.envs.textworld.storyfile import StoryFileError, check_story_file
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


@pytest.fixture(scope="module")
def game(textworld_games) -> Path:
    return textworld_games[0]


@pytest.fixture(scope="module")
def env(game, tmp_path_factory):
    e = TextWorldEnv(game_files=str(game), cache_dir=str(tmp_path_factory.mktemp("twc")))
    yield e
    e.close()


@pytest.fixture(scope="module")
def last(env) -> dict:
    """The info of the env's latest step, shared by the examples of a hypothesis test."""
    return {"info": env.reset(seed=0)[1]}


HAZARDS = [
    "w", "n", "get blanket", "take blanket.", "pick up blanket", "x coffer", "l", "i",
    "save", "restore", "script", "restart", "quit", "undo", "verbose",
    "\\", "\\x", "\\help", "\\restore", "\\cx",
    "\0", "look\0", "\0save", "look\x07\x1b", "\x7f", "go \ud800", "\udfff", "look\ud800",
    "", " ", "\n", "x" * 5000, "look; save", "look. restart",
]  # fmt: skip


@st.composite
def commands(draw, admissible: list[str]):
    kind = draw(st.sampled_from(["admissible", "variant", "hazard", "text", "mix", "other"]))
    # an index, not sampled_from(admissible): what is drawn must not depend on the env's state
    pick = draw(st.integers(0, 10**6))
    base = admissible[pick % len(admissible)] if admissible else "look"
    if kind == "admissible":
        return base
    if kind == "variant":
        return draw(st.sampled_from(["", " ", "\t"])) + base.upper().replace(" ", "  ") + " "
    if kind == "hazard":
        return draw(st.sampled_from(HAZARDS))
    if kind == "text":  # any code point, surrogates and control characters included
        return draw(st.text(st.characters(codec=None, exclude_categories=()), max_size=40))
    if kind == "mix":
        cut = draw(st.integers(0, 100)) % (len(base) + 1)
        junk = draw(st.sampled_from(["\0", "\\", "\ud800", "\x1b[2J", ".", " please", "\n\\x"]))
        return base[:cut] + junk + base[cut:]
    return draw(st.sampled_from([None, 7, b"look", ["look"]]))


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_fuzzed_commands_follow_the_validity_rule(env, last, data):
    before = last["info"]
    admissible = before["admissible_actions"] or []
    cmd = data.draw(commands(admissible))
    obs, reward, terminated, truncated, info = env.step(cmd)
    valid = isinstance(cmd, str) and command_key(cmd) in {command_key(a) for a in admissible}
    assert info["action_valid"] is valid
    if not valid:
        assert obs == NOTHING and reward == 0.0 and not terminated
        assert info["state_key"] == before["state_key"]
        assert info["points"] == before["points"]
    last["info"] = env.reset(seed=0)[1] if terminated or truncated else info


def test_parser_synonyms_that_would_change_the_state_are_invalid(env):
    _, info = env.reset(seed=0)
    moves = [a for a in info["admissible_actions"] if a.startswith(("go ", "take "))]
    assert moves
    for cmd in moves:
        verb, _, rest = cmd.partition(" ")
        alias = {"go": rest[:1], "take": f"get {rest}"}[verb]  # the parser accepts both
        for variant in (alias, cmd + ".", cmd.replace(" ", "\0", 1)):
            _, _, _, _, after = env.step(variant)
            assert after["action_valid"] is False and after["state_key"] == info["state_key"]
    _, _, _, _, after = env.step(moves[0].upper())  # the admissible command itself is valid
    assert after["action_valid"] is True and after["state_key"] != info["state_key"]


def test_meta_commands_never_reach_the_interpreter(env, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # 'save' and 'script' would write files here
    _, info = env.reset(seed=0)
    for cmd in ("save", "script", "restart", "quit", "\\save", "\\restore"):
        obs, _, terminated, _, after = env.step(cmd)
        assert obs == NOTHING and not after["action_valid"] and not terminated
        assert after["state_key"] == info["state_key"]
    assert list(tmp_path.iterdir()) == []


# -- broken game files --------------------------------------------------------------------------


def _broken_copies(game: Path, out: Path) -> dict[str, Path]:
    data = game.read_bytes()
    flipped = bytearray(data)
    flipped[1000] ^= 0xFF
    bad_length = bytearray(data)
    bad_length[0x1A:0x1C] = (100).to_bytes(2, "big")
    bad_dict = bytearray(data)
    bad_dict[0x08:0x0A] = (10).to_bytes(2, "big")
    blobs = {
        "zeros": b"\0" * 512,
        "empty": b"",
        "header_only": data[:64],
        "short_header": data[:40],
        "truncated_half": data[: len(data) // 2],
        "truncated_90": data[: int(len(data) * 0.9)],
        "random_v8": bytes([8]) + bytes((i * 7919) % 251 for i in range(len(data) - 1)),
        "body_flip": bytes(flipped),
        "bad_length": bytes(bad_length),
        "bad_dictionary": bytes(bad_dict),
        "version_3": bytes([3]) + data[1:],
        "text": b"hello world\n" * 100,
    }
    paths = {}
    for name, blob in blobs.items():
        p = out / f"{name}.z8"
        p.write_bytes(blob)
        shutil.copy(game.with_suffix(".json"), p.with_suffix(".json"))
        paths[name] = p
    return paths


def test_broken_story_files_are_errors_naming_the_file(game, tmp_path):
    check_story_file(game)  # a real game passes
    for name, path in _broken_copies(game, tmp_path).items():
        with pytest.raises(StoryFileError) as err:
            check_story_file(path)
        assert str(path) in str(err.value), name
        env = TextWorldEnv(game_files=str(path), cache_dir=str(tmp_path / "cache"))
        with pytest.raises(ValueError, match="Z-machine") as err:
            env.reset(seed=0)  # before Jericho: this process is still here to see the error
        assert str(path) in str(err.value), name
        env.close()


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_truncation_or_body_change_is_caught(game, data):
    blob = game.read_bytes()
    declared = int.from_bytes(blob[0x1A:0x1C], "big") * 8
    kind = data.draw(st.sampled_from(["truncate", "change"]))
    if kind == "truncate":
        blob = blob[: data.draw(st.integers(0, declared - 1))]
    else:  # any changed byte past the header changes the checksum
        at = data.draw(st.integers(64, declared - 1))
        new = data.draw(st.integers(0, 255).filter(lambda b: b != blob[at]))
        blob = blob[:at] + bytes([new]) + blob[at + 1 :]
    path = game.parent / f"hyp-{kind}.z8"
    path.write_bytes(blob)
    try:
        with pytest.raises(StoryFileError, match=str(path).replace(".", r"\.")):
            check_story_file(path)
    finally:
        path.unlink()


def test_probe_contains_crashes_hangs_and_caches_success(game, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    probe_game(game, cache)  # loads in a child; the verdict is remembered
    assert len(list((cache / "verified").iterdir())) == 1
    monkeypatch.setattr(probe_mod, "_CHILD", "raise SystemExit('must not run: cached')")
    probe_game(game, cache)
    monkeypatch.setattr(
        probe_mod,
        "_CHILD",
        f"import os, signal; os.kill(os.getpid(), signal.{signal.SIGSEGV.name})",
    )
    with pytest.raises(GameLoadError, match="killed by SIGSEGV") as err:
        probe_game(game, tmp_path / "cache2")
    assert str(game) in str(err.value)
    monkeypatch.setattr(probe_mod, "_CHILD", "import time; time.sleep(60)")
    with pytest.raises(GameLoadError, match="did not load this game within 1 s"):
        probe_game(game, tmp_path / "cache3", timeout=1.0)
    monkeypatch.setattr(probe_mod, "_CHILD", "import sys; print('Fatal error: x'); sys.exit(1)")
    with pytest.raises(GameLoadError, match="exit code 1: Fatal error: x"):
        probe_game(game, tmp_path / "cache4")
