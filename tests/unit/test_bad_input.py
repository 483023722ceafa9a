"""The bad-input suite: each malformed experiment or search-space file gives exactly one line naming
the file and the field (or resource), before anything is started or written."""

from __future__ import annotations

import pytest

from autotuner.config import ConfigError, load_experiment
from autotuner.core import preflight

SPACE = "engine: llamacpp\nparams:\n  parallel: {type: int, low: 1, high: 8}\n  flash_attn: {type: categorical, choices: ['on', 'off']}\n"
EXP = "name: t\nengine: llamacpp\nmodel: {path: m.gguf}\nsearch_space: s.yaml\n"

# (experiment file, search-space file, the exact message with {exp} and {space} for the files' paths)
CASES = {
    "yaml-syntax": (EXP + "workload: {num_prompts: 4\n", SPACE,
                    "{exp}: invalid YAML at line 6, column 1: expected ',' or '}}', but got '<stream end>'"),
    "yaml-tab": (EXP + "workload:\n\tnum_prompts: 4\n", SPACE,
                 "{exp}: invalid YAML at line 6, column 1: found character '\\t' that cannot start any token"),
    "not-a-mapping": ("- name: t\n", SPACE, "{exp}: expected a mapping of fields at the top level, got list"),
    "empty-file": ("", SPACE, "{exp}: expected a mapping of fields at the top level, got NoneType"),
    "unknown-key": (EXP + "trails: 5\n", SPACE, "{exp}: field 'trails': unknown field"),
    "unknown-nested-key": (EXP + "workload: {outputlen: 5}\n", SPACE, "{exp}: field 'workload.outputlen': unknown field"),
    "wrong-type": (EXP + "workload: {num_prompts: many}\n", SPACE,
                   "{exp}: field 'workload.num_prompts': Input should be a valid integer, unable to parse string as an integer (got 'many')"),
    "zero-prompts": (EXP + "workload: {num_prompts: 0}\n", SPACE,
                     "{exp}: field 'workload.num_prompts': Input should be greater than 0 (got 0)"),
    "negative-warmup": (EXP + "workload: {warmup_requests: -1}\n", SPACE,
                        "{exp}: field 'workload.warmup_requests': Input should be greater than or equal to 0 (got -1)"),
    "bad-endpoint": (EXP + "workload: {endpoint: embeddings}\n", SPACE,
                     "{exp}: field 'workload.endpoint': Input should be 'completions' or 'chat' (got 'embeddings')"),
    "two-load-kinds": (EXP + "load: {max_concurrency: [4], request_rate: [2.0]}\n", SPACE,
                       "{exp}: field 'load': give exactly one of max_concurrency, request_rate, speedup or search"),
    "no-load-kind": (EXP + "load: {}\n", SPACE, "{exp}: field 'load': give exactly one of max_concurrency, request_rate, speedup or search"),
    "zero-level": (EXP + "load: {max_concurrency: [4, 0]}\n", SPACE,
                   "{exp}: field 'load': load levels must be positive (got 0)"),
    "empty-levels": (EXP + "load: {max_concurrency: []}\n", SPACE,
                     "{exp}: field 'load.max_concurrency': List should have at least 1 item after validation, not 0 (got [])"),
    "unknown-advisor": (EXP + "advisors: [engin]\n", SPACE,
                        "{exp}: field 'advisors.0': Input should be 'engine', 'earlier-studies', 'performance-model' or 'neighbours' (got 'engin')"),
    "bad-gpu-system": (EXP + "hardware: {gpu_system: H100 SXM}\n", SPACE,
                       "{exp}: field 'hardware.gpu_system': String should match pattern '^[a-z0-9_]+$' (got 'H100 SXM')"),
    "llm-advisor-without-url": (EXP + "advisors: [engine, {llm: {model: q}}]\n", SPACE,
                                "{exp}: field 'advisors.1.llm.base_url': Field required"),
    "bad-name": (EXP.replace("name: t", "name: my study"), SPACE,
                 "{exp}: field 'name': String should match pattern '^[A-Za-z0-9][A-Za-z0-9._-]*$' (got 'my study')"),
    "missing-name": (EXP.replace("name: t\n", ""), SPACE, "{exp}: field 'name': Field required"),
    "missing-model": (EXP.replace("model: {path: m.gguf}\n", ""), SPACE, "{exp}: field 'model': Field required"),
    "missing-space": (EXP.replace("search_space: s.yaml\n", ""), SPACE, "{exp}: field 'search_space': Field required"),
    "bad-launcher": (EXP + "launcher: kubernetes\n", SPACE,
                     "{exp}: field 'launcher': Input should be 'process' or 'docker' (got 'kubernetes')"),
    "bad-direction": (EXP + "objective: {direction: up}\n", SPACE,
                      "{exp}: field 'objective.direction': Input should be 'maximize' or 'minimize' (got 'up')"),
    "error-rate-above-1": (EXP + "objective: {max_error_rate: 2}\n", SPACE,
                           "{exp}: field 'objective.max_error_rate': Input should be less than or equal to 1 (got 2)"),
    "bad-sampler": (EXP + "study: {sampler: cmaes}\n", SPACE,
                    "{exp}: field 'study.sampler': Input should be 'tpe', 'random', 'gp' or 'nsga2' (got 'cmaes')"),
    "bad-pruner": (EXP + "study: {pruner: asha}\n", SPACE,
                   "{exp}: field 'study.pruner': Input should be 'none', 'ceiling', 'median', 'wilcoxon' or 'hyperband' (got 'asha')"),
    "negative-timeout": (EXP + "startup_timeout_s: -1\n", SPACE,
                         "{exp}: field 'startup_timeout_s': Input should be greater than 0 (got -1)"),
    "engine-args-not-list": (EXP + "engine_args: --mlock\n", SPACE,
                             "{exp}: field 'engine_args': Input should be a valid list (got '--mlock')"),
    "missing-space-file": (EXP.replace("s.yaml", "nope.yaml"), SPACE,
                           "{exp}: field 'search_space': file not found: {dir}/nope.yaml"),
    "missing-model-file": (EXP.replace("m.gguf", "gone.gguf"), SPACE,
                           "{exp}: field 'model.path': not found: {dir}/gone.gguf (scripts/setup.sh makes the quickstart model, scripts/setup-vllm.sh the vLLM one)"),
    "storage-folder-missing": (EXP + "study: {storage: 'sqlite:///no/such/dir/s.db'}\n", SPACE,
                               "{exp}: field 'study.storage': folder no/such/dir does not exist (sqlite:///no/such/dir/s.db)"),
    "storage-unknown-database": (EXP + "study: {storage: 'notadb://x'}\n", SPACE,
                                 "{exp}: field 'study.storage': no database called 'notadb' (notadb://x); use "
                                 "sqlite, postgresql or mysql"),
    "secret-not-set": (EXP + "secret_env: [AUTOTUNER_TEST_UNSET_TOKEN]\n", SPACE,
                       "{exp}: field 'secret_env': AUTOTUNER_TEST_UNSET_TOKEN is not set in the environment"),
    "enqueue-unknown-param": (EXP + "enqueue: [{threads: 2}]\n", SPACE,
                              "{exp}: field 'enqueue.0': 'threads' is not a param of this space (params: parallel, flash_attn)"),
    "enqueue-out-of-range": (EXP + "enqueue: [{parallel: 4}, {parallel: 99}]\n", SPACE,
                             "{exp}: field 'enqueue.1': 'parallel' must be within [1, 8] (got 99)"),
    "enqueue-bad-choice": (EXP + "enqueue: [{flash_attn: auto}]\n", SPACE,
                           "{exp}: field 'enqueue.0': 'flash_attn' must be one of ['on', 'off'] (got 'auto')"),
    "unknown-engine": (EXP.replace("engine: llamacpp", "engine: tgi"), SPACE.replace("llamacpp", "tgi"),
                       "{exp}: field 'engine': unknown engine 'tgi' (engines: llamacpp, sglang, vllm)"),
    "space-engine-mismatch": (EXP, SPACE.replace("llamacpp", "vllm"),
                              "{space}: field 'engine': search space is for 'vllm' but {exp} uses 'llamacpp'"),
    "space-unknown-type": (EXP, SPACE.replace("type: int", "type: integer"),
                           "{space}: field 'params.parallel': Input tag 'integer' found using 'type' does not match any of the expected tags: 'int', 'float', 'categorical', 'bool'"),
    "space-inverted-range": (EXP, SPACE.replace("low: 1, high: 8", "low: 8, high: 1"),
                             "{space}: field 'params.parallel': low (8) must not exceed high (1)"),
    "space-log-from-zero": (EXP, SPACE.replace("low: 1, high: 8", "low: 0, high: 8, log: true"),
                            "{space}: field 'params.parallel': log scale needs low > 0 (got 0)"),
    "space-no-params": (EXP, "engine: llamacpp\nparams: {}\n",
                        "{space}: field 'params': Dictionary should have at least 1 item after validation, not 0"),
    "space-params-list": (EXP, "engine: llamacpp\nparams: [parallel]\n",
                          "{space}: field 'params': Input should be a valid dictionary (got ['parallel'])"),
    "space-empty-choices": (EXP, SPACE.replace("['on', 'off']", "[]"),
                            "{space}: field 'params.flash_attn.choices': List should have at least 1 item after validation, not 0 (got [])"),
    "space-repeated-choices": (EXP, SPACE.replace("['on', 'off']", "['on', 'on']"),
                               "{space}: field 'params.flash_attn.choices': choices must not repeat (got ['on', 'on'])"),
    "space-missing-engine": (EXP, SPACE.replace("engine: llamacpp\n", ""), "{space}: field 'engine': Field required"),
    "kernels-unknown-field": (EXP + "kernels: {gpus: 8}\n", SPACE, "{exp}: field 'kernels.gpus': unknown field"),
    "kernels-zero-batch": (EXP + "kernels: {batch_sizes: [0]}\n", SPACE,
                           "{exp}: field 'kernels.batch_sizes.0': Input should be greater than 0 (got 0)"),
    "length-without-mean": (EXP + "workload: {input_len: {dist: normal}}\n", SPACE,
                            "{exp}: field 'workload.input_len': a normal length needs mean"),
    "length-unknown-dist": (EXP + "workload: {output_len: {dist: gauss, mean: 5}}\n", SPACE,
                            "{exp}: field 'workload.output_len.dist': Input should be 'fixed', 'uniform', 'normal' or "
                            "'lognormal' (got 'gauss')"),
    "trace-missing": (EXP + "workload: {trace: {path: t.jsonl}}\n", SPACE,
                      "{dir}/t.jsonl: file not found (from workload.trace.path)"),
    "dataset-and-trace": (EXP + "workload: {dataset: {path: a.json, format: sharegpt}, trace: {path: t.jsonl}}\n",
                          SPACE, "{exp}: field 'workload': give a dataset or a trace, not both"),
    "dataset-format": (EXP + "workload: {dataset: {path: a.json, format: csv}}\n", SPACE,
                       "{exp}: field 'workload.dataset.format': Input should be 'sharegpt' or 'jsonl' (got 'csv')"),
    "speedup-without-trace": (EXP + "load: {speedup: [1, 2]}\n", SPACE,
                              "{exp}: field 'load.speedup': a speed-up replays a trace's own timestamps: set "
                              "workload.trace, or use max_concurrency or request_rate levels"),
    "sessions-not-chat": (EXP + "workload: {sessions: {turns: 2}}\n", SPACE,
                          "{exp}: field 'workload': sessions send the history as chat messages: set endpoint: chat"),
    "sessions-at-a-rate": (EXP + "workload: {endpoint: chat, sessions: {turns: 2}}\nload: {request_rate: [2]}\n",
                           SPACE, "{exp}: field 'load': sessions are measured at a number of sessions in flight: use "
                                  "max_concurrency levels"),
    "space-unknown-engine-param": (EXP, SPACE + "  n_gpu_layers: {type: int, low: 0, high: 99}\n",
                                   "{space}: field 'params': 'n_gpu_layers' is not a llamacpp param (known: batch_size, cache_reuse, cache_type_k, cache_type_v, cont_batching, ctx_size, flash_attn, kv_unified, load_mode, parallel, rope_freq_base, threads, threads_batch, ubatch_size)"),
    "space-value-engine-rejects": (EXP, SPACE.replace("['on', 'off']", "['on', 'yes']"),
                                   "{space}: field 'params': 'flash_attn': 'yes' is not accepted by llamacpp (accepted: ['on', 'off', 'auto'])"),
    "space-constraint-call": (EXP, SPACE + "constraints: [\"open('x') == 1\"]\n",
                              "{space}: \"open('x') == 1\": Call is not allowed in expressions"),
    "space-condition-unknown": (EXP, SPACE.replace("choices: ['on', 'off']}", "choices: ['on', 'off'], condition: 'threads > 1'}"),
                                "{space}: 'threads > 1': unknown param 'threads' (params: parallel)"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_exact_line(name, tmp_path, monkeypatch):
    experiment, space, expected = CASES[name]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUTOTUNER_TEST_UNSET_TOKEN", raising=False)
    (tmp_path / "exp.yaml").write_text(experiment)
    (tmp_path / "s.yaml").write_text(space)
    (tmp_path / "m.gguf").write_bytes(b"")
    before = sorted(tmp_path.iterdir())
    with pytest.raises(ConfigError) as err:
        preflight.check(load_experiment(tmp_path / "exp.yaml"))
    assert str(err.value) == expected.format(exp=tmp_path / "exp.yaml", space=tmp_path / "s.yaml", dir=tmp_path)
    assert sorted(tmp_path.iterdir()) == before  # nothing written


def test_the_suite_is_at_least_thirty_files():
    assert len(CASES) >= 30


def test_the_gp_sampler_without_pytorch_is_refused_before_the_study_starts(tmp_path, monkeypatch):
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("PyTorch is installed here: the GP sampler can run")
    experiment, space, _ = CASES["bad-sampler"]
    (tmp_path / "exp.yaml").write_text(experiment.replace("cmaes", "gp"))
    (tmp_path / "s.yaml").write_text(space)
    (tmp_path / "m.gguf").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"exp.yaml: field 'study.sampler': gp needs PyTorch, which is not installed"):
        preflight.check(load_experiment(tmp_path / "exp.yaml"))


@pytest.mark.parametrize("text, expected", [
    ('{"timestamp": 0, "input_length": 8, "output_length": 4}\n{"timestamp": 0, "input_length": 8}\n',
     "t.jsonl: line 2: field 'output_length': missing (from workload.trace.path)"),
    ("", "t.jsonl: empty: no request in it (from workload.trace.path)"),
])
def test_a_bad_trace_line_is_one_line_before_anything_starts(tmp_path, monkeypatch, text, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.yaml").write_text(EXP + "workload: {trace: {path: t.jsonl}}\nload: {speedup: [1]}\n")
    (tmp_path / "s.yaml").write_text(SPACE)
    (tmp_path / "m.gguf").write_bytes(b"")
    (tmp_path / "t.jsonl").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_experiment(tmp_path / "exp.yaml")
    assert str(err.value) == f"{tmp_path}/{expected}"
