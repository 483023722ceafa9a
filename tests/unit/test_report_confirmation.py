"""The study summary after a confirmation round: the winner by median among configs measured alike,
the gain as a ratio of medians with its range, flaky configs out, one answer everywhere."""

from __future__ import annotations

import json

import optuna
import pytest
from optuna.distributions import IntDistribution

from autotuner import report
from autotuner.core.study import best_trial, best_tuned, verdict
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


NIGHT = [(100.0, True, {}), (160.0, False, {"parallel": 8}), (150.0, False, {"parallel": 4})]


def test_provisional_gain_over_the_baseline_and_top_rows():
    s = summarize(study_with([(100.0, True, {}), (150.0, False, {"parallel": 8}), (120.0, False, {"parallel": 2})]),
                  "output_tok_per_s")
    assert s.best.number == 1 and s.baseline_value == 100.0 and s.gain == 0.5 and not s.confirmed
    assert [r.number for r in s.top] == [1, 2, 0]
    assert s.counts == {"COMPLETE": 3}
    assert "provisional" in report.verdict_line(s)


def test_a_lucky_first_measurement_loses_to_the_better_median():
    s = summarize(study_with(NIGHT, confirmation={"0": [101.0, 99.0, 100.0], "1": [120.0, 118.0, 119.0],
                                                  "2": [149.0, 152.0, 150.0]}), "output_tok_per_s")
    assert s.confirmed and s.best.number == 2 and s.best.median == 150.0
    # The first (selected, so biased) measurement is not among the compared ones.
    assert s.top[1].number == 1 and sorted(s.top[1].repeats) == [118.0, 119.0, 120.0]
    assert s.baseline_value == 100.0 and s.gain == pytest.approx(0.5)
    assert s.gain_range == pytest.approx((149 / 101 - 1, 152 / 99 - 1))
    text = report.verdict_line(s)
    assert "median of 3 confirmation launches, 149.0–152.0" in text and "+50.0% over the engine defaults" in text


def test_a_config_whose_confirmation_launch_failed_is_flaky_and_cannot_win():
    s = summarize(study_with(NIGHT, confirmation={"0": [100.0, 100.0], "1": [200.0, None], "2": [150.0, 151.0]}),
                  "output_tok_per_s")
    assert s.best.number == 2 and s.flaky == [1]
    assert "flaky" in report.verdict_line(s) and "#1" in report.verdict_line(s)


def test_the_defaults_can_win_and_the_verdict_says_so():
    s = summarize(study_with(NIGHT, confirmation={"0": [170.0, 171.0], "1": [150.0, 152.0], "2": [140.0, 141.0]}),
                  "output_tok_per_s")
    assert s.best.baseline and s.gain == pytest.approx(0.0)
    assert "engine defaults are the best configuration measured" in report.verdict_line(s)


def test_every_reader_names_the_same_winner():
    study = study_with(NIGHT, confirmation={"0": [100.0, 100.0], "1": [120.0, 118.0], "2": [149.0, 152.0]})
    v = verdict(study)
    assert v.winner.number == best_trial(study).number == summarize(study, "output_tok_per_s").best.number == 2


def test_the_best_tuned_config_is_the_winner_or_the_best_the_defaults_kept_out():
    won = study_with(NIGHT, confirmation={"0": [100.0, 100.0], "1": [120.0, 118.0], "2": [149.0, 152.0]})
    assert best_tuned(won).number == best_trial(won).number == 2
    # the defaults measured best, once each (no round): the best tuned config is still there to transfer
    kept = study_with([(890.0, True, {}), (848.0, False, {"parallel": 2}), (700.0, False, {"parallel": 1})])
    assert best_trial(kept).number == 0 and best_tuned(kept).number == 1
    # a round where the best median failed a launch: it is flaky, the next tuned config stands in
    flaky = study_with(NIGHT, confirmation={"0": [170.0, 171.0], "1": [200.0, None], "2": [140.0, 141.0]})
    assert best_trial(flaky).number == 0 and best_tuned(flaky).number == 2
    assert best_tuned(study_with([(100.0, True, {})])) is None


def test_the_row_shows_the_level_the_trial_was_scored_by_not_the_fastest():
    study = optuna.create_study(direction="maximize")
    study.add_trial(optuna.trial.create_trial(
        value=100.0, params={"parallel": 4}, distributions={"parallel": IntDistribution(1, 64)},
        user_attrs={"levels": [{"output_tok_per_s": 100.0, "ttft_ms_p99": 300.0},     # met the SLO
                               {"output_tok_per_s": 400.0, "ttft_ms_p99": 9000.0}], "scored_level": 0}))  # broke it
    row = summarize(study, "output_tok_per_s").best
    assert row.metrics["ttft_ms_p99"] == 300.0


def test_a_gain_within_the_noise_keeps_the_defaults_in_every_output(tmp_path):
    # #2's median is 5% above the defaults', but in round 2 the defaults read higher beside it.
    study = study_with(NIGHT, confirmation={"0": [100.0, 106.0, 98.0], "1": [90.0, 91.0, 92.0],
                                            "2": [105.0, 104.0, 103.0]})
    s = summarize(study, "output_tok_per_s")
    assert s.best.baseline and s.contender.number == 2 and s.contender_gain == pytest.approx(0.04)
    text = report.verdict_line(s)
    assert text.startswith("Keep the engine defaults (trial #0, 100.0 output_tok_per_s")
    assert "trial #2, measured 104.0, +4.0% (range -2.8% to +7.1%), but did not beat them in every" in text
    best = json.loads(report.write_best(s, "llama-server", tmp_path).read_text())
    assert best["best"]["number"] == 0 and best["best"]["value"] == 100.0 == s.baseline_value
    assert report.to_json(s)["best"]["value"] == 100.0 and verdict(study).value == 100.0


def test_best_json_states_the_winners_confirmed_median_not_its_first_value(tmp_path):
    s = summarize(study_with(NIGHT, confirmation={"0": [101.0, 99.0, 100.0], "1": [120.0, 118.0, 119.0],
                                                  "2": [149.0, 152.0, 150.0]}), "output_tok_per_s")
    best = json.loads(report.write_best(s, "llama-server", tmp_path).read_text())
    assert (best["best"]["value"], best["best"]["first_value"]) == (150.0, 150.0)
    s = summarize(study_with(NIGHT, confirmation={"0": [101.0, 99.0, 100.0], "1": [170.0, 171.0, 172.0],
                                                  "2": [149.0, 152.0, 150.0]}), "output_tok_per_s")
    best = json.loads(report.write_best(s, "llama-server", tmp_path).read_text())
    assert (best["best"]["value"], best["best"]["first_value"]) == (171.0, 160.0)
    assert "beat them in every interleaved round (by +68.3% at least)" in best["verdict"]
