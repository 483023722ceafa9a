"""The study driver and the trial executor, for real, against the fake OpenAI server as the engine:
what a user would notice of the loop's rules (levels kept, the round's order, re-proposals, retries,
pruning), in seconds and without llama-server."""

from __future__ import annotations

import re
import sys

import pytest

from autotuner.core import asking
from autotuner.core.progress import Progress
from tests.support import (
    WORK,
    launched,
    study,
    worker,
)


def test_an_overloaded_higher_level_keeps_the_lower_levels_that_met_the_slo(tmp_path):
    trials, out = study(tmp_path, "  capacity: {type: categorical, choices: [4]}\n  itl_ms: {type: categorical, choices: [5]}\n",
                        WORK + "load: {max_concurrency: [2, 8]}\nconfirm: {top_k: 0}\n", 1, ", baseline: false")
    (t,) = trials
    assert t.state.name == "COMPLETE", t.user_attrs.get("failure_reason")
    levels = t.user_attrs["levels"]
    assert [m["max_concurrency"] for m in levels] == [2, 8] and levels[1]["error_rate"] > 0.3
    assert t.user_attrs["scored_level"] == 0 and t.value == levels[0]["output_tok_per_s"]
    assert "the lower levels that met the SLO count" in out


ITL = "  itl_ms: {type: categorical, choices: [20]}\n"


def test_a_level_where_the_server_dropped_a_request_is_measured_once_more(tmp_path):
    # Streams 1-16 are the first level, 17-20 the second's warm-up (at its concurrency), 21-36 the second
    # level; 24 drops, and its re-measurement (37-52) drops none.
    # (The first 4 of a level open new connections: one dropped on a reused connection would be resent.
    # 20 ms between tokens: none of the first 4 ends before the 4th connects, a stall of the machine
    # included: at 5 ms the window was 80 ms.)
    trials, out = study(tmp_path, "  drop_streams: {type: categorical, choices: ['24']}\n" + ITL,
                        WORK + "load: {max_concurrency: [2, 4]}\nconfirm: {top_k: 0}\n", 1, ", baseline: false")
    (t,) = trials
    levels = t.user_attrs["levels"]
    assert [(m["max_concurrency"], m["failed"]) for m in levels] == [(2, 0), (4, 0)]
    assert "dropped_before_remeasure" not in levels[0] and levels[1]["dropped_before_remeasure"] == 1
    assert "the server dropped 1 of 16 requests at concurrency 4 and is still up: measuring it once more" in out
    assert t.user_attrs["scored_level"] == 1  # the value is the re-measured level's


def test_a_level_that_drops_requests_again_ends_the_sweep(tmp_path):
    trials, out = study(tmp_path, "  drop_streams: {type: categorical, choices: ['24 39']}\n" + ITL,
                        WORK + "load: {max_concurrency: [2, 4]}\nconfirm: {top_k: 0}\n", 1, ", baseline: false")
    (t,) = trials
    levels = t.user_attrs["levels"]
    assert t.state.name == "COMPLETE" and [m["failed"] for m in levels] == [0, 1]
    assert levels[1]["dropped_before_remeasure"] == 1 and t.user_attrs["scored_level"] == 0
    assert out.count("measuring it once more") == 1 and "the lower levels that met the SLO count" in out


def test_the_round_interleaves_the_top_configs_with_the_baseline(tmp_path):
    trials, out = study(tmp_path, "  itl_ms: {type: categorical, choices: [2, 5, 20]}\n",
                        WORK + "load: {max_concurrency: [4]}\nconfirm: {top_k: 2, repeats: 2}\n"
                        "enqueue: [{itl_ms: 2}, {itl_ms: 5}, {itl_ms: 20}]\n", 4)
    order = [int(n) for n in re.findall(r"\[confirm \d/6 · #(\d+)\] confirming", out)]
    # The two best first values (as measured: a stall of this machine can swap itl 2 and 5), then the
    # defaults, twice.
    best = sorted((t for t in trials if t.number), key=lambda t: -t.value)[:2]
    assert order == [best[0].number, best[1].number, 0] * 2, out[-3000:]
    assert "median of 2 confirmation launches" in (tmp_path / "results" / "fake" / "report.md").read_text()


