"""Env ids and a server runner for the env-server tests: the pool tests' fragile Sokoban (and its
not-replayable twin), and one whose info holds a set (which JSON cannot carry).
``python -m agentrl.pool.serve --import http_envs`` loads them; :class:`Server` runs that command
as a real subprocess on loopback (tests/test_pool_http.py, and the ``http`` backend of
tests/test_pool.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from pool_envs import FragileSokoban, OneShotSokoban

from agentrl import envs

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


class SetInfoSokoban(FragileSokoban):
    """Action "set" answers with an ``info`` holding a set; other actions play Sokoban."""

    def step(self, action: str):
        if action == "set":
            obs, reward, terminated, truncated, info = super().step("up")
            return obs, reward, terminated, truncated, dict(info, tags={"a", "b"})
        return super().step(action)


envs.register("FragileSokoban-v0", FragileSokoban)
envs.register("OneShotSokoban-v0", OneShotSokoban)
envs.register("SetInfoSokoban-v0", SetInfoSokoban)


class Server:
    """``python -m agentrl.pool.serve`` in a subprocess; ``url`` once it listens."""

    def __init__(self, env: str, *args: str, port: int = 0, token: str | None = None):
        env_vars = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(ROOT)])}
        if token:
            env_vars["TEST_ENV_TOKEN"] = token
            args = (*args, "--token-env", "TEST_ENV_TOKEN")
        cmd = [sys.executable, "-m", "agentrl.pool.serve", env, "--port", str(port)]
        cmd += ["--import", "http_envs", *args]
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env_vars, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        line = self.proc.stdout.readline()
        if not line.startswith("serving"):
            self.stop()
            raise RuntimeError(f"server did not start: {line}{self.proc.stderr.read()}")
        self.url = line.split(" on ")[1].split()[0]
        self.port = int(self.url.rsplit(":", 1)[1])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
