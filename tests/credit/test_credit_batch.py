"""The step batch: validation that names the problem, derived arrays, helpers."""

from __future__ import annotations

import numpy as np
import pytest
from agentrl.credit import StepBatch, StepBatchError, factorize


def cols(**over):
    """Two trajectories of one group: traj 0 has 3 steps, traj 1 has 2."""
    base = dict(
        group=[0, 0, 0, 0, 0],
        traj=[0, 0, 0, 1, 1],
        t=[0, 1, 2, 0, 1],
        reward=[0.0, 0.0, 1.0, 0.0, 0.5],
        done=[False, False, True, False, True],
        state_key=["a", "b", "c", "a", "d"],
        action_key=["up", "up", "left", "down", "up"],
        valid=[True, True, True, False, True],
    )
    base.update(over)
    return base


def test_valid_batch_and_derived_arrays():
    b = StepBatch(**cols())
    assert len(b) == 5 and b.num_trajectories == 2 and b.num_groups == 1
    assert b.traj_length.tolist() == [3, 2]
    assert b.episode_return.tolist() == [1.0, 0.5]
    # G with gamma 0.5: traj 0: t2 = 1, t1 = 0 + 0.5 * 1 = 0.5, t0 = 0.25; traj 1: t1 = 0.5, t0 = 0.25
    assert b.discounted_returns(0.5).tolist() == [0.25, 0.5, 1.0, 0.25, 0.5]
    assert b.next_row.tolist() == [1, 2, -1, 4, -1]
    assert b.prev_row.tolist() == [-1, 0, 1, -1, 3]
    # anchor groups: "a" appears in both trajectories (rows 0 and 3)
    a = b.anchor_index
    assert a[0] == a[3] and len(set(a.tolist())) == 4
    assert b.forward_cumsum(np.array([1.0, 2, 3, 4, 5])).tolist() == [1, 3, 6, 4, 9]


def test_history_levels():
    # traj 0 states a b c, traj 1 a b d, traj 2 x b c: level 2 keys (prev, cur)
    b = StepBatch.from_trajectories(
        [
            dict(group=0, rewards=[0, 0, 0], states=["a", "b", "c"]),
            dict(group=0, rewards=[0, 0, 0], states=["a", "b", "d"]),
            dict(group=0, rewards=[0, 0, 0], states=["x", "b", "c"]),
        ]
    )
    (k1, _), (k2, _), (k3, _) = b.history_levels(3)
    assert np.array_equal(k1, b.anchor_index)
    # level 2: (a,b) twice (rows 1, 4); (b,c) twice (rows 2, 8); (x,b) once; t=0 rows have none
    assert k2[[0, 3, 6]].tolist() == [-1, -1, -1]
    assert k2[1] == k2[4] and k2[2] == k2[8] and k2[7] not in (k2[1], k2[2])
    # level 3: (a,b,c) vs (x,b,c) differ
    assert k3[2] != k3[8] and k3[1] == -1


@pytest.mark.parametrize(
    "over, words",
    [
        (dict(traj=[0, 0, 0, 1]), ["'traj'", "4 rows", "expected 5"]),
        (dict(reward=[0.0, 1.0]), ["'reward'", "shape"]),
        (dict(group=["a", "a", "a", "b", "b"]), ["'group'", "integers", "factorize"]),
        (dict(t=[0.0, 1.5, 2.0, 0.0, 1.0]), ["'t'", "integers"]),
        (dict(reward=["x", 0, 0, 0, 0]), ["'reward'", "numbers"]),
        (dict(done=[0, 0, 2, 0, 1]), ["'done'", "booleans"]),
        (dict(valid=[True, True]), ["'valid'", "shape"]),
        (dict(reward=[[0.0]] * 5), ["'reward'", "shape"]),
        (dict(t=[0, 2, 3, 0, 1]), ["not contiguous from t=0", "rows [0, 1, 2]"]),
        (dict(t=[1, 2, 3, 0, 1]), ["not contiguous from t=0", "rows [0, 1, 2]"]),
        (dict(t=[0, 1, 1, 0, 1]), ["duplicate (traj, t)", "rows [1, 2]"]),
        (dict(t=[0, 1, 2, -1, 0]), ["'t' must be >= 0", "rows [3]"]),
        (dict(group=[0, 0, 1, 1, 1]), ["trajectories [0] span several groups", "rows [0, 1, 2]"]),
        (
            dict(done=[True, False, True, False, True]),
            ["'done' is set before the last step", "rows [0]"],
        ),
        (
            dict(reward=[0.0, np.nan, 1.0, 0.0, np.nan]),
            ["'reward'", "NaN or infinite", "rows [1, 4]"],
        ),
        (dict(reward=[0.0, 0.0, np.inf, 0.0, 0.0]), ["'reward'", "rows [2]"]),
        (dict(success=[True, True, False, False, False]), ["'success' differs"]),
        (dict(milestone=[0, 1, -1, 0, 0]), ["'milestone' must be >= 0", "rows [2]"]),
        (dict(value=[0.0, 0.0, 0.0, np.nan, 0.0]), ["'value'", "rows [3]"]),
        (dict(embedding=np.zeros((5,))), ["'embedding'", "shape (5, d)"]),
        (dict(embedding=np.ones((4, 3))), ["'embedding'", "shape (5, d)"]),
        (dict(extras={"observation": ["x"] * 4}), ["'observation'", "(5,)", "(4,)"]),
    ],
)
def test_validation_errors_name_the_problem(over, words):
    with pytest.raises(StepBatchError) as err:
        StepBatch(**cols(**over))
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_embedding_nan_names_rows_and_float32_is_kept():
    emb = np.ones((5, 3), dtype=np.float32)
    assert StepBatch(**cols(embedding=emb)).embedding.dtype == np.float32
    emb[3, 1] = np.nan
    with pytest.raises(StepBatchError, match=r"'embedding'.*rows \[3\]"):
        StepBatch(**cols(embedding=emb))


