"""Env factories for the pool tests (top-level so worker processes and Ray actors can load them)."""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time

from agentrl.envs.sokoban import SokobanEnv


class FragileSokoban(SokobanEnv):
    """Sokoban that misbehaves on request.

    "die" ends its process (exit code 3), "segfault" crashes it in native code, "sigkill" kills it,
    "raise" raises, "sleep" hangs for 30 s, "nap" takes 1.2 s, "unpicklable" returns an ``info`` holding a lock (which
    pickle rejects); other actions play Sokoban.
    """

    def step(self, action: str):
        if action == "die":
            os._exit(3)
        if action == "segfault":
            ctypes.string_at(0)
        if action == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if action == "raise":
            raise RuntimeError("boom")
        if action == "sleep":
            time.sleep(30)
        if action == "nap":  # slow but legitimate
            time.sleep(1.2)
            action = "up"
        if action == "unpicklable":
            obs, reward, terminated, truncated, info = super().step("up")
            return obs, reward, terminated, truncated, dict(info, handle=threading.Lock())
        return super().step(action)


def fragile() -> FragileSokoban:
    return FragileSokoban()


def broken() -> FragileSokoban:
    """An env whose construction fails (a bad config), to check the error names it."""
    raise ValueError("no such room size")
