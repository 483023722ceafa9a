"""The study summary: winner by median over confirmations, gain over the baseline, noise note."""

from __future__ import annotations

import optuna
from optuna.distributions import IntDistribution

from autotuner.report import summarize


def study_with(values: list[tuple[float, bool, dict]], confirmation: dict | None = None) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    for value, baseline, params in values:
        study.add_trial(optuna.trial.create_trial(
            value=value, params=params, distributions={k: IntDistribution(1, 64) for k in params},
            user_attrs={"baseline": baseline, "levels": [{"output_tok_per_s": value, "ttft_ms_p99": 10.0}]}))
    if confirmation:
        study.set_user_attr("confirmation", confirmation)
    return study


def test_gain_over_the_baseline_and_top_rows():
    s = summarize(study_with([(100.0, True, {}), (150.0, False, {"parallel": 8}), (120.0, False, {"parallel": 2})]),
                  "output_tok_per_s")
    assert s.best.number == 1 and s.baseline_value == 100.0 and s.gain == 0.5
    assert [r.number for r in s.top] == [1, 2, 0]
    assert s.counts == {"COMPLETE": 3}


def test_a_lucky_measurement_loses_to_the_better_median():
    s = summarize(study_with([(100.0, True, {}), (160.0, False, {"parallel": 8}), (150.0, False, {"parallel": 4})],
                             confirmation={"1": [120.0, 118.0], "2": [149.0, 152.0]}), "output_tok_per_s")
    assert s.best.number == 2 and s.best.median == 150.0
    assert s.top[1].number == 1 and sorted(s.top[1].repeats) == [118.0, 120.0, 160.0] and s.top[1].median == 120.0
    assert s.top_two_within_noise  # 118..160 overlaps 149..152


def test_separated_top_two_are_not_called_noise():
    s = summarize(study_with([(200.0, False, {"parallel": 8}), (100.0, False, {"parallel": 4})],
                             confirmation={"0": [198.0], "1": [101.0]}), "output_tok_per_s")
    assert not s.top_two_within_noise and s.gain is None


def test_the_row_shows_the_level_the_trial_was_scored_by_not_the_fastest():
    study = optuna.create_study(direction="maximize")
    study.add_trial(optuna.trial.create_trial(
        value=100.0, params={"parallel": 4}, distributions={"parallel": IntDistribution(1, 64)},
        user_attrs={"levels": [{"output_tok_per_s": 100.0, "ttft_ms_p99": 300.0},     # met the SLO
                               {"output_tok_per_s": 400.0, "ttft_ms_p99": 9000.0}]}))  # broke it
    row = summarize(study, "output_tok_per_s").best
    assert row.metrics["ttft_ms_p99"] == 300.0
