"""The `llm` advisor: the answer's schema comes from the space, the model's word is checked (malformed,
off the space, too slow: said and ignored, the study goes on), the key travels only in the header.

The endpoint here is a small OpenAI-style HTTP server that replies what each test scripts (a real
implementation of the seam); tests/integration/test_llm_advisor_llamacpp.py asks a real llama-server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotuner.advisors.llm import AdviceError, parse, request_body, schema
from autotuner.config import LlmAdvisorConfig, load_experiment
from autotuner.engines._base import get_engine
from autotuner.report.dryrun import dry_run
from tests.support import LLAMA_SPACE, Endpoint


def test_the_answer_schema_holds_the_spaces_params_and_values():
    s = schema(LLAMA_SPACE, 3)
    assert s["properties"]["proposals"]["maxItems"] == 3
    params = s["properties"]["proposals"]["items"]["properties"]["params"]
    assert params["additionalProperties"] is False and "cache_type_v" not in params["required"]  # conditional
    assert set(params["required"]) == set(LLAMA_SPACE.names) - {"cache_type_v"}
    assert params["properties"]["parallel"] == {"type": "integer", "minimum": 1, "maximum": 16}
    assert params["properties"]["flash_attn"] == {"enum": ["on", "off", "auto"]}
    assert params["properties"]["cont_batching"] == {"type": "boolean"}


def test_each_api_carries_the_schema_where_its_servers_read_it():
    chat = request_body(LlmAdvisorConfig(base_url="u", model="m"), "sys", "user", {"type": "object"})
    assert chat["messages"][0] == {"role": "system", "content": "sys"}
    assert chat["response_format"]["json_schema"]["schema"] == {"type": "object"}
    plain = request_body(LlmAdvisorConfig(base_url="u", model="m", api="completions"), "sys", "user", {"type": "object"})
    assert "sys" in plain["prompt"] and "user" in plain["prompt"] and plain["json_schema"] == {"type": "object"}


def test_proposals_off_the_space_are_refused_not_bent_to_fit():
    text = json.dumps({"proposals": [
        {"params": {"parallel": 8, "cont_batching": True}, "reason": "queueing at\n 4 slots\x07"},
        {"params": {"parallel": 99}, "reason": "more"},
        {"params": {"gpu_memory_utilization": 0.9}, "reason": "wrong engine"},
        {"params": {}, "reason": "nothing"},
    ]})
    good, big, alien, empty = parse(text, LLAMA_SPACE)
    assert good.refused is None and good.params == {"parallel": 8, "cont_batching": True}
    assert good.reason == "queueing at 4 slots"  # one printable line
    assert "must be within [1, 16]" in big.refused
    assert "not a param of this space" in alien.refused and empty.refused == "no params"


@pytest.mark.parametrize("text", ["I think -np 8 would be good", '{"proposals": []}', '{"proposals": [{"reason": 1}]}',
                                  '["parallel", 8]'])
def test_an_answer_that_is_not_proposals_is_an_advice_error(text):
    with pytest.raises(AdviceError):
        parse(text, LLAMA_SPACE)












def test_an_llm_advisor_is_written_in_the_experiment(tmp_path: Path):
    (tmp_path / "s.yaml").write_text("engine: llamacpp\nparams:\n  parallel: {type: int, low: 1, high: 4}\n")
    (tmp_path / "e.yaml").write_text("name: x\nengine: llamacpp\nmodel: {path: m.gguf}\nsearch_space: s.yaml\n"
                                     "advisors: [engine, {llm: {base_url: 'http://h/v1', model: q, api: completions}}]\n")
    exp = load_experiment(tmp_path / "e.yaml")
    advisors = exp.config.advisors
    assert advisors[0] == "engine" and advisors[1].llm.api == "completions" and advisors[1].llm.proposals == 3
    lines: list[str] = []
    dry_run(exp, get_engine("llamacpp"), 2, lines.append)
    assert "# advisor llm: q at http://h/v1 (completions), asked whenever the queue is empty" in "\n".join(lines)


def test_a_login_page_instead_of_an_api_counts_as_a_failed_answer_and_an_echoed_key_is_hidden(monkeypatch):
    from autotuner.advisors.llm import LlmAdvisor
    from tests.support import so_far

    monkeypatch.setenv("TUNER_KEY", "sk-secret-123")
    gateway = [(200, "text/html", "<html>sign in</html>"), (401, "text/plain", "invalid key sk-secret-123")]
    with Endpoint(gateway) as endpoint:  # type: ignore[arg-type]  # raw replies, not model texts
        llm = LlmAdvisor(LlmAdvisorConfig(base_url=endpoint.url, model="m", api_key_env="TUNER_KEY"), "llamacpp",
                         get_engine("llamacpp").describe)
        with pytest.raises(AdviceError, match=r"HTTP 200 but not JSON \(text/html\)"):
            llm.propose(so_far())
        with pytest.raises(AdviceError, match=r"HTTP 401: invalid key \*\*\*$"):
            llm.propose(so_far())
    assert llm._failures == 2  # two of the three failed answers after which it steps aside
