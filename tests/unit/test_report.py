"""The status report on synthetic studies: what a reader learns from it (pure summarize + rendering)."""

from __future__ import annotations

import json

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState, create_trial
from rich.console import Console

from autotuner import report
from autotuner.engines._base import get_engine

DIST = {"parallel": IntDistribution(1, 32, log=True), "flash_attn": CategoricalDistribution(["on", "off"])}
HOST = {"hostname": "box", "os": "Linux 6", "cpu_model": "AMD EPYC 9654", "cpu_cores": 192, "cpus_usable": 192,
        "memory_gib": 1511.0, "gpu_count": 8, "gpu_names": "NVIDIA H200", "driver_version": "570.86",
        "cuda_version": "12.8", "gpu_topology": "GPU0\tX\tNV18", "gpus": []}


def lvl(c, tok, *, waiting=0.0, running=4.0, kv=None, cv=0.03, samples=10):
    m = {"max_concurrency": c, "output_tok_per_s": tok, "ttft_ms_p99": 100.0 + c, "tpot_ms_p99": 20.0,
         "e2e_ms_p99": 900.0, "output_tok_per_s_cv": cv, "server_samples": samples,
         "server_requests_running_mean": running, "server_requests_running_max": running,
         "server_requests_waiting_mean": waiting}
    if kv is not None:
        m["server_kv_cache_usage_max"] = kv
    return m


def complete(value, params, levels, **attrs):
    dist = {k: DIST[k] for k in params}
    return create_trial(params=params, distributions=dist, value=value,
                        user_attrs={"levels": levels, "state": "COMPLETE", "command": "llama-server ...", **attrs})


def failed(cls, reason):
    return create_trial(state=TrialState.FAIL, params={"parallel": 32}, distributions={"parallel": DIST["parallel"]},
                        user_attrs={"failure_class": cls, "failure_reason": reason})


def study(trials, target=None):
    s = optuna.create_study(direction="maximize", study_name="night")
    s.add_trials(trials)
    s.set_user_attr("environment", {"engine": "llamacpp", "engine_version": "0.5.0", "launcher": "process", "host": HOST})
    s.set_user_attr("settings", {"load": "concurrency 8, concurrency 32", "objective": "maximize output_tok_per_s"})
    if target:
        s.set_user_attr("target", target)
    return s


def night():
    return study([
        complete(400.0, {}, [lvl(8, 300, waiting=6), lvl(32, 400, waiting=28)], baseline=True),
        failed("assert", "GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max) failed"),
        complete(780.0, {"parallel": 16, "flash_attn": "on"}, [lvl(8, 600), lvl(32, 780, running=16, waiting=0.1)]),
        complete(800.0, {"parallel": 32, "flash_attn": "on"}, [lvl(8, 610), lvl(32, 800, running=30, waiting=0.2)]),
        complete(790.0, {"parallel": 32, "flash_attn": "on"}, [lvl(8, 600), lvl(32, 790, running=30)]),
        failed("infeasible", "cache_type_v=q8_0 needs flash_attn on"),
        complete(500.0, {"parallel": 4, "flash_attn": "off"}, [lvl(8, 450, waiting=4), lvl(32, 500, waiting=28)]),
    ], target=1000.0)


def test_summary_ranks_counts_and_compares_with_the_baseline():
    s = report.summarize(night(), "output_tok_per_s", top_k=3)
    assert [r.number for r in s.top] == [3, 2, 6]  # one row per configuration: #4 measured #3's config again
    assert s.counts == {"COMPLETE": 5, "FAIL": 2}
    assert s.failure_classes == {"assert": 1, "infeasible": 1}
    assert "GGML_ASSERT" in s.failure_examples["assert"]
    # No confirmation round: provisional, each config by its first measurement (#4 is no new config).
    assert not s.confirmed and s.baseline_value == 400.0 and s.gain == pytest.approx(800 / 400 - 1)
    assert s.target == 1000.0 and s.target_gap == pytest.approx(-0.2)
    best = s.best
    assert best.metrics["max_concurrency"] == 32 and best.spread == pytest.approx(0.03)
    assert best.repeats == [] and best.median == 800.0
    assert best.limit == "compute" and s.study_limit == "compute"
    assert "still rises" in best.plateau
    baseline = s.baseline
    assert baseline.limit == "queueing"


def test_next_steps_read_like_an_engineer_would_write_them():
    s = report.summarize(night(), "output_tok_per_s")
    text = "\n".join(s.next_steps)
    assert "target (1,000.0) is 20% away" in text
    assert "compute-bound" in text
    assert "Measure a higher load level" in text
    assert "Re-measure the top trials" in text  # 800 vs 790: 1.2% apart


