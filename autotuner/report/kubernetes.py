"""The winner as Kubernetes manifests: a Deployment of one engine pod and a Service in front of it.

Built from the same container launch as the winner's `docker run` line (core.launch.in_container): the
same image, entrypoint, arguments, environment and GPU count; `--ipc host` becomes a memory-backed
/dev/shm, the model mount a volume, the engine's health endpoint the readiness and startup probes (the
startup probe allows the experiment's `startup_timeout_s` for loading the weights). Secrets are named,
never written: each comes from a Secret `<name>-secrets` with one key per variable.

The model volume is a hostPath at the folder the study read: right for the node the study ran on, to
be replaced by a PersistentVolumeClaim on a cluster (the header says so). With the extra `k8s`
(kubernetes-validate) each object is checked against the Kubernetes API's own schema before it is written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

from autotuner.launchers.docker_command import environment
from autotuner.report.export import ExportError

PROBE_PERIOD_S = 10
PROBE_TIMEOUT_S = 5
SHM_SIZE = "16Gi"  # PyTorch's workers share tensors through /dev/shm; Docker's --ipc host had no limit
GPU_RESOURCE = "nvidia.com/gpu"  # NVIDIA's device plugin


def manifests(c: Any, *, name: str, gpus: int, startup_timeout_s: float,
              annotations: Mapping[str, str] | None = None) -> str:
    """A Deployment and a Service (two YAML documents) for the container launch `c`
    (core.launch.InContainer) under the DNS name made from `name`."""
    app = dns_name(name)
    labels = {"app.kubernetes.io/name": app, "app.kubernetes.io/managed-by": "autotuner"}
    container, volumes = engine_container(c, app, gpus, startup_timeout_s)
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": app, "labels": labels, **({"annotations": dict(annotations)} if annotations else {})},
        "spec": {
            "replicas": 1,
            # One pod holds the node's GPUs: a rolling update's second pod would wait for them forever.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app.kubernetes.io/name": app}},
            "template": {"metadata": {"labels": labels},
                         "spec": {"containers": [container], "volumes": volumes,
                                  "terminationGracePeriodSeconds": c.settings.stop_timeout_s}},
        },
    }
    service = front(app, labels, {"app.kubernetes.io/name": app}, c.spec.port)
    for doc in (deployment, service):
        check(doc)
    head = (f"# {app}: the winner as a Deployment and a Service (kubectl apply -f FILE).\n"
            "# The model volume is a hostPath at the folder the study read: on a cluster, point it at your\n"
            "# PersistentVolumeClaim; the engine's image must be one your nodes can pull.\n")
    if any("valueFrom" in e for e in container.get("env", ())):
        head += f"# Secrets come from the Secret {app}-secrets, one key per variable (never written here).\n"
    return head + dump([deployment, service])


def engine_container(c: Any, app: str, gpus: int, startup_timeout_s: float) -> tuple[dict[str, Any], list[dict]]:
    """The engine's container for the launch `c` and the pod's volumes it mounts: its command, environment,
    GPUs, memory, model volume, memory-backed /dev/shm and probes on its health endpoint (the startup
    probe allows `startup_timeout_s` for loading the weights)."""
    spec, settings = c.spec, c.settings
    env = env_vars(c, app)
    volumes, mounts = model_volumes(c)
    if gpus or settings.ipc_host or settings.shm_size:
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory",
                                                     "sizeLimit": quantity(settings.shm_size) or SHM_SIZE}})
    resources: dict[str, dict[str, str]] = {}
    if gpus:
        resources = {"limits": {GPU_RESOURCE: str(gpus)}, "requests": {GPU_RESOURCE: str(gpus)}}
    if settings.memory:
        resources.setdefault("limits", {})["memory"] = quantity(settings.memory) or settings.memory
    # A busy engine answers /health late: 1 s (the default) would restart a pod that is only loaded.
    probe = {"httpGet": {"path": spec.health_path, "port": "http"}, "periodSeconds": PROBE_PERIOD_S,
             "timeoutSeconds": PROBE_TIMEOUT_S}
    container: dict[str, Any] = {
        "name": "engine", "image": settings.image, "command": [spec.argv[0]], "args": list(spec.argv[1:]),
        "ports": [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}],
        **({"env": env} if env else {}),
        **({"resources": resources} if resources else {}),
        "volumeMounts": mounts,
        "startupProbe": {**probe, "failureThreshold": max(1, int(startup_timeout_s // PROBE_PERIOD_S) + 1)},
        "readinessProbe": {**probe, "failureThreshold": 3},
        "livenessProbe": {**probe, "failureThreshold": 6},
        **({"workingDir": spec.workdir} if spec.workdir else {}),
    }
    return container, volumes


def front(app: str, labels: Mapping[str, str], selector: Mapping[str, str], port: int) -> dict[str, Any]:
    """The Service in front of the pods `selector` picks, on the engine's port."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": app, "labels": dict(labels)},
            "spec": {"selector": dict(selector),
                     "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}]}}


def dump(docs: list[dict[str, Any]]) -> str:
    return yaml.dump_all(docs, Dumper=_Plain, sort_keys=False)


class _Plain(yaml.SafeDumper):
    """YAML without anchors: a reader sees every probe and label written out."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def check(doc: dict[str, Any]) -> None:
    """The API's schema, strict (no field it does not know), where kubernetes-validate is installed."""
    try:
        import kubernetes_validate
    except ImportError:
        return
    try:
        kubernetes_validate.validate(doc, kubernetes_validate.utils.latest_version(), strict=True)
    except kubernetes_validate.ValidationError as e:
        raise ExportError(f"the {doc['kind']} does not match the Kubernetes API schema: {e.message}") from None


def env_vars(c: Any, app: str) -> list[dict[str, Any]]:
    """The launch's environment; a variable whose value is kept secret comes from the Secret `app`-secrets."""
    return [{"name": var, "value": value} if value is not None else
            {"name": var, "valueFrom": {"secretKeyRef": {"name": f"{app}-secrets", "key": var}}}
            for var, value in sorted(environment(c.spec, c.settings).items())]


def model_volumes(c: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The launch's mounts as hostPath volumes and their mounts, the model's named "model"."""
    volumes, mounts = [], []
    for k, (source, target, read_only) in enumerate(c.mounted):
        vol = "model" if k == 0 else f"volume-{k}"
        # The model mount is a folder (a file's folder); a missing one fails the pod at once, not after loading.
        volumes.append({"name": vol, "hostPath": {"path": str(source), **({"type": "Directory"} if k == 0 else {})}})
        mounts.append({"name": vol, "mountPath": str(target), "readOnly": read_only})
    return volumes, mounts


def dns_name(text: str) -> str:
    """A name a Service takes too (RFC 1035 label): lower case, digits and '-', a letter first, at most 63."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if name and not name[0].isalpha():
        name = "m-" + name
    return name[:63].rstrip("-") or "autotuner"


def quantity(docker_size: str | None) -> str | None:
    """Docker's 8g / 512m as Kubernetes' 8Gi / 512Mi."""
    if not docker_size:
        return None
    m = re.fullmatch(r"(\d+)([bkmgBKMG]?)", docker_size)
    if not m:
        return None
    return m[1] + {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi"}[m[2].lower()]
