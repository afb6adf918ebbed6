"""The env guide's example (docs/guides/add-env.md), run exactly as written.

The example's code blocks are taken from the guide page, written into a package on a temporary
path together with a distribution's metadata declaring the ``agentrl.envs`` entry point, so the
registration goes through the real entry-point mechanism (as after ``pip install``).
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from agentrl.envs import registry
from gymnasium.utils.env_checker import check_env

from agentrl import envs
from agentrl.check_env import main as check_main

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "add-env.md"


def readme_blocks() -> dict[str, str]:
    """Code blocks of the guide page, keyed by their first-line comment (a file name)."""
    section = GUIDE.read_text()
    blocks = re.findall(r"```(?:python|toml|yaml)\n(.*?)```", section, re.S)
    return {b.splitlines()[0].lstrip("# ").strip(): b for b in blocks}


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    blocks = readme_blocks()
    root = tmp_path_factory.mktemp("site")
    pkg = root / "my_envs"
    pkg.mkdir()
    (pkg / "guess.py").write_text(blocks["my_envs/guess.py"])
    (pkg / "__init__.py").write_text(blocks["my_envs/__init__.py"])
    toml = blocks["pyproject.toml"]
    group, line = re.search(r'\[project\.entry-points\."([^"]+)"\]\n(.+)', toml).groups()
    dist = root / "my_envs-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-envs\nVersion: 0.1\n")
    entry = line.replace(" ", "").replace('"', "")
    (dist / "entry_points.txt").write_text(f"[{group}]\n{entry}\n")
    sys.path.insert(0, str(root))
    registry.load_plugins(force=True)
    yield blocks
    sys.path.remove(str(root))
    del gym.registry["agentrl/GuessNumber-v0"]  # later tests must not see a plug-in that is gone


def test_entry_point_registers_the_env(plugin):
    assert "agentrl/GuessNumber-v0" in envs.list_envs()
    check_env(gym.make("agentrl/GuessNumber-v0").unwrapped)


def test_expert_always_wins_within_the_cap(plugin):
    env = envs.make("GuessNumber-v0")
    for task in env.task_ids("test"):
        env.reset(options={"task_id": task})
        terminated = truncated = False
        while not (terminated or truncated):
            _, reward, terminated, truncated, info = env.step(env.expert_action())
        assert info["won"] and reward == 1.0, task


def test_works_in_the_pool_with_workers(plugin):
    from agentrl.pool import EnvPool, EnvSpec

    with EnvPool([EnvSpec("GuessNumber-v0")] * 2, num_workers=2) as pool:
        out = pool.reset(seeds=[3, 3])
        assert out[0][1]["state_key"] == out[1][1]["state_key"]
        result = pool.step([0, 1], ["banana", "10"])
        assert not result[0].info["action_valid"] and result[1].info["action_valid"]


def test_guide_check_command_passes(plugin, capsys):
    """The guide's ``python -m agentrl.check_env`` line, run on the guide's env: every rule
    passes, and the output lines the guide quotes are the real ones."""
    section = GUIDE.read_text()
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    command, *quoted = block.splitlines()
    args = shlex.split(command)
    assert args[:3] == ["python", "-m", "agentrl.check_env"]
    assert check_main(args[3:]) == 0
    out = capsys.readouterr().out
    for line in quoted:
        line = line.removeprefix("# ")
        if line != "...":
            assert line in out, (line, out)
