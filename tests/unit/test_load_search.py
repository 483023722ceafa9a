"""The load plans on synthetic SLO curves: what a trial measures next, and the highest load it finds."""

from __future__ import annotations

import random

import pytest

from autotuner.config import LoadConfig, ObjectiveConfig
from autotuner.core.load_search import Bisection, LevelList, highest_passing, make_plan
from autotuner.core.objective import meets


def run(plan, passes_at):
    """Drive a plan as the tuner does, with `passes_at(load)` deciding each probe; returns the loads."""
    measured = []
    while (level := plan.next_level(measured)) is not None:
        load = next(iter(level.values()))
        measured.append({**level, "ok": 1.0 if passes_at(load) else 0.0, "output_tok_per_s": 10.0 * load})
    return measured


def passes(m):
    return m["ok"] == 1.0


def loads(measured, kind="max_concurrency"):
    return [m[kind] for m in measured]


def test_monotone_curve_finds_the_capacity_exactly_within_the_steps():
    plan = Bisection("max_concurrency", 1, 64, steps=8, passes=passes)
    measured = run(plan, lambda c: c <= 11)
    assert loads(measured)[:3] == [1, 64, 8]  # the ends, then the geometric midpoint
    assert highest_passing(measured, "max_concurrency", passes) == 11
    assert len(measured) <= 8 and len(set(loads(measured))) == len(measured)  # never measures a load twice
    assert "highest passing concurrency 11, concurrency 12 fails" in plan.done


def test_the_step_budget_ends_the_search_with_the_best_so_far():
    plan = Bisection("max_concurrency", 1, 1024, steps=4, passes=passes)
    measured = run(plan, lambda c: c <= 300)
    assert len(measured) == 4
    assert highest_passing(measured, "max_concurrency", passes) == 181  # 1, 1024, 32, 181
    assert plan.done.startswith("4 levels measured")


def test_never_passing_stops_after_the_low_end():
    plan = Bisection("max_concurrency", 2, 64, steps=6, passes=passes)
    measured = run(plan, lambda c: False)
    assert loads(measured) == [2]
    assert highest_passing(measured, "max_concurrency", passes) is None
    assert "lowest load" in plan.done


def test_always_passing_stops_after_the_high_end():
    plan = Bisection("request_rate", 0.5, 32.0, steps=6, passes=passes)
    measured = run(plan, lambda r: True)
    assert loads(measured, "request_rate") == [0.5, 32.0]
    assert "even the highest load" in plan.done


def test_rate_stops_within_the_tolerance():
    plan = Bisection("request_rate", 0.5, 32.0, steps=20, passes=passes, tolerance=0.1)
    measured = run(plan, lambda r: r <= 5.0)
    found = highest_passing(measured, "request_rate", passes)
    assert 5.0 / 1.1 <= found <= 5.0
    assert len(measured) < 20


@pytest.mark.parametrize("seed", range(20))
def test_noisy_curve_stays_inside_its_interval_and_answers_a_passing_probe(seed):
    rng = random.Random(seed)
    plan = Bisection("max_concurrency", 1, 128, steps=7, passes=passes)
    # Around the capacity (20) a probe passes or fails by chance.
    measured = run(plan, lambda c: c <= 14 or (c <= 28 and rng.random() < 0.5))
    found = highest_passing(measured, "max_concurrency", passes)
    assert len(measured) <= 7 and len(set(loads(measured))) == len(measured)
    assert all(1 <= c <= 128 and isinstance(c, int) for c in loads(measured))
    assert found is not None and 11 <= found <= 28  # 11, the first midpoint, always passes; 29+ never does
    for i, m in enumerate(measured[2:], start=2):  # each probe lies between a pass and a fail seen before it
        before = measured[:i]
        low = max(b["max_concurrency"] for b in before if passes(b))
        high = min(b["max_concurrency"] for b in before if not passes(b) and b["max_concurrency"] > low)
        assert low < m["max_concurrency"] < high

def test_level_list_stops_at_saturation():
    plan = LevelList([{"max_concurrency": c} for c in (1, 2, 4, 8)], saturation_gain=0.05)
    measured = []
    for tok in (100.0, 180.0, 182.0):
        measured.append({**plan.next_level(measured), "output_tok_per_s": tok})
    assert plan.next_level(measured) is None and "saturated at concurrency 4" in plan.done
    assert LevelList([{"request_rate": 1.0}], None).next_level([{"request_rate": 1.0}]) is None


def test_make_plan_reads_the_experiment_and_passes_by_the_slo_and_error_rate():
    objective = ObjectiveConfig(slo={"ttft_ms_p99": 500}, max_error_rate=0.05)
    plan = make_plan(LoadConfig(search={"max_concurrency": [1, 64], "steps": 5}), lambda m: meets(m, objective))
    assert isinstance(plan, Bisection) and plan.total == 5 and plan.next_level([]) == {"max_concurrency": 1}
    ok = {"max_concurrency": 1, "ttft_ms_p99": 100.0, "error_rate": 0.0}
    assert plan.next_level([ok]) == {"max_concurrency": 64}
    assert not meets({"ttft_ms_p99": 100.0, "error_rate": 0.2}, objective)  # failed requests fail a probe
    assert isinstance(make_plan(LoadConfig(max_concurrency=[4, 16]), lambda m: True), LevelList)
