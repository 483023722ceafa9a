"""Stopping rules and the sweep's saturation and SLO logic, on synthetic results."""

from __future__ import annotations

import pytest

from autotuner.config import ObjectiveConfig
from autotuner.core.objective import SloViolated, saturated, slo_violations, trial_value
from autotuner.core.stopping import converged, decide, relative_noise, same_start_failure, target_met


def test_target_in_both_directions():
    assert target_met(1000.0, 1000.0, "maximize") and not target_met(999.0, 1000.0, "maximize")
    assert target_met(40.0, 50.0, "minimize") and not target_met(None, 50.0, "maximize")


def test_converged_only_when_the_tail_stays_within_noise_of_the_best():
    values = [100.0, 150.0, None, 152.0, 149.0, 155.0]
    assert converged(values, "maximize", patience=3, noise=0.05)  # +3.3% is noise
    assert not converged(values, "maximize", patience=3, noise=0.01)  # +3.3% beats 1% noise
    assert not converged(values[:3], "maximize", patience=3, noise=0.05)  # too few trials yet
    assert not converged([None, None, None, None], "maximize", patience=2, noise=0.05)
    assert converged([10.0, 5.0, 9.9, 9.8], "minimize", patience=2, noise=0.05)


def test_decide_says_why():
    assert decide([100.0, 1200.0], "maximize", target=1000.0, patience=None, noise=0.05).reason == "target"
    d = decide([100.0, 101.0, 99.0, 100.5], "maximize", target=None, patience=3, noise=0.05)
    assert d.reason == "converged" and "5.0%" in d.message
    assert decide([100.0, 200.0, 300.0], "maximize", target=None, patience=2, noise=0.05) is None


def test_noise_is_measured_from_repeats():
    assert relative_noise({"a": [100.0, 110.0, 105.0], "b": [50.0]}) == pytest.approx(10 / 105)
    assert relative_noise({"a": [100.0]}) is None


def test_saturation_ends_the_sweep_when_more_load_buys_nothing():
    assert not saturated([100.0], 0.05)
    assert not saturated([100.0, 180.0], 0.05)
    assert saturated([100.0, 180.0, 185.0], 0.05)
    assert saturated([100.0, 90.0], 0.05)


def test_slo_picks_the_best_level_that_meets_it():
    levels = [{"output_tok_per_s": 100.0, "ttft_ms_p99": 300.0}, {"output_tok_per_s": 400.0, "ttft_ms_p99": 2500.0}]
    objective = ObjectiveConfig(slo={"ttft_ms_p99": 2000})
    assert slo_violations(levels[1], objective.slo) == ["ttft_ms_p99 2500.0 > 2000"]
    assert trial_value(levels, objective) == 100.0
    assert trial_value(levels, ObjectiveConfig()) == 400.0
    with pytest.raises(SloViolated, match="ttft_ms_p99 300.0 > 100"):
        trial_value(levels, ObjectiveConfig(slo={"ttft_ms_p99": 100}))
    assert slo_violations({"ttft_ms_p99": float("nan")}, {"ttft_ms_p99": 10}) == ["ttft_ms_p99 nan > 10"]


def test_slo_names_only_latency_metrics():
    with pytest.raises(ValueError, match="'output_tok_per_s' is not a latency metric"):
        ObjectiveConfig(slo={"output_tok_per_s": 5})


def test_the_same_start_failure_again_and_again_stops_the_study():
    cuda = ("exited-at-start", "exited with code 1 at start: RuntimeError: CUDA error: devices unavailable (pid 4711)")
    again = ("exited-at-start", "exited with code 1 at start: RuntimeError: CUDA error: devices unavailable (pid 815)")
    stop = same_start_failure([(None, None), cuda, again, cuda], 3)
    assert stop is not None and stop.reason == "start-failures" and "CUDA error: devices unavailable" in stop.message
    assert same_start_failure([cuda, again], 3) is None  # not yet three
    assert same_start_failure([cuda, ("oom", "CUDA out of memory"), cuda], 3) is None  # not alike
    assert same_start_failure([("quality", "x")] * 3, 3) is None  # a measurement's failure: the configs'
    assert same_start_failure([cuda] * 5, 0) is None  # off
    oom = ("oom", "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`")
    assert same_start_failure([oom] * 4, 3) is None  # the configs' own doing, however alike it reads
