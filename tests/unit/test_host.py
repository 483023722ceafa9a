"""The host fingerprint never fails and always says what the CPU is."""

from __future__ import annotations

import json

from autotuner.node import host


def test_fingerprint_is_json_and_names_the_cpu(monkeypatch):
    fp = host.fingerprint()
    json.dumps(fp)
    assert fp["cpu_model"] and fp["cpu_cores"] >= 1
    assert fp["gpu_count"] == len(fp["gpus"])
    tags = host.tags(fp)
    assert tags["host.cpu_model"] == fp["cpu_model"] and tags["host.gpu_count"] == str(fp["gpu_count"])


def test_no_nvidia_tools_means_no_gpus_not_an_error(monkeypatch):
    monkeypatch.setattr(host.shutil, "which", lambda name: None)
    monkeypatch.setattr(host, "_gpus_from_nvml", lambda: None)
    fp = host.fingerprint()
    assert fp["gpus"] == [] and fp["gpu_topology"] is None and "host.gpu_names" not in host.tags(fp)
    assert host.image_digest(None) is None


def test_gpus_driver_cuda_and_topology_from_nvidia_smi(tmp_path, monkeypatch):
    """A stand-in nvidia-smi on PATH answering as a 2-GPU H200 box does (NVML left out)."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("""#!/bin/sh
case "$*" in
  *--query-gpu*) printf '0, NVIDIA H200, 570.86.15, 143771\\n1, NVIDIA H200, 570.86.15, 143771\\n' ;;
  "topo -m") printf '\\tGPU0\\tGPU1\\tCPU Affinity\\nGPU0\\t X \\tNV18\\t0-47\\nGPU1\\tNV18\\t X \\t0-47\\n' ;;
  *) printf '| NVIDIA-SMI 570.86.15   Driver Version: 570.86.15   CUDA Version: 12.8     |\\n' ;;
esac
""")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    monkeypatch.setattr(host, "_gpus_from_nvml", lambda: None)
    fp = host.fingerprint()
    assert fp["gpu_count"] == 2 and fp["gpu_names"] == "NVIDIA H200"
    assert fp["gpus"][1] == {"index": 1, "name": "NVIDIA H200", "memory_gib": 140.4}
    assert fp["driver_version"] == "570.86.15" and fp["cuda_version"] == "12.8"
    assert "NV18" in fp["gpu_topology"]
    assert host.tags(fp)["host.gpu_topology"].startswith("GPU0")
