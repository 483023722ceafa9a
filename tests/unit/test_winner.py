"""The one winner rule (pure): provisional on single values, confirmed on the round's medians."""

from __future__ import annotations

import pytest

from autotuner.core.winner import Candidate, confirmation_order, decide


def test_provisional_picks_the_best_single_value_and_compares_with_the_baseline_once():
    v = decide([Candidate(0, 100.0, baseline=True), Candidate(1, 130.0), Candidate(2, 120.0)], "maximize")
    assert not v.confirmed and v.winner.number == 1 and v.gain == pytest.approx(0.3) and v.gain_range is None
    assert [c.number for c in v.ranking] == [1, 2, 0]


def test_confirmed_uses_only_the_round_and_only_candidates_measured_alike():
    v = decide([Candidate(0, 100.0, True, (90.0, 91.0, 92.0)),
                Candidate(1, 999.0, False, (100.0, 101.0, 102.0)),  # lucky first value: not compared
                Candidate(2, 120.0, False, (110.0, 111.0, 112.0)),
                Candidate(3, 140.0, False, (200.0,)),  # fewer measurements: not comparable
                Candidate(4, 130.0)], "maximize")  # never confirmed
    assert v.confirmed and v.winner.number == 2 and v.value == 111.0 and v.baseline_value == 91.0
    assert v.gain == pytest.approx(111 / 91 - 1)
    assert v.gain_range == pytest.approx((110 / 92 - 1, 112 / 90 - 1))
    assert [c.number for c in v.ranking][:3] == [2, 1, 0]


def test_flaky_cannot_win_and_minimize_prefers_lower():
    v = decide([Candidate(0, 50.0, True, (50.0, 52.0)), Candidate(1, 10.0, False, (10.0, None)),
                Candidate(2, 30.0, False, (30.0, 31.0))], "minimize")
    assert v.winner.number == 2 and v.flaky == (1,)
    assert v.gain == pytest.approx(1 - 30.5 / 51)


def test_a_flaky_baseline_leaves_no_gain():
    v = decide([Candidate(0, 50.0, True, (50.0, None)), Candidate(1, 60.0, False, (61.0, 62.0))], "maximize")
    assert v.winner.number == 1 and v.gain is None and v.baseline_value is None


def test_the_round_interleaves_and_resumes_where_it_stopped():
    order, done, seen = [3, 5, 0], {}, []
    while (n := confirmation_order(order, done, 2)) is not None:
        seen.append(n)
        done[n] = done.get(n, 0) + 1
    assert seen == [3, 5, 0, 3, 5, 0]
    assert confirmation_order(order, {3: 2, 5: 1, 0: 1}, 2) == 5
    assert confirmation_order(order, {3: 1}, 2) == 5  # 5 and 0 have none yet: the first of them


def test_a_gain_that_did_not_win_every_round_keeps_the_defaults():
    # Round 2: the tuned config read below the defaults measured beside it. Its median is 8% higher, yet
    # one round says the difference is within the noise: keep the defaults, and say what it measured.
    v = decide([Candidate(0, 100.0, True, (100.0, 104.0, 98.0)),
                Candidate(1, 130.0, False, (112.0, 101.0, 108.0))], "maximize")
    assert v.winner.number == 0 and v.winner_is_baseline and v.value == 100.0 and v.gain == 0.0
    assert v.contender.number == 1 and v.contender_value == 108.0
    assert v.contender_gain == pytest.approx(0.08) and v.gain_low == pytest.approx(101 / 104 - 1)
    assert v.contender_range == pytest.approx((101 / 104 - 1, 112 / 98 - 1))


def test_a_gain_in_every_round_names_the_winner_and_a_close_runner_up_is_tied():
    v = decide([Candidate(0, 100.0, True, (100.0, 101.0, 99.0)),
                Candidate(1, 130.0, False, (120.0, 118.0, 125.0)),
                Candidate(2, 128.0, False, (121.0, 117.0, 119.0))], "maximize")  # beat #1 in round 1
    assert v.winner.number == 1 and v.contender is None
    assert v.gain_low == pytest.approx(118 / 101 - 1) and v.gain == pytest.approx(0.2)
    assert v.tied == (2,)
    clear = decide([Candidate(0, 100.0, True, (100.0, 101.0, 99.0)), Candidate(1, 130.0, False, (120.0, 118.0, 125.0)),
                    Candidate(2, 110.0, False, (105.0, 104.0, 103.0))], "maximize")
    assert clear.tied == ()


def test_minimize_keeps_the_defaults_when_a_lower_latency_did_not_hold_every_round():
    v = decide([Candidate(0, 50.0, True, (50.0, 48.0)), Candidate(1, 40.0, False, (45.0, 49.0))], "minimize")
    assert v.winner_is_baseline and v.contender.number == 1 and v.gain_low == pytest.approx(1 - 49 / 48)
