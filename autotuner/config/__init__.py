"""Experiment and search-space files: YAML validated by pydantic models.

A mistake in a file becomes one `ConfigError` line that names the file, the field and what was expected;
loading never starts, creates or writes anything. Relative paths in a file are resolved against the
folder of the file that names them, so an experiment works from any working directory.

params.py (search spaces), workload.py (what the load generator sends), experiment.py (everything else
and the rules between sections), loading.py (files to models).
"""

from autotuner.config._base import ConfigError
from autotuner.config.experiment import (
    DockerConfig,
    Experiment,
    ExperimentConfig,
    KernelsConfig,
    LlmAdvisorConfig,
    LoadConfig,
    ObjectiveConfig,
    QualityConfig,
    VolumeConfig,
    measured_metrics,
    recheck,
)
from autotuner.config.loading import load_experiment, load_search_space
from autotuner.config.params import BoolParam, CategoricalParam, FloatParam, IntParam, SearchSpaceConfig
from autotuner.config.workload import WorkloadConfig

__all__ = [
    "BoolParam",
    "CategoricalParam",
    "ConfigError",
    "DockerConfig",
    "Experiment",
    "ExperimentConfig",
    "FloatParam",
    "IntParam",
    "KernelsConfig",
    "LlmAdvisorConfig",
    "LoadConfig",
    "ObjectiveConfig",
    "QualityConfig",
    "SearchSpaceConfig",
    "VolumeConfig",
    "WorkloadConfig",
    "load_experiment",
    "load_search_space",
    "measured_metrics",
    "recheck",
]
