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


def test_a_spread_winner_is_a_group_whose_leader_waits_for_its_pods_then_runs_the_engine_as_it_ran(tmp_path,
                                                                                                  monkeypatch):
    import json
    import os
    import subprocess
    import sys

    from autotuner.report import leader_workers

    monkeypatch.setattr(leader_workers, "POLL_S", 0.2)
    group, service = yaml.safe_load_all(leader_workers.manifests(
        launch(), name="big", gpus=12, gpus_per_pod=8, startup_timeout_s=60, ip_env="VLLM_HOST_IP"))
    lws = group["spec"]["leaderWorkerTemplate"]
    assert lws["size"] == 2 and lws["restartPolicy"] == "RecreateGroupOnPodRestart"  # 12 GPUs: two pods of 8
    (leader,) = lws["leaderTemplate"]["spec"]["containers"]
    (worker,) = lws["workerTemplate"]["spec"]["containers"]
    for c in (leader, worker):
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert {"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in c["env"]
        assert {m["mountPath"] for m in c["volumeMounts"]} == {"/models", "/dev/shm"}  # each pod loads its part
    assert "readinessProbe" in leader and "readinessProbe" not in worker and "ports" not in worker
    assert service["spec"]["selector"] == {"app.kubernetes.io/name": "big", "app.kubernetes.io/component": "leader"}
    # Its own name: LWS names the group's headless Service (the pods' DNS names) after the group.
    assert (group["metadata"]["name"], service["metadata"]["name"]) == ("big", "big-leader")
    assert leader["startupProbe"]["failureThreshold"] * 10 >= 60 + leader_workers.GROUP_WAIT_S

    # Run both pods' scripts with stand-ins for ray, python3 (the live-node count) and the engine: the
    # leader polls until both pods are live, then runs the engine's exact argv; the worker joins the leader.
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    calls = tmp_path / "calls"
    stub = {"ray": f'echo "ray $*" >> {calls}',
            "python3": f'n=$(cat {tmp_path}/polls 2>/dev/null || echo 0); echo $((n + 1)) > {tmp_path}/polls; '
                       'echo $((n + 1))',
            "llama-server": f"exec {sys.executable} -c 'import json, sys; print(json.dumps(sys.argv[1:]))' \"$@\""}
    for name, body in stub.items():
        (bin_ / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_ / name).chmod(0o755)
    env = {"PATH": f"{bin_}:{os.environ['PATH']}", "LWS_GROUP_SIZE": "2", "LWS_LEADER_ADDRESS": "big-0.big",
           "VLLM_HOST_IP": "10.1.2.3"}
    ran = subprocess.run([*leader["command"], *leader["args"]], env=env, capture_output=True, text=True, timeout=30)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout.splitlines()[-1]) == ["-m", "/models/m.gguf", "--port", "8080"]
    assert (tmp_path / "polls").read_text().strip() == "2"  # one live node, a wait, then both
    subprocess.run([*worker["command"], *worker["args"]], env=env, check=True, timeout=30)
    assert calls.read_text().splitlines() == [
        "ray start --head --port=6379 --node-ip-address=10.1.2.3 --disable-usage-stats",
        "ray start --address=big-0.big:6379 --node-ip-address=10.1.2.3 --disable-usage-stats --block"]


def test_a_pod_template_the_api_schema_refuses_is_an_export_error():
    from autotuner.report import leader_workers

    with pytest.raises(ExportError, match="PodTemplate does not match the Kubernetes API schema"):
        leader_workers.manifests(launch(), name="m", gpus=2, gpus_per_pod=1, startup_timeout_s=60,
                                 ip_env=7)  # type: ignore[arg-type]
