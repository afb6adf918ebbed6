"""Token broadcast: a step's advantage lands on exactly that step's response tokens."""

from __future__ import annotations

import numpy as np
import pytest
from agentrl.credit import response_token_step, step_to_tokens
from hypothesis import given, settings
from hypothesis import strategies as st


def test_dialogue_layout_several_responses_in_one_sequence():
    # prompt(2) | response of step 0 (2) | observation (2) | response of step 1 (3) | pad (1)
    token_step = np.array([[-1, -1, 0, 0, -1, -1, 1, 1, 1, -1]])
    out = step_to_tokens(np.array([0.5, -2.0]), token_step)
    assert out.dtype == np.float32
    assert out.tolist() == [[0, 0, 0.5, 0.5, 0, 0, -2, -2, -2, 0]]


def test_one_sequence_per_step_layout():
    # sequence 0 is step 3: 2 prompt tokens, response tokens at 2..3; sequence 1 is step 1: 3 prompt tokens, response 3..5
    ts = response_token_step(np.array([3, 1]), np.array([2, 3]), np.array([4, 6]), width=7)
    assert ts.tolist() == [[-1, -1, 3, 3, -1, -1, -1], [-1, -1, -1, 1, 1, 1, -1]]
    out = step_to_tokens(np.array([9.0, 7.0, 8.0, -1.0]), ts)
    assert out.tolist() == [[0, 0, -1, -1, 0, 0, 0], [0, 0, 0, 7, 7, 7, 0]]


def test_bad_token_step():
    with pytest.raises(IndexError, match="outside 0..1"):
        step_to_tokens(np.array([1.0, 2.0]), np.array([[0, 2]]))
    with pytest.raises(IndexError):
        step_to_tokens(np.array([1.0, 2.0]), np.array([[-2, 0]]))
    with pytest.raises(TypeError, match="integers"):
        step_to_tokens(np.array([1.0]), np.array([[0.0]]))


@settings(max_examples=60, deadline=None)
@given(
    adv=st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=64), min_size=1, max_size=8),
    data=st.data(),
)
def test_every_response_token_gets_its_steps_value_and_nothing_else(adv, data):
    adv = np.array(adv)
    shape = data.draw(st.tuples(st.integers(1, 4), st.integers(1, 12)))
    flat = data.draw(
        st.lists(
            st.integers(-1, len(adv) - 1),
            min_size=shape[0] * shape[1],
            max_size=shape[0] * shape[1],
        )
    )
    ts = np.array(flat).reshape(shape)
    out = step_to_tokens(adv, ts)
    for pos, k in np.ndenumerate(ts):
        expected = np.float32(adv[k]) if k >= 0 else np.float32(0.0)
        assert out[pos] == expected  # exact: the float32 of that step's advantage
