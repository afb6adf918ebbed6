"""SIGINT and SIGTERM during training: stop at a safe point, keep the work, exit with a code.

:func:`interrupts` installs handlers for the loop of :func:`agentrl.recipe.train`. A signal
*abandons* the current iteration while nothing of it has reached the weights (rollout, credit,
evaluation: :class:`Interrupted` is raised at once, from the handler), and *finishes* it while
its update runs (inside :meth:`Interrupts.finishing`: the update, the weight sync and the
iteration's metrics row complete, then :class:`Interrupted` is raised). Either way the learner
holds exactly the state after the last finished iteration, which the recipe then checkpoints:
resuming from it continues as the uninterrupted run would (every random choice of iteration
``i`` is seeded from ``(seed, i)``; with ``rollout.staleness >= 1`` the checkpoint keeps the
policy versions the next batches sample with; ``rollout.partial_rollouts=true`` runs depend on
the threads' timing and are not reproduced).

The wait is bounded: cluster schedulers send SIGKILL 30-90 s after SIGTERM. Inside
:meth:`Interrupts.abandonable` (the update itself) an update that would outlast
``grace_s`` seconds after the signal (``trainer.signal_grace_s``; its pace so far tells, after
each micro-batch: :meth:`Interrupts.poll`, and a timer ends the wait at the deadline whatever
runs) is abandoned: the learner gets back the state before it (:func:`restore_point`) and the
recipe saves that, naming the lost iteration. The handler says at once, in one line on stderr,
what the run waits for.

A second signal quits at once without saving (:class:`Quit`: the ``finally`` blocks still close
the env pool, the engine and the producer; ``python -m agentrl.train`` prints one line, no
traceback). Under ``torchrun`` nothing is installed (the ranks would stop at different
collectives); time-based checkpoints (``trainer.checkpoint_minutes``) keep the work there.

The exit code is ``128 + signal number``, as a shell reports a process a signal ended: 130 for
SIGINT, 143 for SIGTERM.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Any

import torch

__all__ = ["Interrupted", "Interrupts", "Quit", "interrupts", "quit_on_signal", "restore_point"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """Training was interrupted by ``signum`` (its exit code: ``128 + signum``); ``lost``: the
    iteration whose update was abandoned (``None``: none was)."""

    def __init__(self, signum: int, lost: int | None = None):
        self.signum = signum
        self.name = signal.Signals(signum).name
        self.lost = lost
        super().__init__(f"interrupted by {self.name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class Quit(BaseException):
    """A second signal: the run ends at once without saving (``BaseException``, as
    ``KeyboardInterrupt``: no ``except Exception`` on the way swallows it)."""

    def __init__(self, signum: int):
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"quit by a second {self.name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _Abandon(BaseException):
    """Raised inside :meth:`Interrupts.abandonable` to leave the update."""


class _Deadline:
    """The end of the grace: a timer thread sends the main thread the signal it caught again
    (marked ``fired``), whose handler then leaves the update wherever it runs. A thread and
    not SIGALRM: the process's one alarm timer belongs to whoever else uses it."""

    def __init__(self, seconds: float, signum: int, owner: Interrupts):
        self._signum, self._main, self._owner = signum, threading.main_thread().ident, owner
        self._timer = threading.Timer(max(seconds, 0.001), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self._owner._deadline_fired = True
        signal.pthread_kill(self._main, self._signum)

    def cancel(self) -> None:
        self._timer.cancel()


def _stderr(line: str) -> None:
    # os.write, not print: the handler may run while the main thread is inside a print
    with suppress(OSError):
        os.write(2, (line + "\n").encode())


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


class Interrupts:
    """The signal state of one training loop (see the module docstring).

    ``grace_s``: how long after a signal an update may still run (``None``: until it ends);
    ``say``: where the one line goes (stderr); ``clock``: seconds, monotonic."""

    def __init__(
        self,
        grace_s: float | None = 20.0,
        say: Callable[[str], None] = _stderr,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.grace_s = grace_s
        self.signum: int | None = None
        self.received_at = 0.0
        self.active = False  # handlers installed
        self._say, self._clock = say, clock
        self._finishing = 0
        self._update: tuple[int, float] | None = None  # (iteration, start) while abandonable
        self._fraction = 0.0  # of the update in progress
        self._previous: dict[int, Any] = {}
        self._timer: _Deadline | None = None
        self._deadline_fired = False

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    @property
    def bounded(self) -> bool:
        """Whether an update may be abandoned (handlers installed and a grace set): the
        recipe then keeps a :func:`restore_point` before each update."""
        return self.active and self.grace_s is not None

    # -- the handlers ------------------------------------------------------------------------
    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self._deadline_fired:  # the grace is over (our own signal, maybe delivered late)
            self._deadline_fired = False
            if self._update is not None:
                raise _Abandon  # leave the update wherever it is: its state is restored
            return
        if self.signum is not None:
            raise Quit(signum)
        self.signum, self.received_at = signum, self._clock()
        name = signal.Signals(signum).name
        again = "Ctrl-C again" if signum == signal.SIGINT else f"a second {name}"
        if not self._finishing:
            self._say(f"{name}: stopping before this iteration reaches the weights, then saving "
                      f"the iterations done; {again} quits without saving")  # fmt: skip
            raise Interrupted(signum)
        if self._update is None or self.grace_s is None:
            self._say(f"{name}: finishing the update in progress, then saving; {again} quits "
                      "without saving")  # fmt: skip
            if self.grace_s is not None:  # an update about to start is bounded all the same
                self._timer = _Deadline(self.grace_s, signum, self)
            return
        it, _start = self._update
        left = self._left()
        if left is not None and left > self.grace_s:
            self._say(f"{name}: the update of iteration {it} would take about {_duration(left)} "
                      f"more, past trainer.signal_grace_s={self.grace_s:g}: abandoning it, then "
                      f"saving the iterations before it; {again} quits without saving")  # fmt: skip
            raise _Abandon
        pace = f", about {_duration(left)} left" if left is not None else ""
        self._say(f"{name}: finishing the update in progress (iteration {it}, {self._fraction:.0%} "
                  f"done{pace}; abandoned if it outlasts trainer.signal_grace_s="
                  f"{self.grace_s:g}), then saving; {again} quits without saving")  # fmt: skip
        self._timer = _Deadline(self.grace_s, signum, self)

    def _left(self) -> float | None:
        """Seconds the update in progress would still take at its pace so far."""
        if self._update is None or self._fraction <= 0:
            return None
        spent = self._clock() - self._update[1]
        return spent * (1.0 - self._fraction) / self._fraction

    def _install(self) -> None:
        for s in SIGNALS:
            self._previous[s] = signal.signal(s, self._handle)
        self.active = True

    def _restore(self) -> None:
        self._cancel()
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()
        self.active = False

    # -- the loop's blocks ---------------------------------------------------------------------
    @contextmanager
    def finishing(self) -> Iterator[None]:
        """A block that a signal must not cut (the update and what records it): a signal
        received inside it raises :class:`Interrupted` when the block ends."""
        self._finishing += 1
        try:
            yield
        finally:
            self._finishing -= 1
            if not self._finishing:
                self._cancel()
        if self.signum is not None and not self._finishing:
            raise Interrupted(self.signum)

    @contextmanager
    def abandonable(self, iteration: int, restore: Callable[[], None] | None) -> Iterator[None]:
        """The update of ``iteration`` (inside :meth:`finishing`): with ``restore`` (the state
        before it, :func:`restore_point`) it is abandoned when it would outlast the grace; the
        learner is then restored and :class:`Interrupted` names the lost iteration."""
        if restore is None:
            yield
            return
        self._update, self._fraction = (iteration, self._clock()), 0.0
        try:
            yield
        except _Abandon:
            self._update = None
            restore()
            raise Interrupted(self.signum or signal.SIGTERM, lost=iteration) from None
        finally:
            self._update = None

    def poll(self, fraction: float) -> None:
        """After each micro-batch of the update (``fraction`` of it done): leave it when, at
        this pace, it would end past the grace after a signal."""
        self._fraction = float(fraction)
        if self.signum is None or self._update is None or self.grace_s is None:
            return
        spent = self._clock() - self.received_at
        left = self._left() or 0.0
        if fraction < 1.0 and spent + left > self.grace_s:
            raise _Abandon


@contextmanager
def quit_on_signal() -> Iterator[None]:
    """While the interrupted run saves: a further SIGINT or SIGTERM quits without saving
    (:class:`Quit`) instead of ending the process with a traceback."""

    def handle(signum: int, _frame: FrameType | None) -> None:
        raise Quit(signum)

    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.signal(s, handle) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextmanager
def interrupts(
    enabled: bool = True,
    grace_s: float | None = 20.0,
    say: Callable[[str], None] = _stderr,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[Interrupts]:
    """Handle SIGINT and SIGTERM inside the block (only in the main thread, and only when
    ``enabled``); the previous handlers are back when it ends."""
    state = Interrupts(grace_s, say, clock)
    if enabled and threading.current_thread() is threading.main_thread():
        state._install()
    try:
        yield state
    finally:
        state._restore()


def _cpu(tree: Any) -> Any:
    if isinstance(tree, torch.Tensor):
        return tree.detach().to("cpu", copy=True)
    if isinstance(tree, dict):
        return {k: _cpu(v) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(_cpu(v) for v in tree)
    return tree


def restore_point(learner: Any) -> Callable[[], None]:
    """A copy of the learner's state now (its trainable weights, value head, optimiser state
    and update count, on the CPU) and the function that loads it back: an abandoned update
    leaves the state of the iteration before it. With LoRA a few MB per iteration; with full
    fine-tuning three times the model's weights (``trainer.signal_grace_s=null`` keeps none)."""
    state = learner.state_dict()  # its weights are CPU copies already; the rest is the live one
    head, optimizer = _cpu(state["value_head"]), _cpu(state["optimizer"])

    @torch.no_grad()
    def restore() -> None:  # as it was: no checkpoint file's checks (the state is our own)
        params = dict(learner.model.named_parameters())
        for name, value in state["model"].items():
            params[name].copy_(value.to(params[name].device))
        if learner.value_head is not None:
            learner.value_head.load_state_dict(head)
        learner.optimizer.load_state_dict(optimizer)
        learner.updates = state["updates"]

    return restore
