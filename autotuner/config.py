"""Experiment and search-space files: YAML validated by pydantic models.

A mistake in a file becomes one `ConfigError` line that names the file, the field and what was expected;
loading never starts, creates or writes anything. Relative paths in a file are resolved against the
folder of the file that names them, so an experiment works from any working directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class ConfigError(Exception):
    """A user's file is wrong. The message is one line: file, field, what was expected."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- search space -----------------------------------------------------------------------------------

class _Param(_Strict):
    condition: str | None = Field(
        None, description="Expression over earlier params; the param is only sampled when it is true."
    )


class IntParam(_Param):
    type: Literal["int"]
    low: int
    high: int
    step: int = Field(1, gt=0)
    log: bool = False

    @model_validator(mode="after")
    def _range(self) -> IntParam:
        _check_range(self.low, self.high, self.log)
        return self


class FloatParam(_Param):
    type: Literal["float"]
    low: float
    high: float
    step: float | None = Field(None, gt=0)
    log: bool = False

    @model_validator(mode="after")
    def _range(self) -> FloatParam:
        _check_range(self.low, self.high, self.log)
        return self


Choice = Union[bool, int, float, str]


class CategoricalParam(_Param):
    type: Literal["categorical"]
    choices: list[Choice] = Field(min_length=1)

    @field_validator("choices")
    @classmethod
    def _unique(cls, choices: list[Choice]) -> list[Choice]:
        if len({repr(c) for c in choices}) != len(choices):
            raise ValueError("choices must not repeat")
        return choices


class BoolParam(_Param):
    type: Literal["bool"]


ParamSpec = Annotated[Union[IntParam, FloatParam, CategoricalParam, BoolParam], Field(discriminator="type")]


def _check_range(low: float, high: float, log: bool) -> None:
    if low > high:
        raise ValueError(f"low ({low}) must not exceed high ({high})")
    if log and low <= 0:
        raise ValueError(f"log scale needs low > 0 (got {low})")


class SearchSpaceConfig(_Strict):
    """What the study may change: engine params by the adapter's names, and rules between them."""

    engine: str = Field(description="The engine these params belong to (llamacpp, vllm, sglang).")
    params: dict[str, ParamSpec] = Field(min_length=1)
    constraints: list[str] = Field(
        default_factory=list, description="Expressions that every launched config must satisfy."
    )


# --- experiment -------------------------------------------------------------------------------------

class ModelConfig(_Strict):
    path: Path = Field(description="Model file or folder, relative to the experiment file.")
    name: str = Field("model", min_length=1, description="Name the server announces (served model name).")


class HardwareConfig(_Strict):
    gpus: int = Field(0, ge=0, description="GPUs the engine may use.")
    cpus: int | None = Field(None, gt=0, description="CPU cores the engine may use (default: all).")


class WorkloadConfig(_Strict):
    endpoint: Literal["completions", "chat"] = "completions"
    num_prompts: int = Field(64, gt=0, description="Measured requests per load level.")
    input_len: int = Field(128, gt=0, description="Prompt length in words (about one token each).")
    output_len: int = Field(64, gt=0, description="Generated tokens per request.")
    warmup_requests: int = Field(4, ge=0, description="Unmeasured requests sent before each trial.")
    request_timeout_s: float = Field(120.0, gt=0)
    seed: int = 0


class LoadConfig(_Strict):
    """Load levels applied within one launch, lowest first."""

    max_concurrency: list[int] | None = Field(None, min_length=1)
    request_rate: list[float] | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _one_kind(self) -> LoadConfig:
        if (self.max_concurrency is None) == (self.request_rate is None):
            raise ValueError("give exactly one of max_concurrency or request_rate")
        for v in self.max_concurrency or self.request_rate or []:
            if v <= 0:
                raise ValueError(f"load levels must be positive (got {v})")
        return self

    def levels(self) -> list[dict[str, Any]]:
        if self.max_concurrency:
            return [{"max_concurrency": c} for c in self.max_concurrency]
        return [{"request_rate": r} for r in self.request_rate or []]


class ObjectiveConfig(_Strict):
    metric: str = Field("output_tok_per_s", description="LevelResult metric to optimize (best level).")
    direction: Literal["maximize", "minimize"] = "maximize"
    max_error_rate: float = Field(0.05, ge=0, le=1, description="A level with more failed requests fails the trial.")
    target: float | None = Field(None, description="Stop the study once a trial reaches this value of the metric.")


