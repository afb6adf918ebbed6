"""Look-alike letters never change what an action means.

The confusables are built from Unicode itself: every BMP character outside ASCII whose lower,
upper or case-folded form, or whose NFKC/NFKD normal form, spells ASCII letters (``ı``, ``İ``,
``ſ``, the Kelvin sign, ``ß``, ``ﬁ``, fullwidth and circled letters, modifier letters...).
Hypothesis writes every env's valid commands with some of their letters replaced by such
characters (the rest in any ASCII case) and checks that the step neither raises nor is valid,
and that the state is unchanged; the same holds for the rollout's parser (tags, HiPER's switch).
"""

from __future__ import annotations

import functools
import string
import sys
import unicodedata
from collections import defaultdict

import pytest
from agentrl.envs.commands import ascii_lower, ascii_upper, command_lower
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl import envs
from agentrl.methods.hiper import HiperFormat
from agentrl.rollout.parse import ActionFormat

CASE_FORMS = (str.lower, str.upper, str.casefold)
NORMAL_FORMS = (
    functools.partial(unicodedata.normalize, "NFKC"),
    functools.partial(unicodedata.normalize, "NFKD"),
)


@functools.cache
def confusables(forms: tuple = CASE_FORMS + NORMAL_FORMS) -> dict[str, tuple[str, ...]]:
    """ASCII letters (one, or the few a ligature spells) -> the BMP characters that ``forms``
    map onto them. With :data:`CASE_FORMS` alone: the ones Python's case rules fold onto ASCII
    (``ı``, ``İ``, ``ſ``, the Kelvin sign, ``ß``, ``ﬁ``...), which code that lower-cases or
    matches with ``re.IGNORECASE`` would take for the letter."""
    out: dict[str, set[str]] = defaultdict(set)
    for cp in range(0x80, 0x10000):
        c = chr(cp)
        if unicodedata.category(c) in ("Cs", "Cn"):
            continue
        for form in forms:
            letters = _ascii_letters(form(c))
            if letters:
                out[letters].add(c)
    return {k: tuple(sorted(v)) for k, v in out.items()}


def case_confusables() -> dict[str, tuple[str, ...]]:
    return confusables(CASE_FORMS)


def _ascii_letters(text: str) -> str | None:
    """The 1-3 ASCII letters ``text`` spells, combining marks aside (``"ǰ".upper()`` is
    ``"J\u030c"``: ``"j"``), lower-cased; ``None`` when it holds anything else."""
    base = [ch for ch in text if not unicodedata.combining(ch)]
    if not 1 <= len(base) <= 3 or not all(ch in string.ascii_letters for ch in base):
        return None
    return ascii_lower("".join(base))


def test_the_confusables_come_from_unicode():
    table = confusables()
    assert set(string.ascii_lowercase) <= set(table)  # every letter has look-alikes
    for c, letter in [("ı", "i"), ("İ", "i"), ("ſ", "s"), ("\u212a", "k"), ("ｒ", "r")]:
        assert c in table[letter], (c, letter)
    assert "ß" in table["ss"] and "ﬁ" in table["fi"]
    assert sum(map(len, table.values())) > 500
    folding = case_confusables()
    assert {"ı", "İ", "ſ", "\u212a"} <= {c for v in folding.values() for c in v}


def single_swaps(command: str) -> list[str]:
    """Every way to replace one letter (or a ligature's letters) of ``command`` by a character
    Python's case rules fold onto it: few enough to try all."""
    out = []
    for n in (1, 2, 3):
        for i in range(len(command) - n + 1):
            for c in case_confusables().get(ascii_lower(command[i : i + n]), ()):
                out.append(command[:i] + c + command[i + n :])
    return out


