"""What a run is doing inside an iteration, counted live: the progress line of a long iteration.

An iteration of a real model on a CPU takes minutes; :class:`Activity` counts, as they happen,
the episodes finished and the steps and tokens generated (a runner with ``activity`` set counts
through :class:`MeteredBackend` and its episodes' ends) and the update's micro-batches
(``Learner.on_micro_batch``); :meth:`Activity.line` says it in one line, which the progress bar
shows live and, off a terminal, a line at most every 30 s repeats (:class:`Heartbeat`). Counts
are thread-safe: an asynchronous producer plays while the learner updates.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

__all__ = ["Activity", "Heartbeat", "MeteredBackend"]

_GENERATING = ("rollout", "eval")


class Activity:
    """Live counts since the iteration started (:meth:`start`): episodes finished, steps and
    tokens generated, the update's micro-batches and the share of it done."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.start(0)

    def start(self, iteration: int) -> None:
        """A new iteration (1-based, as the progress line counts): every count back to 0."""
        with self._lock:
            self.iteration = iteration
            self.phase = "rollout"
            self.episodes = self.steps = self.tokens = self.micro_batches = 0
            self.update_done = 0.0
            self._t0 = self._tok_t0 = self._phase_t0 = self._clock()
            self._tok0, self._rate = 0, None

    def enter(self, phase: str) -> None:
        """The main thread moves on: ``rollout``, ``credit``, ``update`` or ``eval`` (a held-out
        evaluation, between iterations: its own counts)."""
        with self._lock:
            if self.phase in _GENERATING and phase not in _GENERATING:  # the rate it ended at
                self._rate = self._rate_now()
            self.phase, self._phase_t0 = phase, self._clock()
            if phase == "update":
                self.micro_batches, self.update_done = 0, 0.0
            if phase == "eval":  # a held-out evaluation counts its own episodes
                self.episodes = self.steps = self.tokens = 0
            if phase in _GENERATING:  # tokens/s of this phase's generation
                self._tok_t0, self._tok0, self._rate = self._clock(), self.tokens, None

    def generated(self, responses: int, tokens: int) -> None:
        with self._lock:
            self.steps += responses
            self.tokens += tokens

    def episode_done(self, n: int = 1) -> None:
        with self._lock:
            self.episodes += n

    def micro_batch(self, done: int, fraction: float) -> None:
        """After each micro-batch of the update: ``done`` so far, ``fraction`` of the update."""
        with self._lock:
            self.micro_batches, self.update_done = done, fraction

    def tokens_per_s(self) -> float:
        """Generated tokens per second: live while generating, else the last phase's rate."""
        with self._lock:
            return self._rate if self._rate is not None else self._rate_now()

    def _rate_now(self) -> float:
        dt = self._clock() - self._tok_t0
        return (self.tokens - self._tok0) / dt if dt > 0 else 0.0

    def line(self) -> str:
        """``played 64 episodes (210 steps, 35 tok/s)``, with the update's micro-batches while
        it runs: one line for the bar and the log."""
        rate = self.tokens_per_s()
        with self._lock:
            played = f"played {self.episodes} episodes ({self.steps} steps, {rate:.0f} tok/s)"
            if self.phase == "update":
                return (
                    f"{played}; update: micro-batches done {self.micro_batches} "
                    f"({self.update_done:.0%} of the update)"
                )
            if self.phase == "credit":
                return f"{played}; credit"
            return played

    def elapsed(self) -> float:
        """Seconds since the iteration started."""
        return self._clock() - self._t0

    def phase_elapsed(self) -> float:
        """Seconds since the current phase started."""
        return self._clock() - self._phase_t0


class MeteredBackend:
    """A generation backend that counts what it generates into an :class:`Activity` (a step
    is one response); anything else is the wrapped engine's."""

    def __init__(self, backend: Any, activity: Activity):
        self.backend, self.activity = backend, activity

    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: Any, allowed: Any = None, **stream: Any
    ):
        gens = self.backend.generate(prompts, sampling, allowed, **stream)  # on_tokens
        self.activity.generated(len(gens), sum(len(g.token_ids) for g in gens))
        return gens

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)


class Heartbeat:
    """Off a terminal: a line (``line()``) every ``every`` seconds while nothing else printed
    one (:meth:`printed` resets the clock), from a daemon thread; :meth:`close` stops it."""

    def __init__(self, line: Callable[[], str | None], stream: TextIO, every: float = 30.0):
        self._line, self._stream, self._every = line, stream, float(every)
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agentrl-heartbeat", daemon=True)
        self._thread.start()

    def printed(self) -> None:
        self._last = time.monotonic()

    def _run(self) -> None:
        while not self._stop.wait(max(0.05, self._last + self._every - time.monotonic())):
            if time.monotonic() - self._last < self._every:
                continue
            text = self._line()
            if text:
                try:
                    print(text, file=self._stream, flush=True)
                except (ValueError, OSError):  # the stream closed under us: stop quietly
                    return
            self._last = time.monotonic()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
