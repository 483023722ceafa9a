"""The `llm` advisor against a real llama-server with the answer's JSON schema enforced: a random-weight
model's proposals are random, but every one is valid, so the plumbing (the request, the schema, parsing,
checking, enqueueing, the tags in the study and in MLflow) is exercised for real."""

from __future__ import annotations

import io

import pytest
from mlflow.tracking import MlflowClient
from rich.console import Console

from autotuner.advisors import StudySoFar
from autotuner.advisors.llm import LlmAdvisor
from autotuner.compose import make_driver
from autotuner.config import LlmAdvisorConfig, load_experiment
from autotuner.core.progress import Progress
from autotuner.engines._base import LaunchContext, get_engine
from autotuner.launchers._base import free_port
from autotuner.launchers.process import ProcessLauncher
from autotuner.tracking import MlflowTracker
from tests.fake_engine import FakeEngine
from tests.support import LLAMA_SPACE

pytestmark = pytest.mark.engine


@pytest.fixture
def advisor_url(llama_server, tiny_model, tmp_path):
    """llama-server serving the tiny model: the advisor's language model."""
    launcher = ProcessLauncher(tmp_path / "llm-procs")
    spec = get_engine("llamacpp").build({"ctx_size": 8192, "parallel": 1}, LaunchContext(
        model_path=tiny_model, served_model_name="advisor", port=free_port(), binary=llama_server))
    handle = launcher.start(spec, tmp_path / "advisor.log", {"autotuner.test": "llm-advisor"})
    try:
        launcher.wait_ready(handle, 60)
        yield handle.base_url + "/v1"
    finally:
        launcher.stop(handle)


def test_every_proposal_of_a_schema_bound_model_is_valid(advisor_url):
    llm = LlmAdvisor(LlmAdvisorConfig(base_url=advisor_url, model="advisor", api="completions", temperature=1.0,
                                      max_tokens=3000, proposals=2), "llamacpp", get_engine("llamacpp").describe)
    so_far = StudySoFar(trials=[], space=LLAMA_SPACE, load_key="max_concurrency", max_load=16, cpus=2, gpus=0,
                        metric="output_tok_per_s", direction="maximize", defaults=get_engine("llamacpp").defaults())
    proposals = [p for _ in range(3) for p in llm.propose(so_far)]
    assert proposals and all(p.refused is None for p in proposals), [p.refused for p in proposals]
    assert all(p.params and p.reason for p in proposals)
    assert all(LLAMA_SPACE.contains(p.params) is None for p in proposals)


def test_a_study_launches_the_models_proposals_tagged_with_its_name(advisor_url, tmp_path):
    model = tmp_path / "model.bin"
    model.write_bytes(b"fake")
    # capacity from 2: every config of the space serves concurrency 2 (one slot answers the second request
    # 503, a failed trial), so a proposal fails only if the plumbing does
    (tmp_path / "s.yaml").write_text("engine: fake\nparams:\n  itl_ms: {type: categorical, choices: [2, 5, 20]}\n"
                                     "  capacity: {type: int, low: 2, high: 64}\n")
    (tmp_path / "exp.yaml").write_text(
        f"name: llm\nengine: fake\nmodel: {{path: {model}, name: m}}\nsearch_space: s.yaml\n"
        f"study: {{storage: 'sqlite:///{tmp_path}/s.db', seed: 0}}\n"
        "workload: {num_prompts: 8, input_len: 8, output_len: 8, warmup_requests: 0}\n"
        "load: {max_concurrency: [2]}\nconfirm: {top_k: 0}\nquality: off\n"
        f"advisors: [{{llm: {{base_url: '{advisor_url}', model: advisor, api: completions, max_tokens: 3000, proposals: 2}}}}]\n")
    out = io.StringIO()
    tracker = MlflowTracker(root=tmp_path / "mlruns")
    driver = make_driver(load_experiment(tmp_path / "exp.yaml"), engine=FakeEngine(),
                         launcher=ProcessLauncher(tmp_path / "procs"), tracker=tracker,
                         results_dir=tmp_path / "results",
                         progress=lambda total: Progress(total, "output_tok_per_s", Console(file=out, width=300)))
    trials = driver.run(3).get_trials()
    by_llm = [t for t in trials if t.user_attrs.get("proposed_by") == "llm"]
    assert by_llm, out.getvalue()[-3000:]
    assert all(t.state.name == "COMPLETE" and t.user_attrs["reason"] for t in by_llm), \
        [(t.number, t.state.name, t.user_attrs.get("failure_reason"), t.user_attrs.get("levels")) for t in by_llm]
    client = MlflowClient(tracker.uri)
    exp_id = client.get_experiment_by_name("llm").experiment_id
    runs = client.search_runs([exp_id], "tags.`autotuner.proposed_by` = 'llm'")
    assert {r.data.tags["autotuner.trial"] for r in runs} == {str(t.number) for t in by_llm}
    assert all(r.data.tags["autotuner.reason"] for r in runs)