@st.composite
def look_alike(draw, command: str) -> str:
    """``command`` with at least one letter (or letter pair/triple) replaced by a look-alike and
    the other ASCII letters in a random case."""
    table = confusables()
    spots = [
        (i, n)
        for n in (1, 2, 3)
        for i in range(len(command) - n + 1)
        if ascii_lower(command[i : i + n]) in table
    ]
    assert spots, command
    chosen = draw(st.lists(st.sampled_from(spots), min_size=1, max_size=3))
    out, i, done = [], 0, set()
    starts = {}
    for at, n in sorted(chosen):
        if all(k not in done for k in range(at, at + n)):
            starts[at] = n
            done.update(range(at, at + n))
    while i < len(command):
        if i in starts:
            n = starts[i]
            key = ascii_lower(command[i : i + n])
            folding = case_confusables().get(key)  # the dangerous few: drawn half of the time
            pool = folding if folding and draw(st.booleans()) else table[key]
            out.append(draw(st.sampled_from(pool)))
            i += n
        else:
            ch = command[i]
            out.append(ascii_upper(ch) if draw(st.booleans()) else ascii_lower(ch))
            i += 1
    return "".join(out)


SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _check(env, prepare, action: str) -> None:
    """After ``prepare(env)``, ``action`` is invalid, raises nothing and changes nothing."""
    prepare(env)
    key = env.last_info["state_key"]
    _, _, terminated, _, info = env.step(action)
    assert info["action_valid"] is False, ascii(action)
    assert info["state_key"] == key and not terminated, ascii(action)


class _Tracked:
    """An env that remembers the info of its last reset/step (the state key before a step) and
    counts the steps since its reset."""

    def __init__(self, env):
        self.env, self.last_info, self.steps = env, None, 0

    def reset(self, **kw):
        obs, self.last_info = self.env.reset(**kw)
        self.steps = 0
        return obs, self.last_info

    def step(self, action):
        out = self.env.step(action)
        self.last_info, self.steps = out[4], self.steps + 1
        return out

    def close(self):
        self.env.close()


def _reset(seed: int = 0):
    return lambda env: env.reset(seed=seed)


def _walk(*actions: str, seed: int = 0):
    """Reset, then take ``actions`` (each must be valid): the state a command is tried in."""

    def go(env):
        env.reset(seed=seed)
        for a in actions:
            assert env.step(a)[4]["action_valid"], a

    return go


def _expert_until(kind_is, seed: int = 0, limit: int = 12):
    """Reset, then follow the expert until ``kind_is(env)``: e.g. WebShop's item page."""

    def go(env):
        env.reset(seed=seed)
        for _ in range(limit):
            if kind_is(env.env):
                return
            env.step(env.env.expert_action())
        raise AssertionError("the expert never reached the page")

    return go


@pytest.fixture(scope="module")
def make_env():
    """One env per name for the module (hypothesis examples share it; each prepares its state)."""
    made: dict[str, _Tracked] = {}

    def make(name: str) -> _Tracked:
        if name not in made:
            made[name] = _Tracked(envs.make(name))
        return made[name]

    yield make
    for env in made.values():
        env.close()


def _valid_now(env, prepare, command: str) -> bool:
    prepare(env)
    return bool(env.step(command)[4]["action_valid"])


# -- Sokoban and FrozenLake: directions ---------------------------------------------------------
DIRECTIONS = ("up", "down", "left", "right")


@pytest.mark.parametrize("name", ["Sokoban-v0", "FrozenLake-v0"])
@SETTINGS
@given(data=st.data())
def test_directions_with_look_alikes_are_invalid(make_env, name, data):
    env = make_env(name)
    command = data.draw(st.sampled_from(DIRECTIONS))
    assert _valid_now(env, _reset(), command.upper())  # ASCII case is free
    _check(env, _reset(), data.draw(look_alike(command)))


def _all_swaps_invalid(env, commands) -> int:
    """Every single case-folding swap of every command, in the env's current state: each is
    invalid and leaves the state as it is (so no reset between them). Returns how many."""
    key, n = env.last_info["state_key"], 0
    for command in commands:
        for action in single_swaps(command) + single_swaps(ascii_upper(command)):
            _, _, terminated, _, info = env.step(action)
            assert info["action_valid"] is False, ascii(action)
            assert info["state_key"] == key and not terminated, ascii(action)
            n += 1
    return n


