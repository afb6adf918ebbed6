"""Env factories for the pool tests (top-level so worker processes and Ray actors can load them)."""

from __future__ import annotations

import ctypes
import itertools
import os
import signal
import threading
import time

from agentrl.envs import register as register_env
from agentrl.envs.sokoban import SokobanEnv

#: Actions that make ``FragileSokoban.step`` return a malformed result, and the error kind the
#: pool must report for each.
BAD_OUTPUTS = {
    "none_obs": "observation",
    "bytes_obs": "observation",
    "list_info": "info",
    "nan_reward": "reward",
    "str_reward": "reward",
    "str_flag": "flag",
    "int_flag": "flag",
    "raise": "exception",
}

#: MiB that one "leak" step keeps alive.
LEAK_MB = 128


class FragileSokoban(SokobanEnv):
    """Sokoban that misbehaves on request.

    "die" ends its process (exit code 3), "segfault" crashes it in native code, "sigkill" kills it,
    "raise" raises, "sleep" hangs for 30 s, "nap" takes 1.2 s, "unpicklable" returns an ``info``
    holding a lock (which pickle rejects), "leak" keeps :data:`LEAK_MB` MiB more alive on every
    call, "balloon" grows by 16 MiB every 20 ms within one call (up to 4 GiB), and the keys of
    :data:`BAD_OUTPUTS` return a malformed result; other actions play Sokoban.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._hoard: list[bytes] = []

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
        if action == "leak":
            self._hoard.append(b"\x01" * (LEAK_MB << 20))
            action = "up"
        if action == "balloon":
            for _ in range(256):
                self._hoard.append(b"\x01" * (16 << 20))
                time.sleep(0.02)
            action = "up"
        obs, reward, terminated, truncated, info = super().step(
            "up" if action in BAD_OUTPUTS or action == "unpicklable" else action
        )
        if action == "unpicklable":
            return obs, reward, terminated, truncated, dict(info, handle=threading.Lock())
        bad = {
            "none_obs": (None, reward, terminated, truncated, info),
            "bytes_obs": (obs.encode(), reward, terminated, truncated, info),
            "list_info": (obs, reward, terminated, truncated, list(info.items())),
            "nan_reward": (obs, float("nan"), terminated, truncated, info),
            "str_reward": (obs, "1.0", terminated, truncated, info),
            "str_flag": (obs, reward, "no", truncated, info),
            "int_flag": (obs, reward, terminated, 0, info),
        }
        return bad.get(action, (obs, reward, terminated, truncated, info))


class OneShotSokoban(FragileSokoban):
    """A :class:`FragileSokoban` that declares it cannot be replayed."""

    metadata = {**FragileSokoban.metadata, "replayable": False}


_instances = itertools.count()


class DriftingSokoban(FragileSokoban):
    """Claims to be replayable but is not: every new instance renders its observations with a
    new tag, so a replay on a restarted worker shows other observations."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._tag = f"{os.getpid()}-{next(_instances)}"

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return f"{obs}\n[{self._tag}]", info

    def step(self, action: str):
        obs, *rest = super().step(action)
        return (f"{obs}\n[{self._tag}]" if isinstance(obs, str) else obs, *rest)


def fragile() -> FragileSokoban:
    return FragileSokoban()


def one_shot() -> OneShotSokoban:
    return OneShotSokoban()


def drifting() -> DriftingSokoban:
    return DriftingSokoban()


def broken() -> FragileSokoban:
    """An env whose construction fails (a bad config), to check the error names it."""
    raise ValueError("no such room size")


def register() -> None:
    """The ``agentrl.envs`` entry point of the training tests: ``agentrl/Fragile-v0``, a 5x5
    Sokoban whose ``fault`` kwarg picks a fault (:class:`FaultySokoban`)."""
    register_env("Fragile-v0", FaultySokoban)


class FaultySokoban(FragileSokoban):
    """5x5 Sokoban (the default training env) that misbehaves on its own, for training runs.

    ``fault``: the :class:`FragileSokoban` action it performs instead of the agent's at step
    ``at_step`` of an episode, in training episodes whose reset seed is divisible by ``every`` (so
    whole groups fault together, at a rate of about 1/``every``; ``every=1``: every episode).
    Held-out evaluation (reset by task id) never faults.
    """

    def __init__(self, fault: str = "none_obs", every: int = 4, at_step: int = 1, **kwargs):
        kwargs = {"dim_room": 5, "num_boxes": 1, "open_room": True, "search_depth": 1,
                  "max_steps": 10, **kwargs}  # fmt: skip
        super().__init__(**kwargs)
        self.fault, self.every, self.at_step = fault, int(every), int(at_step)
        self._faulty, self._t = False, 0

    def reset(self, *, seed=None, options=None):
        # training resets (a seed, no task id); held-out evaluation passes a task id
        self._faulty = seed is not None and not options and seed % self.every == 0
        self._t = 0
        return super().reset(seed=seed, options=options)

    def step(self, action: str):
        self._t += 1
        if self._faulty and self._t == self.at_step:
            action = self.fault
        return super().step(action)
