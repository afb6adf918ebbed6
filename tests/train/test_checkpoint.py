"""Checkpoints: only complete ones are found, loading runs no code, broken files name themselves,
and a resume loads exactly the saved state or refuses with one line naming the file."""

from __future__ import annotations

import io
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agentrl.learner import Learner, LearnerConfig
from agentrl.learner.state_check import StateMismatch
from agentrl.models import apply_lora, load_model
from agentrl.training.checkpoint import (
    CheckpointError,
    find_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from agentrl.training.sharded_checkpoint import load_learner, load_run_checkpoint, save_learner

from .helpers import SMOKE

ROOT = Path(__file__).resolve().parents[2]


def _state():
    return {"learner": {"model": {"w": torch.ones(2)}, "updates": 3}, "history": [{"a": 1.0}]}


def test_save_is_atomic_and_keeps_the_newest(tmp_path):
    for it in (1, 2, 3):
        save_checkpoint(tmp_path, it, _state(), keep=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["iter_000002", "iter_000003"]
    state = load_checkpoint(find_checkpoint(tmp_path))
    assert state["iteration"] == 3 and state["learner"]["updates"] == 3


def test_a_leftover_temporary_folder_is_never_a_candidate(tmp_path):
    save_checkpoint(tmp_path, 2, _state(), keep=5)
    tmp = tmp_path / "checkpoints" / "iter_000009.tmp"
    tmp.mkdir()
    torch.save({"iteration": 9, "learner": {}, "history": []}, tmp / "state.pt")
    (tmp_path / "checkpoints" / "iter_000010").mkdir()  # no state.pt: an incomplete copy
    assert find_checkpoint(tmp_path).parent.name == "iter_000002"
    save_checkpoint(tmp_path, 3, _state(), keep=1)  # pruning ignores foreign folders too
    assert find_checkpoint(tmp_path).parent.name == "iter_000003"


def test_an_older_checkpoint_folder_names_itself(tmp_path):
    """``trainer.resume=<run>/checkpoints/iter_NNNNNN`` picks that checkpoint, not the newest."""
    for it in (1, 2):
        save_checkpoint(tmp_path, it, _state(), keep=2)
    older = tmp_path / "checkpoints" / "iter_000001"
    assert find_checkpoint(older) == older / "state.pt"
    (older / "state.pt").unlink()  # incomplete: an error, not a silent switch to another one
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        find_checkpoint(older)


def test_no_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        find_checkpoint(tmp_path)


@pytest.mark.parametrize(
    "content",
    [b"", b"\x00" * 7, b"junk" * 100, b"PK\x03\x04truncated zip", os.urandom(4096)],
    ids=["empty", "zeros", "junk", "truncated-zip", "random"],
)
def test_broken_files_give_one_line_naming_the_file(tmp_path, content):
    path = tmp_path / "state.pt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_truncated_real_checkpoint_is_rejected(tmp_path):
    d = save_checkpoint(tmp_path, 1, _state(), keep=1)
    data = (d / "state.pt").read_bytes()
    for cut in (len(data) // 3, len(data) - 10):
        broken = tmp_path / f"cut{cut}.pt"
        broken.write_bytes(data[:cut])
        with pytest.raises(CheckpointError, match=str(broken)):
            load_checkpoint(broken)


def test_wrong_structure_is_rejected(tmp_path):
    for obj in ([1, 2], {"iteration": 1}, torch.ones(3)):
        path = tmp_path / "state.pt"
        torch.save(obj, path)
        with pytest.raises(CheckpointError, match="not an agentrl checkpoint"):
            load_checkpoint(path)


class _Payload:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_a_crafted_pickle_runs_no_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "state.pt"
    torch.save({"iteration": 1, "learner": _Payload(), "history": []}, path, pickle_module=pickle)
    with pytest.raises(CheckpointError, match="not a readable agentrl checkpoint"):
        load_checkpoint(path)
    assert not (tmp_path / "pwned").exists()


# -- resume is exact or refuses -----------------------------------------------------------------
def _learner(tiny_path, value_head: bool = True, lora: bool = False) -> Learner:
    torch.manual_seed(0)
    model, tok, _ = load_model(tiny_path)
    if lora:
        model = apply_lora(model, r=4, alpha=8)
    return Learner(model, LearnerConfig(), tok.pad_token_id, value_head=value_head)


def _stepped(learner: Learner) -> Learner:
    """One AdamW step on small random gradients: the optimiser has state, as after training."""
    gen = torch.Generator().manual_seed(1)
    for g in learner.optimizer.param_groups:
        for p in g["params"]:
            p.grad = 1e-3 * torch.randn(p.shape, generator=gen)
    learner.optimizer.step()
    learner.updates = 1
    return learner


@pytest.fixture(scope="module")
def saved(tiny_path, tmp_path_factory):
    """A real one-process checkpoint of a trained learner (iteration 1 of a run)."""
    run = tmp_path_factory.mktemp("run")
    state = {"learner": _stepped(_learner(tiny_path)).state_dict(), "history": [{"iteration": 1}]}
    return save_checkpoint(run, 1, state, keep=1) / "state.pt"


def _resume(tiny_path, path, iterations=10, **learner_kw) -> Learner:
    """What the recipe does on trainer.resume: load the file, then the learner's state."""
    state = load_checkpoint(path, iterations)
    learner = _learner(tiny_path, **learner_kw)
    load_run_checkpoint(learner, path, state["learner"])
    return learner


def _nan_weight(s):
    s["learner"]["model"]["model.norm.weight"][3] = float("nan")


def _inf_moment(s):
    s["learner"]["optimizer"]["state"][0]["exp_avg_sq"][0, 0] = float("inf")


def _drop_half(s):
    model = s["learner"]["model"]
    for k in list(model)[::2]:
        del model[k]


def _set(*keys, value):
    def go(s):
        d = s
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value(d[keys[-1]]) if callable(value) else value

    return go


def _pop(*keys):
    def go(s):
        d = s
        for k in keys[:-1]:
            d = d[k]
        del d[keys[-1]]

    return go


CORRUPTIONS = {  # how the file was broken -> what the one line must say
    "one-element embedding": (
        _set("learner", "model", "model.embed_tokens.weight", value=torch.tensor([0.123])),
        "shape (1,), this learner (512, 128)",
    ),
    "half the parameters": (_drop_half, "lacks 13 of this learner's 26"),
    "an extra parameter": (
        _set("learner", "model", "model.extra.weight", value=torch.zeros(2)),
        "does not train (model.extra.weight)",
    ),
    "another dtype": (
        _set("learner", "model", "model.norm.weight", value=lambda t: t.half()),
        "dtype torch.float16",
    ),
    "NaN weights": (_nan_weight, "non-finite weights: model['model.norm.weight'] has 1 NaN"),
    "an infinite optimiser moment": (_inf_moment, "non-finite"),
    "no optimizer": (_pop("learner", "optimizer"), "lacks optimizer"),
    "no value head": (_set("learner", "value_head", value=None), "no value head"),
    "a moment of another shape": (
        _set("learner", "optimizer", "state", 0, "exp_avg", value=torch.zeros(3)),
        "optimizer.state[0]['exp_avg'] has shape (3,)",
    ),
    "a moment without its step": (
        _pop("learner", "optimizer", "state", 0, "step"),
        "optimizer.state[0] has entries exp_avg, exp_avg_sq, an AdamW state has",
    ),
    "a tensor among a group's parameters": (
        _set("learner", "optimizer", "param_groups", 0, "params", 3, value=torch.zeros(2)),
        "optimizer.param_groups[0]['params'] is",
    ),
    "one parameter group": (
        _set("learner", "optimizer", "param_groups", value=lambda g: g[:1]),
        "1 parameter groups, this learner 2",
    ),
    "a string learning rate": (
        _set("learner", "optimizer", "param_groups", 0, "lr", value="fast"),
        "param_groups[0]['lr'] is 'fast'",
    ),
    "an optimiser that is a number": (
        _set("learner", "optimizer", value=3),
        "optimizer is not an optimiser state",
    ),
    "updates as text": (_set("learner", "updates", value="3"), "updates is '3'"),
    "model weights as a list": (_set("learner", "model", value=[1, 2]), "not a mapping"),
    "iteration 'one'": (_set("iteration", value="one"), "iteration is 'one' (str)"),
    "iteration True": (_set("iteration", value=True), "iteration is True"),
    "a negative iteration": (_set("iteration", value=-1), "iteration is -1"),
    "iteration 10**12": (
        _set("iteration", value=10**12),
        "past this run's trainer.iterations=10: nothing would be trained",
    ),
    "history as a number": (_set("history", value=5), "history is of type int"),
    "history past the checkpoint": (
        _set("history", value=[{"iteration": 7}]),
        "history[0] has iteration 7",
    ),
    "learner as a list": (_set("learner", value=[1]), "learner is of type list"),
    "shards outside the folder": (
        _set("learner", value={"format": "dcp", "path": "../../elsewhere"}),
        "not the shard folder",
    ),
    "an unknown entry": (_set("surprise", value=1), "unknown entries surprise"),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_every_checkpoint_problem_is_one_line_naming_the_file(tiny_path, saved, tmp_path, case):
    corrupt, expected = CORRUPTIONS[case]
    state = torch.load(saved, weights_only=True)
    corrupt(state)
    path = tmp_path / "state.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointError) as info:
        _resume(tiny_path, path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: ") and "\n" not in msg, msg
    assert expected in msg, msg


def test_a_checkpoint_of_another_model_config_is_refused(tiny_path, tmp_path):
    """A LoRA run's checkpoint resumed without LoRA (and the other way round)."""
    lora = save_checkpoint(
        tmp_path / "lora", 1, {"learner": _learner(tiny_path, lora=True).state_dict(),
                               "history": []}, keep=1)  # fmt: skip
    with pytest.raises(CheckpointError, match="lacks 26 of this learner's 26 trainable"):
        _resume(tiny_path, lora / "state.pt")
    full = save_checkpoint(
        tmp_path / "full", 1, {"learner": _learner(tiny_path).state_dict(), "history": []}, keep=1
    )
    with pytest.raises(CheckpointError, match=str(full / "state.pt")):
        _resume(tiny_path, full / "state.pt", lora=True)


def test_a_refused_state_changes_nothing(tiny_path, saved):
    learner = _learner(tiny_path)
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    state = torch.load(saved, weights_only=True)["learner"]
    state["model"]["model.embed_tokens.weight"] = torch.tensor([0.123])  # broadcasts if copied
    with pytest.raises(StateMismatch):
        learner.load_state_dict(state)
    after = learner.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert learner.updates == 0 and not learner.optimizer.state


def test_a_valid_checkpoint_resumes_exactly(tiny_path, saved):
    original = torch.load(saved, weights_only=True)["learner"]
    learner = _resume(tiny_path, saved, iterations=1)  # the checkpoint's own iteration: allowed
    now = learner.state_dict()
    assert now["updates"] == original["updates"] == 1
    for k, v in original["model"].items():
        assert torch.equal(now["model"][k], v), k
    for i, entry in original["optimizer"]["state"].items():
        for k, v in entry.items():
            assert torch.equal(now["optimizer"]["state"][i][k], v), (i, k)


# -- sharded (torchrun) checkpoints -------------------------------------------------------------
class _PayloadAt:
    """Pickles as a call to ``os.system``: loading it anywhere would create ``pwned``."""

    def __init__(self, where: Path):
        self.where = where

    def __reduce__(self):
        return (os.system, (f"touch {self.where}",))


@pytest.fixture(scope="module")
def shards(tiny_path, tmp_path_factory):
    """A DCP checkpoint of a trained learner whose schedule has set initial_lr."""
    learner = _stepped(_learner(tiny_path))
    for g in learner.optimizer.param_groups:
        g["initial_lr"], g["lr"] = g["lr"], g["lr"] * 0.5  # as after a scheduled update
    folder = tmp_path_factory.mktemp("dcp") / "learner"
    save_learner(learner, folder, {"iteration": 1, "history": [1.5]})
    return folder, learner


def _copy(shards, tmp_path) -> Path:
    folder = tmp_path / "learner"
    shutil.copytree(shards[0], folder)
    return folder


def test_sharded_round_trip_is_exact_and_keeps_the_schedule(tiny_path, shards):
    folder, original = shards
    learner = _learner(tiny_path)
    meta = load_learner(learner, folder)
    assert meta == {"iteration": 1, "history": [1.5]} and learner.updates == 1
    assert (folder / "meta.json").is_file() and not (folder / "meta.pt").exists()
    for a, b in zip(original.model.parameters(), learner.model.parameters()):
        assert torch.equal(a, b)
    for g, h in zip(original.optimizer.param_groups, learner.optimizer.param_groups):
        assert h["initial_lr"] == g["initial_lr"] and h["lr"] == g["lr"]


def _crafted_index(folder: Path, marker: Path, tiny_path) -> None:
    (folder / ".metadata").write_bytes(pickle.dumps(_PayloadAt(marker)))


def _crafted_entry(folder: Path, marker: Path, tiny_path) -> None:
    """A real checkpoint whose learning-rate entry is a pickled call to os.system (DCP pickles
    a non-tensor value as bytes: saved from a learner whose lr is the payload)."""
    shutil.rmtree(folder)
    learner = _learner(tiny_path)
    learner.optimizer.param_groups[0]["lr"] = _PayloadAt(marker)
    save_learner(learner, folder)


def _truncate(name: str, keep: int):
    def go(folder: Path, marker: Path, tiny_path) -> None:
        f = folder / name
        f.write_bytes(f.read_bytes()[:keep])

    return go


def _nan_shards(folder: Path, marker: Path, tiny_path) -> None:
    shutil.rmtree(folder)
    learner = _learner(tiny_path)
    with torch.no_grad():
        learner.model.get_input_embeddings().weight[0, 0] = float("nan")
    save_learner(learner, folder)


def _old_meta(folder: Path, marker: Path, tiny_path) -> None:
    (folder / "meta.json").unlink()
    torch.save({"x": _PayloadAt(marker)}, folder / "meta.pt", pickle_module=pickle)


SHARD_CORRUPTIONS = {
    "a crafted index": (_crafted_index, ".metadata: not a readable checkpoint index (posix.system"),
    "a crafted optimiser entry": (_crafted_entry, "refused: loading it could run code"),
    "a crafted old meta.pt": (_old_meta, "meta.pt: not readable"),
    "a truncated index": (_truncate(".metadata", 100), "not a readable checkpoint index"),
    "a truncated shard": (_truncate("__0_0.distcp", 1000), "truncated?"),
    "an empty shard": (_truncate("__0_0.distcp", 0), "truncated?"),
    "junk meta.json": (
        lambda f, m, t: (f / "meta.json").write_text("{oops"),
        "meta.json: not readable",
    ),
    "NaN weights": (_nan_shards, "non-finite weights"),
}


@pytest.mark.parametrize("case", list(SHARD_CORRUPTIONS))
def test_sharded_checkpoint_problems_run_no_code_and_name_the_folder(
    tiny_path, shards, tmp_path, case
):
    folder = _copy(shards, tmp_path)
    marker = tmp_path / "pwned"
    corrupt, expected = SHARD_CORRUPTIONS[case]
    corrupt(folder, marker, tiny_path)
    state_file = tmp_path / "state.pt"
    with pytest.raises(CheckpointError) as info:
        load_run_checkpoint(_learner(tiny_path), state_file, {"format": "dcp", "path": "learner"})
    msg = str(info.value)
    assert msg.startswith(str(folder)) and "\n" not in msg, msg
    assert expected in msg, msg
    assert not marker.exists()


@pytest.mark.parametrize(
    "kw, expected",
    [
        ({"value_head": False}, "tensors this learner does not train (model.value_head.bias"),
        ({"lora": True}, "the checkpoint lacks"),
    ],
)
def test_sharded_checkpoint_of_another_config_is_refused_before_reading(
    tiny_path, shards, kw, expected
):
    learner = _learner(tiny_path, **kw)
    before = [p.clone() for p in learner.model.parameters()]
    with pytest.raises(CheckpointError, match=re.escape(expected)) as info:
        load_learner(learner, shards[0])
    assert str(shards[0]) in str(info.value)
    assert all(torch.equal(a, b) for a, b in zip(before, learner.model.parameters()))


def test_the_index_unpickler_refuses_every_global_it_does_not_list():
    from agentrl.training.sharded_checkpoint import _MetadataUnpickler

    for obj in (print, os.system, _PayloadAt(Path("x")), pickle.Pickler):
        with pytest.raises(pickle.UnpicklingError, match="not part of a checkpoint index"):
            _MetadataUnpickler(io.BytesIO(pickle.dumps(obj))).load()


# -- through the real CLI -----------------------------------------------------------------------
CLI = [*SMOKE, "trainer.eval_initial=false", "trainer.progress=false"]


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """A one-iteration run of ``python -m agentrl.train``: its checkpoint is the one corrupted."""
    out = tmp_path_factory.mktemp("cli") / "run"
    proc = _train(f"output_dir={out}", "trainer.iterations=1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out / "checkpoints" / "iter_000001" / "state.pt"


def _train(*overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "agentrl.train", *CLI, *overrides],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
    )  # fmt: skip


@pytest.mark.parametrize(
    "case", ["one-element embedding", "iteration 10**12", "NaN weights", "no optimizer"]
)
def test_the_cli_exits_2_with_one_line_naming_the_file(cli_run, tmp_path, case):
    corrupt, expected = CORRUPTIONS[case]
    state = torch.load(cli_run, weights_only=True)
    corrupt(state)
    bad = tmp_path / "state.pt"
    torch.save(state, bad)
    proc = _train(f"output_dir={tmp_path / 'resumed'}", "trainer.iterations=10",
                  f"trainer.resume={bad}")  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith(f"{bad}: ") and expected in lines[-1], lines
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "resumed" / "metrics.jsonl").exists()  # nothing was started