@pytest.mark.parametrize("name", ["Sokoban-v0", "FrozenLake-v0"])
def test_every_case_folding_swap_of_a_direction_is_invalid(make_env, name):
    env = make_env(name)
    env.reset(seed=0)
    assert _all_swaps_invalid(env, DIRECTIONS) >= 8  # 'rıght', 'rİght', 'RİGHT', ...


def test_the_issue_s_sokoban_cases():
    env = envs.make("Sokoban-v0")
    env.reset(seed=0)
    for action in ("RİGHT", "rıght", "ＲＩＧＨＴ", "rig\u02b0t", "ＵＰ"):
        assert env.step(action)[4]["action_valid"] is False, ascii(action)
    assert env.step("RiGhT")[4]["action_valid"] is True


# -- WebShop: verbs and click targets -----------------------------------------------------------
def _on(kind: str):
    return lambda env: env._page.kind == kind


@SETTINGS
@given(data=st.data())
def test_webshop_verbs_and_targets_with_look_alikes_are_invalid(make_env, data):
    env = make_env("WebShop-v0")
    page = data.draw(st.sampled_from(["search", "results", "item"]))
    prepare = _reset() if page == "search" else _expert_until(_on(page))
    prepare(env)
    if page == "search":
        commands = ["search[socks]"]
    else:
        clicks = sorted(k for k in env.env._clicks if any(c.isalpha() for c in k))
        commands = [f"click[{k}]" for k in clicks]
    command = data.draw(st.sampled_from(commands))
    assert _valid_now(env, prepare, command)
    action = data.draw(look_alike(command))
    verb_intact = ascii_lower(action).startswith(command.split("[")[0])
    if page == "search" and verb_intact:
        return  # search[<any text>] is a valid search: the query is free text
    _check(env, prepare, action)


def test_the_issue_s_webshop_cases(make_env):
    env = make_env("WebShop-v0")
    prepare = _expert_until(_on("item"))
    for action in (
        "ſearch[buy now]",
        "clıck[buy now]",
        "CLİCK[buy now]",
        "click[bac\u212a to search]",
    ):
        _check(env, prepare, action)
    prepare(env)
    assert env.step("CLICK[Buy Now]")[4]["action_valid"] is True


@pytest.mark.parametrize("page", ["search", "results", "item"])
def test_every_case_folding_swap_of_a_webshop_action_is_invalid(make_env, page):
    env = make_env("WebShop-v0")
    (_reset() if page == "search" else _expert_until(_on(page)))(env)
    if page == "search":  # the verb only: search[<any text>] is a valid search
        commands = [f"{verb}[socks]" for verb in ("search", "click")]
        swaps = [a for c in commands for a in single_swaps(c) if "[socks]" in a]
        key = env.last_info["state_key"]
        for action in swaps:
            assert env.step(action)[4]["action_valid"] is False, ascii(action)
            assert env.last_info["state_key"] == key
        return
    clicks = sorted(k for k in env.env._clicks if any(c.isalpha() for c in k))
    commands = [f"click[{k}]" for k in clicks] + [f"search[{k}]" for k in clicks]
    assert _all_swaps_invalid(env, commands) > 20


# -- ALFWorld and TextWorld: admissible commands ------------------------------------------------
@pytest.mark.parametrize("name", ["ALFWorld-v0", "TextWorld-v0"])
def test_admissible_commands_match_in_any_ascii_case(make_env, name):
    env = make_env(name)
    _, info = env.reset(seed=0)
    for command in info["admissible_actions"][:3]:
        assert _valid_now(env, _reset(), ascii_upper(command)), command


