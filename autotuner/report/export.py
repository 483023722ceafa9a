"""The winner, ready to run: an engine command line, a `docker run` line, or a file the engine reads.

Pure: every function maps a launch (autotuner.core.launch: its spec, command and `docker run` argv, all from
the one builder every trial used) to text, and never looks at the disk, Docker or the engine. Formats:

- `args`   the command that starts the winner where the study ran it, on the export port: the engine's
           command line (launcher process), or the `docker run` line (launcher docker).
- `docker` `docker run` for the same configuration: a docker study's exactly as its trials ran (image,
           entrypoint, environment, GPUs, mounts), a process study's in the engine's image.
- `config` the engine's own configuration file: vLLM and SGLang read YAML (`--config FILE`, keys are
           the long option names without dashes); llama.cpp's llama-server reads INI presets from
           `$XDG_CONFIG_HOME/llama.cpp/config.ini` (or ~/.config/llama.cpp/config.ini,
           /etc/llama.cpp/config.ini; keys are option names without dashes, `[*]` applies to every
           model) since the version the project builds (common/arg.cpp, common_params_apply_system_config).
- `yaml`   YAML: the engine's config file for vLLM and SGLang; for llama.cpp, which reads no YAML, a
           record of the winner (params, flags, command) that says so.
- `env`    environment variables the engine reads (llama.cpp's LLAMA_ARG_*, from the `set_env` of
           each option in common/arg.cpp); options without one are listed as still needing their flag.
- `k8s`    a Kubernetes Deployment and Service of the same container (report/kubernetes.py).
- `helm-values`  values for the vLLM production stack's chart, the same container (report/helm_values.py).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from autotuner.engines._base import LaunchSpec

FORMATS = ("args", "docker", "config", "yaml", "env", "k8s", "helm-values")

# llama.cpp: short flag -> (long option name, env var or None). From common/arg.cpp of the vendored
# llama.cpp (llama-cpp-python 0.3.36): -tb has no env var.
LLAMACPP_OPTIONS: dict[str, tuple[str, str | None]] = {
    "-np": ("parallel", "LLAMA_ARG_N_PARALLEL"),
    "-t": ("threads", "LLAMA_ARG_THREADS"),
    "-tb": ("threads-batch", None),
    "-b": ("batch-size", "LLAMA_ARG_BATCH"),
    "-ub": ("ubatch-size", "LLAMA_ARG_UBATCH"),
    "-cb": ("cont-batching", "LLAMA_ARG_CONT_BATCHING"),
    "-nocb": ("no-cont-batching", "LLAMA_ARG_CONT_BATCHING"),
    "-fa": ("flash-attn", "LLAMA_ARG_FLASH_ATTN"),
    "-ctk": ("cache-type-k", "LLAMA_ARG_CACHE_TYPE_K"),
    "-ctv": ("cache-type-v", "LLAMA_ARG_CACHE_TYPE_V"),
    "-c": ("ctx-size", "LLAMA_ARG_CTX_SIZE"),
    "-kvu": ("kv-unified", "LLAMA_ARG_KV_UNIFIED"),
    "-no-kvu": ("no-kv-unified", "LLAMA_ARG_KV_UNIFIED"),
    "--cache-reuse": ("cache-reuse", "LLAMA_ARG_CACHE_REUSE"),
    "-lm": ("load-mode", "LLAMA_ARG_LOAD_MODE"),
    "--model": ("model", "LLAMA_ARG_MODEL"),
    "--host": ("host", "LLAMA_ARG_HOST"),
    "--port": ("port", "LLAMA_ARG_PORT"),
    "--alias": ("alias", "LLAMA_ARG_ALIAS"),
    "--metrics": ("metrics", "LLAMA_ARG_ENDPOINT_METRICS"),
}
_NEGATIVE = {"-nocb", "-no-kvu"}


class ExportError(ValueError):
    """The winner cannot be written in the asked format."""


def option_pairs(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """argv options -> [(flag, value or None for a bare switch)], in order."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        flag = args[i]
        if not flag.startswith("-"):
            raise ExportError(f"unexpected positional argument {flag!r}")
        value = args[i + 1] if i + 1 < len(args) and not _is_flag(args[i + 1]) else None
        pairs.append((flag, value))
        i += 2 if value is not None else 1
    return pairs


def _is_flag(token: str) -> bool:
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)  # -1 is a value
        return False
    except ValueError:
        return True


def scalar(value: str | None) -> Any:
    """A command-line value typed: a number, true/false, or the text itself ("on" stays text, as engines
    spell it); a flag without a value is true."""
    if value is None:
        return True
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(value.lower(), value)


# --- config files -----------------------------------------------------------------------------------