def test_empty_batch_is_an_error():
    with pytest.raises(StepBatchError, match="empty"):
        StepBatch(
            group=[], traj=[], t=[], reward=[], done=[], state_key=[], action_key=[], valid=[]
        )


def test_keys_any_hashable_or_unhashable_by_content():
    keys = [[1, 2], (1, 2), np.array([1, 2]), {"p": 1}, [1, 2]]
    codes, k = factorize(np.fromiter(keys, dtype=object, count=5))
    # lists and tuples with equal content are the same key; the ndarray carries its shape too
    assert codes[0] == codes[1] == codes[4] and k == 3
    b = StepBatch(**cols(state_key=np.fromiter(keys, dtype=object, count=5)))
    assert b.state_index[0] == b.state_index[4]


def test_ids_need_not_be_sorted_or_dense():
    b = StepBatch(**cols(group=[7, 7, 7, 7, 7], traj=[40, 40, 40, 3, 3]))
    assert b.num_trajectories == 2 and sorted(b.traj_length.tolist()) == [2, 3]
    assert b.episode_return[b.traj_index[0]] == 1.0  # traj 40: rewards 0, 0, 1


def test_take_and_from_trajectories():
    b = StepBatch.from_trajectories(
        [
            dict(group=0, rewards=[1, 2], states=["a", "b"], success=True),
            dict(group=1, rewards=[3], states=["c"]),
        ]
    )
    assert b.t.tolist() == [0, 1, 0] and b.done.tolist() == [False, True, True]
    assert b.success.tolist() == [True, True, False]
    p = b.take(np.array([2, 0, 1]))
    assert p.reward.tolist() == [3, 1, 2] and p.success.tolist() == [False, True, True]


def test_require_names_field_and_how():
    b = StepBatch(**cols())
    with pytest.raises(StepBatchError, match="'embedding'.*turn it on"):
        b.require("embedding", "turn it on")
    with pytest.raises(StepBatchError, match="'observation'"):
        b.require("observation", "pass extras")


def test_columns_are_declared_once_and_documented():
    """COLUMNS is read from the dataclass; docs/architecture.md's table lists exactly them."""
    from dataclasses import fields
    from pathlib import Path

    from agentrl.credit.batch import COLUMNS

    assert [c.name for c in COLUMNS] == [f.name for f in fields(StepBatch) if f.name != "extras"]
    required = [c.required for c in COLUMNS]
    assert required == sorted(required, reverse=True)  # required columns come first
    doc = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
    table = doc.split("## The step batch", 1)[1].split("\n\n")[2]
    documented = {
        cells[1].strip("` "): cells[2].strip() == "yes"
        for line in table.splitlines()[2:]
        if (cells := line.split("|")) and cells[1].strip("` ") != "extras"
    }
    assert documented == {c.name: c.required for c in COLUMNS}


def test_concat_keeps_rows_in_order_and_refuses_mismatched_parts():
    b = StepBatch(**cols(milestone=[0, 1, 0, 0, 2]), extras={"note": list("vwxyz")})
    first, second = b.take(np.arange(3)), b.take(np.arange(3, 5))
    joined = StepBatch.concat([first, second])
    for name in ("group", "traj", "t", "reward", "done", "state_key", "valid", "milestone"):
        assert getattr(joined, name).tolist() == getattr(b, name).tolist(), name
    assert joined.value is None and joined.extras["note"].tolist() == list("vwxyz")
    assert StepBatch.concat([b]) is b
    no_milestone = StepBatch(**cols(), extras={"note": list("vwxyz")}).take(np.arange(3, 5))
    with pytest.raises(StepBatchError, match="'milestone' is present in some parts"):
        StepBatch.concat([first, no_milestone])
    with pytest.raises(StepBatchError, match="extra columns differ"):
        StepBatch.concat([first, StepBatch(**cols(milestone=[0] * 5)).take(np.arange(3, 5))])
    with pytest.raises(ValueError, match="no step batches"):
        StepBatch.concat([])