@pytest.mark.parametrize("name", ["ALFWorld-v0", "TextWorld-v0"])
def test_every_case_folding_swap_of_an_admissible_command_is_invalid(make_env, name):
    env = make_env(name)
    _, info = env.reset(seed=0)
    assert _all_swaps_invalid(env, info["admissible_actions"]) > 10


_START: dict[str, tuple] = {}  # per env: the reset state's key and admissible commands


@pytest.mark.parametrize("name", ["ALFWorld-v0", "TextWorld-v0"])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_admissible_commands_with_look_alikes_are_invalid(make_env, name, data):
    env = make_env(name)
    start = _START.get(name)
    if start is None or env.steps > 20 or env.last_info["state_key"] != start[0]:
        _, info = env.reset(seed=0)  # invalid steps change nothing: reset only now and then
        start = _START[name] = (info["state_key"], info["admissible_actions"])
    commands = [c for c in start[1] if any(ch.isalpha() for ch in c)]
    command = data.draw(st.sampled_from(commands))
    _check(env, lambda _env: None, data.draw(look_alike(command)))


# -- the rollout's parser -----------------------------------------------------------------------
FORMATS = [
    ActionFormat(),
    ActionFormat(pattern=r"(?i)<action>\s*(.*?)\s*</action>"),
    ActionFormat(pattern=r"(?i)<action>(\w+)</action>"),
]


@given(data=st.data())
@settings(max_examples=200, deadline=None)
def test_look_alike_tags_hold_no_action(data):
    fmt = data.draw(st.sampled_from(FORMATS))
    assert (
        fmt.parse(
            "<ACTION>up</Action>" if fmt.pattern.startswith("(?i)") else "<action>up</action>"
        ).action
        == "up"
    )
    bad = data.draw(look_alike("action"))
    response = f"<{bad}>up</{bad}>"
    assert fmt.parse(response).action is None, ascii(response)


@given(data=st.data())
@settings(max_examples=100, deadline=None)
def test_a_look_alike_think_block_is_no_think_block(data):
    fmt = ActionFormat(think=True, require_think=True)
    assert fmt.parse("<think>x</think><action>up</action>").action == "up"
    bad = data.draw(look_alike("think"))
    response = f"<{bad}>x</{bad}><action>up</action>"
    assert fmt.parse(response).action is None, ascii(response)


@given(data=st.data())
@settings(max_examples=200, deadline=None)
def test_hiper_switch_with_look_alikes_is_invalid(data):
    """(With every case-folding swap tried below.)"""
    word = data.draw(st.sampled_from(["KEEP", "SWITCH"]))
    bad = data.draw(look_alike(word))
    response = f"<switch>{bad}</switch><subgoal>go</subgoal><action>up</action>"
    assert HiperFormat().parse(response).action is None, ascii(response)
    assert HiperFormat().parse(response.replace(bad, word.lower())).action == "up"


def test_every_case_folding_swap_of_a_tag_or_switch_holds_no_action():
    fmt, hiper = FORMATS[2], HiperFormat()
    for bad in single_swaps("action") + single_swaps("ACTION"):
        assert fmt.parse(f"<{bad}>up</{bad}>").action is None, ascii(bad)
    for word in ("KEEP", "SWITCH", "keep", "switch"):
        for bad in single_swaps(word):
            response = f"<switch>{bad}</switch><subgoal>go</subgoal><action>up</action>"
            assert hiper.parse(response).action is None, ascii(response)


def test_command_lower_folds_non_ascii_letters_but_never_onto_ascii():
    assert command_lower("CAFÉ Ünder") == "café ünder"
    assert command_lower("\u212a") == "\u212a" and command_lower("İ") == "İ"
    assert command_lower("ÅNGSTRÖM") == "ångström"
    for cp in range(0x80, sys.maxunicode + 1):
        c = chr(cp)
        if unicodedata.category(c) != "Cs":
            assert not (command_lower(c).isascii() and command_lower(c).strip()), hex(cp)
