"""A request's timeout follows the level's load and the rate the config showed, unless fixed."""

from __future__ import annotations

from autotuner.core.timeouts import FIRST_S, MAX_S, MIN_S, request_timeout


def timeout(**kw):
    base = {"fixed": None, "load_key": "max_concurrency", "load": 1024, "num_prompts": 2048, "output_len": 512,
            "tok_per_s": 500.0, "slo": {}}
    return request_timeout(**{**base, **kw})


def test_a_slow_config_at_high_concurrency_gets_the_time_its_rate_needs():
    # 1024 requests share 500 tok/s: one of 512 tokens takes ~1049 s; the old fixed 900 s failed it.
    assert timeout() == 3 * 1024 * 512 / 500
    assert timeout(load=16, tok_per_s=2000.0) == MIN_S  # never under the floor
    assert timeout(tok_per_s=50.0) == MAX_S  # a rate shown at a low load: no hours-long request
    assert timeout(load=64, num_prompts=16, tok_per_s=10.0) == 3 * 16 * 512 / 10  # no more in flight than sent


def test_the_experiments_timeout_wins_and_an_unmeasured_config_gets_the_first_guess():
    assert timeout(fixed=900.0) == 900.0
    assert timeout(tok_per_s=None) == FIRST_S


def test_a_request_rate_level_bounds_the_queue_by_its_requests_and_its_duration():
    assert timeout(load_key="request_rate", load=4.0, num_prompts=512) == 3 * 512 * 512 / 500
    assert timeout(load_key="request_rate", load=4.0, duration_s=60.0) == 3 * 240 * 512 / 500


def test_an_slo_on_the_whole_request_caps_it():
    assert timeout(slo={"e2e_ms_p99": 200_000}) == 600.0
    assert timeout(slo={"ttft_ms_p99": 1000}) == 3 * 1024 * 512 / 500
