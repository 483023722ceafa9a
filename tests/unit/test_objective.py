"""A trial's value is its best load level under the objective's direction."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from autotuner.config import ObjectiveConfig
from autotuner.core.objective import trial_value

LEVELS = [{"output_tok_per_s": 100.0, "ttft_ms_p99": 40.0}, {"output_tok_per_s": 250.0, "ttft_ms_p99": 90.0},
          {"output_tok_per_s": 240.0, "ttft_ms_p99": 300.0}]


def test_maximize_takes_the_best_level():
    assert trial_value(LEVELS, ObjectiveConfig()) == 250.0


def test_minimize_takes_the_lowest():
    assert trial_value(LEVELS, ObjectiveConfig(metric="ttft_ms_p99", direction="minimize")) == 40.0


def test_unknown_metric_names_the_measured_ones():
    # Refused when the experiment is read, so no trial ever scores a level by a metric it lacks.
    with pytest.raises(ValidationError, match="'tok_s' is not a metric the load generator measures .*output_tok_per_s"):
        ObjectiveConfig(metric="tok_s")


def test_no_levels_has_no_value():
    with pytest.raises(ValueError):
        trial_value([], ObjectiveConfig())
