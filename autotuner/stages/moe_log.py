"""Which fused-MoE kernel config a server loaded, read from its log: the check that a trial really ran
the kernel stage's tuned configs (or the engine's own, or its defaults).

The lines, verbatim from the engines' code:
- vLLM 0.32.0, model_executor/layers/fused_moe/fused_moe.py, get_moe_configs:
  "Using configuration from <path> for MoE layer." and
  "Using default MoE config. Performance might be sub-optimal! Config file not found at <paths>"
- SGLang 0.5.23, srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py, get_moe_configs:
  "Using MoE kernel config from <path>.", "... use MoE kernel config from <path>. Performance might be
  sub-optimal!" (another Triton version's file) and "Using default MoE kernel config. Performance might
  be sub-optimal!"
A path inside the engine's own package is a config the engine ships ("builtin"); any other is a tuned
folder's ("tuned"). Experts that do not run the Triton kernel (NVFP4, MXFP4) log none of these.

Pure but for `tags_from_file`, which reads the start of a log file (the lines come while the server
starts) and never fails a trial.
"""

from __future__ import annotations

import re
from pathlib import Path

HEAD_BYTES = 8 * 1024 * 1024  # the start-up part of a server log, where the lines are
TAG = "autotuner.moe_config"  # the launch tag the executor records

_LOADED = re.compile(r"Using configuration from (\S+) for MoE layer\."  # vLLM
                     r"|(?:Using|use) MoE kernel config from (\S+?)\.?(?:\s|$)")  # SGLang
_DEFAULT = re.compile(r"Using default MoE (?:kernel )?config\. Performance might be sub-optimal!")
_BUILTIN = re.compile(r"/(?:vllm|sglang)/.*/configs/")  # the engine's own configs folder


def moe_configs_used(log: str) -> list[str]:
    """Each distinct config the log says was loaded, in order: 'tuned:<file>', 'builtin:<file>' or
    'default'. [] when the log names none (no MoE layer, or experts on other kernels)."""
    found: dict[str, None] = {}
    for line in log.splitlines():
        if m := _LOADED.search(line):
            path = m.group(1) or m.group(2)
            found[f"{'builtin' if _BUILTIN.search(path) else 'tuned'}:{path.rsplit('/', 1)[-1]}"] = None
        elif _DEFAULT.search(line):
            found["default"] = None
    return list(found)


def moe_config_tags(log: str) -> dict[str, str]:
    """The launch tag for a trial's server log: {TAG: 'tuned:E=...json; default'}; {} when it names none."""
    used = moe_configs_used(log)
    return {TAG: "; ".join(used)} if used else {}


def tags_from_file(log_path: Path) -> dict[str, str]:
    """`moe_config_tags` of the start of a server log file; {} when it cannot be read."""
    try:
        with log_path.open("rb") as f:
            return moe_config_tags(f.read(HEAD_BYTES).decode("utf-8", "replace"))
    except OSError:
        return {}