class StudyConfig(_Strict):
    name: str | None = Field(None, description="Optuna study name (default: the experiment's name).")
    storage: str = Field("sqlite:///autotuner.db", description="Optuna storage URL.")
    sampler: Literal["tpe", "random", "gp", "nsga2"] = "tpe"
    pruner: Literal["none", "median", "wilcoxon", "hyperband"] = "none"
    seed: int | None = 0
    baseline: bool = Field(True, description="Run the engine's defaults as the first trial.")


class TrackingConfig(_Strict):
    uri: str | None = Field(None, description="MLflow tracking URI (default: a local store under mlruns/).")


class DockerConfig(_Strict):
    """How a Docker launch runs the engine (launcher: docker)."""

    image: str | None = Field(None, description="Image to run (default: the engine's, e.g. vllm/vllm-openai).")
    volumes: list[str] = Field(default_factory=list, description="Extra mounts as host:container[:ro]; the "
                               "model folder is mounted read-only at its own path.")


class ExperimentConfig(_Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    engine: str
    launcher: Literal["process", "docker"] = "process"
    model: ModelConfig
    hardware: HardwareConfig = HardwareConfig()
    search_space: Path = Field(description="Search-space file, relative to the experiment file.")
    workload: WorkloadConfig = WorkloadConfig()
    load: LoadConfig = LoadConfig(max_concurrency=[16])
    objective: ObjectiveConfig = ObjectiveConfig()
    study: StudyConfig = StudyConfig()
    tracking: TrackingConfig = TrackingConfig()
    startup_timeout_s: float = Field(120.0, gt=0, description="Longest wait for the engine to be ready.")
    engine_args: list[str] = Field(
        default_factory=list, description="Fixed extra engine arguments, added to every trial."
    )
    engine_env: dict[str, str] = Field(
        default_factory=dict, description="Fixed environment variables for the engine, set in every trial."
    )
    docker: DockerConfig = DockerConfig()
    enqueue: list[dict[str, Choice]] = Field(
        default_factory=list, description="Configs to try first (after the baseline), by param name."
    )

    @property
    def study_name(self) -> str:
        return self.study.name or self.name


class Experiment(_Strict):
    """A loaded experiment: the validated file plus its resolved search space and paths."""

    source: Path
    config: ExperimentConfig
    space: SearchSpaceConfig
    model_path: Path
    space_path: Path


# --- loading ----------------------------------------------------------------------------------------

def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: invalid YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of fields at the top level, got {type(data).__name__}")
    return data


def _one_line(path: Path, err: ValidationError, model: type[BaseModel]) -> ConfigError:
    """The first pydantic error as `file: field 'a.b': message (got X)`."""
    first = err.errors(include_url=False)[0]
    # Discriminated unions put the tag into the location; users never wrote it, so drop it.
    tags = {"int", "float", "categorical", "bool"}
    loc = [str(p) for p in first["loc"] if not (isinstance(p, str) and p in tags)]
    field = ".".join(loc) or "(top level)"
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "unknown field"
    got = "" if first["type"] in ("missing", "extra_forbidden") else f" (got {first['input']!r})"
    if len(got) > 80:
        got = got[:77] + "...)"
    return ConfigError(f"{path}: field '{field}': {msg}{got}")


def load_search_space(path: Path) -> SearchSpaceConfig:
    data = _read_yaml(path)
    try:
        return SearchSpaceConfig.model_validate(data)
    except ValidationError as e:
        raise _one_line(path, e, SearchSpaceConfig) from None


def load_experiment(path: Path | str) -> Experiment:
    """Read and validate an experiment file and the search space it names. Raises ConfigError."""
    path = Path(path)
    data = _read_yaml(path)
    try:
        cfg = ExperimentConfig.model_validate(data)
    except ValidationError as e:
        raise _one_line(path, e, ExperimentConfig) from None

    base = path.parent
    space_path = (base / cfg.search_space).resolve()
    if not space_path.is_file():
        raise ConfigError(f"{path}: field 'search_space': file not found: {space_path}")
    space = load_search_space(space_path)
    if space.engine != cfg.engine:
        raise ConfigError(
            f"{space_path}: field 'engine': search space is for '{space.engine}' but {path} uses '{cfg.engine}'"
        )
    model_path = (base / cfg.model.path).resolve()
    return Experiment(source=path, config=cfg, space=space, model_path=model_path, space_path=space_path)
