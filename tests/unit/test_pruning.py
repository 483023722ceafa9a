"""Pruning where the value is decided: ceilings per level, and a pruner that stops only hopeless trials."""

from __future__ import annotations

import optuna
import pytest

from autotuner.core.pruning import SCALING_MARGIN, CeilingPruner, ceiling, measured_scaling

PASS = lambda m: m.get("ttft_ms_p99", 0) <= 1000  # noqa: E731 - a tiny SLO for the tests


def lv(c, tok, ttft=100.0):
    return {"max_concurrency": c, "output_tok_per_s": tok, "ttft_ms_p99": ttft}


def tp(levels, last=False):
    return ceiling(levels, metric="output_tok_per_s", direction="maximize", load_key="max_concurrency",
                   max_load=16, passes=PASS, last_level=last)


def test_throughput_ceiling_scales_the_tightest_level_to_the_highest_load():
    assert tp([lv(4, 150)]) == 600  # one slot: 150 at 4, at most 4x that at 16
    assert tp([lv(1, 100), lv(4, 150)]) == 600  # the tightest bound of the two
    assert tp([lv(4, 150), lv(16, 500)], last=True) == 500  # every level measured: the value itself


def test_the_growth_measured_in_the_study_replaces_the_sound_bound_once_three_trials_show_it():
    finished = [[lv(4, 100), lv(16, 120)], [lv(4, 200), lv(16, 300)], [lv(4, 100)]]  # the last: pruned at 4
    assert measured_scaling(finished, metric="output_tok_per_s", load_key="max_concurrency", max_load=16) == {}
    finished.append([lv(4, 50), lv(16, 60, ttft=5000)])  # over the SLO at 16: its growth still counts
    scaling = measured_scaling(finished, metric="output_tok_per_s", load_key="max_concurrency", max_load=16)
    assert scaling == {4.0: pytest.approx(1.5 * (1 + SCALING_MARGIN))}
    bound = ceiling([lv(4, 150)], metric="output_tok_per_s", direction="maximize", load_key="max_concurrency",
                    max_load=16, passes=PASS, last_level=False, scaling=scaling)
    assert bound == pytest.approx(150 * 1.5 * (1 + SCALING_MARGIN))  # not 4x: this study's servers grow 1.5x
    steep = {4.0: 9.0}  # never past the sound bound
    assert ceiling([lv(4, 150)], metric="output_tok_per_s", direction="maximize", load_key="max_concurrency",
                   max_load=16, passes=PASS, last_level=False, scaling=steep) == 600


def test_a_level_that_missed_the_slo_still_bounds_but_never_scores():
    assert tp([lv(4, 400, ttft=5000)]) == 1600
    assert tp([lv(4, 400, ttft=5000)], last=True) is None


def test_latency_floor_is_the_best_passing_value():
    levels = [lv(4, 100, ttft=300), lv(16, 200, ttft=900)]
    assert ceiling(levels, metric="ttft_ms_p99", direction="minimize", load_key="max_concurrency", max_load=16,
                   passes=PASS, last_level=False) == 300


def study_with_best(value: float, pruner=None) -> optuna.Study:
    study = optuna.create_study(direction="maximize", pruner=pruner or CeilingPruner(margin=0.05))
    study.add_trial(optuna.trial.create_trial(value=value))
    return study


@pytest.mark.parametrize(("bound", "pruned"), [(600.0, True), (790.0, False), (1200.0, False)])
def test_the_pruner_stops_only_what_cannot_beat_the_best(bound, pruned):
    study = study_with_best(811.0)
    trial = study.ask()
    trial.report(bound, 0)
    assert trial.should_prune() is pruned


def test_the_same_trial_under_the_old_report_was_pruned_at_low_load():
    """A config that scales (150 at concurrency 4, 800 at 16): its level-1 value sits below the median of
    earlier trials' level-1 values, its ceiling does not."""
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.MedianPruner(n_startup_trials=1))
    for first, final in ((300.0, 500.0), (320.0, 520.0)):
        t = study.ask()
        t.report(first, 0)
        study.tell(t, final)
    old, new = study.ask(), study.ask()
    old.report(150.0, 0)
    assert old.should_prune()
    new.report(tp([lv(4, 150)]), 0)
    assert not new.should_prune()
