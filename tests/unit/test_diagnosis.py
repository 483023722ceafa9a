"""Which limit binds, where throughput plateaus, convergence and range edges (pure)."""

from __future__ import annotations

import pytest

from autotuner.bench.limits import binding_limit
from autotuner.report.diagnosis import convergence, load_plateau, param_trends


def level(**kw):
    return {"server_samples": 10, "server_requests_running_max": 8, **kw}


@pytest.mark.parametrize("metrics, kind, words", [
    (level(server_kv_cache_usage_max=0.97, server_requests_waiting_mean=3), "kv-cache", "97%"),
    (level(server_kv_cache_usage_max=0.4, server_preemptions=5), "kv-cache", "5 preemption"),
    (level(server_requests_waiting_mean=2.5, server_requests_running_mean=4), "queueing", "2.5 requests waited"),
    (level(server_requests_waiting_mean=0.1, server_requests_running_mean=7.5, server_kv_cache_usage_max=0.3),
     "compute", "processor"),
    ({"server_samples": 2}, "unknown", "too short"),
    ({}, "unknown", "too short"),
    (level(server_requests_running_max=0), "unknown", "no sample saw"),
])
def test_binding_limit(metrics, kind, words):
    limit = binding_limit(metrics)
    assert limit.kind == kind and words in limit.why


def test_load_plateau_finds_the_knee_and_says_when_still_rising():
    levels = [{"max_concurrency": c, "output_tok_per_s": v} for c, v in ((16, 800), (4, 400), (8, 700), (32, 810))]
    p = load_plateau(levels, "output_tok_per_s")
    assert p.level["max_concurrency"] == 16 and "plateaus at concurrency 16" in p.text
    rising = load_plateau([{"request_rate": 1, "output_tok_per_s": 100}, {"request_rate": 2, "output_tok_per_s": 190}],
                          "output_tok_per_s")
    assert rising.level is None and "still rises" in rising.text and "2 req/s" in rising.text
    assert load_plateau(levels[:1], "output_tok_per_s") is None


def test_convergence_counts_trials_since_the_last_real_gain():
    c = convergence([(0, 100), (1, 150), (2, 151), (3, 140), (4, 150.5)], maximize=True)
    assert c.last_gain_trial == 1 and c.trials_since == 3  # +0.7% at #2 is not a gain
    assert convergence([(0, 10), (1, 5)], maximize=False).trials_since == 0
    assert convergence([], maximize=True) is None


def test_param_trends_flag_a_best_at_the_range_edge():
    trials = [({"parallel": p, "threads": 2}, v) for p, v in ((1, 100), (4, 300), (8, 500), (16, 700))]
    [trend] = param_trends(trials, maximize=True, bounds={"parallel": (1, 16)})
    assert trend.at_edge == "high" and "top of parallel's range" in trend.text
    flat = [({"parallel": p}, v) for p, v in ((1, 100), (4, 690), (8, 700), (16, 702))]
    [trend] = param_trends(flat, maximize=True, bounds={"parallel": (1, 32)})
    assert trend.at_edge is None and "flattens from parallel=4" in trend.text
