"""bench_games.py's command line: a bad --seeds is one usage line, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bad_seeds_is_one_line(tmp_path):
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_games.py"), "--seeds", "0",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].endswith("--seeds must name at least one seed")
    assert not any(tmp_path.iterdir())  # nothing started
