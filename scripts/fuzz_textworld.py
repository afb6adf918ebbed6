"""Fuzz TextWorld-v0 with model-like garbage and with broken game files; print the counts.

Commands: games made by TextWorld's own generator are played through the env pool (worker
processes, so a native crash or hang is counted instead of ending the run). Each command is drawn
from one class: admissible (as listed, or with case/space changes), parser synonyms and
abbreviations of admissible commands (``w``, ``get key``, ``take key.``), interpreter meta verbs
(``save``, ``script``, ``restart``, ``quit``...), interpreter escapes (leading backslash), NUL bytes,
control characters, lone surrogates, other unicode, very long or empty text, non-strings, and
random words. Counted per class: tried, valid, crashed (a worker died), hung (a step over
``--hang`` seconds), exceptions (the env raised), state changed on an invalid action, files
written into the working directory (``save``/``script`` would write there).

Files: ``--files N`` corrupted copies of a real game (truncations, byte flips anywhere, header-only,
junk with a Z-machine version byte) are loaded in this process; counted: clear error naming the
file, loaded, anything else. This process must survive every one.

    python scripts/fuzz_textworld.py --commands 10000 --files 200

Exit status 1 when any crash, hang, exception, state change, file write or unclear error occurred.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from agentrl.envs.cache import cache_root
from agentrl.envs.textworld import MakeSettings, TextWorldEnv, make_game_file
from agentrl.envs.textworld.env import command_key

from agentrl.pool import EnvPool, EnvSpec

META = [
    "save", "restore", "script", "script on", "unscript", "transcript", "restart", "quit", "q",
    "undo", "oops", "again", "g", "verbose", "brief", "superbrief", "score", "full score",
    "version", "notify", "pronouns", "wait", "z", "yes", "no", "hint", "help", "about",
]  # fmt: skip
ESCAPES = ["\\", "\\x", "\\help", "\\restore", "\\save", "\\cx", "\\lt", "\\w", "\\q", "\\u", "\\n"]
SYNONYMS = {
    "go ": ["", "walk ", "run ", "head "],
    "take ": ["get ", "pick up ", "grab ", "t "],
    "examine ": ["x ", "look at ", "inspect ", "check "],
    "drop ": ["put down ", "discard "],
    "open ": ["unlock ", "pull open "],
    "eat ": ["consume ", "devour "],
}
ABBREV = {"north": "n", "south": "s", "east": "e", "west": "w", "inventory": "i", "look": "l"}
CLASSES = (
    "admissible",
    "admissible_variant",
    "synonym",
    "meta",
    "escape",
    "nul",
    "control",
    "surrogate",
    "unicode",
    "long",
    "empty",
    "not_text",
    "random_words",
    "junk_suffix",
)


def synonym(rng: random.Random, cmd: str) -> str:
    """A phrasing the game's parser accepts but the admissible list does not hold."""
    for word, full in ABBREV.items():
        if word in cmd.split() and rng.random() < 0.5:
            return cmd.replace(word, full) if not cmd.startswith("go ") else full
    for prefix, alts in SYNONYMS.items():
        if cmd.startswith(prefix):
            alt = rng.choice(alts)
            out = alt + cmd[len(prefix) :]
            return out + "." if out == cmd else out
    return cmd + rng.choice([".", "!", " please", " now"])


