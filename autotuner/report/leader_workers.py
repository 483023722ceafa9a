"""A winner that ran spread over the nodes of a Ray cluster as Kubernetes manifests: a LeaderWorkerSet
(kubernetes-sigs/lws, the multi-node deployment vLLM's docs give) of one group of pods, a node of the
trial's cluster each, and a Service in front of the group's leader.

The leader starts a Ray head, waits until every pod of its group has joined, then runs the engine's
command as the trial ran it (vLLM with `--distributed-executor-backend ray` places its GPU workers on
the pods by a placement group of its own); each worker pod joins the leader's cluster and holds it. The
engine's address in the cluster (VLLM_HOST_IP) is its pod's. A lost pod restarts the whole group
(RecreateGroupOnPodRestart): the engine's workers on it are gone, and the engine with them.

Each pod template is checked against the Kubernetes API's own schema (as a PodTemplate, strict), the
Service too, where kubernetes-validate is installed. The LeaderWorkerSet's own fields are a custom
resource's, which that schema does not hold: they are the few its v1 API defines, written here alone.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from typing import Any

from autotuner.report.kubernetes import check, dns_name, dump, engine_container, front

RAY_PORT = 6379  # the leader's Ray head (GCS); pods of a group reach each other by the leader's address
LWS_API = "leaderworkerset.x-k8s.io/v1"
POLL_S = 5
# The leader's startup probe waits for the group too: scheduling its other pods, pulling their image and
# their joining Ray come before the weights load. Past it the leader restarts, and with it the group.
GROUP_WAIT_S = 600


def manifests(c: Any, *, name: str, gpus: int, gpus_per_pod: int, startup_timeout_s: float,
              ip_env: str, annotations: Mapping[str, str] | None = None) -> str:
    """A LeaderWorkerSet of ceil(gpus / gpus_per_pod) pods of `gpus_per_pod` GPUs each and a Service on
    its leader (two YAML documents), for the container launch `c` (core.launch.InContainer) spread over
    them, under the DNS name made from `name`; `ip_env` is the engine's variable for its own address."""
    app = dns_name(name)
    size = max(1, math.ceil(gpus / gpus_per_pod))
    labels = {"app.kubernetes.io/name": app, "app.kubernetes.io/managed-by": "autotuner"}
    leader, volumes = engine_container(c, app, gpus_per_pod, startup_timeout_s + GROUP_WAIT_S)
    own_ip = {"name": ip_env, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    env = [e for e in leader.get("env", []) if e["name"] != ip_env] + [own_ip]
    # The group size comes from LWS itself (LWS_GROUP_SIZE), the leader's address too (LWS_LEADER_ADDRESS).
    serve = shlex.join(c.spec.argv)
    leader |= {"name": "leader", "command": ["sh", "-c"], "env": env, "args": [
        f"ray start --head --port={RAY_PORT} --node-ip-address=\"${ip_env}\" --disable-usage-stats && "
        f"until [ \"$(python3 -c '{_LIVE_NODES}')\" -ge \"$LWS_GROUP_SIZE\" ]; do sleep {POLL_S}; done && "
        f"exec {serve}"]}
    worker = {k: v for k, v in leader.items() if not k.endswith("Probe") and k not in ("ports", "workingDir")}
    worker |= {"name": "worker", "args": [
        f"until ray start --address=\"$LWS_LEADER_ADDRESS:{RAY_PORT}\" --node-ip-address=\"${ip_env}\" "
        "--disable-usage-stats --block; "
        f"do sleep {POLL_S}; done"]}

    def template(role: str, container: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"labels": {**labels, "app.kubernetes.io/component": role}},
                "spec": {"containers": [container], "volumes": volumes,
                         "terminationGracePeriodSeconds": c.settings.stop_timeout_s}}

    templates = {"leaderTemplate": template("leader", leader), "workerTemplate": template("worker", worker)}
    group = {
        "apiVersion": LWS_API, "kind": "LeaderWorkerSet",
        "metadata": {"name": app, "labels": labels, **({"annotations": dict(annotations)} if annotations else {})},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {
            "size": size, "restartPolicy": "RecreateGroupOnPodRestart", **templates}},
    }
    for t in templates.values():
        check({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": app}, "template": t})
    # Not the group's name: LWS names its own headless Service so (the pods' addresses, LWS_LEADER_ADDRESS).
    service = front(dns_name(f"{app[:56]}-leader"), labels,
                    {"app.kubernetes.io/name": app, "app.kubernetes.io/component": "leader"}, c.spec.port)
    check(service)
    head = (f"# {app}: the winner, spread over {size} pods of {gpus_per_pod} GPU(s) as its trial was over the\n"
            f"# nodes of a Ray cluster, as a LeaderWorkerSet and a Service on its leader, {service['metadata']['name']}"
            "\n"
            "# (kubectl apply -f FILE; the LeaderWorkerSet controller must be installed: https://lws.sigs.k8s.io).\n"
            "# The image needs Ray (vLLM's has it). The model volume is a hostPath at the folder the study read,\n"
            "# on every node: on a cluster, point it at your PersistentVolumeClaim. The pods talk over the pod\n"
            "# network unless yours gives them the nodes' fast interconnect (the trial's ran on its cluster's).\n")
    if any("valueFrom" in e and "secretKeyRef" in e["valueFrom"] for e in env):
        head += f"# Secrets come from the Secret {app}-secrets, one key per variable (never written here).\n"
    return head + dump([group, service])


# The count of live nodes in the leader's cluster, as vLLM's own multi-node script counts them.
_LIVE_NODES = ('import ray; ray.init(address="auto", logging_level="ERROR"); '
               'print(sum(n["Alive"] for n in ray.nodes()))')
