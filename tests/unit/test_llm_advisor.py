"""The `llm` advisor: the answer's schema comes from the space, the model's word is checked (malformed,
off the space, too slow: said and ignored, the study goes on), the key travels only in the header.

The endpoint here is a small OpenAI-style HTTP server that replies what each test scripts (a real
implementation of the seam); tests/integration/test_llm_advisor_llamacpp.py asks a real llama-server."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from autotuner.advisors.llm import AdviceError, parse, request_body, schema
from autotuner.config import LlmAdvisorConfig, load_experiment
from autotuner.engines._base import get_engine
from autotuner.report.dryrun import dry_run
from tests.conftest import launched
from tests.unit.test_advisors import LLAMA_SPACE
from tests.unit.test_driver import WORK, study


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


class Endpoint:
    """An OpenAI-style /v1/chat/completions that answers the scripted texts in turn (the last one again)."""

    def __init__(self, answers: list[str], delay_s: float = 0.0):
        self.answers, self.delay_s, self.requests = answers, delay_s, []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802  (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append((self.path, dict(self.headers), body))
                time.sleep(endpoint.delay_s)
                text = endpoint.answers[min(len(endpoint.requests), len(endpoint.answers)) - 1]
                status, kind = 200, "application/json"
                if isinstance(text, tuple):  # (status, content type, body): what some gateway answers instead
                    status, kind, body_text = text
                    reply = body_text.encode()
                else:
                    reply = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                except (BrokenPipeError, ConnectionResetError):  # the advisor gave up waiting: as it should
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> Endpoint:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


SPACE = "  itl_ms: {type: categorical, choices: [2, 5, 20]}\n  capacity: {type: categorical, choices: [64, 1]}\n"


def llm_study(tmp_path: Path, url: str, n: int, timeout_s: float = 30) -> tuple[list, str]:
    return study(tmp_path, SPACE, WORK + "load: {max_concurrency: [2]}\nconfirm: {top_k: 0}\nquality: off\n"
                 f"advisors: [{{llm: {{base_url: '{url}', model: tuner, api_key_env: TUNER_KEY, "
                 f"timeout_s: {timeout_s}}}}}]\n", n)


def test_the_study_launches_what_the_model_proposes_and_shrugs_off_what_it_garbles(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_KEY", "sk-secret-123")
    answers = ["Sure! Try more capacity.",  # not JSON: said, ignored
               json.dumps({"proposals": [{"params": {"itl_ms": 3}, "reason": "off the grid"},
                                         {"params": {"itl_ms": 2, "capacity": 64}, "reason": "#0 queued: more room"}]})]
    with Endpoint(answers) as endpoint:
        trials, out = llm_study(tmp_path, endpoint.url, 4)
    assert "advisor llm: no proposal this time (not JSON" in out
    assert "advisor llm: proposed {'itl_ms': 3}: refused ('itl_ms' must be one of [2, 5, 20] (got 3))" in out
    (taken,) = [t for t in trials if t.user_attrs.get("proposed_by") == "llm"]
    assert taken.params == {"itl_ms": 2, "capacity": 64} and taken.user_attrs["reason"] == "#0 queued: more room"
    assert taken.state.name == "COMPLETE" and "by llm: #0 queued: more room" in out
    path, headers, body = endpoint.requests[-1]
    assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer sk-secret-123"
    evidence = json.loads(body["messages"][1]["content"])
    assert evidence["trials"][0]["params"] == "engine defaults" and "output_tok_per_s" in evidence["trials"][0]
    assert body["response_format"]["json_schema"]["schema"]["properties"]["proposals"]["maxItems"] == 3
    stored = "".join(p.read_text(errors="replace") for p in (tmp_path / "results").rglob("*") if p.is_file())
    assert "sk-secret-123" not in stored + out


def test_a_model_slower_than_its_timeout_is_skipped_and_after_three_in_a_row_not_asked_again(tmp_path):
    with Endpoint([json.dumps({"proposals": [{"params": {"itl_ms": 2}, "reason": "late"}]})], delay_s=3) as endpoint:
        trials, out = llm_study(tmp_path, endpoint.url, 5, timeout_s=0.5)
        asked = len(endpoint.requests)
    assert "advisor llm: no proposal this time (no answer within 0.5 s)" in out
    assert "3 failed answers in a row: not asked again in this run" in out and asked == 3
    ran = [t for t in launched(trials) if t.state.name != "WAITING"]
    assert len(ran) == 5 and not any(t.user_attrs.get("proposed_by") == "llm" for t in ran)


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
    from tests.unit.test_advisors import so_far

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
