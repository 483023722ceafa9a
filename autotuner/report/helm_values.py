"""The winner as values for the vLLM production stack's Helm chart (`vllm-stack`, from
https://vllm-project.github.io/production-stack): one `servingEngineSpec.modelSpec` entry (pure).

Built from the same container launch as `--format k8s` (core.launch.in_container). The chart writes the
start of the command itself (`vllm serve <modelURL> --host 0.0.0.0 --port <containerPort>`), then a flag
for each `vllmConfig` key it knows, then `extraArgs` in order; every other tuned flag goes there. Facts
of the chart as read at production-stack 01eaf92 (helm/templates/deployment-vllm-multi.yaml):
- `enablePrefixCaching` false or absent renders `--no-enable-prefix-caching`: it is always written, true
  where the winner left vLLM's default (on);
- `/dev/shm` is mounted only when `tensorParallelSize` is set: it is always written;
- no `--served-model-name` is rendered (the served name would be modelURL): it goes in extraArgs;
- the template requires `requestCPU` (an integer) and `requestMemory` where no `resources` are given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from autotuner.report.export import ExportError
from autotuner.report.kubernetes import SHM_SIZE, dns_name, env_vars, model_volumes, quantity

CHART = "vllm-stack"
# Flags the template writes itself from its own settings: never repeated in extraArgs.
OWN = {"--model", "--host", "--port"}
# Flags with a vllmConfig key of their own: flag -> (key, type).
KEYED: dict[str, tuple[str, type]] = {
    "--tensor-parallel-size": ("tensorParallelSize", int),
    "--max-num-seqs": ("maxNumSeqs", int),
    "--max-model-len": ("maxModelLen", int),
    "--dtype": ("dtype", str),
    "--gpu-memory-utilization": ("gpuMemoryUtilization", float),
}
SWITCHES = {"enable-chunked-prefill": "enableChunkedPrefill", "enable-prefix-caching": "enablePrefixCaching"}
CPUS_PER_GPU, MEMORY_PER_GPU_GIB = 4, 32  # the requests the template requires, when the study set none


def values(c: Any, *, name: str, gpus: int, annotations: Mapping[str, str] | None = None) -> str:
    """Values (YAML) that deploy the container launch `c` (core.launch.InContainer) with the chart."""
    argv = list(c.spec.argv)
    if argv[:2] != ["vllm", "serve"]:
        raise ExportError("--format helm-values: the chart starts `vllm serve`; this launch is "
                          f"{' '.join(argv[:2])!r} (vLLM only)")
    model, config = vllm_config(argv[2:])
    if model is None:
        raise ExportError("--format helm-values: the launch names no --model")
    if "@" in c.settings.image:
        raise ExportError(f"--format helm-values: the chart names an image by repository and tag, not by digest "
                          f"({c.settings.image}): pass --image REPOSITORY:TAG")
    image, _, tag = c.settings.image.rpartition(":") if ":" in c.settings.image.rsplit("/", 1)[-1] else (
        c.settings.image, "", "latest")
    env = env_vars(c, dns_name(name))
    spec: dict[str, Any] = {
        "name": dns_name(name), "repository": image, "tag": tag, "modelURL": model, "replicaCount": 1,
        "requestCPU": CPUS_PER_GPU * max(gpus, 1),
        "requestMemory": quantity(c.settings.memory) or f"{MEMORY_PER_GPU_GIB * max(gpus, 1)}Gi",
        "requestGPU": gpus, "shmSize": quantity(c.settings.shm_size) or SHM_SIZE, "vllmConfig": config,
        **({"env": env} if env else {}),
        **({"annotations": dict(annotations)} if annotations else {}),
    }
    volumes, mounts = model_volumes(c)
    if volumes:
        spec.update(extraVolumes=volumes, extraVolumeMounts=mounts)
    head = (f"# {spec['name']}: the winner as values for the vLLM production stack's chart:\n"
            f"#   helm repo add vllm https://vllm-project.github.io/production-stack\n"
            f"#   helm install {spec['name']} vllm/{CHART} -f FILE\n"
            "# The model is a hostPath at the folder the study read: on a cluster, use pvcStorage or your own\n"
            f"# volume. requestCPU and requestMemory ({CPUS_PER_GPU} CPUs, {MEMORY_PER_GPU_GIB} GiB a GPU unless the "
            "study set a memory limit)\n# are the chart's required requests: set your nodes' own.\n")
    if any("valueFrom" in e for e in env):
        head += f"# Secrets come from the Secret {spec['name']}-secrets, one key per variable (never written here).\n"
    return head + yaml.safe_dump({"servingEngineSpec": {"modelSpec": [spec]}}, sort_keys=False)


def vllm_config(options: Sequence[str]) -> tuple[str | None, dict[str, Any]]:
    """`vllm serve`'s options as the chart's vllmConfig (its keys, then extraArgs in order), and the model."""
    config: dict[str, Any] = {}
    extra: list[str] = []
    model = None
    i = 0
    while i < len(options):
        flag, value, i = _option(options, i)
        name = flag[2:]
        if flag == "--model":
            model = value
        elif flag in OWN:
            pass
        elif flag in KEYED and value is not None:
            key, kind = KEYED[flag]
            config[key] = kind(value)
        elif value is None and (name in SWITCHES or name.removeprefix("no-") in SWITCHES):
            config[SWITCHES[name.removeprefix("no-")]] = not name.startswith("no-")
        else:
            extra += [flag] if value is None else [flag, value]
    config.setdefault("tensorParallelSize", 1)  # the chart mounts /dev/shm only with it
    config.setdefault("enablePrefixCaching", True)  # vLLM's default; the chart's absent is off
    if extra:
        config["extraArgs"] = extra
    return model, config


def _option(options: Sequence[str], i: int) -> tuple[str, str | None, int]:
    """The option at i: its flag, its value (None: a switch) and where the next one starts."""
    token = options[i]
    if "=" in token:
        flag, value = token.split("=", 1)
        return flag, value, i + 1
    if i + 1 < len(options) and not options[i + 1].startswith("--"):
        return token, options[i + 1], i + 2
    return token, None, i + 1