def test_markdown_report_has_every_section():
    s = report.summarize(night(), "output_tok_per_s")
    s.plots = ["results/night/plots/slice.html"]
    md = report.to_markdown(s, get_engine("llamacpp"), "llama-server --model m -np 32 -fa on")
    for heading in ("## Verdict", "## Environment", "## What was tried", "## Top 4", "## Limits and plateaus",
                    "## Next steps", "## Run the winner", "## Files"):
        assert heading in md
    assert "- Best: trial #3 at 800.0 output_tok_per_s, a single measurement (provisional: not confirmed) (its rate " \
           "moved ±3% over time within one measurement), baseline 400.0: +100.0% over the engine defaults; target 1,000.0: not met (20% short)." in md
    assert "| GPUs | 8 × NVIDIA H200 |" in md and "| Driver / CUDA | 570.86 / 12.8 |" in md
    assert "GPU0\tX\tNV18" in md
    assert "| assert | 1 | GGML_ASSERT" in md
    assert "`-np 32 -fa on`" in md and "engine defaults (baseline)" in md
    assert "results/night/plots/slice.html" in md


def test_json_report_is_plain_json_without_nan():
    s = report.summarize(night(), "output_tok_per_s")
    s.best.metrics["itl_ms_p99"] = float("nan")
    data = json.loads(json.dumps(report.to_json(s, "cmd"), allow_nan=False))
    assert data["best"]["number"] == 3 and data["gain"] == pytest.approx(800 / 400 - 1) and data["command"] == "cmd"
    assert data["best"]["metrics"]["itl_ms_p99"] is None
    assert data["counts"] == {"COMPLETE": 5, "FAIL": 2}


def test_a_study_where_nothing_completed_says_what_to_fix():
    s = report.summarize(study([failed("oom", "failed to allocate 3 GiB")]), "output_tok_per_s")
    assert s.best is None
    assert "Fix what fails before tuning further: 1 trial(s) ended `oom`" in s.next_steps[0]
    assert "No trial completed" in report.to_markdown(s)


def test_kv_cache_bound_winner_gets_kv_advice():
    s = report.summarize(study([
        complete(900.0, {"parallel": 32}, [lvl(32, 900, kv=0.98, running=20, waiting=8)]),
        complete(700.0, {"parallel": 8}, [lvl(32, 700, waiting=20)]),
    ]), "output_tok_per_s")
    assert s.study_limit == "kv-cache" and "98%" in s.study_limit_why
    assert any("KV cache room" in step for step in s.next_steps)


def test_a_baseline_without_a_value_is_explained_in_the_verdict():
    base = create_trial(state=TrialState.FAIL, params={}, distributions={},
                        user_attrs={"baseline": True, "failure_class": "slo-violated",
                                    "failure_reason": "ttft_ms_p99 6,100 > 5,000 at every level"})
    s = report.summarize(study([base, complete(700.0, {"parallel": 8}, [lvl(8, 700)])]), "output_tok_per_s")
    assert s.gain is None
    assert ("(the baseline has no value: trial #0 FAIL slo-violated: ttft_ms_p99 6,100 > 5,000 at every level)"
            in report.verdict_line(s))


def test_the_closing_view_fits_120_columns_with_every_config_whole():
    s = night()
    s.add_trial(complete(810.0, {"parallel": 32, "flash_attn": "on"}, [lvl(8, 610), lvl(32, 810, running=30)],
                         quality={"quality_token_agreement": 0.97, "quality_logprob_delta": 0.004}))
    s.set_user_attr("confirmation", {"0": [401.0, 399.0, 400.0], "3": [801.0, 799.0, 802.0],
                                     "2": [779.0, 781.0, 778.0]})
    summary = report.summarize(s, "output_tok_per_s")
    console = Console(record=True, width=report.WIDTH)
    engine = get_engine("llamacpp")
    report.render(summary, engine, "llama-server -m model.gguf --port 8080 -np 32 -fa on", console)
    lines = console.export_text().splitlines()
    table = lines[:lines.index(next(line for line in lines if line.startswith("  #")))]
    assert max(len(line.rstrip()) for line in table) <= report.WIDTH and "…" not in "\n".join(table)
    header = next(line for line in table if line.lstrip().startswith("trial"))
    assert header.split() == ["trial", "output_tok_per_s", "range", "ttft_ms_p99", "tpot_ms_p99", "e2e_ms_p99",
                              "quality"]
    # each config whole on a line of its own, after the table, in the table's order
    configs = [line for line in lines if line.startswith("  #")]
    assert configs == [f"  #{row.number}  {report.config_text(row, engine)}" for row in summary.top]
    assert f"  #{summary.best.number}  -np 32 -fa on" in configs
    verdict = next(line for line in lines if line.startswith("Best: trial"))
    assert verdict == report.verdict_line(summary)  # one line, never wrapped