def test_a_config_within_the_noise_of_the_best_joins_the_round(tmp_path):
    """top_k 1 names one config; a second whose first value came within the noise of the best's is not
    ruled out on one reading (near: 1): it is launched again with them. One far behind is not."""
    # Levels of ~0.5 s (32 requests of 32 tokens at 2 ms, 4 at once): a stall of the shared machine moves
    # them by a few percent, not the 30% of the noise rule; the far config (10 ms) reads 80% behind.
    trials, out = study(tmp_path, "  itl_ms: {type: categorical, choices: [2, 2.02, 10]}\n",
                        "workload: {num_prompts: 32, input_len: 8, output_len: 32, warmup_requests: 0}\n"
                        "load: {max_concurrency: [4]}\nconfirm: {top_k: 1, repeats: 1, near: 1}\n"
                        "stop: {min_improvement: 0.3}\n"
                        "enqueue: [{itl_ms: 2}, {itl_ms: 2.02}, {itl_ms: 10}]\n", 4)
    order = [int(n) for n in re.findall(r"\[confirm \d/3 · #(\d+)\] confirming", out)]
    close = sorted((t for t in trials if t.number and t.params["itl_ms"] < 10), key=lambda t: -t.value)
    assert order == [close[0].number, close[1].number, 0], out[-3000:]


def test_a_reproposed_config_is_never_launched_again_nor_counted(tmp_path):
    trials, out = study(tmp_path, "  capacity: {type: categorical, choices: [8, 16]}\n",
                        WORK + "load: {max_concurrency: [2]}\nconfirm: {top_k: 0}\n", 10)
    ran = launched(trials)
    assert len(ran) == 3  # the baseline and the two configs of the space: each once
    assert len({tuple(sorted(t.params.items())) for t in ran}) == 3
    ghosts = [t for t in trials if t.user_attrs.get("duplicate_of") is not None]
    assert ghosts and all(t.state.name == "FAIL" and "failure_class" not in t.user_attrs for t in ghosts)
    assert "stopping: every configuration of the search space was measured" in out
    assert "[trial 4/10" not in out  # a re-proposal is no trial of the budget


def test_a_config_another_worker_is_measuring_now_is_a_re_proposal_too(tmp_path):
    space, body = "  capacity: {type: categorical, choices: [8, 16]}\n", WORK + "load: {max_concurrency: [2]}\n"
    first, _ = worker(tmp_path, space, body, ", baseline: false")
    second, _ = worker(tmp_path, space, body, ", baseline: false")  # the same seed: the same first proposal
    running, params = asking.ask_new(first, Progress(2, "output_tok_per_s"))  # RUNNING: its worker measures it
    trial, other = asking.ask_new(second, Progress(2, "output_tok_per_s"))
    assert other != params
    [ghost] = [t for t in second.study.get_trials() if t.user_attrs.get("duplicate_of") is not None]
    assert ghost.params == params and ghost.user_attrs["duplicate_of"] == running.number


def test_a_startup_timeout_is_measured_once_more_before_it_is_final(tmp_path):
    trials, out = study(tmp_path, "  start_delay_s: {type: categorical, choices: [4]}\n",
                        WORK + "load: {max_concurrency: [2]}\nconfirm: {top_k: 0}\n", 3, ", baseline: false",
                        startup_s=1)
    timeouts = [t for t in trials if t.user_attrs.get("failure_class") == "startup-timeout"]
    assert len(timeouts) == 2 and timeouts[1].user_attrs["retry_of"] == timeouts[0].number
    assert "measuring it once more" in out


def test_a_launch_whose_port_another_program_answers_on_is_measured_once_more_on_another(tmp_path, monkeypatch):
    from autotuner.core import executor
    from autotuner.launchers._base import free_port
    from tests.fake_openai_server import FakeOpenAIServer

    with FakeOpenAIServer(port=free_port()) as other:  # another program, healthy, on the port given first
        ports = iter([int(other.base_url.rsplit(":", 1)[1])])
        monkeypatch.setattr(executor, "free_port", lambda: next(ports, None) or free_port())
        trials, out = study(tmp_path, "  itl_ms: {type: categorical, choices: [2]}\n",
                            WORK + "load: {max_concurrency: [2]}\nconfirm: {top_k: 0}\nquality: off\n", 2,
                            ", baseline: false")
        assert other.served == 0  # nothing of the trial was measured on it
    taken, again = launched(trials)
    assert taken.user_attrs["failure_class"] == "port-taken", taken.user_attrs.get("failure_reason")
    assert "another program listens on port" in taken.user_attrs["failure_reason"]
    assert again.state.name == "COMPLETE" and again.user_attrs["retry_of"] == taken.number
    assert "measuring it once more" in out


