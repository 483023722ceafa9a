"""The vLLM production stack's chart as the tests read it (vllm-project/production-stack at 01eaf92:
helm/values.schema.json, helm/templates/deployment-vllm-multi.yaml): the schema of the values autotuner
writes, and `vllm serve`'s argv as the template renders it from one modelSpec."""

from __future__ import annotations

from typing import Any

# The chart's values.schema.json for what the export writes: its field names and types (the chart allows
# unknown keys and ignores them; here they fail, so a misspelt key cannot pass unseen).
_STR, _INT = {"type": "string"}, {"type": "integer"}
MODEL_SPEC = {
    "type": "object", "additionalProperties": False,
    "required": ["name", "repository", "tag", "modelURL", "requestCPU", "requestMemory", "requestGPU"],
    "properties": {
        "name": _STR, "repository": _STR, "tag": _STR, "modelURL": _STR, "replicaCount": _INT,
        "requestCPU": _INT, "requestMemory": _STR, "requestGPU": {"type": ["integer", "number", "string"]},
        "shmSize": _STR, "annotations": {"type": "object"}, "env": {"type": "array"},
        "extraVolumes": {"type": "array"}, "extraVolumeMounts": {"type": "array"},
        "vllmConfig": {"type": "object", "additionalProperties": False, "properties": {
            "enablePrefixCaching": {"type": "boolean"}, "enableChunkedPrefill": {"type": "boolean"},
            "maxModelLen": _INT, "tensorParallelSize": _INT, "maxNumSeqs": _INT, "dtype": _STR,
            "gpuMemoryUtilization": {"type": ["integer", "number", "string"]},
            "extraArgs": {"type": "array", "items": _STR}}},
    },
}
SCHEMA = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "properties": {
    "servingEngineSpec": {"type": "object", "properties": {"modelSpec": {"type": "array", "items": MODEL_SPEC}}}}}
KEY_FLAGS = [("maxModelLen", "--max-model-len"), ("dtype", "--dtype"), ("tensorParallelSize", "--tensor-parallel-size"),
             ("maxNumSeqs", "--max-num-seqs"), ("gpuMemoryUtilization", "--gpu_memory_utilization")]
def rendered_args(spec: dict[str, Any]) -> list[str]:
    """`vllm serve`'s argv as deployment-vllm-multi.yaml writes it from one modelSpec."""
    args = ["vllm", "serve", spec["modelURL"], "--host", "0.0.0.0", "--port", "8000"]
    c = spec.get("vllmConfig") or {}
    if c:
        if "enableChunkedPrefill" in c:
            args.append("--enable-chunked-prefill" if c["enableChunkedPrefill"] else "--no-enable-chunked-prefill")
        args.append("--enable-prefix-caching" if c.get("enablePrefixCaching") else "--no-enable-prefix-caching")
        for key, flag in KEY_FLAGS:
            if key in c:
                args += [flag, str(c[key])]
        args += c.get("extraArgs", [])
    return args


def options(argv: list[str]) -> dict[str, str | None]:
    """Flag -> value as vLLM's parser reads them (underscores are dashes; --model is the positional)."""
    out: dict[str, str | None] = {}
    i = 2
    if not argv[2].startswith("--"):
        out["--model"], i = argv[2], 3
    while i < len(argv):
        flag = "--" + argv[i][2:].replace("_", "-")
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[flag], i = argv[i + 1], i + 2
        else:
            out[flag], i = None, i + 1
    return {k: v for k, v in out.items() if k not in ("--host", "--port")}
