"""What MLflow gets from the Optuna storage when it missed something, or when a study resumes."""

from __future__ import annotations

import optuna
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from autotuner.tracking import MlflowStudyLog, MlflowTracker


def test_a_resumed_study_backfills_its_launched_trials_and_never_a_re_proposal(tmp_path):
    study = optuna.create_study(direction="maximize")
    measured = study.ask({"parallel": optuna.distributions.IntDistribution(1, 8)})
    study.tell(measured, 100.0)
    again = study.ask({"parallel": optuna.distributions.IntDistribution(1, 8)})
    again.set_user_attr("duplicate_of", measured.number)  # the sampler re-proposed it: told FAIL, never launched
    study.tell(again, state=TrialState.FAIL)

    tracker = MlflowTracker(root=tmp_path / "mlruns")
    log = MlflowStudyLog(tracker, study_name="resumed", params={}, tags={}, workdir=tmp_path / "results",
                         metric="output_tok_per_s", direction="maximize")
    log.study_started(study)  # a resume logs what an earlier tuner left unlogged

    client = MlflowClient(tracker.uri)
    exp_id = client.get_experiment_by_name("resumed").experiment_id
    runs = client.search_runs([exp_id], "tags.`autotuner.role` = 'trial'")
    assert [r.data.tags["autotuner.trial"] for r in runs] == [str(measured.number)]
    assert runs[0].info.status == "FINISHED"