def test_a_trial_that_cannot_beat_the_best_is_pruned_at_the_low_level(tmp_path):
    trials, out = study(tmp_path, "  itl_ms: {type: categorical, choices: [1, 50]}\n",
                        WORK + "load: {max_concurrency: [2, 8]}\nconfirm: {top_k: 0}\n"
                        "enqueue: [{itl_ms: 1}, {itl_ms: 50}]\n", 2, ", baseline: false, pruner: ceiling")
    fast, slow = trials
    assert fast.state.name == "COMPLETE" and len(fast.user_attrs["levels"]) == 2
    assert slow.state.name == "PRUNED" and len(slow.user_attrs["levels"]) == 1
    assert "it can reach at most" in out


def test_a_config_that_answers_differently_fails_the_quality_gate_before_its_levels(tmp_path):
    trials, out = study(tmp_path, "  wrong_answers: {type: bool}\n",
                        WORK + "load: {max_concurrency: [2]}\nconfirm: {top_k: 0}\n"
                        "enqueue: [{wrong_answers: true}, {wrong_answers: false}]\n", 3)
    base, wrong, same = trials
    assert base.user_attrs["quality"]["quality_tok_per_s"] > 0 and "quality_token_agreement" not in base.user_attrs["quality"]
    assert wrong.state.name == "FAIL" and wrong.user_attrs["failure_class"] == "quality"
    assert wrong.user_attrs["levels"] == []  # no load level spent on it
    assert wrong.user_attrs["quality"]["quality_token_agreement"] == 0.0
    assert "token agreement 0.00 (bar 0.85)" in wrong.user_attrs["failure_reason"]
    assert "from token 2" in wrong.user_attrs["failure_reason"]  # where the answers part, and how
    assert wrong.user_attrs["quality"]["quality_speed_ratio"] > 0  # what its speed would have been
    assert same.state.name == "COMPLETE" and same.user_attrs["quality"]["quality_token_agreement"] == 1.0
    assert same.user_attrs["quality"]["quality_logprob_delta"] == 0.0
    report = (tmp_path / "results" / "fake" / "report.md").read_text()
    assert "## Failed the quality gate" in report and f"#{wrong.number} `--wrong-answers`" in report
    assert "| reference |" in report and "| 1.00, Δlp 0.000 |" in report


def test_without_a_baseline_trial_the_defaults_answer_first_and_a_resumed_study_keeps_the_reference(tmp_path):
    space = "  wrong_answers: {type: bool}\n"
    body = WORK + "load: {max_concurrency: [2]}\nconfirm: {top_k: 0}\nenqueue: [{wrong_answers: true}]\n"
    trials, out = study(tmp_path, space, body, 1, ", baseline: false")
    (reference,) = (tmp_path / "results" / "fake").glob("quality-reference-*")
    assert (reference / "server.log").exists()
    assert trials[0].user_attrs["failure_class"] == "quality"
    (reference / "server.log").unlink()
    trials, out = study(tmp_path, space, body.replace("enqueue: [{wrong_answers: true}]\n", ""), 1, ", baseline: false")
    assert not (reference / "server.log").exists()  # the stored reference served: no launch to answer again
    assert len(list((tmp_path / "results" / "fake").glob("quality-reference-*"))) == 1
    assert trials[-1].state.name == "COMPLETE" and trials[-1].params == {"wrong_answers": False}


def test_quality_off_asks_nothing(tmp_path):
    trials, out = study(tmp_path, "  wrong_answers: {type: categorical, choices: [true]}\n",
                        WORK + "load: {max_concurrency: [2]}\nconfirm: {top_k: 0}\nquality: off\n", 2)
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    assert not any(t.user_attrs.get("quality") for t in trials)


def test_a_time_bounded_level_and_its_timeout_from_the_rate_the_config_showed(tmp_path):
    # 50 ms between tokens: ~20 tok/s a request. The second level's 40 requests in flight need ~3 x 40 x 64 / rate
    # seconds by the rate the first level showed: well above the 120 s floor, so the rule, not the floor, decides.
    trials, out = study(tmp_path, "  itl_ms: {type: categorical, choices: [50]}\n",
                        "workload: {num_prompts: 400, input_len: 8, output_len: 64, warmup_requests: 1, "
                        "duration_s: 1.0}\nload: {max_concurrency: [1, 40]}\nconfirm: {top_k: 0}\nquality: off\n",
                        1, ", baseline: false")
    (t,) = trials
    first, second = t.user_attrs["levels"]
    assert first["completed"] < 400 and second["completed"] < 400  # ~1 s of new requests each, not 400
    assert "(400 requests or 1 s)" in out
    expected = 3 * 40 * 64 / first["output_tok_per_s"]
    assert expected > 120 and second["request_timeout_s"] == pytest.approx(min(expected, 3600.0))


