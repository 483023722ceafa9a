"""Every check that can be made before anything starts: a wrong file, a param the engine does not
have, a missing model or secret, an unusable storage. Each failure is one ConfigError line naming the
file and field (or the resource), and nothing has been started, created or written yet.
"""

from __future__ import annotations

import importlib.util
import os
from urllib.parse import urlsplit

from autotuner.config import CategoricalParam, ConfigError, Experiment
from autotuner.config.space import ExpressionError, SearchSpace
from autotuner.core.study import check_storage
from autotuner.engines._base import Engine, EngineError, EnvParamError, get_engine


def check(exp: Experiment, need_model: bool = True) -> Engine:
    """Raise ConfigError for the first problem found; return the experiment's engine adapter.
    `need_model` False: a dry run, which only prints commands (the model may live on the GPU box)."""
    cfg = exp.config
    try:
        engine = get_engine(cfg.engine, exp.space.env_params)
    except EnvParamError as e:
        raise ConfigError(f"{exp.space_path}: field 'params.{e.param}.env': {e}") from None
    except EngineError as e:
        raise ConfigError(f"{exp.source}: field 'engine': {e}") from None
    _check_env_params_not_fixed(exp)
    choices = {n: p.choices for n, p in exp.space.params.items() if isinstance(p, CategoricalParam)}
    try:
        engine.check_space(list(exp.space.params), choices)
    except EngineError as e:
        raise ConfigError(f"{exp.space_path}: field 'params': {e}") from None
    try:
        space = SearchSpace(exp.space)
    except ExpressionError as e:
        raise ConfigError(f"{exp.space_path}: {e}") from None
    for i, params in enumerate(cfg.enqueue):
        if why := space.contains(params):
            raise ConfigError(f"{exp.source}: field 'enqueue.{i}': {why}")
    for name in cfg.secret_env:
        if name not in os.environ:
            raise ConfigError(f"{exp.source}: field 'secret_env': {name} is not set in the environment")
    if need_model and not exp.model_path.exists():
        raise ConfigError(f"{exp.source}: field 'model.path': not found: {exp.model_path} "
                          "(scripts/setup.sh makes the quickstart model, scripts/setup-vllm.sh the vLLM one)")
    check_storage(cfg.study.storage, f"{exp.source}: field 'study.storage'")
    if cfg.study.sampler == "gp" and importlib.util.find_spec("torch") is None:
        # Optuna's GPSampler imports torch only when it first samples: fail here, not hours in.
        raise ConfigError(f"{exp.source}: field 'study.sampler': gp needs PyTorch, which is not installed "
                          "(pip install torch), or use tpe")
    return engine


def check_tracking(uri: str | None, field: str) -> None:
    """An MLflow tracking URI that can work: an http(s) server, or a database (checked as a study's
    storage is). A folder would be MLflow's file store, which MLflow no longer develops and which fails
    with its own traceback: say what to give instead. None: the local store under mlruns/."""
    if uri is None:
        return
    scheme = urlsplit(uri).scheme.lower()
    if scheme in ("http", "https", "databricks"):
        return
    if scheme in ("", "file") or len(scheme) == 1:  # a path (a Windows drive letter reads as a scheme)
        raise ConfigError(f"{field}: '{uri}' is a folder (MLflow's file store); give a database such as "
                          f"sqlite:///mlruns/mlflow.db, or an http(s):// tracking server")
    check_storage(uri, field)


def _check_env_params_not_fixed(exp: Experiment) -> None:
    """A variable the space searches must not also be fixed by the experiment: the fixed value would win
    over every sampled one (launch.launch_spec, docker_command.environment) and the study measure nothing."""
    docker_env = exp.config.docker.env if exp.config.docker else {}
    passed = dict.fromkeys(exp.config.docker.pass_env) if exp.config.docker else {}  # the caller's value wins too
    for field, fixed in (("env", exp.config.env), ("docker.env", docker_env), ("docker.pass_env", passed)):
        for param, variable in exp.space.env_params.items():
            if variable in fixed:
                raise ConfigError(f"{exp.source}: field '{field}': {variable} is searched by the space's param "
                                  f"'{param}' ({exp.space_path}): fix it in one place only")
