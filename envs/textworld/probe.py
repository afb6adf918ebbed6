"""Load a game once in a child process, where a native crash cannot take the caller down.

A story file can pass the header check (:mod:`.storyfile`) and still make Jericho's C core exit,
segfault or spin (a crafted file with a valid checksum, a game compiled for another interpreter).
:func:`probe_game` starts TextWorld on the file in a fresh Python process, resets it and plays
one admissible command, with a time limit. A file that passes is remembered by the digest of its
contents (and of its ``.json``) under ``<cache_dir>/verified/``, so each distinct game costs one
probe (~1-3 s) per machine, not one per worker or run.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["GameLoadError", "probe_game"]

PROBE_TIMEOUT = 120.0  # seconds; a game that loads needs 1-3 s here
_OK = "agentrl-textworld-probe-ok"
_CHILD = f"""
import sys, warnings
warnings.filterwarnings("ignore")
import textworld
infos = textworld.EnvInfos(admissible_commands=True, facts=True, score=True)
env = textworld.start(sys.argv[1], request_infos=infos)
gs = env.reset()
commands = list(gs["admissible_commands"] or [])
if commands:
    env.step("look" if "look" in commands else commands[0])
env.close()
print({_OK!r}, flush=True)
"""


class GameLoadError(ValueError):
    """A game file TextWorld cannot load; the message names the file and what happened."""


def _digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    for p in (path, path.with_suffix(".json")):
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()


def _tail(text: str, limit: int = 300) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    out = " | ".join(lines[-3:])
    return out[-limit:]


def probe_game(path: str | Path, cache_dir: str | Path, timeout: float = PROBE_TIMEOUT) -> None:
    """Raise :class:`GameLoadError` naming ``path`` unless TextWorld loads and plays it in a
    child process; a verdict of "loads" is cached by content digest under ``cache_dir``."""
    path = Path(path)
    try:
        marker = Path(cache_dir) / "verified" / _digest(path)
    except OSError as exc:
        raise GameLoadError(f"{path}: cannot read the game file ({exc})") from exc
    if marker.is_file():
        return
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path)],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise GameLoadError(
            f"{path}: TextWorld did not load this game within {timeout:.0f} s (in a child "
            "process; the interpreter hangs on it)"
        ) from None
    if proc.returncode != 0 or _OK not in proc.stdout:
        if proc.returncode < 0:
            try:
                how = f"killed by {signal.Signals(-proc.returncode).name}"
            except ValueError:
                how = f"killed by signal {-proc.returncode}"
        else:
            how = f"exit code {proc.returncode}"
        said = _tail(proc.stderr + "\n" + proc.stdout)
        raise GameLoadError(
            f"{path}: TextWorld cannot load this game (loading it in a child process ended "
            f"with {how}{': ' + said if said else ''})"
        )
    try:  # remember the verdict; atomic, so concurrent probes agree
        marker.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=marker.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            f.write(f"{path}\n")
        os.replace(tmp, marker)
    except OSError:
        pass  # an unwritable cache only costs a probe next time
