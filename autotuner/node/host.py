"""The machine a study ran on: CPU model and cores, memory, OS, and the GPUs with their driver, CUDA
version and topology, so that a result can be told apart from one measured elsewhere.

GPU facts come from NVIDIA's management library (nvidia-ml-py) where it loads, else from `nvidia-smi`;
on a machine with neither the GPU fields are simply empty. Nothing here ever raises: a fingerprint is
commentary on a study, never a reason for it to fail. `fingerprint()` runs a few short subprocesses;
call it once per study.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from typing import Any

TOPOLOGY_MAX_CHARS = 4000


def _run(argv: list[str], timeout: float = 10.0) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "Model", "Hardware")) and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _gpus_from_nvml() -> dict[str, Any] | None:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None
    try:
        def text(value: Any) -> str:
            return value.decode() if isinstance(value, bytes) else str(value)

        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            gpus.append({"index": i, "name": text(pynvml.nvmlDeviceGetName(h)),
                         "memory_gib": round(pynvml.nvmlDeviceGetMemoryInfo(h).total / 2**30, 1)})
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        return {"gpus": gpus, "driver_version": text(pynvml.nvmlSystemGetDriverVersion()),
                "cuda_version": f"{cuda // 1000}.{cuda % 1000 // 10}"}
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _gpus_from_smi() -> dict[str, Any] | None:
    if not shutil.which("nvidia-smi"):
        return None
    out = _run(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total", "--format=csv,noheader,nounits"])
    if out is None:
        return None
    gpus: list[dict[str, Any]] = []
    driver = None
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4:
            try:
                memory = round(float(parts[3]) / 1024, 1)
            except ValueError:
                memory = None
            gpus.append({"index": int(parts[0]) if parts[0].isdigit() else len(gpus), "name": parts[1],
                         "memory_gib": memory})
            driver = parts[2]
    header = _run(["nvidia-smi"]) or ""
    cuda = None
    if "CUDA Version:" in header:
        cuda = header.split("CUDA Version:", 1)[1].split()[0].strip("|")
    return {"gpus": gpus, "driver_version": driver, "cuda_version": cuda}


def gpu_topology() -> str | None:
    """`nvidia-smi topo -m`: how the GPUs talk to each other (NVLink, PCIe switch, ...) and CPU affinity."""
    if not shutil.which("nvidia-smi"):
        return None
    out = _run(["nvidia-smi", "topo", "-m"])
    return out.strip()[:TOPOLOGY_MAX_CHARS] if out else None


def fingerprint() -> dict[str, Any]:
    """What this machine is, as plain JSON-able data. GPU fields are empty where no NVIDIA GPU is seen."""
    gpu = _gpus_from_nvml() or _gpus_from_smi() or {"gpus": [], "driver_version": None, "cuda_version": None}
    if gpu["gpus"] and gpu.get("cuda_version") is None:  # NVML knows no CUDA version on old drivers
        smi = _gpus_from_smi()
        gpu["cuda_version"] = smi.get("cuda_version") if smi else None
    return {
        "hostname": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gib": memory_gib(),
        "gpu_count": len(gpu["gpus"]),
        "gpus": gpu["gpus"],
        "gpu_names": ", ".join(sorted({g["name"] for g in gpu["gpus"]})),
        "driver_version": gpu.get("driver_version"),
        "cuda_version": gpu.get("cuda_version"),
        "gpu_topology": gpu_topology() if gpu["gpus"] else None,
    }


def tags(fp: dict[str, Any]) -> dict[str, str]:
    """The fingerprint as MLflow tags (`host.*`); empty values are left out."""
    out = {
        "host.name": fp.get("hostname"), "host.os": fp.get("os"), "host.cpu_model": fp.get("cpu_model"),
        "host.cpu_cores": fp.get("cpu_cores"), "host.cpus_usable": fp.get("cpus_usable"),
        "host.memory_gib": fp.get("memory_gib"), "host.gpu_count": fp.get("gpu_count"),
        "host.gpu_names": fp.get("gpu_names"), "host.driver_version": fp.get("driver_version"),
        "host.cuda_version": fp.get("cuda_version"), "host.gpu_topology": fp.get("gpu_topology"),
    }
    return {k: str(v) for k, v in out.items() if v not in (None, "")}


def image_digest(image: str | None) -> str | None:
    """The local image's content digest (repo digest when pulled, else its ID), via the docker CLI or API."""
    if not image:
        return None
    try:
        import docker  # docker-py

        img = docker.from_env().images.get(image)
        return (img.attrs.get("RepoDigests") or [img.id])[0]
    except Exception:
        return None