def test_the_baseline_says_at_which_loads_the_defaults_miss_the_slo(tmp_path):
    # The engine's defaults answer after 50 ms at every load; the SLO allows 20: both loads are missed,
    # and the user learns it from the baseline, not from a study that silently scores nothing.
    space = "  capacity: {type: categorical, choices: [4]}\n"
    body = (WORK + "load: {max_concurrency: [1, 2]}\nconfirm: {top_k: 0}\nengine_args: ['--ttft-s', '0.05']\n"
            "objective: {metric: output_tok_per_s, slo: {ttft_ms_p99: 20}}\n")
    (t,), out = study(tmp_path, space, body, 1)
    assert t.user_attrs["baseline"] and t.state.name == "FAIL"
    for load in (1, 2):
        assert re.search(rf"the defaults miss the SLO at concurrency {load}: ttft_ms_p99 5\d\.\d > 20", out), out
    assert "raise its limit in objective.slo, under a new study name" in out

    (tmp_path / "s.db").unlink()
    (t,), out = study(tmp_path, space, body.replace("ttft_ms_p99: 20", "ttft_ms_p99: 500"), 1)
    assert t.user_attrs["baseline"] and t.state.name == "COMPLETE" and "miss the SLO" not in out


def test_a_worker_takes_the_reference_from_a_running_baseline_that_has_answered(tmp_path, monkeypatch):
    # The baseline stores its answers before its load levels: another worker that needs the reference
    # meanwhile takes them, rather than waiting for the baseline's end or launching the defaults again.
    space = "  wrong_answers: {type: bool}\n"
    body = WORK + "load: {max_concurrency: [2]}\nconfirm: {top_k: 0}\nenqueue: [{wrong_answers: false}]\n"
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    base = study(tmp_path / "first", space, body, 1)[0][0]
    assert base.user_attrs["baseline"] and base.user_attrs["early_answers"]
    other, out = worker(tmp_path / "second", space, body, ", baseline: false")
    running = other.study.ask()  # another worker's baseline, in flight, past its answers
    running.set_user_attr("baseline", True)
    running.set_user_attr("early_answers", base.user_attrs["early_answers"])

    recover = other._recover_dead_workers

    def waited(progress):  # each poll of a waiting worker calls it: this baseline never ends, so fail, not hang
        if sys._getframe(1).f_code.co_name == "_await_baseline_answers":
            raise AssertionError("the worker waited for answers the running baseline had given")
        recover(progress)

    monkeypatch.setattr(other, "_recover_dead_workers", waited)
    trials = other.run(1).get_trials()
    assert not list((tmp_path / "second" / "results" / "fake").glob("quality-reference-*"))
    (measured,) = [t for t in trials if t.state.name != "RUNNING"]
    assert measured.state.name == "COMPLETE" and measured.user_attrs["quality"]["quality_token_agreement"] == 1.0
    assert other.study.user_attrs["quality_reference"] == base.user_attrs["early_answers"]


def test_a_worker_checks_no_answers_when_the_running_baseline_gave_none(tmp_path):
    # The defaults gave no answers (here: said so by a running baseline): launching them once more for the
    # reference would cost a model load for the same outcome; the worker measures without the check.
    space = "  wrong_answers: {type: bool}\n"
    body = WORK + "load: {max_concurrency: [2]}\nconfirm: {top_k: 0}\nenqueue: [{wrong_answers: true}]\n"
    other, out = worker(tmp_path, space, body, ", baseline: false")
    running = other.study.ask()
    running.set_user_attr("baseline", True)
    running.set_user_attr("early_answers", {"no_answers": "HTTP 500 on every prompt"})
    trials = other.run(1).get_trials()
    assert not list((tmp_path / "results" / "fake").glob("quality-reference-*"))
    (measured,) = [t for t in trials if t.state.name != "RUNNING"]
    assert measured.state.name == "COMPLETE"  # its wrong answers unchecked: no reference to check them by
    assert "the defaults gave no reference answers (HTTP 500 on every prompt)" in out.getvalue()