def long_option_config(args: Sequence[str]) -> dict[str, Any]:
    """Long-option argv (vLLM, SGLang) -> their --config YAML mapping: `--max-num-seqs 8` -> max-num-seqs: 8,
    `--enforce-eager` -> true, `--no-enable-prefix-caching` -> enable-prefix-caching: false."""
    out: dict[str, Any] = {}
    for flag, value in option_pairs(args):
        key = flag.lstrip("-")
        if value is None and key.startswith("no-"):
            out[key[3:]] = False
        else:
            out[key] = scalar(value)
    return out


def llamacpp_ini(args: Sequence[str]) -> str:
    """llama-server args -> the INI it reads at start (see the module docstring)."""
    lines = ["; llama-server reads this file at start from $XDG_CONFIG_HOME/llama.cpp/config.ini",
             "; (default ~/.config/llama.cpp/config.ini, or /etc/llama.cpp/config.ini); flags on the",
             "; command line still win over it.", "version = 1", "", "[*]"]
    for flag, value in option_pairs(args):
        long, _env = LLAMACPP_OPTIONS.get(flag, (flag.lstrip("-"), None))
        if flag in _NEGATIVE:
            lines.append(f"{long.removeprefix('no-')} = false")
        else:
            lines.append(f"{long} = {'true' if value is None else value}")
    return "\n".join(lines) + "\n"


def llamacpp_env(args: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """llama-server args -> (LLAMA_ARG_* variables, flags that have no variable and must stay as flags)."""
    env: dict[str, str] = {}
    rest: list[str] = []
    for flag, value in option_pairs(args):
        _long, var = LLAMACPP_OPTIONS.get(flag, (None, None))
        if var is None:
            rest += [flag] + ([value] if value is not None else [])
        elif flag in _NEGATIVE:
            env[var] = "false"
        else:
            env[var] = "true" if value is None else value
    return env, rest


# --- one entry point --------------------------------------------------------------------------------

def export(fmt: str, *, engine: str, spec: LaunchSpec, command: str, docker: Sequence[str],
           tuning_args: Sequence[str], params: Mapping[str, Any], summary: Mapping[str, Any] | None = None,
           tuning_env: Mapping[str, str] | None = None) -> str:
    """The winner in format `fmt` (one of FORMATS), as text ending in a newline. `spec` is the launch as the
    server sees it, `command` what starts it where the study ran, `docker` its `docker run` argv, and
    `tuning_env` the environment variables its params set (a config file cannot hold them: said in a comment)."""
    if fmt == "args":
        return command + "\n"
    if fmt == "docker":
        return shlex.join(docker) + "\n"
    options = list(spec.argv[1:])
    if fmt == "env":
        if engine != "llamacpp":
            raise ExportError(f"--format env: {engine} reads its settings from flags or --config (try yaml)")
        env, rest = llamacpp_env(options)
        lines = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
        if rest:
            lines.append(f"# no environment variable for: {shlex.join(rest)} (pass on the command line)")
        return "\n".join(lines) + "\n"
    if fmt == "config":
        if engine == "llamacpp":
            return llamacpp_ini(options)
        return _yaml_config(engine, options, tuning_env or {})
    if fmt == "yaml":
        if engine == "llamacpp":
            record = {"engine": engine, "params": dict(params), "flags": list(tuning_args),
                      "command": command, **({"result": dict(summary)} if summary else {})}
            return ("# llama-server reads no YAML: this records the winner. `autotuner best --format config`\n"
                    "# writes the config.ini it does read; `--format env` its LLAMA_ARG_* variables.\n"
                    + yaml.safe_dump(record, sort_keys=False))
        return _yaml_config(engine, options, tuning_env or {})
    raise ExportError(f"unknown format {fmt!r} (formats: {', '.join(FORMATS)})")


def _yaml_config(engine: str, options: Sequence[str], tuning_env: Mapping[str, str]) -> str:
    head = f"# {engine} --config FILE reads this; flags on the command line still win over it.\n"
    if tuning_env:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in tuning_env.items())
        head += f"# Set in the engine's environment too: {env}\n"
    return head + yaml.safe_dump(long_option_config(_drop_module(options)), sort_keys=False)


def _drop_module(options: Sequence[str]) -> list[str]:
    """`python -m vllm.entrypoints.openai.api_server --x` -> `--x`; `serve MODEL --x` -> model: MODEL."""
    opts = list(options)
    if opts[:1] == ["-m"] and len(opts) > 1:
        opts = opts[2:]
    if opts and not opts[0].startswith("-"):  # `vllm serve MODEL`
        opts = opts[1:] if opts[0] == "serve" else opts
        if opts and not opts[0].startswith("-"):
            opts = ["--model", opts[0], *opts[1:]]
    return opts
