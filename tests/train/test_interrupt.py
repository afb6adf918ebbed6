"""No interrupt loses work: SIGINT/SIGTERM sent to a real training process
write a checkpoint of the iterations done and their summary, exit 130/143 with one line, leave no
child process, and the checkpoint resumes to the uninterrupted run's numbers; time-based
checkpoints; one progress line per iteration when stdout is not a terminal."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from agentrl.config import load_config
from agentrl.recipe import train
from agentrl.training.interrupt import Interrupted, interrupts
from agentrl.training.runlog import Progress

from .helpers import SMOKE, make_cfg

#: A run that would take minutes: it is interrupted after its first iteration. Two env worker
#: processes, so that the test sees the pool's children go too. Constant lr: the resumed run
#: below is shorter than this one, and a schedule depends on the run's length.
RUN = [
    *SMOKE,
    "trainer.iterations=200",
    "trainer.checkpoint_every=0",
    "trainer.eval_initial=false",
    "trainer.lr_schedule=constant",
    "env.num_workers=2",
]


def _rows(path: Path) -> list[dict]:
    text = (path / "metrics.jsonl").read_text() if (path / "metrics.jsonl").exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _interrupt(out: Path, sig: int, tmp_path: Path) -> tuple[subprocess.CompletedProcess, set]:
    """Start ``python -m agentrl.train`` on ``RUN``, send ``sig`` once its first iteration is
    logged, wait; returns the finished process and the pids of the children it had."""
    cmd = [
        sys.executable,
        "-m",
        "agentrl.train",
        *RUN,
        "trainer.progress=true",
        f"output_dir={out}",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    children: set[int] = set()
    deadline = time.monotonic() + 240
    try:
        while not any(r.get("phase") == "train" for r in _rows(out)):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no iteration in 240 s"
            time.sleep(0.1)
        children = {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr), children


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])  # fmt: skip
def test_a_signal_keeps_the_work_and_exits_with_its_code(tmp_path, sig, code):
    out = tmp_path / "run"
    proc, children = _interrupt(out, sig, tmp_path)
    assert proc.returncode == code, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    name = signal.Signals(sig).name
    done = max(r["iteration"] for r in _rows(out) if r.get("phase") == "train")
    assert lines[0].startswith(f"training interrupted by {name} after {done} of 200 iterations")
    ck = out / "checkpoints" / f"iter_{done:06d}" / "state.pt"
    assert ck.is_file() and lines[0].endswith(f"; continue with trainer.resume={ck}")
    summary = json.loads((out / "summary.json").read_text())["summary"]
    assert summary["status"] == "interrupted" and summary["signal"] == name
    assert summary["iterations_done"] == done and summary["checkpoint"] == str(ck.parent)
    assert _rows(out)[-1]["phase"] == "interrupted"
    # stdout is a pipe: one progress line per iteration done, not a progress bar
    progress = [ln for ln in proc.stdout.splitlines() if ln.startswith("train ")]
    assert progress and progress[0].startswith("train 1/200  success ")
    assert len(children) >= 2  # the two env workers
    gone, alive = psutil.wait_procs([_proc(p) for p in children if _proc(p)], timeout=10)
    assert not alive, f"children left behind: {alive}"


def _proc(pid: int):
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def test_the_interrupt_checkpoint_resumes_to_the_uninterrupted_run(tmp_path):
    """Interrupted after k iterations and resumed to k + 1, the metrics are those of a run of
    k + 1 iterations that was never interrupted (same machine)."""
    proc, _ = _interrupt(tmp_path / "cut", signal.SIGINT, tmp_path)
    assert proc.returncode == 130, proc.stderr[-3000:]
    done = max(r["iteration"] for r in _rows(tmp_path / "cut") if r.get("phase") == "train")
    ck = proc.stderr.strip().rsplit("trainer.resume=", 1)[1]  # the printed command
    assert ck == str(tmp_path / "cut" / "checkpoints" / f"iter_{done:06d}" / "state.pt")
    # in-process, in one pool process as the subprocess was (RUN's two workers)
    total = f"trainer.iterations={done + 1}"
    train(load_config(make_cfg(*RUN, total, f"trainer.resume={ck}")), tmp_path / "resumed")
    train(load_config(make_cfg(*RUN, total)), tmp_path / "full")
    full = [r for r in _rows(tmp_path / "full") if r["phase"] == "train"]
    resumed = [r for r in _rows(tmp_path / "resumed") if r["phase"] == "train"]
    assert [r["iteration"] for r in resumed] == list(range(1, done + 2))
    for a, b in zip(full, resumed, strict=True):
        for k, v in a.items():
            if k.startswith(("train/", "loss/", "credit/")):
                assert v == pytest.approx(b[k], rel=1e-6, abs=1e-7), (a["iteration"], k)


@pytest.fixture
def python_handlers():
    """Python's own SIGINT/SIGTERM handlers for the test, whatever an earlier test in this
    process (or a library it loaded) installed; the handlers found are back afterwards."""
    found = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    for s, handler in found.items():
        signal.signal(s, handler)


def _wait_for(condition, seconds: float = 30.0) -> None:
    """Sleep in short steps until ``condition()`` holds: a signal sent to this process may be
    taken by another thread, and the main thread runs its handler at its next check, which on
    a loaded machine can be late; a fixed sleep would race it."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the signal handler never ran"
        time.sleep(0.01)


def test_a_signal_before_the_update_abandons_during_it_finishes(python_handlers):
    with interrupts():
        with pytest.raises(Interrupted) as info:
            os.kill(os.getpid(), signal.SIGINT)
            _wait_for(lambda: False)  # the handler raises out of this wait
        assert info.value.exit_code == 130
    reached = []
    with interrupts() as sig:
        with pytest.raises(Interrupted) as info, sig.finishing():
            os.kill(os.getpid(), signal.SIGTERM)
            _wait_for(lambda: sig.signum is not None)
            reached.append("end of the update")  # not cut
        assert info.value.exit_code == 143 and reached == ["end of the update"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_second_signal_is_not_caught(python_handlers):
    # the second Ctrl-C meets Python's own handler; it is sent once the first one was handled
    # (two signals pending at once would reach the handler as one)
    with interrupts() as sig, pytest.raises(KeyboardInterrupt), sig.finishing():
        os.kill(os.getpid(), signal.SIGINT)
        _wait_for(lambda: sig.signum is not None)
        os.kill(os.getpid(), signal.SIGINT)
        _wait_for(lambda: False)  # KeyboardInterrupt raises out of this wait


def test_time_based_checkpoints(tmp_path):
    cfg = load_config(make_cfg(*SMOKE, "trainer.checkpoint_every=0", "trainer.keep_checkpoints=5",
                               "trainer.checkpoint_minutes=1e-6", "trainer.eval_initial=false"))  # fmt: skip
    train(cfg, tmp_path)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["final", "iter_000001", "iter_000002"]


def test_progress_is_one_line_per_iteration_off_a_terminal():
    stream = io.StringIO()
    bar = Progress(True, 3, 0, stream=stream)
    row = {"train/success_rate": 0.25, "train/mean_return": -0.5, "time/iteration_s": 2.0,
           "time/rollout_s": 1.5, "time/credit_s": 0.01, "time/update_s": 0.4}  # fmt: skip
    bar.update(1, row)
    bar.note("eval success 10.0%")
    bar.close()
    assert stream.getvalue().splitlines() == [
        "train 1/3  success 25%  return -0.50  2.0s/it (rollout 1.5 credit 0.01 update 0.4)",
        "eval success 10.0%",
    ]
