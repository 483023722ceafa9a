"""Experiment and search-space files: valid ones load, each mistake is one line naming file and field."""

from __future__ import annotations

import pytest

from autotuner.config import ConfigError, load_experiment, load_search_space
from tests.support import (
    BASE,
    REPO,
    SPACE,
    write,
)


def test_shipped_quickstart_loads_with_paths_relative_to_the_file():
    exp = load_experiment(REPO / "experiments" / "quickstart.yaml")
    assert exp.config.engine == "llamacpp"
    assert exp.model_path == (REPO / "models" / "quickstart.gguf").resolve()
    assert exp.space_path == (REPO / "search_spaces" / "llamacpp.yaml").resolve()
    assert {"parallel", "threads", "batch_size", "ubatch_size", "cont_batching", "flash_attn",
            "cache_type_k", "cache_type_v", "ctx_size"} <= set(exp.space.params)


def test_defaults_fill_what_the_file_leaves_out(tmp_path):
    exp = load_experiment(write(tmp_path, BASE))
    assert exp.config.study_name == "t"
    assert exp.config.load.levels() == [{"max_concurrency": 16}]
    assert exp.config.study.storage == "sqlite:///autotuner.db"


@pytest.mark.parametrize("experiment, space, expected", [
    (BASE + "bogus: 1\n", SPACE, "exp.yaml: field 'bogus': unknown field"),
    (BASE + "workload: {num_prompts: 0}\n", SPACE,
     "exp.yaml: field 'workload.num_prompts': Input should be greater than 0 (got 0)"),
    (BASE + "workload: {endpoint: embeddings}\n", SPACE,
     "exp.yaml: field 'workload.endpoint': Input should be 'completions' or 'chat' (got 'embeddings')"),
    (BASE + "load: {max_concurrency: [4], request_rate: [1.0]}\n", SPACE,
     "exp.yaml: field 'load': give exactly one of max_concurrency, request_rate, speedup or search"),
    (BASE.replace("name: t\n", ""), SPACE, "exp.yaml: field 'name': Field required"),
    (BASE + "load: {max_concurrency: [0]}\n", SPACE, "exp.yaml: field 'load': load levels must be positive (got 0)"),
    (BASE, SPACE.replace("high: 8", "high: 0"),
     "space.yaml: field 'params.parallel': low (1) must not exceed high (0)"),
    (BASE, SPACE.replace("type: int", "type: integer"),
     "space.yaml: field 'params.parallel': Input tag 'integer' found using 'type' does not match any of the expected tags"),
    (BASE, "engine: llamacpp\nparams: {}\n", "space.yaml: field 'params': Dictionary should have at least 1 item"),
    (BASE, SPACE.replace("{type: int, low: 1, high: 8}", "{type: categorical, choices: [1, 1]}"),
     "space.yaml: field 'params.parallel.choices': choices must not repeat"),
    (BASE, SPACE.replace("engine: llamacpp", "engine: vllm"),
     "space.yaml: field 'engine': search space is for 'vllm' but"),
    (BASE + "study: {sampler: cmaes}\n", SPACE, "exp.yaml: field 'study.sampler': Input should be"),
    (BASE + "workload: {input_len: 64, shared_prefix_len: 64}\n", SPACE,
     "exp.yaml: field 'workload': shared_prefix_len (64) must be below input_len (64): each prompt needs tokens "
     "of its own"),
])
def test_each_mistake_is_one_line_naming_file_and_field(tmp_path, experiment, space, expected):
    with pytest.raises(ConfigError) as err:
        load_experiment(write(tmp_path, experiment, space))
    message = str(err.value)
    assert "\n" not in message
    assert expected in message
    assert message.startswith(str(tmp_path))


def test_yaml_syntax_error_names_line(tmp_path):
    with pytest.raises(ConfigError, match=r"exp.yaml: invalid YAML at line 3"):
        load_experiment(write(tmp_path, "name: t\nengine: llamacpp\n  bad: indent\n"))


def test_missing_files_are_named(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml: file not found"):
        load_experiment(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="field 'search_space': file not found"):
        load_experiment(write(tmp_path, BASE.replace("space.yaml", "other.yaml")))


def test_top_level_must_be_a_mapping(tmp_path):
    with pytest.raises(ConfigError, match="expected a mapping of fields at the top level, got list"):
        load_experiment(write(tmp_path, "- a\n- b\n"))


def test_search_space_loads_alone(tmp_path):
    (tmp_path / "s.yaml").write_text(SPACE)
    assert load_search_space(tmp_path / "s.yaml").params["parallel"].high == 8


def test_a_trace_experiment_reads_back_as_the_study_records_it(tmp_path):
    # The study keeps its experiment as YAML (every field, defaults included) for `report`, `best` and
    # `transfer`; a trace's lengths and window must read back as they were (a resumed read failed before).
    import yaml

    from autotuner.config import ExperimentConfig

    (tmp_path / "s.yaml").write_text("engine: llamacpp\nparams:\n  parallel: {type: int, low: 1, high: 8}\n")
    (tmp_path / "m.gguf").write_bytes(b"")
    (tmp_path / "t.jsonl").write_text("".join(
        f'{{"timestamp": {k * 100}, "input_length": 700, "output_length": 20}}\n' for k in range(10)))
    (tmp_path / "exp.yaml").write_text("name: t\nengine: llamacpp\nmodel: {path: m.gguf}\nsearch_space: s.yaml\n"
                                       "workload: {trace: {path: t.jsonl, duration_s: 0.55}}\nload: {speedup: [1]}\n")
    exp = load_experiment(tmp_path / "exp.yaml")
    again = ExperimentConfig.model_validate(yaml.safe_load(yaml.safe_dump(exp.config.model_dump(mode="json"))))
    assert again.workload == exp.config.workload and again.workload.count(tmp_path) == 6  # the window's, not 64
