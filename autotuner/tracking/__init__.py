"""MLflow tracking: `MlflowTracker` (the one module that imports mlflow: tracker.py) and the study
callback that keeps a study's runs (`MlflowStudyLog`, study_log.py); the study's files are artifacts.py.
"""

from autotuner.tracking.study_log import MlflowStudyLog
from autotuner.tracking.tracker import MlflowTracker, default_tracking_uri

__all__ = ["MlflowStudyLog", "MlflowTracker", "default_tracking_uri"]
