"""Two objectives: each trial's values, the samplers on a multi-objective study with failures, stopping on
the front's hypervolume, and the report of a front (pure, on synthetic studies)."""

from __future__ import annotations

import json

import optuna
import pytest
from optuna.distributions import IntDistribution
from optuna.trial import TrialState, create_trial
from rich.console import Console

from autotuner import report
from autotuner.config import ObjectiveConfig
from autotuner.core.objective import SloViolated, trial_values
from autotuner.core.sampling import FAILURE_CONSTRAINT
from autotuner.core.stopping import decide_front, front_converged
from autotuner.core.study import _base_sampler, best_trial, make_sampler, primary_value
from autotuner.engines._base import get_engine

TWO = ObjectiveConfig(metrics=["output_tok_per_s", "ttft_ms_p99"], directions=["maximize", "minimize"],
                      slo={"ttft_ms_p99": 1000})
LEVELS = [{"max_concurrency": 4, "output_tok_per_s": 100.0, "ttft_ms_p99": 50.0, "error_rate": 0.0},
          {"max_concurrency": 16, "output_tok_per_s": 300.0, "ttft_ms_p99": 400.0, "error_rate": 0.0},
          {"max_concurrency": 64, "output_tok_per_s": 350.0, "ttft_ms_p99": 2500.0, "error_rate": 0.0}]


def test_every_metric_is_read_at_the_level_the_first_picks():
    # Not (350, 50): no single load gives the best throughput and the best latency at once.
    assert trial_values(LEVELS, TWO) == [300.0, 400.0]
    latency_first = TWO.model_copy(update={"metric": "ttft_ms_p99", "direction": "minimize",
                                           "metrics": ["ttft_ms_p99", "output_tok_per_s"],
                                           "directions": ["minimize", "maximize"]})
    assert trial_values(LEVELS, latency_first) == [50.0, 100.0]
    with pytest.raises(SloViolated):
        trial_values(LEVELS[2:], TWO)
    with pytest.raises(KeyError, match="'e2e_ms_p99' is not measured"):
        trial_values(LEVELS, TWO.model_copy(update={"metrics": ["output_tok_per_s", "e2e_ms_p99"]}))


