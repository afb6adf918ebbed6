"""Checkpoints: only complete ones are found, loading runs no code, broken files name themselves."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from agentrl.training.checkpoint import (
    CheckpointError,
    find_checkpoint,
    load_checkpoint,
    save_checkpoint,
)


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
