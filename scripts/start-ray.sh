#!/usr/bin/env bash
# A Ray cluster of two nodes on this machine, a head and a worker, for `executor: ray` (docs/ray.md) and
# its tests. Each node declares its resources: RAY_NODE_CPUS (default 2) CPUs and RAY_NODE_GPUS
# (default 0) GPUs, declared even where there are none, so placement is tested without a GPU; RAY_PORT
# (default 6390) is the head's port, AUTOTUNER_RAY_DIR the cluster's folder (logs, sockets).
# Idempotent: a cluster already up on the port is left as it is. Prints the line that points autotuner at it:
#   eval "$(scripts/start-ray.sh)"      then    autotuner run --experiment experiments/quickstart-ray.yaml
# scripts/stop-ray.sh stops it (only its own processes).
set -euo pipefail
cd "$(dirname "$0")/.."

port="${RAY_PORT:-6390}"
# Short: Ray's socket paths must fit in 107 bytes. The folder names the cluster: stop-ray.sh finds it by it.
dir="${AUTOTUNER_RAY_DIR:-/tmp/autotuner-ray-$(id -u)-$port}"
cpus="${RAY_NODE_CPUS:-2}"
gpus="${RAY_NODE_GPUS:-0}"
# Each node's object store: trials pass only their results and files through it (Ray's default takes 30%
# of memory per node, from /dev/shm, which a container may hold small).
store_mb="${RAY_OBJECT_STORE_MB:-300}"
ray=.venv/bin/ray
say() { echo "[start-ray] $*" >&2; }
[ -x "$ray" ] || { say "no $ray: run scripts/setup.sh first (Ray comes with the extra autotuner[ray])"; exit 1; }
address="127.0.0.1:$port"

# Nothing listening on the port: no cluster, and `ray status` would wait out its timeout to say so.
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && RAY_ADDRESS="$address" timeout 20 "$ray" status >/dev/null 2>&1; then
  say "a Ray cluster already answers at $address"
  echo "export RAY_ADDRESS=$address"
  exit 0
fi
mkdir -p "$dir"
log="$dir/start.log"
common=(--node-ip-address 127.0.0.1 --num-cpus "$cpus" --num-gpus "$gpus" --object-store-memory $((store_mb << 20))
        --disable-usage-stats --temp-dir "$dir")
"$ray" start --head --port "$port" --include-dashboard=false --resources '{"autotuner-head": 1}' "${common[@]}" \
  >"$log" 2>&1 || { cat "$log" >&2; say "the head did not start"; exit 1; }
"$ray" start --address "$address" --resources '{"autotuner-worker": 1}' "${common[@]}" \
  >>"$log" 2>&1 || { cat "$log" >&2; say "the worker node did not start"; exit 1; }
say "two nodes at $address (head and worker, each $cpus CPU(s) and $gpus GPU(s) declared); logs in $dir"
echo "export RAY_ADDRESS=$address"
