"""Advisors in a whole study of the fake engine (a real server process, SQLite, MLflow): proposals first,
checked, never launched twice; workers queueing a proposal once; earlier studies' winners; --advice
ask; values an engine refused never launched again; an LLM advisor over a real HTTP endpoint.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from autotuner.advisors import Proposal, StudySoFar
from autotuner.config import load_experiment
from autotuner.core import advising
from tests.support import (
    WORK,
    Endpoint,
    Scripted,
    launched,
    study,
    worker,
)


def test_the_driver_takes_proposals_first_checks_them_and_never_launches_one_twice(tmp_path, monkeypatch):
    advisor = Scripted([Proposal({"itl_ms": 5, "capacity": 1}, "too small to serve"),
                        Proposal({"itl_ms": 2, "capacity": 64}, "the fast one"),
                        Proposal({"itl_ms": 2, "capacity": 64}, "again")])
    monkeypatch.setattr("autotuner.compose.advisors", lambda driver: [advisor])
    trials, out = study(tmp_path, "  itl_ms: {type: categorical, choices: [2, 5, 20]}\n"
                        "  capacity: {type: categorical, choices: [64, 1]}\n",
                        WORK + "load: {max_concurrency: [2]}\nconfirm: {top_k: 0}\nquality: off\n", 5)
    ran = launched(trials)
    by = [(t.user_attrs.get("proposed_by"), t.user_attrs.get("reason")) for t in ran]
    assert by[0][0] == "baseline"
    assert ("scripted", "too small to serve") in by and ("scripted", "the fast one") in by
    assert sum(t.params.get("itl_ms") == 2 and t.params.get("capacity") == 64 for t in ran) == 1  # once
    assert by[-1][0] in (None, "retry")  # the advisors had nothing new: the sampler's slot (or its retry)
    assert "by scripted: the fast one" in out
    assert advisor.seen[0] == 1 and advisor.seen == sorted(set(advisor.seen))  # asked again with more evidence


def test_workers_advising_at_once_queue_a_proposal_once(tmp_path):

    from autotuner.core.progress import Progress

    class Slow(Scripted):  # thinks long enough for the other worker to find the queue empty too
        def propose(self, s: StudySoFar) -> list[Proposal]:
            time.sleep(0.5)
            return super().propose(s)

    space = "  itl_ms: {type: categorical, choices: [2, 5, 20]}\n"
    drivers = [worker(tmp_path, space, WORK + "load: {max_concurrency: [2]}\nquality: off\n")[0] for _ in range(2)]
    for d in drivers:
        d.advisors = [Slow([Proposal({"itl_ms": 2}, "the fast one")])]
    threads = [threading.Thread(target=advising.advise, args=(d, Progress(2, "output_tok_per_s"), 2)) for d in drivers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)  # neither waits forever on the other's lock
    queued = drivers[0].study.get_trials()
    assert [t.system_attrs["fixed_params"] for t in queued] == [{"itl_ms": 2}]
    assert sum(len(d.advisors[0].seen) for d in drivers) == 1  # the other found it queued: not asked


def test_an_infeasible_proposal_is_refused_with_the_rule_it_breaks(tmp_path, monkeypatch):
    advisor = Scripted([Proposal({"itl_ms": 5}, "breaks the rule")])
    monkeypatch.setattr("autotuner.compose.advisors", lambda driver: [advisor])
    trials, out = study(tmp_path, "  itl_ms: {type: categorical, choices: [2, 5]}\nconstraints: ['itl_ms < 5']\n",
                        WORK + "load: {max_concurrency: [2]}\nconfirm: {top_k: 0}\nquality: off\n", 2)
    assert "advisor scripted: proposed --itl-s 0.005: refused (itl_ms < 5)" in out
    assert not any(t.user_attrs.get("proposed_by") == "scripted" for t in trials)  # the sampler's own may fail


def test_a_later_study_starts_from_an_earlier_studys_confirmed_winner(tmp_path: Path):
    space = "  itl_ms: {type: categorical, choices: [1, 10, 20, 30]}\n"
    body = WORK + "load: {max_concurrency: [2]}\nconfirm: {top_k: 2, repeats: 1}\nquality: off\n"
    study(tmp_path, space, body + "enqueue: [{itl_ms: 1}, {itl_ms: 20}]\n", 2, ", baseline: false")
    trials, out = study(tmp_path, space, body, 1, ", baseline: false, name: second")
    second = [t for t in trials if t.user_attrs.get("proposed_by") == "earlier-studies"]
    assert second and second[0].params == {"itl_ms": 1}
    assert "the confirmed winner of study 'fake'" in second[0].user_attrs["reason"]


def asked_study(tmp_path: Path, answers: list) -> tuple[list, str, list[str]]:
    """A study of the fake engine with --advice ask, the user's answers scripted in turn."""
    import io

    from rich.console import Console

    from autotuner.compose import make_driver
    from autotuner.core.progress import Progress
    from autotuner.launchers.process import ProcessLauncher
    from autotuner.tracking import MlflowTracker
    from tests.fake_engine import FakeEngine

    model = tmp_path / "model.bin"
    model.write_bytes(b"fake")
    (tmp_path / "s.yaml").write_text("engine: fake\nparams:\n  itl_ms: {type: categorical, choices: [2, 5, 20]}\n")
    (tmp_path / "exp.yaml").write_text(
        f"name: fake\nengine: fake\nmodel: {{path: {model}, name: m}}\nsearch_space: s.yaml\n"
        f"study: {{storage: 'sqlite:///{tmp_path}/s.db', seed: 0}}\n" + WORK
        + "load: {max_concurrency: [2]}\nconfirm: {top_k: 0}\nquality: off\n")
    questions: list[str] = []

    def ask(question: str, params: dict):
        questions.append(question)
        return answers[len(questions) - 1] if len(questions) <= len(answers) else False

    out = io.StringIO()
    driver = make_driver(load_experiment(tmp_path / "exp.yaml"), engine=FakeEngine(),
                         launcher=ProcessLauncher(tmp_path / "procs"), tracker=MlflowTracker(root=tmp_path / "mlruns"),
                         results_dir=tmp_path / "results", advice="ask", ask=ask,
                         progress=lambda total: Progress(total, "output_tok_per_s", Console(file=out, width=300)))
    driver.advisors = [Scripted([Proposal({"itl_ms": 20}, "slow but steady"), Proposal({"itl_ms": 5}, "middle")])]
    return driver.run(3).get_trials(), out.getvalue(), questions