def draw_command(rng: random.Random, admissible: list[str]) -> tuple[str, object]:
    """(class, command) for one fuzzed step."""
    cls = rng.choices(CLASSES, weights=[3, 2, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1])[0]
    base = rng.choice(admissible) if admissible else "look"
    if cls == "admissible":
        return cls, base
    if cls == "admissible_variant":
        out = "".join(c.upper() if rng.random() < 0.3 else c for c in base)
        return cls, rng.choice(["", " ", "\t", "\n"]) + out.replace(
            " ", rng.choice([" ", "  ", "\t"])
        ) + rng.choice(["", " ", "\n"])
    if cls == "synonym":
        return cls, synonym(rng, base)
    if cls == "meta":
        return cls, rng.choice(META)
    if cls == "escape":
        return cls, rng.choice(ESCAPES) + rng.choice(["", " ", "x", " look", "\\", "00"])
    if cls == "nul":
        k = rng.randrange(len(base) + 1)
        return cls, rng.choice(
            [base[:k] + "\0" + base[k:], "\0", "\0" * rng.randint(1, 50), base + "\0save"]
        )
    if cls == "control":
        ctl = "".join(
            chr(rng.choice([*range(1, 32), 127, *range(0x80, 0xA0)]))
            for _ in range(rng.randint(1, 5))
        )
        k = rng.randrange(len(base) + 1)
        return cls, base[:k] + ctl + base[k:]
    if cls == "surrogate":
        s = chr(rng.randint(0xD800, 0xDFFF))
        return cls, rng.choice([s, base + s, s + base, "go " + s])
    if cls == "unicode":
        pool = "éßøΩЖ中文😀\u200b\u202e\u0301\ufeff\uffff\U0010ffff"
        return cls, "".join(rng.choice(pool + "abc ") for _ in range(rng.randint(1, 30)))
    if cls == "long":
        return cls, (base + " ") * rng.randint(20, 5000)
    if cls == "empty":
        return cls, rng.choice(["", " ", "\n", "\t\t", "\r\n"])
    if cls == "not_text":
        return cls, rng.choice([None, 42, 3.5, b"look", ["look"], {"cmd": "look"}])
    if cls == "random_words":
        words = [
            "the",
            "a",
            "key",
            "door",
            "chest",
            "north",
            "go",
            "take",
            "open",
            "eat",
            "it",
            "all",
            "from",
            "on",
            "in",
            "with",
            "xyzzy",
            "plugh",
        ]
        return cls, " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))
    return cls, base + rng.choice(["; save", " and quit", ". restart", "\nscript", " then \\x"])


def fuzz_commands(
    games: list[Path], n: int, envs: int, workers: int, hang: float, seed: int
) -> bool:
    rng = random.Random(seed)
    counts: dict[str, Counter] = defaultdict(Counter)
    spec = EnvSpec("TextWorld-v0", {"game_files": [str(g) for g in games], "max_steps": 10**6})
    workdir = Path(tempfile.mkdtemp(prefix="tw-fuzz-cwd-"))
    old_cwd = os.getcwd()
    os.chdir(workdir)  # the workers inherit it: a 'save' or 'script' reaching the game writes here
    try:
        with EnvPool([spec] * envs, num_workers=workers, step_timeout=hang * 3) as pool:
            infos = [info for _, info in pool.reset(seeds=list(range(envs)))]
            tried, slow, slowest = 0, 0, 0.0
            while tried < n:
                k = min(envs, n - tried)
                drawn = [draw_command(rng, infos[i]["admissible_actions"] or []) for i in range(k)]
                start = time.perf_counter()
                results = pool.step(list(range(k)), [c for _, c in drawn])
                elapsed = time.perf_counter() - start
                slowest = max(slowest, elapsed)
                slow += elapsed > hang  # a pool step of k envs that took longer than one may
                for i, ((cls, cmd), r) in enumerate(zip(drawn, results)):
                    c = counts[cls]
                    c["tried"] += 1
                    error = r.info.get("error")
                    if error:
                        if "timed out" in error:
                            c["hung"] += 1
                        elif "killed by" in error or "exit code" in error:
                            c["crashed"] += 1
                        else:
                            c["exception"] += 1
                        print(f"[{cls}] {cmd!r}: {error}", file=sys.stderr)
                    else:
                        valid = bool(r.info["action_valid"])
                        c["valid"] += valid
                        expect = isinstance(cmd, str) and command_key(cmd) in {
                            command_key(a) for a in infos[i]["admissible_actions"] or []
                        }
                        if valid != expect:
                            c["rule_violated"] += 1
                            print(
                                f"[{cls}] {cmd!r}: valid={valid}, rule says {expect}",
                                file=sys.stderr,
                            )
                        if not valid and r.info["state_key"] != infos[i]["state_key"]:
                            c["state_changed"] += 1
                            print(f"[{cls}] {cmd!r}: state changed while invalid", file=sys.stderr)
                    infos[i] = r.info
                    if error or r.terminated or r.truncated:
                        infos[i] = pool.reset([i], seeds=[rng.randrange(10**6)])[0][1]
                tried += k
        written = sorted(p.name for p in workdir.iterdir())
    finally:
        os.chdir(old_cwd)
        shutil.rmtree(workdir, ignore_errors=True)
    total = Counter()
    cols = ("tried", "valid", "crashed", "hung", "exception", "state_changed", "rule_violated")
    print(f"\ncommands on {len(games)} generated games, {envs} envs in {workers} workers")
    print(f"{'class':<20}" + "".join(f"{h:>14}" for h in cols))
    for cls in CLASSES:
        total.update(counts[cls])
        print(f"{cls:<20}" + "".join(f"{counts[cls][h]:>14}" for h in cols))
    print(f"{'total':<20}" + "".join(f"{total[h]:>14}" for h in cols))
    print(f"pool steps slower than {hang} s: {slow} (slowest {slowest:.2f} s)")
    print(f"files written into the working directory: {len(written)} {written[:5]}")
    bad = sum(total[h] for h in cols[2:]) + len(written) + slow
    return bad == 0


