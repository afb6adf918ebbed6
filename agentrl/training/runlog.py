"""Where a run's numbers go: ``metrics.jsonl``, TensorBoard, the progress bar, and the end outputs.

:class:`RunLog` appends one JSON row per event (training iteration, evaluation, summary) to
``<run>/metrics.jsonl``, mirrors the finite numbers to TensorBoard, and keeps the history a
checkpoint stores. :func:`write_outputs` writes ``summary.json``, ``summary.md``, the printed
summary and the training curve.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from ..rollout.activity import Activity, Heartbeat
from .summary import (
    RunSummary,
    categories_markdown,
    categories_rich,
    model_card,
    plot_curves,
    to_markdown,
    to_rich,
)
from .trackers import Tracker, close_all

__all__ = ["Progress", "RunLog", "Timer", "write_interrupted", "write_outputs"]


@dataclass
class Timer:
    """Wall and CPU seconds of a ``with`` block."""

    wall: float = 0.0
    cpu: float = 0.0

    def __enter__(self) -> Timer:
        self._w, self._c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self._w
        self.cpu = time.process_time() - self._c


class RunLog:
    """Append-only metrics rows (``metrics.jsonl``, mirrored to the experiment trackers of
    ``trainer.loggers``); ``history`` holds them all."""

    def __init__(self, out: Path, history: list[dict], trackers: Sequence[Tracker] = ()):
        self.history = history
        self.trackers = list(trackers)
        self._file = open(out / "metrics.jsonl", "w")  # noqa: SIM115 (closed in close())
        for row in history:  # a resumed run rewrites what came before
            self._file.write(json.dumps(row) + "\n")

    def __call__(self, row: dict[str, Any]) -> None:
        self.history.append(row)
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        for tracker in self.trackers:
            tracker.log_row(row)

    def close(self) -> None:
        self._file.close()
        close_all(self.trackers)


class Progress:
    """Training progress: a rich progress bar with the live training success rate on a terminal;
    one plain line per iteration when stdout is not one (a log file, a pipe, a batch job), so a
    redirected run says how far it is; nothing when disabled. With an ``activity``
    (:class:`~agentrl.rollout.activity.Activity`) a long iteration says what it is doing: live in
    the bar, and off a terminal in a line at most every ``every`` seconds; after the first
    iteration each line ends with an estimate of the run's time left."""

    def __init__(
        self,
        enabled: bool,
        total: int,
        start: int,
        stream: TextIO | None = None,
        activity: Activity | None = None,
        every: float = 30.0,
    ):
        self._p = None
        self._stream = stream or sys.stdout
        self._total, self._done, self._activity = total, start, activity
        self._seconds: list[float] = []  # the iterations' wall seconds, for the estimate
        self._beat: Heartbeat | None = None
        self._lines = enabled and not _is_terminal(self._stream)
        if self._lines and activity is not None:
            self._beat = Heartbeat(self._live_line, self._stream, every)
        if enabled and not self._lines:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as Bar

            live = [_LiveColumn(activity)] if activity is not None else []
            self._p = Bar(
                TextColumn("[bold]train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                *live,
                TimeElapsedColumn(),
                TimeRemainingColumn(),
            )
            self._p.start()
            self._task = self._p.add_task("train", total=total, completed=start, info="")

    def update(self, done: int, row: dict) -> None:
        self._done = done
        self._seconds.append(float(row.get("time/iteration_s", 0.0)))
        if self._p is None and not self._lines:
            return
        info = (
            f"success {row['train/success_rate']:.0%}  return {row['train/mean_return']:+.2f}  "
            f"{row['time/iteration_s']:.1f}s/it (rollout {row['time/rollout_s']:.1f} "
            f"credit {row['time/credit_s']:.2f} update {row['time/update_s']:.1f})"
        )
        if self._p is not None:
            self._p.update(self._task, completed=done, info=info)
        else:
            print(
                f"train {done}/{self._total}  {info}{self._left()}", file=self._stream, flush=True
            )
            if self._beat is not None:
                self._beat.printed()

    def _left(self) -> str:
        """``  about 1 h 20 min left`` at the mean pace of the iterations so far (none done:
        nothing) when the run is not over."""
        left = self._total - self._done
        if not self._seconds or left <= 0:
            return ""
        return f"  about {_duration(left * sum(self._seconds) / len(self._seconds))} left"

    def _live_line(self) -> str | None:
        """The heartbeat's line: iteration, what it is doing, for how long."""
        act = self._activity
        if act is not None and act.phase == "eval":
            return (f"train {self._done}/{self._total}  held-out evaluation running for "
                    f"{_duration(act.phase_elapsed())}: {act.line()}")  # fmt: skip
        if act is None or self._done >= self._total:
            return None
        it = self._done + 1
        return (f"train {it}/{self._total}  iteration {it} running for "
                f"{_duration(act.elapsed())}: {act.line()}{self._left()}")  # fmt: skip

    def note(self, text: str) -> None:
        if self._p is not None:
            self._p.console.print(text)
        else:
            print(text, file=self._stream, flush=True)

    def close(self) -> None:
        if self._beat is not None:
            self._beat.close()
            self._beat = None
        if self._p is not None:
            self._p.stop()
            self._p = None


def _duration(s: float) -> str:
    """``45 s``, ``12 min``, ``3 h 05 min``."""
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


class _LiveColumn:
    """A progress-bar column showing what the iteration in progress is doing (rich renders it
    at every refresh)."""

    def __new__(cls, activity: Activity):
        from rich.progress import ProgressColumn
        from rich.text import Text

        class Live(ProgressColumn):
            def render(self, task):  # noqa: ARG002 - the activity, not the task, says it
                return Text(activity.line(), style="dim")

        return Live()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False


def write_interrupted(
    out: Path,
    signal_name: str,
    done: int,
    total: int,
    checkpoint: Path,
    initial: dict | None,
    history: list[dict],
    log: Any,
    lost: int | None = None,
) -> str:
    """What an interrupted run did: a ``phase: interrupted`` metrics row, ``summary.json``
    (``status: interrupted``, the iterations done, the checkpoint, the command that resumes it,
    the training rows' means and the initial evaluation) and ``summary.md``; returns the one
    line to print. Under torchrun only rank 0 writes (the other ranks' ``log`` is a no-op)."""
    train = [r for r in history if r.get("phase") == "train"]
    last = train[-1] if train else {}
    resume = f"trainer.resume={checkpoint / 'state.pt'}"  # find_checkpoint takes the file
    record = {
        "status": "interrupted",
        "signal": signal_name,
        "iterations_done": done,
        "iterations": total,
        "abandoned_iteration": lost,  # its update outlasted trainer.signal_grace_s
        "checkpoint": str(checkpoint),
        "resume": resume,
        "last_train_success_rate": last.get("train/success_rate"),
        "mean_iteration_s": (
            sum(r["time/iteration_s"] for r in train) / len(train) if train else None
        ),
    }
    log({"iteration": done, "step": done, "phase": "interrupted", **record})
    if isinstance(log, RunLog):
        full = {"summary": record, "initial_eval": initial}
        (out / "summary.json").write_text(json.dumps(full, indent=1, default=str))
        lines = [f"# Interrupted run ({signal_name})", ""]
        lines += [f"- {k.replace('_', ' ')}: {v}" for k, v in record.items() if v is not None]
        (out / "summary.md").write_text("\n".join(lines) + "\n")
    why = (
        f" (the update of iteration {lost} was abandoned: it would have outlasted "
        "trainer.signal_grace_s; that iteration is lost)"
        if lost is not None
        else ""
    )
    return (
        f"training interrupted by {signal_name} after {done} of {total} iterations{why}: "
        f"checkpoint {checkpoint}; continue with {resume}"
    )


def write_outputs(
    out: Path,
    summary: RunSummary,
    report: Any,
    initial: dict | None,
    history: list[dict],
    plot: bool,
    trackers: Sequence[Tracker] = (),
) -> None:
    """summary.json, summary.md, the printed summary, (optionally) training_curve.png; then the
    trackers get the figures, the summary's scalars and the final model's path."""
    record = {"summary": summary.flat(), "final_eval": report.to_dict(), "initial_eval": initial}
    (out / "summary.json").write_text(json.dumps(record, indent=1, default=str))
    per_category = categories_markdown(initial, report)
    (out / "summary.md").write_text(to_markdown(summary) + "\n\n" + per_category + "\n")
    final = Path(summary.final_model)
    if final.is_dir():  # the model card: what was trained, how it did, how to load it
        config = (
            json.loads((out / "config.json").read_text()) if (out / "config.json").exists() else {}
        )
        if not config and (out / "config.yaml").exists():
            import yaml

            config = yaml.safe_load((out / "config.yaml").read_text()) or {}
        (final / "README.md").write_text(model_card(summary, config, initial, report))
    try:
        from rich.console import Console
    except ImportError:
        print(to_markdown(summary))
    else:
        console = Console()
        console.print(to_rich(summary))
        console.print(categories_rich(initial, report))
    figures = []
    if plot:
        try:
            plot_curves(history, out / "training_curve.png", summary)
            figures.append(out / "training_curve.png")
        except Exception as exc:  # noqa: BLE001 - a plotting problem must not lose a finished run
            print(f"warning: could not draw the training curve: {exc}", file=sys.stderr)
    for tracker in trackers:
        try:
            tracker.finish(figures, summary.flat(), final if final.is_dir() else None)
        except Exception as exc:  # noqa: BLE001 - a tracker must not lose a finished run
            print(
                f"warning: {type(tracker).__name__} could not log the outputs: {exc}",
                file=sys.stderr,
            )
    print(f"outputs: {out}")
