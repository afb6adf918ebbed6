"""The env guide (docs/guides/add-env.md) as a user runs it: its package written from the
guide's blocks, installed with pip into a fresh virtual environment, trained for 2 iterations
and evaluated per category with the guide's own command lines.

The fresh environment sees this project's installed dependencies through a ``.pth`` file
(installing torch and transformers again would take minutes and a network), so what is fresh is
what the guide adds: the package, its entry point, its config folder.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

from agentrl.overrides import group_options

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "add-env.md"


def guide() -> tuple[dict[str, str], list[str]]:
    """The section's files (keyed by their first-line comment) and its install/train/evaluate lines."""
    section = GUIDE.read_text()
    files = {
        b.splitlines()[0].lstrip("# ").strip(): b
        for b in re.findall(r"```(?:python|toml|yaml)\n(.*?)```", section, re.S)
    }
    shell = [b for b in re.findall(r"```bash\n(.*?)```", section, re.S) if "pip install" in b]
    lines = [ln.split("  #")[0].strip() for ln in shell[0].splitlines() if ln.strip()]
    return files, lines


def fresh_venv(root: Path) -> Path:
    """A venv without pip whose interpreter also sees this environment's site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    ours = sysconfig.get_paths()["purelib"]
    (Path(purelib) / "_project_deps.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return python


def test_the_env_guide_works_as_written(tmp_path):
    files, lines = guide()
    pkg = tmp_path / "my-envs"
    for name in ("my_envs/guess.py", "my_envs/__init__.py", "my_envs/env/guess.yaml"):
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(files[name])
    (pkg / "pyproject.toml").write_text(files["pyproject.toml"])
    python = fresh_venv(tmp_path / "venv")
    install, train, evaluate = (shlex.split(ln) for ln in lines)
    assert install[:2] == ["pip", "install"]
    assert train[:3] == ["python", "-m", "agentrl.train"]
    assert evaluate[:3] == ["python", "-m", "agentrl.evaluate"]
    # pip from this environment installs into the fresh one (which has no pip of its own)
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps"]
    pip += ["--no-build-isolation", "--no-index", "-q", *install[2:]]
    done = subprocess.run(pip, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for args in (train, evaluate):
        out = subprocess.run(
            [str(python), *args[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=600
        )
        assert out.returncode == 0, (args, out.stderr[-3000:])
    rows = [json.loads(r) for r in (tmp_path / "runs/guess/metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows if r.get("phase") == "train"] == [1, 2]
    results = json.loads((tmp_path / "runs/guess-eval/results.json").read_text())
    cats = {g["category"] for g in results["groups"] if g["category"] != "all"}
    assert cats == {"low", "middle", "high"}, results["groups"]


def test_bad_env_kwargs_are_one_line_and_exit_2_in_train_and_evaluate(tmp_path):
    for cli in (["agentrl.train"], ["agentrl.evaluate", "agent=random"]):
        out = subprocess.run(
            [sys.executable, "-m", *cli, "+env.kwargs.dimm=5", f"output_dir={tmp_path}"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        err = out.stderr.strip()
        assert out.returncode == 2, (cli, err[-2000:])
        assert len(err.splitlines()) == 1 and "has no option 'dimm'" in err, err
        assert "did you mean 'dim_room'?" in err


def test_unknown_group_options_get_a_suggestion(tmp_path):
    for cli in (["agentrl.train"], ["agentrl.evaluate", "agent=random"]):
        out = subprocess.run(
            [sys.executable, "-m", *cli, "env=sokobn", f"output_dir={tmp_path}"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert out.returncode == 2
        options = ", ".join(group_options()["env"])
        assert out.stderr.strip().splitlines() == [
            f"invalid config: unknown env=sokobn; did you mean sokoban? (options: {options})"
        ]