def corrupt(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """(class, bytes) of one broken copy of a story file."""
    cls = rng.choice(["truncated", "header_only", "byte_flips", "header_flips", "junk", "empty"])
    if cls == "truncated":
        return cls, data[: rng.randrange(0, len(data) - 512)]
    if cls == "header_only":
        return cls, data[: rng.choice([1, 32, 63, 64, 65, 128])]
    if cls == "byte_flips":
        out = bytearray(data)
        for _ in range(rng.randint(1, 20)):
            out[rng.randrange(64, len(out))] = rng.randrange(256)
        return cls, bytes(out)
    if cls == "header_flips":
        out = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            out[rng.randrange(0, 64)] = rng.randrange(256)
        return cls, bytes(out)
    if cls == "junk":
        return cls, bytes([rng.randint(1, 8)]) + rng.randbytes(rng.randint(0, len(data)))
    return cls, b""


def fuzz_files(game: Path, n: int, seed: int) -> bool:
    rng = random.Random(seed)
    data = game.read_bytes()
    counts: dict[str, Counter] = defaultdict(Counter)
    with tempfile.TemporaryDirectory(prefix="tw-fuzz-files-") as tmp:
        for k in range(n):
            cls, blob = corrupt(rng, data)
            path = Path(tmp) / f"bad{k}.z8"
            path.write_bytes(blob)
            shutil.copy(game.with_suffix(".json"), path.with_suffix(".json"))
            c = counts[cls]
            c["tried"] += 1
            env = TextWorldEnv(game_files=str(path), cache_dir=tmp)
            try:
                env.reset(seed=0)
                c["loaded"] += 1  # bytes the game never reads (padding) or harmless changes
            except ValueError as exc:
                c["clear_error" if str(path) in str(exc) else "unclear_error"] += 1
            except Exception as exc:  # noqa: BLE001 - counted, not hidden
                c["other_exception"] += 1
                print(f"[{cls}] {path.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            finally:
                env.close()
    cols = ("tried", "clear_error", "loaded", "unclear_error", "other_exception")
    total = Counter()
    print(f"\nbroken copies of {game.name}, loaded in this process (pid {os.getpid()}, alive)")
    print(f"{'class':<16}" + "".join(f"{h:>16}" for h in cols))
    for cls, c in sorted(counts.items()):
        total.update(c)
        print(f"{cls:<16}" + "".join(f"{c[h]:>16}" for h in cols))
    print(f"{'total':<16}" + "".join(f"{total[h]:>16}" for h in cols))
    return total["unclear_error"] + total["other_exception"] == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--commands", type=int, default=10_000)
    ap.add_argument("--files", type=int, default=0)
    ap.add_argument("--games", type=int, default=3, help="generated games to play")
    ap.add_argument("--envs", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--hang", type=float, default=3.0, help="seconds a step may take")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", default=str(cache_root("textworld") / "fuzz"))
    args = ap.parse_args()
    settings = MakeSettings(world_size=3, nb_objects=6, quest_length=3)
    games = [make_game_file(args.cache_dir, s, settings) for s in range(1, args.games + 1)]
    ok = True
    if args.commands:
        start = time.perf_counter()
        ok &= fuzz_commands(games, args.commands, args.envs, args.workers, args.hang, args.seed)
        print(f"({time.perf_counter() - start:.0f} s)")
    if args.files:
        start = time.perf_counter()
        ok &= fuzz_files(games[0], args.files, args.seed)
        print(f"({time.perf_counter() - start:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
