"""The code base stays ruff-clean (lint and format), as CI runs it."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]])
def test_ruff(args):
    # ``python -m ruff`` from this interpreter: works whether or not the venv is on PATH.
    assert importlib.util.find_spec("ruff"), "ruff is part of the dev extra: pip install '.[dev]'"
    out = subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
