"""``lograte.LineBudget``: a flood of per-connection log lines is bounded and summarised."""

from __future__ import annotations

from oxiedge.lograte import LineBudget, clip, suppressed_note


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_goes_through_then_the_rate_and_the_held_back_are_counted() -> None:
    clock = Clock()
    budget = LineBudget(per_second=2, burst=5, clock=clock)
    assert [budget.take() for _ in range(5)] == [0] * 5
    assert [budget.take() for _ in range(7)] == [None] * 7  # same instant: held back
    assert budget.suppressed == budget.suppressed_total == 7
    clock.now += 0.5  # one line's worth at 2 per second
    assert budget.take() == 7  # ... and it says how many were held back
    assert budget.take() is None
    assert budget.suppressed == 1 and budget.suppressed_total == 8
    clock.now += 3600  # refills to the burst, no further
    assert [budget.take() for _ in range(6)] == [1, 0, 0, 0, 0, None]


def test_the_note_is_empty_when_nothing_was_held_back() -> None:
    assert suppressed_note(0) == ""
    assert suppressed_note(12) == " (12 similar lines suppressed)"


def test_clip_bounds_what_a_client_chose() -> None:
    assert clip("sensor-1") == "'sensor-1'" and clip(None) == "None"
    long = clip("x" * 1000)
    assert long == "'" + "x" * 99 + "...(1002 chars)"
    assert clip("y" * 500, 300, quote=False) == "y" * 300 + "...(500 chars)"
