"""Experiment syntax of a load search and of two objectives: what loads, and each mistake as one line."""

from __future__ import annotations

import pytest

from autotuner.config import ConfigError, ExperimentConfig, load_experiment, recheck
from tests.support import BASE, SPACE, write

SLO = "objective: {slo: {ttft_ms_p99: 2000}}\n"
PARETO = "objective: {metrics: [output_tok_per_s, ttft_ms_p99], directions: [maximize, minimize]}\n"


def test_a_load_search_loads_with_its_range_and_steps(tmp_path):
    cfg = load_experiment(write(tmp_path, BASE + SLO + "load: {search: {max_concurrency: [1, 64], steps: 5}}\n")).config
    assert cfg.load.search.kind == "max_concurrency" and cfg.load.max_steps == 5
    assert cfg.load.levels() == [{"max_concurrency": 1}, {"max_concurrency": 64}]
    assert "highest concurrency meeting the SLO in [1, 64]" in cfg.load.describe()
    rate = load_experiment(write(tmp_path, BASE + SLO + "load: {search: {request_rate: [0.5, 32]}}\n")).config
    assert rate.load.search.kind == "request_rate" and rate.load.max_steps == 6


def test_two_objectives_load_and_the_first_is_the_primary(tmp_path):
    cfg = load_experiment(write(tmp_path, BASE + PARETO)).config
    o = cfg.objective
    assert o.multi and o.names == ["output_tok_per_s", "ttft_ms_p99"] and o.all_directions == ["maximize", "minimize"]
    assert (o.metric, o.direction) == ("output_tok_per_s", "maximize")
    assert o.describe() == "maximize output_tok_per_s, minimize ttft_ms_p99"
    # The study keeps the experiment as YAML and reads it back: the dump must validate again.
    assert ExperimentConfig.model_validate(cfg.model_dump(mode="json")).objective == o
    single = load_experiment(write(tmp_path, BASE + "objective: {metric: ttft_ms_p99, direction: minimize}\n"))
    assert not single.config.objective.multi and single.config.objective.names == ["ttft_ms_p99"]


@pytest.mark.parametrize("experiment, expected", [
    ("load: {search: {max_concurrency: [1, 64]}}\n",
     "field 'load.search': the highest load that meets the SLO needs an SLO: set objective.slo"),
    (SLO + "load: {search: {max_concurrency: [64, 1]}}\n", "field 'load.search': low (64) must be below high (1)"),
    (SLO + "load: {search: {max_concurrency: [1, 8, 64]}}\n",
     "field 'load.search.max_concurrency': List should have at most 2 items"),
    (SLO + "load: {search: {max_concurrency: [0, 8]}}\n",
     "field 'load.search.max_concurrency.0': Input should be greater than 0"),
    (SLO + "load: {search: {}}\n", "field 'load.search': give exactly one of max_concurrency or request_rate"),
    (SLO + "load: {search: {request_rate: [1, 8], steps: 1}}\n",
     "field 'load.search.steps': Input should be greater than or equal to 2"),
    (SLO + "load: {search: {request_rate: [1, 8]}, max_concurrency: [4]}\n",
     "field 'load': give exactly one of max_concurrency, request_rate, speedup or search"),
    (SLO + "load: {search: {request_rate: [1, 8], step: 3}}\n", "field 'load.search.step': unknown field"),
    ("objective: {metrics: [output_tok_per_s, ttft_ms_p99]}\n",
     "field 'objective': give one direction per metric in directions (2 metrics)"),
    ("objective: {metrics: [output_tok_per_s, ttft_ms_p99], directions: [maximize]}\n",
     "field 'objective': give one direction per metric in directions (2 metrics)"),
    ("objective: {metrics: [output_tok_per_s], directions: [maximize]}\n",
     "field 'objective.metrics': List should have at least 2 items"),
    ("objective: {metric: ttft_ms_p99, metrics: [output_tok_per_s, ttft_ms_p99], directions: [maximize, minimize]}\n",
     "field 'objective': give metric or metrics, not both (metric is the first of metrics)"),
    ("objective: {directions: [maximize, minimize]}\n", "field 'objective': directions needs metrics"),
    ("objective: {metrics: [output_tok_per_s, output_tok_per_s], directions: [maximize, minimize]}\n", "field 'objective': metrics must not repeat"),
    ("objective: {metrics: [output_tok_per_s, ttft_ms_p99], directions: [maximize, up]}\n",
     "field 'objective.directions.1': Input should be 'maximize' or 'minimize'"),
    (PARETO + "study: {pruner: median}\n",
     "field 'study.pruner': Optuna's pruners do not support multi-objective studies (objective.metrics): use none"),
    (PARETO + "stop: {target: 100}\n", "field 'stop.target': a target is one value"),
])
def test_each_mistake_is_one_line_naming_the_field(tmp_path, experiment, expected):
    with pytest.raises(ConfigError) as err:
        load_experiment(write(tmp_path, BASE + experiment, SPACE))
    assert "\n" not in str(err.value)
    assert expected in str(err.value)


def test_a_command_line_target_on_two_objectives_is_refused(tmp_path):
    cfg = load_experiment(write(tmp_path, BASE + PARETO)).config
    overridden = cfg.model_copy(update={"stop": cfg.stop.model_copy(update={"target": 5.0})})  # as cli._override
    with pytest.raises(ConfigError, match="field 'stop.target': a target is one value"):
        recheck(overridden)


def test_the_shipped_pareto_experiment_loads():
    from tests.support import REPO

    cfg = load_experiment(REPO / "experiments" / "pareto.yaml").config
    assert cfg.load.search.kind == "max_concurrency" and cfg.objective.multi and cfg.study.pruner == "none"
