"""The host fingerprint never fails and always says what the CPU is."""

from __future__ import annotations

import json

from autotuner import host


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
