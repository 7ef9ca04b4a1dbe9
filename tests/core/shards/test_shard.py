"""Where the scheduler reads its stops (`Stops`): one unit for the serial run's order, so it
stops at the serial run's trial at any concurrency."""

from __future__ import annotations

from service.core.evidence.spend import Meter
from service.core.faults.plan import StopConditions
from service.core.shards.shard import StopLimits, Stops


def _spent(trials: int, runs_each: int) -> Meter:
    meter = Meter()
    for _ in range(trials):
        meter.add("f", "intervention", runs_each, (0, 0.0))
        meter.trials += 1
    return meter


def test_a_budget_admits_a_trial_only_while_what_is_left_pays_for_those_ahead_of_it() -> None:
    # Four runs spent over two trials, two runs each: a budget of eight pays for two more.
    stops = Stops(StopConditions(max_runs=8), None, _spent(2, 2), None, 50)
    assert stops.admits(0) is True
    assert stops.admits(1) is True
    assert stops.admits(2) is False  # waits: those ahead may count and leave less, or stop


def test_a_budget_refusal_with_no_trial_ahead_is_the_serial_loops_stop() -> None:
    stops = Stops(StopConditions(max_runs=5), None, _spent(2, 2), None, 50)
    word = stops.admits(0)
    assert isinstance(word, str) and word.startswith("budget: agent runs 4 spent")


def test_before_any_trial_is_counted_a_second_one_waits_for_the_first() -> None:
    stops = Stops(StopConditions(max_runs=8), None, Meter(), None, 50)
    assert stops.admits(0) is True
    assert stops.admits(1) is False


def test_without_a_budget_every_trial_is_admitted_and_none_is_refused() -> None:
    stops = Stops(StopConditions(), None, _spent(2, 2), None, 50)
    assert stops.admits(100) is True
    assert stops.before(7) is None


def test_an_abort_is_asked_once_every_batch_of_counted_trials() -> None:
    asked: list[int] = []

    def should_stop() -> bool:
        asked.append(1)
        return True

    stops = Stops(StopConditions(), None, None, should_stop, 3)
    assert [stops.before(done) for done in range(7)] == [
        None,
        None,
        None,
        "aborted",
        None,
        None,
        "aborted",
    ]
    assert len(asked) == 2
    assert stops.opening() == "aborted"


def test_after_a_trial_a_stop_condition_is_read_before_a_budget() -> None:
    limits = StopLimits(max_effects=0)
    stops = Stops(StopConditions(max_runs=3), limits, _spent(2, 2), None, 50)
    assert stops.after(1, 0, 0) == "effects above the cap (1 > 0)"
    assert stops.after(0, 0, 0) == "budget: agent runs 4 over the budget of 3"


def test_a_budget_stop_is_restated_as_spent_once_the_slots_have_stopped() -> None:
    meter = _spent(1, 2)
    stops = Stops(StopConditions(max_runs=3), None, meter, None, 50)
    early = stops.admits(0)
    assert isinstance(early, str)
    meter.add("f", "intervention", 2, (0, 0.0))
    assert stops.settled(early) == "budget: agent runs 4 over the budget of 3"
    assert stops.settled("aborted") == "aborted"
    assert stops.settled(None) is None
