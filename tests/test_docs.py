"""The README and the documentation site stay runnable and point somewhere.

- Every ``python -m agentrl.train`` line of the README and of ``docs/`` (``torchrun`` ones
  included) composes with Hydra and passes the typed config's checks, as the trainer would check
  it before any work (the world is not asked: model folders and checkpoints may be examples).
- The README's cheap commands run for real (the expert evaluation, the env checker), and every
  script a README or getting-started command names exists and answers ``--help``.
- Every ``python`` block under ``docs/`` parses; a block right after ``<!-- test: run -->`` runs
  in a fresh interpreter and must exit 0 (the env guide's blocks run in tests/envs/).
- Every relative link of the README reaches a file, and its ``#anchor`` a heading there (the site's
  own links and anchors are checked by ``mkdocs build --strict`` in ``.ci/run``).
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from agentrl.config import ConfigError, load_config
from agentrl.overrides import unknown_group_option

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
RUN_MARK = "<!-- test: run -->"


def blocks(text: str, lang: str) -> list[str]:
    """The fenced blocks of one language, in order."""
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def command_lines(text: str) -> list[str]:
    """The lines of the ``bash`` blocks, continuation lines joined, comments dropped."""
    lines = []
    for block in blocks(text, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def train_args(line: str) -> list[str] | None:
    """The overrides of a training command line (``python -m`` or ``torchrun``), else None."""
    if line.endswith("&"):
        line = line[:-1]
    args = shlex.split(line)
    if "agentrl.train" not in args or args[args.index("agentrl.train") - 1] != "-m":
        return None
    return args[args.index("agentrl.train") + 1 :]


def train_commands() -> list[tuple[str, list[str]]]:
    """Every training command of the README and the docs that names no placeholder."""
    found = []
    for path in [README, *PAGES]:
        for line in command_lines(path.read_text()):
            args = train_args(line)
            if args is None or any("..." in a or "$" in a or "<" in a for a in args):
                continue  # a placeholder, not a command
            if any(a.startswith("hydra.searchpath") for a in args):
                continue  # a user's config package: tests/envs/test_env_guide.py runs those

            found.append((f"{path.relative_to(ROOT)}: {line}", args))
    return found


COMMANDS = train_commands()


def test_the_docs_have_training_commands_to_check():
    assert len(COMMANDS) >= 20, [c for c, _ in COMMANDS]
    assert any(args == [] for _, args in COMMANDS)  # the default run


@pytest.fixture(scope="module")
def hydra_train():
    with initialize_config_module("agentrl.configs", version_base=None):
        yield


@pytest.mark.parametrize("command", COMMANDS, ids=[c for c, _ in COMMANDS])
def test_training_command_composes_and_passes_the_config_checks(hydra_train, command):
    line, args = command
    assert unknown_group_option(args) is None, line
    overrides = [a for a in args if not a.startswith("hydra.")]
    try:
        load_config(compose("train", overrides=overrides))
    except ConfigError as exc:
        pytest.fail(f"{line}\n{exc}")


def readme_first_commands() -> list[str]:
    return command_lines(README.read_text()) + command_lines(
        (DOCS / "getting-started.md").read_text()
    )


def test_readme_evaluation_and_env_check_run(tmp_path):
    lines = readme_first_commands()
    evaluate = "python -m agentrl.evaluate agent=expert"
    check = "python -m agentrl.check_env Sokoban-v0"
    assert evaluate in lines and check in lines
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for line in (evaluate, check):  # in a fresh folder, where Hydra writes its run folder
        out = subprocess.run(
            [sys.executable, *shlex.split(line)[1:]],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert out.returncode == 0, (line, out.stderr[-2000:])
    assert list(tmp_path.glob("outputs/*/*/results.json"))


def test_scripts_named_by_the_first_commands_exist_and_answer_help():
    scripts = {
        shlex.split(line)[1]
        for line in readme_first_commands()
        if re.match(r"python scripts/\S+\.py", line)
    }
    assert scripts
    for script in sorted(scripts):
        assert (ROOT / script).is_file(), script
        out = subprocess.run(
            [sys.executable, script, "--help"],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0, (script, out.stderr[-2000:])


def python_blocks() -> list[tuple[str, str, bool]]:
    """(page and index, code, marked to run) of every python block under docs/."""
    found = []
    for path in PAGES:
        text = path.read_text()
        for i, match in enumerate(re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)):
            before = text[: match.start()].rstrip().rsplit("\n", 1)[-1]
            found.append((f"{path.relative_to(ROOT)}#{i}", match.group(1), before == RUN_MARK))
    return found


BLOCKS = python_blocks()
RUNNABLE = [(name, code) for name, code, run in BLOCKS if run]


@pytest.mark.parametrize("block", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_python_blocks_parse(block):
    name, code, _ = block
    try:
        ast.parse(code)
    except SyntaxError as exc:
        pytest.fail(f"{name}: {exc}")


def test_some_blocks_are_marked_to_run():
    pages = {name.split("#")[0] for name, _ in RUNNABLE}
    assert {"docs/concepts.md", "docs/guides/add-credit.md", "docs/guides/tool-calls.md"} <= pages


@pytest.mark.parametrize("block", RUNNABLE, ids=[b[0] for b in RUNNABLE])
def test_marked_python_blocks_run(block, tmp_path):
    name, code = block
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert out.returncode == 0, (name, out.stderr[-3000:])


def github_slug(heading: str) -> str:
    """A heading's anchor as GitHub (and the site's toc settings) make it."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    text = re.sub(r"<[^>]+>", "", text.replace("`", ""))
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    found = {github_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}
    return found | set(re.findall(r'<a id="([^"]+)"', text))


def test_github_slug_matches_the_site():
    assert github_slug("Outputs") == "outputs"
    assert github_slug("The env pool (`agentrl/pool/`)") == "the-env-pool-agentrlpool"
    assert github_slug("Learning at k = 1") == "learning-at-k--1"


def test_readme_links_reach_files_and_headings():
    text = README.read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert len(local) >= 10
    for link in local:
        target, _, anchor = link.partition("#")
        path = (ROOT / target).resolve()
        assert path.exists(), link
        if anchor:
            assert anchor in anchors(path), link
