"""The winner's Kubernetes manifests: names Kubernetes accepts, sizes in its units, secrets by
reference only, and an object the API schema refuses is an export error, not a file."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest
import yaml

from autotuner.config import DockerConfig
from autotuner.core.launch import InContainer
from autotuner.engines._base import LaunchSpec
from autotuner.report.export import ExportError
from autotuner.report.kubernetes import dns_name, manifests


def launch(**docker) -> InContainer:
    spec = LaunchSpec(["llama-server", "-m", "/models/m.gguf", "--port", "8080"], 8080, "m",
                      env={"A": "1"}, secret_env={"HF_TOKEN": ""})
    return InContainer(DockerConfig(image="autotuner/llama-server:0.3.36", **docker),
                       [(Path("/data/models"), PurePosixPath("/models"), True)], spec, None)


@pytest.mark.parametrize("text, name", [("Quickstart_Trace.v2", "quickstart-trace-v2"), ("--x--", "x"),
                                        ("a" * 70, "a" * 63), ("___", "autotuner")])
def test_names_are_rfc_1123_labels(text, name):
    assert dns_name(text) == name


def test_a_cpu_container_gets_no_gpu_and_its_secrets_come_from_a_secret():
    deployment, service = yaml.safe_load_all(manifests(launch(shm_size="8g", memory="12g"), name="Quick Start",
                                                       gpus=0, startup_timeout_s=120))
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert deployment["metadata"]["name"] == service["metadata"]["name"] == "quick-start"
    assert container["resources"] == {"limits": {"memory": "12Gi"}}  # no nvidia.com/gpu on a CPU study
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "quick-start-secrets", "key": "HF_TOKEN"}}} \
        in container["env"] and {"name": "A", "value": "1"} in container["env"]
    dshm = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "dshm")
    assert dshm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    assert container["startupProbe"]["failureThreshold"] * 10 >= 120


def test_an_object_the_api_schema_refuses_is_an_export_error():
    with pytest.raises(ExportError, match="does not match the Kubernetes API schema"):
        manifests(launch(), name="m", gpus=1, startup_timeout_s=60, annotations={"autotuner/trial": 7})  # type: ignore[dict-item]