def two_objective_study(sampler: optuna.samplers.BaseSampler, n: int) -> optuna.Study:
    """x < 10 crashes (told as the tuner tells it); else throughput 10x against latency x^2."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    for _ in range(n):
        trial = study.ask()
        x = trial.suggest_int("x", 0, 19)
        if x < 10:
            trial.set_constraint(FAILURE_CONSTRAINT, 1.0)
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, [10.0 * x, float(x * x)])
    return study


@pytest.mark.parametrize("sampler", ["tpe", "nsga2", "random"])
def test_each_sampler_runs_a_two_objective_study_with_failures(sampler):
    study = two_objective_study(make_sampler(sampler, 0), 16)
    front = study.best_trials
    assert front and all(t.state == TrialState.COMPLETE for t in front)
    assert best_trial(study).values[0] == max(t.values[0] for t in front)


def test_multi_objective_tpe_learns_the_crash_region_too():
    aware = [sum(t.state == TrialState.FAIL for t in two_objective_study(make_sampler("tpe", s), 40).trials[10:])
             for s in range(3)]
    blind = [sum(t.state == TrialState.FAIL for t in two_objective_study(
        optuna.samplers.TPESampler(seed=s, n_startup_trials=10), 40).trials[10:]) for s in range(3)]
    assert sum(aware) < 0.5 * sum(blind), (aware, blind)


def test_gp_sampler_is_optunas_own():
    pytest.importorskip("torch")
    assert isinstance(_base_sampler("gp", 0), optuna.samplers.GPSampler)


def test_primary_value_works_where_trial_value_raises():
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.add_trial(create_trial(values=[1.0, 2.0]))
    assert primary_value(study.trials[0]) == 1.0
    single = create_trial(value=3.0)
    assert primary_value(single) == 3.0 and primary_value(create_trial(state=TrialState.FAIL)) is None


DIRS = ["maximize", "minimize"]


def test_a_front_that_no_longer_grows_has_converged():
    grown = [[100.0, 50.0], None, [200.0, 80.0], [150.0, 60.0], [300.0, 100.0]]
    assert not front_converged(grown, DIRS, patience=2, noise=0.05)  # the last two added (300, 100)
    still = grown + [[120.0, 90.0], None, [250.0, 120.0]]  # all dominated by earlier points
    assert front_converged(still, DIRS, patience=3, noise=0.05)
    assert "hypervolume" in decide_front(still, DIRS, patience=3, noise=0.05).message
    assert decide_front(still, DIRS, patience=None, noise=0.05) is None
    assert not front_converged([None, None, [1.0, 1.0]], DIRS, patience=1, noise=0.05)  # nothing before
    assert not front_converged(still, DIRS, patience=len(still), noise=0.05)


# --- the report of a front -------------------------------------------------------------------------------

def lvl(c, tok, ttft):
    return {"max_concurrency": c, "output_tok_per_s": tok, "ttft_ms_p99": ttft, "tpot_ms_p99": 20.0,
            "e2e_ms_p99": 900.0}


def trial(values, parallel, levels=None, **attrs):
    return create_trial(params={"parallel": parallel} if parallel else {},
                        distributions={"parallel": IntDistribution(1, 32)} if parallel else {}, values=values,
                        user_attrs={"levels": levels or [lvl(8, *values)], **attrs})


def front_study():
    s = optuna.create_study(directions=["maximize", "minimize"], study_name="pareto")
    s.set_metric_names(["output_tok_per_s", "ttft_ms_p99"])
    s.add_trials([
        trial([300.0, 400.0], 0, baseline=True),
        trial([500.0, 900.0], 16),   # fastest
        trial([200.0, 100.0], 1),    # lowest latency
        trial([250.0, 500.0], 2),    # dominated by the baseline
        trial([500.0, 900.0], 16, reused_from=1),  # a reused result repeats #1: not a member of its own
        create_trial(state=TrialState.FAIL, params={"parallel": 32}, distributions={"parallel": IntDistribution(1, 32)},
                     user_attrs={"failure_class": "oom", "failure_reason": "out of memory"}),
    ])
    return s


def test_summary_lists_the_front_best_first_metric_first():
    s = report.summarize(front_study(), "output_tok_per_s")
    assert [r.number for r in s.front] == [1, 0, 2]
    assert s.front[0].values == [500.0, 900.0] and s.best.number == 1
    assert s.metrics == ["output_tok_per_s", "ttft_ms_p99"] and s.directions == ["maximize", "minimize"]
    assert report.verdict_line(s).startswith("Pareto front: 3 configurations trade "
                                                                "output_tok_per_s (higher is better) against "
                                                                "ttft_ms_p99 (lower is better)")


def test_markdown_json_best_and_terminal_show_each_member_with_its_command(tmp_path):
    s = report.summarize(front_study(), "output_tok_per_s")
    for row in s.front:
        row.command = f"llama-server -np {row.params.get('parallel', 'default')}"
    engine = get_engine("llamacpp")
    md = report.to_markdown(s, engine)
    assert "## Pareto front (3)" in md and "| trial | output_tok_per_s | ttft_ms_p99 | config |" in md
    assert "| #2 | 200.0 | 100.0 | `-np 1` |" in md and "# trial #2\nllama-server -np 1" in md
    data = report.to_json(s)
    assert [m["number"] for m in data["front"]] == [1, 0, 2]
    best = json.loads(report.write_best(s, "cmd", tmp_path).read_text())
    assert best["front"][2] == {"trial": 2, "values": {"output_tok_per_s": 200.0, "ttft_ms_p99": 100.0},
                                "params": {"parallel": 1}, "baseline": False, "command": "llama-server -np 1"}
    console = Console(record=True, width=200)
    report.render(s, engine, "cmd", console)
    text = console.export_text()
    assert "Pareto front of study 'pareto'" in text and "#2 (output_tok_per_s 200.0, ttft_ms_p99 100.0):" in text
    assert "llama-server -np 16" in text and "Trials: 5 complete, 1 fail" in text


def test_a_single_objective_report_has_no_front():
    s = optuna.create_study(direction="maximize")
    s.add_trial(create_trial(value=1.0, user_attrs={"levels": [lvl(8, 1.0, 10.0)]}))
    summary = report.summarize(s, "output_tok_per_s")
    assert summary.front == [] and "Pareto" not in report.to_markdown(summary)


def test_a_two_objective_study_gets_the_pareto_plot_and_the_others_of_its_first_metric(tmp_path):
    from autotuner.report.plots import write_plots

    study = front_study()
    study.add_trial(trial([420.0, 700.0], 8))
    result = write_plots(study, tmp_path, png=False)
    names = {p.stem for p in result.files}
    assert {"pareto_front", "slice", "parallel_coordinate", "param_importances"} <= names, result.skipped
