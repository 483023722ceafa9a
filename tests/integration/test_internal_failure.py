"""An unexpected error inside a trial is that trial's failure, with its class and traceback; the study goes on."""

from __future__ import annotations

from pathlib import Path

from autotuner.compose import make_driver
from autotuner.config import load_experiment
from autotuner.core.progress import Progress
from autotuner.engines._base import get_engine
from autotuner.launchers.process import ProcessLauncher
from autotuner.tracking import MlflowTracker


class BrokenLauncher(ProcessLauncher):
    """A launcher with a bug: every start raises what no launcher should."""

    def start(self, spec, log_path, labels):  # type: ignore[override]
        raise ValueError("a bug in a launcher")


def test_a_bug_inside_a_trial_fails_that_trial_and_the_study_goes_on(tmp_path: Path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    (tmp_path / "s.yaml").write_text("engine: llamacpp\nparams:\n  parallel: {type: int, low: 1, high: 8}\n")
    (tmp_path / "exp.yaml").write_text(
        f"name: bug\nengine: llamacpp\nmodel: {{path: {model}}}\nsearch_space: s.yaml\n"
        "load: {max_concurrency: [2]}\n"
        f"study: {{storage: 'sqlite:///{tmp_path}/s.db'}}\nconfirm: {{top_k: 0}}\n")
    driver = make_driver(load_experiment(tmp_path / "exp.yaml"), engine=get_engine("llamacpp"),
                         launcher=BrokenLauncher(tmp_path / "procs"), tracker=MlflowTracker(root=tmp_path / "mlruns"),
                         results_dir=tmp_path / "results", progress=lambda n: Progress(n, "output_tok_per_s"))
    trials = driver.run(2).get_trials()
    assert len(trials) == 2 and all(t.state.name == "FAIL" for t in trials)
    assert {t.user_attrs["failure_class"] for t in trials} == {"internal"}
    assert "ValueError: a bug in a launcher" in trials[0].user_attrs["failure_reason"]
    assert "Traceback" in (tmp_path / "results" / "bug" / "trial-0000" / "error.log").read_text()
