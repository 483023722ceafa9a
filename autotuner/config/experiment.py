"""Experiment files: the engine, model, hardware, workload, load, objective and study, and the rules
between sections (`cross_check`). Pure models: reading a file is loading.py's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from autotuner.bench.metric_names import canonical
from autotuner.config._base import ConfigError, _Strict
from autotuner.config.params import Choice, SearchSpaceConfig
from autotuner.config.workload import WorkloadConfig


class ModelConfig(_Strict):
    """The model the engine serves."""

    path: Path = Field(description="Model file or folder, relative to the experiment file.")
    name: str = Field("model", min_length=1, description="Name the server announces (served model name).")


class HardwareConfig(_Strict):
    """What the engine may use of this machine."""

    gpus: int = Field(0, ge=0, description="GPUs the engine may use.")
    cpus: int | None = Field(None, gt=0, description="CPU cores the engine may use (default: all).")
    gpu_system: str | None = Field(
        None, pattern=r"^[a-z0-9_]+$", description="The GPU system as AIConfigurator names it (e.g. h100_sxm), for "
        "the performance-model advisor (default: from the host's GPU name).")


class LoadSearchConfig(_Strict):
    """Bisection for the highest load that still meets the SLO, within one launch (see load_search.py)."""

    max_concurrency: list[Annotated[int, Field(gt=0)]] | None = Field(
        None, min_length=2, max_length=2, description="[low, high]: the concurrency range to search.")
    request_rate: list[Annotated[float, Field(gt=0)]] | None = Field(
        None, min_length=2, max_length=2, description="[low, high]: the request-rate range (req/s) to search.")
    steps: int = Field(6, ge=2, description="Most load levels measured per trial (probes of the search).")
    tolerance: float = Field(
        0.1, gt=0, description="Request rate: stop once the passing and failing rates are this close "
                               "(relative). Concurrency stops when no integer lies between them.")

    @model_validator(mode="after")
    def _range(self) -> LoadSearchConfig:
        if (self.max_concurrency is None) == (self.request_rate is None):
            raise ValueError("give exactly one of max_concurrency or request_rate, as [low, high]")
        low, high = self.max_concurrency or self.request_rate or [0, 0]
        if not low < high:
            raise ValueError(f"low ({low:g}) must be below high ({high:g})")
        return self

    @property
    def kind(self) -> str:
        return "max_concurrency" if self.max_concurrency else "request_rate"


class LoadConfig(_Strict):
    """Load levels applied within one launch: a list, lowest first, or a search for the highest load
    that meets the SLO."""

    max_concurrency: list[int] | None = Field(
        None, min_length=1, description="Levels of requests in flight at once, lowest first (a closed loop).")
    request_rate: list[float] | None = Field(
        None, min_length=1, description="Levels of requests sent per second, lowest first (an open schedule, "
                                        "see arrival).")
    speedup: list[float] | None = Field(
        None, min_length=1, description="A trace workload replayed on its own timestamps, this many times faster "
                                        "(1: as recorded).")
    arrival: Literal["poisson", "constant"] = Field(
        "poisson", description="How requests arrive at a request_rate level: poisson (gamma with burstiness) or "
                               "constant; either offers exactly the rate named.")
    burstiness: float = Field(1.0, gt=0, description="Poisson arrivals' gamma shape: 1 Poisson, < 1 burstier, "
                                                     "> 1 more even (as vllm bench serve's --burstiness).")
    workers: int = Field(1, ge=1, description="Load generator processes (each its own event loop); more when "
                                              "one core cannot keep up with the load.")
    search: LoadSearchConfig | None = Field(
        None, description="Bisect for the highest load meeting objective.slo (instead of a list of levels).")
    stop_at_saturation: bool = Field(True, description="End the sweep when more load stops raising throughput "
                                                       "(levels given as a list).")
    saturation_gain: float = Field(0.05, ge=0, description="Relative throughput gain a higher level must show.")

    @model_validator(mode="after")
    def _one_kind(self) -> LoadConfig:
        given = [k for k in ("max_concurrency", "request_rate", "speedup", "search") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of max_concurrency, request_rate, speedup or search")
        for v in self.max_concurrency or self.request_rate or self.speedup or []:
            if v <= 0:
                raise ValueError(f"load levels must be positive (got {v})")
        return self

    @property
    def max_load(self) -> float:
        """The highest load a trial measures (the top of a search's range)."""
        return max(float(v) for level in self.levels() for v in level.values())

    def levels(self) -> list[dict[str, Any]]:
        """The listed levels; for a search, its two ends (what the first probes measure)."""
        if self.search:
            return [{self.search.kind: v} for v in self.search.max_concurrency or self.search.request_rate or []]
        if self.max_concurrency:
            return [{"max_concurrency": c} for c in self.max_concurrency]
        if self.speedup:
            return [{"speedup": x} for x in self.speedup]
        return [{"request_rate": r} for r in self.request_rate or []]

    @property
    def kind(self) -> str:
        """What a level sets: max_concurrency, request_rate or speedup (the key of each level's dict)."""
        return next(iter(self.levels()[0]))

    @property
    def max_steps(self) -> int:
        """The most levels one trial measures (Hyperband's resource)."""
        return self.search.steps if self.search else len(self.levels())

    def describe(self) -> str:
        if self.search:
            low, high = self.levels()
            name = self.search.kind.replace("max_", "").replace("_", " ")
            return (f"search for the highest {name} meeting the SLO in [{low[self.search.kind]:g}, "
                    f"{high[self.search.kind]:g}], at most {self.search.steps} levels")
        return ", ".join(
            f"trace at {v:g}x" if k == "speedup" else f"{k.replace('max_', '').replace('_', ' ')} {v:g}"
            for lv in self.levels() for k, v in lv.items()
        )


def measured_metrics() -> frozenset[str]:
    """The names a load level measures: what an objective may optimize (bench/metrics.py's LevelResult)."""
    from autotuner.bench.metrics import GOODPUT, LevelResult  # local: bench imports nothing of config

    return frozenset(LevelResult.from_records([], 1.0).metrics()) | {GOODPUT}


class ObjectiveConfig(_Strict):
    """One metric (`metric`, `direction`) or several at once (`metrics`, `directions`: the answer is the
    Pareto front). With several, `metric` and `direction` are the first of them: that metric picks the
    level each trial is scored by, and every metric is read at that level."""

    metric: str = Field("output_tok_per_s", description="LevelResult metric to optimize (best level).")
    direction: Literal["maximize", "minimize"] = Field("maximize", description="Whether more of metric is better.")
    metrics: list[str] | None = Field(
        None, min_length=2, description="Metrics optimized together (multi-objective; the first picks the level).")
    directions: list[Literal["maximize", "minimize"]] | None = Field(None, description="One per metric.")
    max_error_rate: float = Field(0.05, ge=0, le=1, description="A level with more failed requests fails the trial.")
    slo: dict[str, float] = Field(
        default_factory=dict,
        description="Upper limits on level metrics (e.g. ttft_ms_p99: 2000); only levels that meet all count.")

    @model_validator(mode="before")
    @classmethod
    def _primary(cls, data: Any) -> Any:
        # metric/direction mirror the first of metrics/directions, so single-objective readers keep working.
        if not isinstance(data, dict) or not isinstance(data.get("metrics"), list) or not data["metrics"]:
            return data
        firsts = {"metric": data["metrics"][0]}
        if isinstance(data.get("directions"), list) and data["directions"]:
            firsts["direction"] = data["directions"][0]
        for key, first in firsts.items():
            if key in data and data[key] != first:
                raise ValueError(f"give {key} or {key}s, not both ({key} is the first of {key}s)")
        return {**data, **firsts}

    @field_validator("metric", "metrics", mode="before")
    @classmethod
    def _own_names(cls, value: Any) -> Any:
        # AIPerf's, GuideLLM's and vLLM's names for the same metrics (bench/metric_names.py)
        if isinstance(value, str):
            return canonical(value)
        return [canonical(v) if isinstance(v, str) else v for v in value] if isinstance(value, list) else value

    @field_validator("slo", mode="before")
    @classmethod
    def _own_slo_names(cls, value: Any) -> Any:
        return {canonical(k) if isinstance(k, str) else k: v for k, v in value.items()} if isinstance(value, dict) \
            else value

    @field_validator("metric", "metrics")
    @classmethod
    def _measured(cls, value: str | list[str] | None) -> str | list[str] | None:
        # Checked here, before anything starts: an unknown name would otherwise surface after the first launch.
        known = measured_metrics()
        for name in [value] if isinstance(value, str) else value or []:
            if name not in known:
                raise ValueError(f"'{name}' is not a metric the load generator measures "
                                 f"(metrics: {', '.join(sorted(known))})")
        return value

    @model_validator(mode="after")
    def _pairs(self) -> ObjectiveConfig:
        if self.metrics is None:
            if self.directions is not None:
                raise ValueError("directions needs metrics (one direction per metric)")
        elif self.directions is None or len(self.directions) != len(self.metrics):
            raise ValueError(f"give one direction per metric in directions ({len(self.metrics)} metrics)")
        elif len(set(self.metrics)) != len(self.metrics):
            raise ValueError("metrics must not repeat")
        return self

    @property
    def multi(self) -> bool:
        """Several objectives: the study's answer is a Pareto front, not one best trial."""
        return self.metrics is not None

    @property
    def names(self) -> list[str]:
        return list(self.metrics or [self.metric])

    @property
    def all_directions(self) -> list[Literal["minimize", "maximize"]]:
        return list(self.directions or [self.direction])

    def describe(self) -> str:
        """E.g. 'maximize output_tok_per_s, minimize ttft_ms_p99'."""
        return ", ".join(f"{d} {m}" for d, m in zip(self.all_directions, self.names, strict=False))

    @field_validator("slo")
    @classmethod
    def _latency_metrics(cls, slo: dict[str, float]) -> dict[str, float]:
        for name in slo:
            if not re.fullmatch(r"(ttft|tpot|itl|e2e)_ms_(mean|p50|p90|p99|max)|error_rate", name):
                raise ValueError(f"'{name}' is not a latency metric (e.g. ttft_ms_p99, tpot_ms_p90, itl_ms_p99, "
                                 "e2e_ms_p50, error_rate)")
        return slo


class StudyConfig(_Strict):
    """The Optuna study: where it is stored, how it samples and prunes."""

    name: str | None = Field(None, description="Optuna study name (default: the experiment's name).")
    storage: str = Field("sqlite:///autotuner.db", description="Optuna storage URL.")
    sampler: Literal["tpe", "random", "gp", "nsga2"] = Field(
        "tpe", description="Optuna's sampler for the trials no advisor proposed (nsga2 for several metrics).")
    pruner: Literal["none", "ceiling", "median", "wilcoxon", "hyperband"] = Field(
        "none", description="Stop a trial early: ceiling (only when it can no longer beat the best), or one of "
        "Optuna's (median, wilcoxon, hyperband: they compare the same ceilings step by step).")
    seed: int | None = Field(0, description="The sampler's seed (none: a different sequence each run).")
    baseline: bool = Field(True, description="Run the engine's defaults as the first trial.")


class StopConfig(_Strict):
    """When the study ends before its trial budget."""

    target: float | None = Field(None, description="An objective value that ends the study once reached.")
    patience: int | None = Field(
        None, gt=0, description="Stop when the best has not improved by more than the noise for this many trials.")
    min_improvement: float = Field(
        0.05, ge=0, le=1, description="Relative noise floor used until repeated measurements give a better one.")
    max_trials: int | None = Field(
        None, gt=0, description="End the study once it holds this many trials, counted over every worker "
        "(--trials counts one invocation's).")
    same_start_failures: int = Field(
        3, ge=0, description="Stop when this many launches in a row failed to start with the same error (a host "
        "or image fault fails every config alike); 0: never.")


class ConfirmConfig(_Strict):
    """Re-measuring the best configurations at the end, so the winner is not a lucky measurement."""

    top_k: int = Field(2, ge=0, description="How many of the best configurations to launch again with the "
                       "baseline, interleaved (0: no confirmation; the winner is then provisional).")
    repeats: int = Field(3, ge=1, description="Launches of each candidate and of the baseline in the round; the "
                         "winner is the best median of these.")
    near: int = Field(2, ge=0, description="Up to this many more configurations join the round when their first "
                      "value came within the noise of the best's (stop.min_improvement, or the spread measured): "
                      "one reading does not rule them out.")


AdvisorName = Literal["engine", "earlier-studies", "performance-model", "neighbours"]
ADVISORS: tuple[AdvisorName, ...] = ("earlier-studies", "engine")


class LlmAdvisorConfig(_Strict):
    """A language model behind an OpenAI-compatible endpoint that proposes configs (autotuner/advisors/llm.py)."""

    base_url: str = Field(description="The endpoint's base URL, e.g. http://127.0.0.1:8080/v1.")
    model: str = Field(description="The model name the endpoint expects.")
    api_key_env: str | None = Field(None, description="The variable holding the API key (sent, never logged).")
    api: Literal["chat", "completions"] = Field(
        "chat", description="chat: /chat/completions with response_format; completions: /completions with "
                            "response_format and llama-server's json_schema.")
    proposals: int = Field(3, ge=1, le=10, description="Proposals asked for each time the queue is empty.")
    timeout_s: float = Field(120.0, gt=0, description="An answer slower than this is ignored (the study goes on).")
    temperature: float = Field(0.7, ge=0, le=2, description="Sampling temperature of the answer.")
    max_tokens: int = Field(1024, gt=0, description="Longest answer, in tokens (a cut answer proposes nothing).")


class LlmAdvisorEntry(_Strict):
    """An advisor with settings of its own, written as a mapping in the advisors list."""

    llm: LlmAdvisorConfig = Field(description="A language model that proposes configs (see advisors.llm).")


# A name, or a mapping for a configured advisor: errors then speak of the one the entry is meant to be.
AdvisorEntry = Annotated[
    Annotated[AdvisorName, Tag("name")] | Annotated[LlmAdvisorEntry, Tag("llm")],
    Discriminator(lambda v: "name" if isinstance(v, str) else "llm"),
]


class QualityConfig(_Strict):
    """The quality gate (autotuner/quality.py): every candidate answers a fixed prompt set greedily before its
    load levels, and must answer as the engine's defaults did. `quality: off` turns it off."""

    prompts: int = Field(16, gt=0, le=256, description="Prompts of the fixed set each launch answers.")
    max_tokens: int = Field(32, gt=0, description="Tokens per answer (greedy decoding).")
    min_token_agreement: float = Field(
        0.85, ge=0, le=1, description="Share of prompts a candidate must answer token for token as the defaults did.")
    max_logprob_delta: float | None = Field(
        0.01, ge=0, description="Largest mean |difference| of the answers' log-probabilities where both answers "
                                "still agree (none: not checked).")
    concurrency: int = Field(1, gt=0, description="Prompts in flight at once (1: each answer alone, the same "
                             "whatever else the server batches).")


class TrackingConfig(_Strict):
    """Where MLflow records each trial as a run."""

    uri: str | None = Field(None, description="MLflow tracking URI (default: a local store under mlruns/).")


class VolumeConfig(_Strict):
    """A host file or folder mounted into the engine's container (caches, tuned kernel configs)."""

    host: Path = Field(description="Host path, relative to the experiment file; must exist.")
    container: str = Field(pattern=r"^/", description="Absolute path inside the container.")
    read_only: bool = Field(True, description="Mount read-only.")


class DockerConfig(_Strict):
    """How the Docker launcher runs the engine (used with `launcher: docker`).

    The model is always mounted read-only under `model_dir`; the server listens on `container_port`,
    published on 127.0.0.1 at a free host port (or on the host's network with `network_host`).
    """

    image: str = Field(min_length=1, description="Engine image, e.g. autotuner/llama-server:0.3.36 "
                                                 "(scripts/build-engine-image.sh builds it locally).")
    pull: bool = Field(False, description="Pull the image when it is not on the daemon (never implicit).")
    binary: str | None = Field(None, description="Engine executable inside the image (default: the "
                                                 "engine's own name, found on the image's PATH).")
    gpus: Literal["all"] | Annotated[int, Field(ge=1)] | list[int | str] | None = Field(
        None, description="GPUs for the container: 'all', a count, or a list of device ids (none: no GPU).")
    ipc_host: bool = Field(False, description="Share the host's IPC namespace (--ipc host).")
    shm_size: str | None = Field(None, pattern=r"^[0-9]+[bkmgBKMG]?$", description="Size of /dev/shm, e.g. 8g.")
    memory: str | None = Field(None, pattern=r"^[0-9]+[bkmgBKMG]?$", description="Memory limit, e.g. 16g (no "
                               "swap beyond it): a config that needs more is OOM-killed and fails as 'oom'.")
    network_host: bool = Field(False, description="Use the host's network instead of a published port.")
    container_port: int = Field(8000, gt=0, lt=65536, description="Port the server listens on inside.")
    model_dir: str = Field("/models", pattern=r"^/", description="Where the model is mounted inside.")
    volumes: list[VolumeConfig] = Field(default_factory=list, description="Extra mounts.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the container.")
    pass_env: list[str] = Field(default_factory=list, description="Names of host environment variables "
                                "passed through (secrets: their values are never recorded).")
    stop_timeout_s: int = Field(10, ge=0, description="Grace between SIGTERM and SIGKILL on stop.")


class KernelsConfig(_Strict):
    """The kernel stage (autotuner/stages/): before the first trial, the engine's own fused-MoE tuner runs
    once, in the engine's image, for each MoE shard the search space can launch; every trial of that shard
    then reads the tuned configs. `autotuner kernels` runs the stage alone. `autotuner run` on a Ray cluster
    runs the stage on each GPU node instead ([ray](ray.md#the-kernel-stage-on-a-cluster))."""

    gpu: str | None = Field(None, min_length=1, description="GPU model, part of the cache key (default: the name "
                            "nvidia-smi gives GPU 0; 'unknown-gpu' where there is none).")
    engine_version: str | None = Field(None, min_length=1, description="Engine version, part of the cache key "
                                       "(default: the docker image's tag, else the installed engine's version).")
    cache_dir: Path | None = Field(None, description="Where tuned configs are kept, relative to the experiment file "
                                   "(default: <user cache>/kernels).")
    script: str | None = Field(None, min_length=1, description="The engine's tuner script as the engine sees it "
                               "(default: where the engine's image keeps it).")
    batch_sizes: list[Annotated[int, Field(gt=0)]] | None = Field(
        None, min_length=1, description="Token counts to tune for (default: the tuner's own list).")
    timeout_s: float = Field(4 * 3600.0, gt=0, description="Longest run of one tuning job.")


class RayConfig(_Strict):
    """The Ray cluster that runs the trials, with `executor: ray` (docs/ray.md)."""

    address: str | None = Field(
        None, description="The cluster's address (the head's host:port); default: RAY_ADDRESS from the "
                          "environment, else a cluster started on this machine.")
    trials_at_once: int | None = Field(
        None, gt=0, description="Trials in flight at once (default: as many as the cluster's nodes hold of the "
                                "engine's default config, at most a quarter of the trials; one where configs "
                                "may spread over nodes).")


class ExperimentConfig(_Strict):
    """One experiment: the engine and model, the traffic and load, what is optimized, and how the study runs."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                      description="The study's name in Optuna and MLflow, and its folder under results/.")
    engine: str = Field(description="The engine adapter: llamacpp, vllm or sglang.")
    launcher: Literal["process", "docker"] = Field(
        "process", description="Run the engine as a local process or in a container (see docker).")
    docker: DockerConfig | None = Field(None, description="Container settings, for `launcher: docker`.")
    executor: Literal["local", "ray"] = Field(
        "local", description="Where trials run: on this machine (local), or each as a task on a Ray cluster's node "
                             "that holds its GPUs and CPUs (ray; see ray).")
    ray: RayConfig = RayConfig()
    model: ModelConfig
    hardware: HardwareConfig = HardwareConfig()
    search_space: Path = Field(description="Search-space file, relative to the experiment file.")
    workload: WorkloadConfig = WorkloadConfig()
    load: LoadConfig = LoadConfig(max_concurrency=[16])
    objective: ObjectiveConfig = ObjectiveConfig()
    study: StudyConfig = StudyConfig()
    stop: StopConfig = StopConfig()
    confirm: ConfirmConfig = ConfirmConfig()
    quality: QualityConfig | None = Field(
        default_factory=QualityConfig, description="The quality gate's bar; off (or false): no gate.")
    tracking: TrackingConfig = TrackingConfig()
    startup_timeout_s: float = Field(120.0, gt=0, description="Longest wait for the engine to be ready.")
    engine_cache: bool = Field(
        True, description="Keep the engine's compile, autotuning and download caches across the study's launches "
                          "(results/<study>/engine-cache/, a folder per engine version and device, mounted into "
                          "containers): every launch after the first of a config starts warm.")
    engine_args: list[str] = Field(
        default_factory=list, description="Fixed extra engine arguments, added to every trial."
    )
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables for the engine (logged).")
    secret_env: list[str] = Field(
        default_factory=list,
        description="Names of variables taken from the tuner's environment and passed to the engine, never "
                    "logged (HF_TOKEN is always treated so).",
    )
    enqueue: list[dict[str, Choice]] = Field(
        default_factory=list, description="Configs to try first (after the baseline), by param name."
    )
    kernels: KernelsConfig | None = Field(
        None, description="Tune the engine's fused-MoE kernels before the first trial (autotuner kernels); "
                          "{} for the defaults.")
    advisors: list[AdvisorEntry] = Field(
        default_factory=lambda: list[AdvisorEntry](ADVISORS),
        description="Who proposes configs before the sampler, in this order (autotuner/advisors/): the confirmed "
                    "winners of earlier studies in the same storage, the engine's own knowledge, "
                    "performance-model for AIConfigurator's predicted best (the optional extra "
                    "autotuner[aiconfigurator]), and {llm: {base_url, model, api_key_env}} for a language model. "
                    "[] : the sampler alone.")

    @field_validator("quality", mode="before")
    @classmethod
    def _quality_switch(cls, value: Any) -> Any:
        # YAML reads a bare `off` as false and `on` as true.
        if value is False or value is None or (isinstance(value, str) and value.lower() == "off"):
            return None
        if value is True or (isinstance(value, str) and value.lower() == "on"):
            return {}
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ExperimentConfig:
        cross_check(self)
        return self

    @property
    def study_name(self) -> str:
        return self.study.name or self.name


class FieldError(ValueError):
    """A rule between sections, reported at the field that breaks it (not at the top level)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def cross_check(cfg: ExperimentConfig) -> None:
    """Rules between sections. Raises FieldError; run on load and again after command-line overrides."""
    if cfg.load.speedup and not cfg.workload.trace:
        raise FieldError("load.speedup", "a speed-up replays a trace's own timestamps: set workload.trace, or "
                                         "use max_concurrency or request_rate levels")
    if cfg.workload.sessions and (cfg.workload.duration_s or cfg.load.workers > 1):
        raise FieldError("workload.sessions", "sessions are measured whole, by one load generator process: "
                                              "workload.duration_s and load.workers do not apply")
    if cfg.workload.sessions and not cfg.load.max_concurrency:
        raise FieldError("load", "sessions are measured at a number of sessions in flight: use max_concurrency "
                                 "levels")
    if cfg.load.search and not cfg.objective.slo:
        raise FieldError("load.search", "the highest load that meets the SLO needs an SLO: set objective.slo "
                                        "(e.g. {ttft_ms_p99: 2000})")
    if cfg.objective.multi and cfg.study.pruner != "none":
        raise FieldError("study.pruner", f"Optuna's pruners do not support multi-objective studies "
                                         f"(objective.metrics): use none (got '{cfg.study.pruner}')")
    if cfg.objective.multi and cfg.stop.target is not None:
        raise FieldError("stop.target", "a target is one value: with objective.metrics stop by --trials, "
                                        "--timeout or stop.patience (the front's hypervolume)")


def recheck(cfg: ExperimentConfig) -> None:
    """`cross_check` as a ConfigError, for a config changed after loading (model_copy does not validate)."""
    try:
        cross_check(cfg)
    except FieldError as e:
        raise ConfigError(f"field '{e.field}': {e}") from None


class Experiment(_Strict):
    """A loaded experiment: the validated file plus its resolved search space and paths."""

    source: Path
    config: ExperimentConfig
    space: SearchSpaceConfig
    model_path: Path
    space_path: Path


