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

A second signal is not caught (the handlers are the previous ones again after the first): a
second Ctrl-C ends the process at once, without a checkpoint. Under ``torchrun`` nothing is
installed (the ranks would stop at different collectives); time-based checkpoints
(``trainer.checkpoint_minutes``) keep the work there.

The exit code is ``128 + signal number``, as a shell reports a process a signal ended: 130 for
SIGINT, 143 for SIGTERM.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["Interrupted", "Interrupts", "interrupts"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """Training was interrupted by ``signum`` (its exit code: ``128 + signum``)."""

    def __init__(self, signum: int):
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"interrupted by {self.name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class Interrupts:
    """The signal state of one training loop (see the module docstring)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._finishing = 0
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.signum = signum
        self._restore()  # a second signal acts as it would without us
        if not self._finishing:
            raise Interrupted(signum)

    def _install(self) -> None:
        for s in SIGNALS:
            self._previous[s] = signal.signal(s, self._handle)

    def _restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()

    @contextmanager
    def finishing(self) -> Iterator[None]:
        """A block that a signal must not cut (the update and what records it): a signal
        received inside it raises :class:`Interrupted` when the block ends."""
        self._finishing += 1
        try:
            yield
        finally:
            self._finishing -= 1
        if self.signum is not None and not self._finishing:
            raise Interrupted(self.signum)


@contextmanager
def interrupts(enabled: bool = True) -> Iterator[Interrupts]:
    """Handle SIGINT and SIGTERM inside the block (only in the main thread, and only when
    ``enabled``); the previous handlers are back when it ends."""
    state = Interrupts()
    active = enabled and threading.current_thread() is threading.main_thread()
    if active:
        state._install()
    try:
        yield state
    finally:
        state._restore()
