"""The winner as values for the vLLM production stack's chart (report/helm_values.py): rendered as the
chart's template renders them, they start the same `vllm serve` as the winner's container, in a pod the
Kubernetes API schema accepts; every key is one the chart's values schema has, of its type.

The chart's facts (tests/helm_chart.py) were read from vllm-project/production-stack at 01eaf92: the test
renders as that template does."""

from __future__ import annotations

from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from autotuner.config import load_experiment
from autotuner.core import launch
from autotuner.engines._base import get_engine
from autotuner.report.export import ExportError
from autotuner.report.helm_values import values
from tests.helm_chart import SCHEMA, options, rendered_args
from tests.support import REPO

WINNER = {"max_num_seqs": 256, "max_num_batched_tokens": 8192, "enable_chunked_prefill": True,
          "kv_cache_dtype": "fp8", "gpu_memory_utilization": 0.9, "attention_backend": "FLASHINFER"}


def container_of(exp_name: str, params: dict[str, Any], image: str | None = None) -> launch.InContainer:
    exp = load_experiment(REPO / "experiments" / exp_name)
    return launch.in_container(exp, get_engine("vllm"), params, port=launch.EXPORT_PORT, image=image,
                               version="0.32.0")


def test_the_chart_renders_the_winners_vllm_serve_in_a_pod_the_api_accepts():
    c = container_of("vllm-h100-8b.yaml", WINNER)
    text = values(c, name="vllm-h100-8b", gpus=1, annotations={"autotuner/trial": "7"})
    doc = yaml.safe_load(text)
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    (spec,) = doc["servingEngineSpec"]["modelSpec"]
    assert (spec["repository"], spec["tag"], spec["requestGPU"]) == ("vllm/vllm-openai", "v0.32.0", 1)
    winner = options(list(c.spec.argv))
    # What the chart adds that the winner left to vLLM's defaults: TP 1, prefix caching on.
    assert options(rendered_args(spec)) == {**winner, "--tensor-parallel-size": "1",
                                            "--enable-prefix-caching": None}
    assert winner["--served-model-name"] == "llama-3.1-8b"  # the chart renders none: kept through extraArgs

    # The engine container the template builds from these values, in a Deployment the API schema accepts.
    container = {"name": "vllm", "image": f"{spec['repository']}:{spec['tag']}", "args": rendered_args(spec)[1:],
                 "command": ["vllm"], "env": spec.get("env", []),
                 "resources": {"requests": {"cpu": spec["requestCPU"], "memory": spec["requestMemory"],
                                            "nvidia.com/gpu": spec["requestGPU"]},
                               "limits": {"nvidia.com/gpu": spec["requestGPU"]}},
                 "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}, *spec["extraVolumeMounts"]]}
    pod = {"containers": [container], "volumes": [
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": spec["shmSize"]}}, *spec["extraVolumes"]]}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": spec["name"]},
                  "spec": {"selector": {"matchLabels": {"m": "x"}},
                           "template": {"metadata": {"labels": {"m": "x"}}, "spec": pod}}}
    kubernetes_validate.validate(deployment, kubernetes_validate.utils.latest_version(), strict=True)
    assert "helm install vllm-h100-8b vllm/vllm-stack -f FILE" in text


def test_prefix_caching_turned_off_and_pipeline_parallel_stay_as_the_winner_had_them():
    c = container_of("glm5-nvfp4-8x-rtx-pro-6000.yaml", {"parallel_layout": "TP4xPP2", "enable_prefix_caching": False,
                                                         "max_num_seqs": 512})
    (spec,) = yaml.safe_load(values(c, name="glm5", gpus=8))["servingEngineSpec"]["modelSpec"]
    config = spec["vllmConfig"]
    assert config["enablePrefixCaching"] is False and config["tensorParallelSize"] == 4
    assert config["extraArgs"][config["extraArgs"].index("--pipeline-parallel-size") + 1] == "2"  # no key of its own
    assert options(rendered_args(spec)) == options(list(c.spec.argv))
    assert spec["requestGPU"] == 8 and spec["requestCPU"] == 32


def test_an_engine_the_chart_does_not_start_or_an_image_by_digest_is_an_export_error():
    c = container_of("vllm-h100-8b.yaml", WINNER, image="vllm/vllm-openai@sha256:" + "0" * 64)
    with pytest.raises(ExportError, match="not by digest"):
        values(c, name="x", gpus=1)
    llama = c.__class__(c.settings, c.mounted, c.spec.__class__(["llama-server", "-m", "/m.gguf"], 8080, "m"), None)
    with pytest.raises(ExportError, match="vLLM only"):
        values(llama, name="x", gpus=0)
