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
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch

from agentrl.config import load_config
from agentrl.recipe import train
from agentrl.rollout.activity import Activity
from agentrl.training.interrupt import Interrupted, Quit, interrupts, quit_on_signal, restore_point
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
    assert "Traceback" not in proc.stderr and len(lines) == 2, proc.stderr
    name = signal.Signals(sig).name
    again = "Ctrl-C again" if sig == signal.SIGINT else "a second SIGTERM"
    # at once: what the run waits for (the update in progress, or nothing but the save)
    assert lines[0].startswith(f"{name}: ") and lines[0].endswith(f"{again} quits without saving")
    done = max(r["iteration"] for r in _rows(out) if r.get("phase") == "train")
    assert lines[1].startswith(f"training interrupted by {name} after {done} of 200 iterations")
    ck = out / "checkpoints" / f"iter_{done:06d}" / "state.pt"
    assert ck.is_file() and lines[1].endswith(f"; continue with trainer.resume={ck}")
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


def test_a_long_update_is_abandoned_within_the_grace_and_the_state_before_it_saved(tmp_path):
    """SIGTERM while an update that would take minutes runs (200 PPO epochs), with a 1 s grace:
    the line says so at once, the update is abandoned, the state before it is saved and the
    lost iteration named; meanwhile, off a terminal, progress lines said what the run did."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "agentrl.train", *RUN, "trainer.epochs=200",
           "trainer.signal_grace_s=1", "trainer.progress=true", "trainer.progress_every_s=0.5",
           f"output_dir={out}"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        _wait_for(lambda: any("update: micro-batches done" in ln for ln in lines), 240)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        stderr = proc.stderr.read()
        proc.wait(timeout=120)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, stderr[-3000:]
    said = [ln for ln in stderr.splitlines() if ln.strip()]
    assert "Traceback" not in stderr and len(said) == 2, stderr
    assert said[0].startswith("SIGTERM: ") and "trainer.signal_grace_s=1" in said[0]
    assert said[1].startswith(
        "training interrupted by SIGTERM after 0 of 200 iterations (the update of iteration 1 "
        "was abandoned: it would have outlasted trainer.signal_grace_s; that iteration is lost)"
    )
    assert took < 60  # the grace, the save and the exit, on a loaded machine; the update: minutes
    # the state before the update: no optimiser step, no update counted
    state = torch.load(out / "checkpoints" / "iter_000000" / "state.pt", weights_only=True)
    assert state["learner"]["updates"] == 0 and state["learner"]["optimizer"]["state"] == {}
    summary = json.loads((out / "summary.json").read_text())["summary"]
    assert summary["abandoned_iteration"] == 1 and summary["iterations_done"] == 0
    assert not any(r.get("phase") == "train" for r in _rows(out))
    live = [ln for ln in lines if ln.startswith("train 1/200  iteration 1 running for")]
    assert any("played 8 episodes" in ln and "tok/s" in ln for ln in live), lines[:5]


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


def test_a_second_signal_quits_without_saving(python_handlers):
    # the second Ctrl-C is sent once the first one was handled (two signals pending at once
    # would reach the handler as one); it raises Quit, which no `except Exception` catches
    said = []
    with interrupts(say=said.append) as sig, pytest.raises(Quit) as info, sig.finishing():
        os.kill(os.getpid(), signal.SIGINT)
        _wait_for(lambda: sig.signum is not None)
        os.kill(os.getpid(), signal.SIGINT)
        _wait_for(lambda: False)  # Quit raises out of this wait
    assert info.value.exit_code == 130 and not isinstance(info.value, Exception)
    assert said == [
        "SIGINT: finishing the update in progress, then saving; Ctrl-C again quits without saving"
    ]
    with quit_on_signal(), pytest.raises(Quit):  # while an interrupted run saves
        os.kill(os.getpid(), signal.SIGTERM)
        _wait_for(lambda: False)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _signal_during_update(grace, spent, fraction, *, polls=(), said=None):
    """SIGTERM in the update of iteration 3 after ``spent`` seconds at ``fraction`` done, then
    ``polls`` as ``(seconds later, fraction)``; returns what the block raised and whether the
    state before the update was restored."""
    clock, restored, said = _Clock(), [], said if said is not None else []
    with interrupts(grace_s=grace, say=said.append, clock=clock) as sig:
        try:
            with sig.finishing(), sig.abandonable(3, lambda: restored.append(True)):
                sig.poll(0.0)
                clock.now += spent
                sig.poll(fraction)
                os.kill(os.getpid(), signal.SIGTERM)
                _wait_for(lambda: sig.signum is not None)
                for later, f in polls:
                    clock.now += later
                    sig.poll(f)
        except Interrupted as exc:
            return exc, bool(restored), said
    raise AssertionError("no Interrupted")


def test_an_update_that_fits_the_grace_is_finished(python_handlers):
    exc, restored, said = _signal_during_update(20, 10.0, 0.5, polls=[(5.0, 0.75), (5.0, 1.0)])
    assert exc.lost is None and not restored  # finished: the iteration counts
    assert said == [
        "SIGTERM: finishing the update in progress (iteration 3, 50% done, about 10 s left; "
        "abandoned if it outlasts trainer.signal_grace_s=20), then saving; a second SIGTERM "
        "quits without saving"
    ]


def test_an_update_that_would_outlast_the_grace_is_abandoned_at_once(python_handlers):
    exc, restored, said = _signal_during_update(20, 30.0, 0.25)
    assert exc.lost == 3 and restored and exc.exit_code == 143
    assert said == [
        "SIGTERM: the update of iteration 3 would take about 90 s more, past "
        "trainer.signal_grace_s=20: abandoning it, then saving the iterations before it; a "
        "second SIGTERM quits without saving"
    ]


def test_an_update_that_slows_down_is_abandoned_when_it_would_end_too_late(python_handlers):
    # 50 % in 4 s: about 4 s left, within 20; then it crawls: at 56 % after 16 s more, the
    # rest would take 16 s more, past the grace
    exc, restored, _ = _signal_during_update(20, 4.0, 0.5, polls=[(2.0, 0.52), (14.0, 0.56)])
    assert exc.lost == 3 and restored


def test_the_grace_ends_an_update_stuck_between_micro_batches(python_handlers):
    """No micro-batch ends before the deadline: the timer leaves the update wherever it is."""
    restored = []
    with interrupts(grace_s=0.3, say=lambda line: None) as sig:
        t0 = time.monotonic()
        with (
            pytest.raises(Interrupted) as info,
            sig.finishing(),
            sig.abandonable(7, lambda: restored.append(True)),
        ):
            sig.poll(0.5)  # half done at once: finishing fits the grace, so it waits
            os.kill(os.getpid(), signal.SIGTERM)
            while True:  # a micro-batch that never ends
                time.sleep(0.01)
    assert info.value.lost == 7 and restored and time.monotonic() - t0 < 10
    assert not any(isinstance(t, threading.Timer) and t.is_alive() for t in threading.enumerate())


def test_the_restore_point_is_the_state_before_the_update():
    import torch

    from agentrl.config import TrainerConfig
    from agentrl.learner import Learner

    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    model.config = type("C", (), {"hidden_size": 2})()
    learner = Learner(model, TrainerConfig(), pad_token_id=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    back = restore_point(learner)
    model(torch.ones(1, 3)).sum().backward()
    learner.optimizer.step()  # an update's steps
    learner.updates += 1
    assert not all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    back()
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert learner.updates == 0 and learner.optimizer.state_dict()["state"] == {}


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
        "train 1/3  success 25%  return -0.50  2.0s/it (rollout 1.5 credit 0.01 update 0.4)"
        "  about 4 s left",  # 2 iterations left at 2 s each
        "eval success 10.0%",
    ]


def test_off_a_terminal_a_long_iteration_says_what_it_is_doing():
    stream, clock = io.StringIO(), _Clock()
    live = Activity(clock=clock)
    bar = Progress(True, 5, 0, stream=stream, activity=live, every=0.05)
    live.start(1)
    live.generated(4, 40)
    live.episode_done(2)
    clock.now += 2.0  # 20 tokens/s
    live.enter("update")
    live.micro_batch(3, 0.25)
    _wait_for(lambda: "update" in stream.getvalue(), 10)
    bar.close()
    first = stream.getvalue().splitlines()[0]
    assert first == (
        "train 1/5  iteration 1 running for 2 s: played 2 episodes (4 steps, 20 tok/s); "
        "update: micro-batches done 3 (25% of the update)"
    )
    n = len(stream.getvalue().splitlines())
    time.sleep(0.2)
    assert len(stream.getvalue().splitlines()) == n  # closed: no more lines


def test_a_held_out_evaluation_says_so_off_a_terminal():
    stream, clock = io.StringIO(), _Clock()
    live = Activity(clock=clock)
    bar = Progress(True, 5, 2, stream=stream, activity=live, every=0.05)
    live.generated(8, 80)
    live.enter("eval")  # its own counts
    live.episode_done(3)
    clock.now += 90.0
    _wait_for(lambda: "evaluation" in stream.getvalue(), 10)
    bar.close()
    assert stream.getvalue().splitlines()[0] == (
        "train 2/5  held-out evaluation running for 2 min: played 3 episodes (0 steps, 0 tok/s)"
    )
