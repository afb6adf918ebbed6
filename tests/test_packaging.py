"""Packaging and layout rules: every package is shipped under the one import namespace
``agentrl``, configs work from a wheel, and the dependency direction envs/credit -> (not) the rest
of agentrl, credit -> (not) torch holds."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_folder_is_listed_in_pyproject():
    listed = set(pyproject()["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join(
            ("agentrl", *p.parent.relative_to(ROOT).parts)
            if top != "agentrl"
            else p.parent.relative_to(ROOT).parts
        )
        for top in ("agentrl", "envs", "credit")
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert on_disk - listed == set(), "add these packages to [tool.setuptools] packages"
    assert "agentrl.configs" in listed
    assert {p.split(".")[0] for p in listed} == {"agentrl"}, "one import namespace: agentrl"
    mapped = pyproject()["tool"]["setuptools"]["package-dir"]
    assert mapped == {
        "agentrl.envs": "envs",
        "agentrl.credit": "credit",
        "agentrl.configs": "configs",
    }


def imports_of(path: Path) -> set[str]:
    """Absolute module names imported by a file (``from agentrl import envs`` -> agentrl.envs)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
    return names


def _forbidden(name: str, own: str, extra: set[str]) -> bool:
    top = name.split(".")[0]
    inside = name == own or name.startswith(own + ".") or own.startswith(name + ".")
    return (
        (top == "agentrl" and not inside and name != "agentrl")
        or top in extra
        or (
            top in {"envs", "credit"}  # the old top-level names are gone
        )
    )


@pytest.mark.parametrize(
    "package, extra",
    [("envs", set()), ("credit", {"torch"})],
)
def test_dependency_direction(package, extra):
    """envs/ imports nothing else from agentrl; credit/ nothing else either, and no torch."""
    own = f"agentrl.{package}"
    for path in (ROOT / package).rglob("*.py"):
        bad = {n for n in imports_of(path) if _forbidden(n, own, extra)}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_dependency_direction_at_run_time():
    """Importing agentrl.envs and agentrl.credit loads no other agentrl module and no torch."""
    code = (
        "import sys, agentrl.envs, agentrl.credit\n"
        "mods = sorted(m for m in sys.modules if m.startswith('agentrl')"
        " and not m.startswith(('agentrl.envs', 'agentrl.credit')))\n"
        "assert mods == ['agentrl'], mods\n"
        "assert 'torch' not in sys.modules\n"
        "assert 'envs' not in sys.modules and 'credit' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_hydra_configs_load_from_an_installed_wheel(tmp_path):
    """Build the wheel, install it into a bare folder, compose the configs from there."""
    wheel_dir, target, src = tmp_path / "wheel", tmp_path / "site", tmp_path / "src"
    # Build from a copy: setuptools writes build/ into the folder it builds from.
    skip = shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", "outputs", "runs"
    )
    shutil.copytree(ROOT, src, ignore=skip)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(src),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheel_dir),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next(wheel_dir.glob("agentrl-*.whl"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            str(wheel),
            "--no-deps",
            "-q",
            "--target",
            str(target),
        ],
        check=True,
        capture_output=True,
    )
    installed = sorted(p.name for p in target.iterdir() if not p.name.endswith(".dist-info"))
    assert installed == ["agentrl"], f"the wheel installs only agentrl, got {installed}"
    code = (
        "import agentrl.configs, agentrl.envs, agentrl.credit, importlib.resources as r, pathlib\n"
        f"assert agentrl.envs.__file__.startswith({str(target)!r})\n"
        f"assert agentrl.credit.__file__.startswith({str(target)!r})\n"
        "assert agentrl.envs.make('Sokoban-v0') is not None\n"
        "from hydra import compose, initialize_config_module\n"
        "root = pathlib.Path(str(r.files('agentrl.configs')))\n"
        f"assert str(root).startswith({str(target)!r}), root\n"
        "names = sorted(p.stem for p in (root / 'env').glob('*.yaml'))\n"
        "assert 'sokoban' in names, names\n"
        "with initialize_config_module('agentrl.configs', version_base=None):\n"
        "    cfg = compose(config_name='env/sokoban')\n"
        "print(cfg.env.id)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Sokoban-v0"
