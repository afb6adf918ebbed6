"""HiPER's per-token routing: each level's advantage on its own span."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.methods.hiper import route_spans


def test_routing_by_span_and_segment_start():
    # two steps, one sequence each: prompt (-1) then [switch, switch, subgoal, gap, action, action]
    ts = np.array([[-1, 0, 0, 0, 0, 0, 0], [-1, 1, 1, 1, 1, 1, 1]])
    sw = np.array([[0, 1, 1, 0, 0, 0, 0]] * 2, bool)
    sub = np.array([[0, 0, 0, 1, 0, 0, 0]] * 2, bool)
    act = np.array([[0, 0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0, 0]], bool)  # step 1: no action span
    comps = {
        "action": np.array([1.0, 2.0]),
        "subgoal": np.array([10.0, 20.0]),
        "switch": np.array([100.0, 200.0]),
        "segment_start": np.array([1.0, 0.0]),  # step 1 keeps: no subgoal advantage
    }
    adv, loss = route_spans(comps, ts, {"action": act, "subgoal": sub, "switch": sw})
    np.testing.assert_array_equal(adv[0], [0, 100, 100, 10, 0, 1, 1])
    # step 1: the action advantage on every response token (no action span), switch on top
    np.testing.assert_array_equal(adv[1], [0, 202, 202, 2, 2, 2, 2])
    np.testing.assert_array_equal(loss[0], [0, 1, 1, 1, 0, 1, 1])
    assert loss[1, 1:].all() and not loss[1, 0]


def test_routing_errors():
    ts = np.zeros((1, 2), dtype=np.int64)
    m = np.ones((1, 2), bool)
    with pytest.raises(ValueError, match="'subgoal'"):
        route_spans({}, ts, {"action": m, "switch": m})
    with pytest.raises(ValueError, match="components lack"):
        route_spans({"action": np.zeros(1)}, ts, {"action": m, "subgoal": m, "switch": m})
