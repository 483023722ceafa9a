"""The experiment as a study ran it, written into the study (its user attribute `experiment`, each trial's
experiment.yaml) and read back by `autotuner report` and `best` when the file is gone or has changed.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from autotuner.config import Experiment, ExperimentConfig, SearchSpaceConfig


def resolved_experiment(exp: Experiment) -> str:
    """The experiment as the study ran it: paths resolved, the search space inlined (YAML)."""
    data = exp.config.model_dump(mode="json")
    data["model"]["path"] = str(exp.model_path)
    for volume, config in zip(
        (data.get("docker") or {}).get("volumes", []), getattr(exp.config.docker, "volumes", []), strict=False
    ):
        volume["host"] = str((exp.source.parent / config.host).resolve())  # read back, the file's folder is gone
    if exp.config.kernels is not None:  # read back, a folder relative to the file would be lost
        from autotuner.stages.kernels import cache_root

        data["kernels"]["cache_dir"] = str(cache_root(exp))
    data["search_space"] = exp.space.model_dump(mode="json", exclude_defaults=True)
    return (f"# {exp.source} with paths resolved and {exp.space_path} inlined\n"
            + yaml.safe_dump(data, sort_keys=False))


def experiment_from_text(text: str, source: str) -> Experiment:
    """Rebuild an Experiment from `resolved_experiment`'s YAML (kept in the study's user attributes)."""
    data = yaml.safe_load(text)
    space = SearchSpaceConfig.model_validate(data.pop("search_space"))
    data["search_space"] = "(inline)"
    cfg = ExperimentConfig.model_validate(data)
    return Experiment(source=Path(source), config=cfg, space=space, model_path=Path(cfg.model.path),
                      space_path=Path(source))
