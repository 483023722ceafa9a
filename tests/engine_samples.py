"""Every argument an engine adapter can emit: each param at each of its declared values (both sides of a
switch, every choice, every value our search spaces name, a representative number otherwise), plus the
fixed part of a launch. The parser tests feed these to the engines' own parsers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotuner.config import BoolParam, CategoricalParam, FloatParam, IntParam, load_search_space
from autotuner.engines._base import Engine, LaunchContext

REPO = Path(__file__).resolve().parents[1]

# A value for params that take a number or free text (no choices declared).
REPRESENTATIVE: dict[str, list[Any]] = {
    "gpu_memory_utilization": [0.9], "mem_fraction_static": [0.85], "schedule_conservativeness": [0.5],
    "cudagraph_capture_sizes": ["1,2,4,8,16"], "parallel_layout": ["TP8", "TP4xPP2", "TP2xPP4", "TP2xDP4"],
    "chunked_prefill_size": [-1, 8192], "cpu_omp_threads_bind": ["auto", "nobind", "0-1"],
    "moe_config_folder": ["default", "/configs"],
    "decode_context_parallel_size": [1, 2, 4], "mtp_draft_tokens": [0, 1, 2, 3],
    "speculative_num_steps": [1, 3], "speculative_eagle_topk": [1, 4],
}


def space_values(engine: Engine) -> dict[str, list[Any]]:
    """The values each param takes in the search spaces we ship for this engine."""
    values: dict[str, list[Any]] = {}
    for path in sorted((REPO / "search_spaces").glob("*.yaml")):
        space = load_search_space(path)
        if space.engine != engine.name:
            continue
        for name, spec in space.params.items():
            if isinstance(spec, CategoricalParam):
                found = list(spec.choices)
            elif isinstance(spec, BoolParam):
                found = [False, True]
            elif isinstance(spec, (IntParam, FloatParam)):
                found = [spec.low, spec.high]
            values.setdefault(name, [])
            values[name] += [v for v in found if v not in values[name]]
    return values


def param_values(engine: Engine) -> dict[str, list[Any]]:
    """Each param of `engine` -> the values to try."""
    spaces = space_values(engine)
    out: dict[str, list[Any]] = {}
    for name, flag in engine.flags.items():
        if flag.on or flag.off:
            values: list[Any] = [False, True]
        elif flag.choices is not None:
            values = list(flag.choices)
        else:
            values = list(REPRESENTATIVE.get(name, [8]))
        values += [v for v in spaces.get(name, []) if v not in values]
        out[name] = values
    return out


def emitted_argvs(engine: Engine) -> list[list[str]]:
    """One argv per (param, value) that emits arguments, and one full launch with the defaults."""
    argvs = []
    for name, values in param_values(engine).items():
        for value in values:
            args = engine.tuning_args({name: value})
            if args:
                argvs.append(args)
    return argvs


def launch_args(engine: Engine, binary: str, model_path: Path = Path("/models/m")) -> list[str]:
    """The fixed part of a launch (model, host, port, name), without the executable and module."""
    spec = engine.build({}, LaunchContext(model_path=model_path, served_model_name="m", port=8000, binary=binary))
    start = spec.argv.index("-m") + 2 if "-m" in spec.argv else 2
    return spec.argv[start:]


def env_names(engine: Engine) -> list[str]:
    """The engine's own environment variables the adapter can set: its env params, and the allow-list's
    names in the engine's namespace (VLLM_...; NCCL's are NCCL's, not the engine's to check)."""
    own = {flag.env for flag in engine.flags.values() if flag.env}
    return sorted(own | {name for name in engine.env_params if name.startswith(f"{engine.name.upper()}_")})
