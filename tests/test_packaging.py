"""Packaging and layout rules: every package is shipped, configs work from a wheel, and the
dependency direction envs/credit -> (not) agentrl, credit -> (not) torch holds."""

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
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("agentrl", "envs", "credit")
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert on_disk - listed == set(), "add these packages to [tool.setuptools] packages"
    assert "agentrl.configs" in listed


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize(
    "package, forbidden", [("envs", {"agentrl"}), ("credit", {"agentrl", "torch", "envs"})]
)
def test_dependency_direction(package, forbidden):
    for path in (ROOT / package).rglob("*.py"):
        bad = imports_of(path) & forbidden
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


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
    code = (
        "import agentrl.configs, importlib.resources as r, pathlib\n"
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
