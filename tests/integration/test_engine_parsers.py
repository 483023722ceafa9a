"""Every argument our vLLM and SGLang adapters can emit is accepted by the engine's OWN parser, so a
flag renamed or removed upstream fails here, not on a GPU box at 3 a.m.

The parsers run in the vLLM venv (scripts/setup-vllm.sh), in a subprocess: tests/engine_parser_check.py.
Missing venv: skipped locally, a failure under CI. SGLang's parser is used where it imports (its source
from setup-vllm.sh on the vLLM venv's packages); tests/unit/test_sglang_engine.py checks the recorded
flag list everywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from autotuner.engines._base import get_engine
from autotuner.util import paths
from tests.engine_samples import emitted_argvs, env_names, launch_args, param_values
from tests.support import require

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "tests" / "engine_parser_check.py"


def run_check(python: Path, request: dict, pythonpath: str | None = None) -> list[str]:
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run([str(python), str(CHECK)], input=json.dumps(request), capture_output=True, text=True,
                         env=env, timeout=300, cwd="/tmp")
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    python = paths.vllm_python()
    if python is None or not python.exists():
        require("vLLM", "vLLM's CPU build is not installed: run scripts/setup-vllm.sh")
    return python


def test_every_vllm_argument_we_emit_is_accepted_by_vllms_parser(vllm_python, tmp_path):
    engine = get_engine("vllm")
    # AsyncEngineArgs takes a path that is not a folder for a model hub id: give it a local model folder.
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    base = launch_args(engine, str(vllm_python), tmp_path)
    argvs = [base] + [base + argv for argv in emitted_argvs(engine)]
    values = param_values(engine)
    speculative = engine.flags["mtp_draft_tokens"]
    request = {"engine": "vllm", "argvs": argvs, "env": env_names(engine),
               "values": {**{k: [v for v in values[k] if v != engine.flags[k].unset]
                             for k in ("attention_backend", "quantization", "kv_cache_dtype", "dtype", "moe_backend",
                                       "all2all_backend", "cudagraph_mode")},
                          "speculative_method": [dict(speculative.fixed)["method"]]}}  # type: ignore[attr-defined]
    assert len(argvs) > 60
    assert run_check(vllm_python, request) == []


def test_the_check_itself_catches_renamed_flags_and_unknown_names(vllm_python, tmp_path):
    """Guards the guard. A truncated flag (`--max-num-seq`: argparse takes it as an abbreviation, and the
    real server starts with it), a flag vLLM does not have, an unknown env var and an unknown attention
    backend are each reported, once."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    model = ["--model", str(tmp_path)]
    problems = run_check(vllm_python, {"engine": "vllm", "argvs": [model + ["--max-num-seq", "8"],
                                                                   model + ["--max-num-sequences", "8"]],
                                       "env": ["VLLM_NO_SUCH_THING"],
                                       "values": {"attention_backend": ["FLASH_ATTN", "WARP_DRIVE"]}})
    assert len(problems) == 5, problems
    assert problems[0] == "vllm has no option --max-num-seq (argparse would take it as an abbreviation)"
    assert problems[1].startswith("vllm has no option --max-num-sequences")
    assert "unrecognized arguments: --max-num-sequences" in problems[2]
    assert "VLLM_NO_SUCH_THING" in problems[3]
    assert "WARP_DRIVE" in problems[4]


def test_every_sglang_argument_we_emit_is_accepted_by_sglangs_parser(vllm_python):
    folder = paths.sglang_parser_dir()
    if not (folder / ".complete").is_file():
        pytest.skip(f"SGLang's parser is not importable here ({folder}): the recorded flag list is checked instead")
    engine = get_engine("sglang")
    base = launch_args(engine, "python3")
    argvs = [base] + [base + argv for argv in emitted_argvs(engine)]
    recorded = json.loads((REPO / "autotuner" / "engines" / "sglang_flags.json").read_text())
    problems = run_check(vllm_python, {"engine": "sglang", "argvs": argvs, "recorded": recorded}, str(folder))
    assert problems == []
    bad = run_check(vllm_python, {"engine": "sglang", "argvs": [base + ["--cuda-graph-max-bs", "8"]],
                                  "recorded": None}, str(folder))
    # The pre-0.5.23 spelling is gone (now -decode and -prefill): a launch with it would not start.
    assert bad[0] == "sglang has no option --cuda-graph-max-bs (argparse would take it as an abbreviation)"
    assert "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode" in bad[1]
