"""The engine seam: a sampled configuration -> the exact launch of one inference server.

An engine adapter is pure: it knows flag names, defaults, environment variables, the health path and
what a startup failure looks like in the engine's log, and it never starts, reads or writes anything.
Values from the search space only ever reach the flag declared for their param (`Flag`), so a search
space cannot smuggle arbitrary arguments into the server. A search space may also set environment
variables, but only those the adapter lists in `env_params` (its allow-list), each bound to one param
by `Engine.with_env_params`.
"""

from __future__ import annotations

import copy
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar


@dataclass(frozen=True)
class LaunchSpec:
    """Everything a launcher needs to start one server; argv is a list, never a shell string."""

    argv: list[str]
    port: int
    served_model_name: str
    health_path: str = "/health"
    env: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    # Environment that only changes what the server logs, not how it runs: left out of command_line().
    log_env: dict[str, str] = field(default_factory=dict)
    # Passed to the server, never printed: command_line() shows NAME="$NAME" instead of the value.
    secret_env: dict[str, str] = field(default_factory=dict, repr=False)
    # What the device pool leased this launch (GPU ids, CPU cores); empty: all the launcher sees. Left
    # out of command_line(): a deployment has the node to itself.
    gpu_ids: tuple[int, ...] = ()
    cpu_ids: tuple[int, ...] = ()
    # The study's engine cache (compile, autotuning, downloads) kept across launches: the host folder, and
    # each variable the engine reads -> its subfolder there. Left out of command_line(): a tuner's cache.
    cache_dir: str | None = None
    cache_env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None  # the folder it runs in (None: the launcher's); a tool writing where it runs

    def cache_environment(self, root: str) -> dict[str, str]:
        """The cache variables with the cache folder at `root` (the host's, or where a container mounts it)."""
        return {name: f"{root}/{sub}" for name, sub in self.cache_env.items()} if self.cache_dir else {}

    def command_line(self) -> str:
        env = [f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        env += [f'{k}="${k}"' for k in sorted(self.secret_env)]
        return " ".join([*env, shlex.join(self.argv)])


@dataclass(frozen=True)
class LaunchContext:
    """What a launch needs besides the params: where the model is and where to listen."""

    model_path: Path
    served_model_name: str
    port: int
    host: str = "127.0.0.1"
    binary: str | None = None  # the engine's executable, for a local process
    extra_args: tuple[str, ...] = ()
    gpus: int = 0  # GPUs the experiment declares; 0: the engine's CPU build
    extra_env: tuple[tuple[str, str], ...] = ()  # fixed environment from the experiment (env)


@dataclass(frozen=True)
class Flag:
    """How one param reaches the command line.

    `flag VALUE` for values; for booleans `on`/`off` are the flags to pass for True/False (None: pass
    nothing). `choices`, when set, is the engine's own list of accepted values. `env` makes the param an
    environment variable instead of a flag. `unset` is the value that passes nothing at all (the
    engine's own default, e.g. "auto"). `sep` splits a value into several arguments after the flag
    ("1,2,4" -> `--flag 1 2 4`), for the engines' list-valued flags.
    """

    flag: str | None = None
    on: str | None = None
    off: str | None = None
    default: Any = None
    choices: tuple[Any, ...] | None = None
    help: str = ""
    env: str | None = None
    unset: Any = None
    sep: str | None = None

    def render(self, value: Any) -> list[str]:
        if self.env is not None or (self.unset is not None and value == self.unset):
            return []
        if isinstance(value, bool) and (self.on or self.off):
            chosen = self.on if value else self.off
            return [chosen] if chosen else []
        if self.flag is None:
            raise ValueError("flag has no value form")
        if self.sep is not None:
            return [self.flag, *(v.strip() for v in str(value).split(self.sep) if v.strip())]
        return [self.flag, value_text(value)]

    def render_env(self, value: Any) -> dict[str, str]:
        if self.env is None or (self.unset is not None and value == self.unset):
            return {}
        return {self.env: value_text(value)}


def value_text(value: Any) -> str:
    """A param value as an engine reads it: booleans lower-case, floats without binary noise (a float
    param with step 0.05 samples 0.8500000000000001; the engine gets 0.85)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.12g}"
    return str(value)


# The caches of the PyTorch serving stack that a second launch reuses: Triton kernels and TorchInductor
# graphs (keyed by source hash), FlashInfer's JIT builds (FLASHINFER_WORKSPACE_BASE/.cache/flashinfer) and
# the model hub's downloads.
TORCH_STACK_CACHES = {"TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor",
                      "FLASHINFER_WORKSPACE_BASE": "flashinfer", "HF_HUB_CACHE": "hf-hub"}


@dataclass(frozen=True)
class JsonFlag(Flag):
    """A param that is one key of a flag taking a JSON object, with `fixed` keys beside it:
    `--compilation-config '{"cudagraph_mode": "FULL"}'`, `--speculative-config '{"method": "mtp",
    "num_speculative_tokens": 2}'`. `unset` passes nothing (the engine's own default). One such param per
    flag: the engine keeps the last of a repeated flag."""

    key: str = ""
    fixed: tuple[tuple[str, Any], ...] = ()

    def render(self, value: Any) -> list[str]:
        if self.unset is not None and value == self.unset:
            return []
        return [self.flag or "", json.dumps({**dict(self.fixed), self.key: value})]


@dataclass(frozen=True)
class TokenizeEndpoint:
    """How the server counts tokens (bench/tokenize.py reads it): POST `path` with {text_field: text,
    special_field: whether to add the special tokens a prompt gets} (and "model" when `with_model`)."""

    path: str = "/tokenize"
    text_field: str = "prompt"
    special_field: str = "add_special_tokens"
    with_model: bool = True


class EngineError(ValueError):
    """A search space or experiment asks the engine for something it does not have."""


class EnvParamError(EngineError):
    """A search space's environment param that the engine's allow-list does not take (`param`: its name)."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


class Engine:
    """Base of the engine adapters: a table of params -> flags, and the rules that go with it."""

    name: ClassVar[str]
    flags: ClassVar[Mapping[str, Flag]]
    default_image: ClassVar[str] = "{engine}:{version}"  # format(version=...): where --format docker runs it
    server_metrics: ClassVar[Mapping[str, tuple[str, str, float]]] = {}  # canonical /metrics name -> source
    caches: ClassVar[Mapping[str, str]] = {}  # cache variable -> subfolder of the study's engine cache (cache_env)
    # How the server counts tokens (bench/tokenize.py): prompts exact in its tokens; None: it cannot.
    # vLLM's POST /tokenize and SGLang's (from 0.5.4; /v1/tokenize with /tokenize as an alias) take this.
    tokenize: ClassVar[TokenizeEndpoint | None] = TokenizeEndpoint("/tokenize", "prompt", "add_special_tokens")
    # The allow-list: environment variables a search space may set (`{env: NAME, ...}`), name -> Flag(env=NAME).
    env_params: ClassVar[Mapping[str, Flag]] = {}
    # What runs one launch over the GPUs of several nodes of a Ray cluster, the serving process on one of
    # them (vLLM: its Ray backend, which places its workers by a placement group of its own); None: a
    # launch of this engine stays on one node.
    spread_args: ClassVar[tuple[str, ...] | None] = None
    spread_ip_env: ClassVar[str | None] = None  # the variable that tells it the serving node's cluster address

    def spread_problem(self, params: Mapping[str, Any], engine_args: Sequence[str] = ()) -> str | None:
        """Why this config cannot spread over nodes although the engine can (None: it can)."""
        return None

    def with_env_params(self, bindings: Mapping[str, str]) -> Engine:
        """This engine with the search space's environment params added to its flags: {param: VARIABLE},
        each VARIABLE from `env_params`. Raises EnvParamError for anything else."""
        if not bindings:
            return self
        flags = dict(self.flags)
        for param, variable in bindings.items():
            if param in self.flags:
                raise EnvParamError(param, f"'{param}' is a {self.name} param already: give the environment "
                                           "param another name")
            if variable not in self.env_params:
                allowed = ", ".join(sorted(self.env_params)) or "none"
                raise EnvParamError(param, f"{self.name} takes no environment variable {variable} from a search "
                                           f"space (allowed: {allowed})")
            flags[param] = self.env_params[variable]
        bound = copy.copy(self)
        bound.flags = flags  # type: ignore[misc]  # an instance's own table, the class's left as it is
        return bound

    def check_space(self, param_names: list[str], choices: Mapping[str, list[Any]]) -> None:
        """Raise EngineError for a param this engine does not know, or a value it does not accept."""
        for name in param_names:
            if name not in self.flags:
                raise EngineError(
                    f"'{name}' is not a {self.name} param (known: {', '.join(sorted(self.flags))})"
                )
        for name, values in choices.items():
            allowed = self.flags[name].choices
            bad = [v for v in values if allowed is not None and v not in allowed]
            if bad and allowed is not None:  # bad is empty when allowed is None
                raise EngineError(f"'{name}': {bad[0]!r} is not accepted by {self.name} (accepted: {list(allowed)})")

    def tuning_args(self, params: Mapping[str, Any]) -> list[str]:
        args: list[str] = []
        for name, value in params.items():
            args += self.flags[name].render(value)
        return args

    def tuning_env(self, params: Mapping[str, Any]) -> dict[str, str]:
        """The environment variables that params declared with `Flag(env=...)` set."""
        env: dict[str, str] = {}
        for name, value in params.items():
            env.update(self.flags[name].render_env(value))
        return env

    def describe(self, params: Mapping[str, Any]) -> str:
        """A config as a user reads it: its environment variables, then its flags."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.tuning_env(params).items())
        return " ".join(p for p in (env, shlex.join(self.tuning_args(params))) if p)

    def infeasible(self, params: Mapping[str, Any], context: Mapping[str, Any]) -> list[str]:
        """Rules this config breaks before any launch (empty: launchable).

        `context` holds facts about the experiment: `input_len`, `output_len`, `gpus`, `engine_args`, and
        the model's shape when its config.json is at hand (autotuner.models.facts: `num_attention_heads`,
        `num_key_value_heads`, `num_hidden_layers`, `num_experts`, `max_position_embeddings`, `kv_lora_rank`,
        `num_nextn_predict_layers`).
        Each broken rule is one line saying what the rule is and what broke it."""
        return []

    def cache_env(self) -> dict[str, str]:
        """The caches that make a second launch start faster, as variable -> subfolder of the study's engine
        cache (engines key their entries by config and code hash, so configs share the folder safely)."""
        return dict(self.caches)

    def effective(self, params: Mapping[str, Any], engine_args: Sequence[str] = (),
                  env: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The values a launch gets for each known param: those the experiment's `env` sets, then its params
        as the engine reads them (`expanded`; a param's own variable is set after the experiment's), then
        those its `engine_args` pass (they come after params in argv, and the later flag wins in each
        engine's parser)."""
        return {**env_values(self.flags, env or {}), **self.expanded(params),
                **parse_fixed_args(self.flags, engine_args)}

    def expanded(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """`params` with a param that stands for several (vLLM's parallel_layout) as the ones it sets."""
        return dict(params)

    def defaults(self) -> dict[str, Any]:
        """The engine's own default per param, where the adapter knows it."""
        return {name: flag.default for name, flag in self.flags.items() if flag.default is not None}

    def gpus_needed(self, params: Mapping[str, Any], engine_args: Sequence[str] = ()) -> int:
        """GPUs one launch of this config occupies (for `docker run --gpus`), the experiment's fixed
        `engine_args` (a --tensor-parallel-size there) taken into account."""
        return 0

    def cpus_needed(self, params: Mapping[str, Any]) -> int | None:
        """CPU cores one launch keeps busy, when trials share a CPU-only node (None: all of them)."""
        return None

    def host_memory_needed(self, params: Mapping[str, Any], weights: int, kv_per_token: int) -> int:
        """Bytes of host memory one CPU launch of this config holds: its weights, and the KV cache where
        the config sizes it (engines that do override this)."""
        return weights

    def find_binary(self) -> tuple[str | None, str]:
        """The executable a local process runs (None when it is missing) and what to do when it is."""
        return None, f"no local executable is known for {self.name}"

    def planned_binary(self) -> str | None:
        """The executable a local launch would run, for commands written down before one (a dry run): the
        one found, else where the project's setup installs it (None: the engine's name on PATH)."""
        return self.find_binary()[0]

    def build(self, params: Mapping[str, Any], ctx: LaunchContext) -> LaunchSpec:
        raise NotImplementedError

    def classify_failure(self, log_tail: str, exit_code: int | None = None) -> tuple[str | None, str | None]:
        """Why a server failed, read from its log and exit code (None: still running, or unknown):
        (class such as `oom` or `bad-flag`, the telling line). Either may be None when they do not say."""
        return None, None

    def version_argv(self, binary: str) -> list[str]:
        return [binary, "--version"]

    def parse_version(self, output: str) -> str:
        return output.strip().splitlines()[0] if output.strip() else "unknown"


_ENGINES: dict[str, type[Engine]] = {}


def register(cls: type[Engine]) -> type[Engine]:
    _ENGINES[cls.name] = cls
    return cls


def get_engine(name: str, env_params: Mapping[str, str] | None = None) -> Engine:
    """The adapter called `name`, with a search space's environment params bound ({param: VARIABLE})."""
    from autotuner.engines import llamacpp, sglang, vllm  # noqa: F401  (each registers itself)

    try:
        engine = _ENGINES[name]()
    except KeyError:
        raise EngineError(f"unknown engine '{name}' (engines: {', '.join(sorted(_ENGINES))})") from None
    return engine.with_env_params(env_params or {})


def parse_fixed_args(flags: Mapping[str, Flag], args: Sequence[str]) -> dict[str, Any]:
    """The known params among an experiment's fixed engine_args (`--flag V`, `--flag=V`, `--on`/`--off`),
    by the adapter's `flags`; JSON-valued flags are left out (their value is a whole config)."""
    by_flag = {f.flag: n for n, f in flags.items() if f.flag and not isinstance(f, JsonFlag)}
    switches = {f.on: (n, True) for n, f in flags.items() if f.on}
    switches.update({f.off: (n, False) for n, f in flags.items() if f.off})
    values: dict[str, Any] = {}
    i = 0
    while i < len(args):
        key, _, inline = args[i].partition("=")
        if key in switches:
            values[switches[key][0]] = switches[key][1]
        elif key in by_flag:
            given = inline if inline else (args[i + 1] if i + 1 < len(args) else None)
            if not inline:
                i += 1
            values[by_flag[key]] = _number(given)
        i += 1
    return values


def env_values(flags: Mapping[str, Flag], env: Mapping[str, str]) -> dict[str, Any]:
    """The known params an environment sets: those read from a variable (such as vLLM's
    cpu_kvcache_space_gb, VLLM_CPU_KVCACHE_SPACE)."""
    return {name: _number(env[f.env]) for name, f in flags.items() if f.env and f.env in env}


def _number(value: Any) -> Any:
    for cast in (int, float):
        try:
            return cast(value)
        except (TypeError, ValueError):
            pass
    return value
