"""Feed argument lists to vLLM's or SGLang's own argument parser; runs INSIDE the vLLM venv.

Reads a JSON request on stdin and writes a JSON list of problems on stdout (empty: all accepted):

    {"engine": "vllm",   "argvs": [[...], ...], "env": ["VLLM_..."], "values": {"attention_backend": [...], ...}}
    {"engine": "sglang", "argvs": [[...], ...], "recorded": {...sglang_flags.json...}}

For vLLM each argv is parsed by the parser `python -m vllm.entrypoints.openai.api_server` builds
(vllm.entrypoints.launchers.cli_args.make_arg_parser) and turned into AsyncEngineArgs; options whose help
says they are deprecated count as problems; environment variable names must be ones vLLM reads
(vllm.envs); values that the parser takes as free text (attention backend, quantization) must be
members of vLLM's own registries. For SGLang each argv is parsed by ServerArgs.add_cli_args's parser,
deprecated actions count as problems, and the recorded flag list must equal the live one.

It imports nothing from autotuner: tests/integration/test_engine_parsers.py builds the argv lists.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import warnings


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace | None, str | None]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_args(argv), None
    except SystemExit:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        return None, lines[-1] if lines else "rejected"
    except Exception as e:  # noqa: BLE001 - a value a type converter refuses (a JSON key's bad enum name)
        return None, f"{type(e).__name__}: {e}"


def _inexact(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """Long options that are not spelled exactly as the parser declares them. argparse accepts a unique
    prefix (`--max-num-seq` for `--max-num-seqs`), so parsing alone would let a truncated name through."""
    known = {o for a in parser._actions for o in a.option_strings}
    return [arg.split("=", 1)[0] for arg in argv if arg.startswith("--") and arg.split("=", 1)[0] not in known]


def _used_options(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, argparse.Action]:
    by_option = {o: a for a in parser._actions for o in a.option_strings}
    return {arg.split("=", 1)[0]: by_option[arg.split("=", 1)[0]] for arg in argv
            if arg.startswith("-") and arg.split("=", 1)[0] in by_option}


def check_vllm(request: dict) -> list[str]:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import vllm.envs
    from vllm.config.compilation import CUDAGraphMode
    from vllm.config.speculative import SpeculativeMethod
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    parser = make_arg_parser(FlexibleArgumentParser())
    problems = []
    for argv in request["argvs"]:
        problems += [f"vllm has no option {o} (argparse would take it as an abbreviation)" for o in _inexact(parser, argv)]
        ns, error = _parse(parser, argv)
        if error:
            problems.append(f"vllm rejects {' '.join(argv)}: {error}")
            continue
        try:
            AsyncEngineArgs.from_cli_args(ns)
        except Exception as e:  # noqa: BLE001 - any error is a finding
            problems.append(f"vllm AsyncEngineArgs rejects {' '.join(argv)}: {type(e).__name__}: {e}")
        for option, action in _used_options(parser, argv).items():
            if "deprecated" in (action.help or "").lower() or getattr(action, "deprecated", False):
                problems.append(f"vllm: {option} is deprecated: {action.help}")
    for name in request.get("env", []):
        if name not in vllm.envs.environment_variables:
            problems.append(f"vllm does not read the environment variable {name}")
    values = request.get("values", {})
    registries = {"attention_backend": {e.name for e in AttentionBackendEnum},
                  "quantization": set(QUANTIZATION_METHODS),
                  "cudagraph_mode": {e.name for e in CUDAGraphMode},
                  "speculative_method": _literal_values(SpeculativeMethod)}
    for param, known in registries.items():
        for value in values.get(param, []):
            if value not in known:
                problems.append(f"vllm {param}: {value!r} is not one of vLLM's ({', '.join(sorted(known))})")
    for param, dest in (("kv_cache_dtype", "kv_cache_dtype"), ("dtype", "dtype"), ("moe_backend", "moe_backend"),
                        ("all2all_backend", "all2all_backend")):
        action = next(a for a in parser._actions if a.dest == dest)
        for value in values.get(param, []):
            if action.choices is not None and value not in action.choices:
                problems.append(f"vllm {param}: {value!r} is not among {list(action.choices)}")
    return problems


def _literal_values(literal: object) -> set[str]:
    """The strings of a typing.Literal, nested Literals included (vLLM's SpeculativeMethod)."""
    import typing

    values: set[str] = set()
    for arg in typing.get_args(literal):
        values |= _literal_values(arg) if typing.get_args(arg) else {arg}
    return values


def sglang_flags(parser: argparse.ArgumentParser) -> dict:
    """The same shape scripts/record-sglang-flags.py records."""
    flags = {}
    for action in parser._actions:
        for option in action.option_strings:
            flags[option] = {"dest": action.dest, "takes_value": action.nargs != 0,
                             "choices": sorted(action.choices, key=str) if action.choices is not None else None,
                             "deprecated": type(action).__name__.startswith("Deprecated")}
    return dict(sorted(flags.items()))


def check_sglang(request: dict) -> list[str]:
    from sglang.srt.server_args import ServerArgs
    from sglang.version import __version__

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    problems = []
    for argv in request["argvs"]:
        problems += [f"sglang has no option {o} (argparse would take it as an abbreviation)" for o in _inexact(parser, argv)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _ns, error = _parse(parser, argv)
        if error:
            problems.append(f"sglang rejects {' '.join(argv)}: {error}")
            continue
        for option, action in _used_options(parser, argv).items():
            if type(action).__name__.startswith("Deprecated"):
                problems.append(f"sglang: {option} is deprecated")
    recorded = request.get("recorded")
    if recorded is not None:
        if recorded.get("sglang_version") != __version__:
            problems.append(f"recorded flags are of SGLang {recorded.get('sglang_version')}, this is {__version__}")
        elif recorded["flags"] != sglang_flags(parser):
            live = sglang_flags(parser)
            diff = sorted(set(live) ^ set(recorded["flags"])) or [k for k in live if live[k] != recorded["flags"][k]]
            problems.append(f"recorded SGLang flags differ from SGLang's parser: {diff[:10]}")
    return problems


def main() -> int:
    request = json.load(sys.stdin)
    checks = {"vllm": check_vllm, "sglang": check_sglang}
    problems = checks[request["engine"]](request)
    sys.stdout.write("\n" + json.dumps(problems) + "\n")  # last line: the JSON; imports may print above
    return 0


if __name__ == "__main__":
    sys.exit(main())