def test_ask_launches_a_yes_skips_a_no_and_checks_an_edit(tmp_path):
    trials, out, questions = asked_study(tmp_path, [False, {"itl_ms": 2}])
    assert questions[0] == "scripted proposes --itl-s 0.02: slow but steady" and "proposal declined" in out
    edited = [t for t in trials if t.user_attrs.get("proposed_by") == "scripted"]
    assert [t.params for t in edited] == [{"itl_ms": 2}]  # the user's edit of "middle", not the proposal
    assert edited[0].user_attrs["reason"] == "middle (edited by the user)"
    assert not any(t.params == {"itl_ms": 20} for t in trials if t.user_attrs.get("proposed_by") == "scripted")


def test_an_edit_off_the_space_is_refused_and_nothing_launches_for_it(tmp_path):
    trials, out, _ = asked_study(tmp_path, [{"itl_ms": 7}, True])
    assert "edited config: refused ('itl_ms' must be one of [2, 5, 20] (got 7))" in out
    taken = [t.params for t in trials if t.user_attrs.get("proposed_by") == "scripted"]
    assert taken == [{"itl_ms": 5}]  # the next proposal, said yes to


def test_the_study_never_launches_a_refused_value_again(tmp_path, monkeypatch):
    advisor = Scripted([Proposal({"kernel": "turbo", "itl_ms": 5}, "turbo, slower tokens")])
    monkeypatch.setattr("autotuner.compose.advisors", lambda driver: [advisor])
    trials, out = study(tmp_path, "  kernel: {type: categorical, choices: [safe, turbo]}\n"
                        "  itl_ms: {type: categorical, choices: [2, 5, 20]}\n",
                        WORK + "load: {max_concurrency: [2]}\nconfirm: {top_k: 0}\nquality: off\n"
                        "enqueue: [{kernel: turbo, itl_ms: 2}]\n", 6)
    turbo = [t for t in launched(trials) if t.params.get("kernel") == "turbo"]
    refused = [t for t in turbo if t.user_attrs.get("failure_class") == "bad-flag"]
    assert len(refused) == 1 and "invalid choice: 'turbo'" in refused[0].user_attrs["failure_reason"]
    assert "never again with this engine version: kernel='turbo' was refused" in out
    assert "advisor scripted: proposed --kernel turbo --itl-s 0.005: refused (kernel='turbo' was refused" in out
    assert all(t.user_attrs.get("failure_class") == "infeasible" for t in turbo if t not in refused)


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
