"""A stand-in for `python -m vllm.entrypoints.openai.api_server ... --distributed-executor-backend ray`
where vLLM cannot run it (its CPU build has no Ray backend): it joins the Ray cluster and places its
workers as vLLM 0.32's `initialize_ray_cluster` does, with Ray's own API (RAY_ADDRESS's cluster; one
GPU of this node free, else the error vLLM gives; a PACK placement group of one-GPU bundles, the first
pinned to this node; one worker actor in each), says where its workers run, then serves the fake
OpenAI server on --port until it is stopped, or until a worker dies (its node lost), which ends it as a
step of vLLM's on that worker would. Its placement group and workers end with it, as vLLM's do.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def get_ip() -> str:
    """vLLM's get_ip: VLLM_HOST_IP, else the address of the default route (which the test nodes share)."""
    import socket

    if os.environ.get("VLLM_HOST_IP"):
        return os.environ["VLLM_HOST_IP"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("8.8.8.8", 80))  # no packet is sent: it only picks the route
        return s.getsockname()[0]


def main() -> None:
    import ray
    from ray._private.state import available_resources_per_node
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from tests.fake_openai_server import FakeOpenAIServer, FakeServerConfig

    parser = argparse.ArgumentParser()
    parser.add_argument("-m")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--pipeline-parallel-size", type=int, default=1)
    parser.add_argument("--distributed-executor-backend", default=None)
    args, _ = parser.parse_known_args()
    world = args.tensor_parallel_size * args.pipeline_parallel_size
    print(f"stand-in: world size {world}, backend {args.distributed_executor_backend}, "
          f"RAY_ADDRESS {os.environ.get('RAY_ADDRESS')}, VLLM_HOST_IP {os.environ.get('VLLM_HOST_IP')}", flush=True)
    ray.init(address=os.environ.get("RAY_ADDRESS"), log_to_driver=False, logging_level="WARNING")
    here = ray.get_runtime_context().get_node_id()
    if available_resources_per_node()[here].get("GPU", 0) < 1:
        sys.exit(f"ValueError: Current node has no GPU available. vLLM engine cannot start without GPU. {here=}")
    bundles: list[dict[str, float]] = [{"GPU": 1.0} for _ in range(world)]
    bundles[0][f"node:{get_ip()}"] = 0.001
    group = placement_group(bundles, strategy="PACK")
    ray.get(group.ready(), timeout=120)

    @ray.remote(num_gpus=1, num_cpus=0)
    class Worker:
        def where(self) -> tuple[str, list[int]]:
            return ray.get_runtime_context().get_node_id(), [int(g) for g in ray.get_gpu_ids()]

    workers = [Worker.options(scheduling_strategy=PlacementGroupSchedulingStrategy(group, i)).remote()
               for i in range(world)]
    placed = ray.get([w.where.remote() for w in workers])
    print(f"stand-in: serving node {here}; workers on nodes {sorted(node for node, _ in placed)}", flush=True)
    itl_s = float(os.environ.get("STAND_IN_ITL_S", "0.001"))  # a test that needs a longer trial slows it
    with FakeOpenAIServer(FakeServerConfig(itl_s=itl_s), host=args.host, port=args.port):
        while True:  # a worker lost (its node with it) ends the engine, as a vLLM step on it would fail
            try:
                ray.get([w.where.remote() for w in workers], timeout=60)
            except ray.exceptions.RayActorError as e:
                print(f"stand-in: a worker died: {type(e).__name__}: {str(e).splitlines()[0]}", flush=True)
                sys.exit(1)
            time.sleep(0.5)


if __name__ == "__main__":
    main()
