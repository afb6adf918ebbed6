"""The run summary says what its intervals support, and nothing more."""

from agentrl.training.summary import Rate, RunSummary, to_markdown


def _summary(initial, final):
    return RunSummary("Sokoban-v0", "gigpo", "tiny", 10, 200, Rate(*final), "x", Rate(*initial))


def test_disjoint_intervals_are_a_significant_difference():
    s = _summary((0.03, 0.014, 0.064), (0.175, 0.129, 0.234))
    assert s.intervals_disjoint is True
    assert s.verdict() == "+14.5 points; 95 % intervals disjoint: the final policy is better"
    assert "not significant" not in to_markdown(s)


def test_overlapping_intervals_are_not_a_significant_difference():
    s = _summary((0.30, 0.24, 0.37), (0.35, 0.29, 0.42))
    assert s.intervals_disjoint is False
    assert s.verdict() == "+5.0 points; 95 % intervals overlap: not a significant difference"


def test_a_drop_is_reported_as_worse():
    s = _summary((0.60, 0.53, 0.66), (0.20, 0.15, 0.26))
    assert s.verdict().startswith(
        "-40.0 points; 95 % intervals disjoint: the final policy is worse"
    )


def test_flat_carries_the_numbers():
    flat = _summary((0.03, 0.014, 0.064), (0.175, 0.129, 0.234)).flat()
    assert flat["improvement_points"] == 14.5 or abs(flat["improvement_points"] - 14.5) < 1e-9
    assert flat["intervals_disjoint"] is True and flat["final_ci_high"] == 0.234
    assert "learned" not in flat  # no hidden threshold
