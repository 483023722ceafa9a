#!/usr/bin/env bash
# A Ray cluster of two nodes on this machine, a head and a worker, for `executor: ray` (docs/ray.md) and
# its tests. Each node declares its resources: RAY_NODE_CPUS (default 2) CPUs (the worker node
# RAY_WORKER_CPUS, default the same) and RAY_NODE_GPUS (default 0) GPUs, declared even where there are
# none, so placement is tested without a GPU; RAY_PORT
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
worker_cpus="${RAY_WORKER_CPUS:-$cpus}"
gpus="${RAY_NODE_GPUS:-0}"
# Each node's object store: trials pass only their results and files through it (Ray's default takes 30%
# of memory per node, from /dev/shm, which a container may hold small).
store_mb="${RAY_OBJECT_STORE_MB:-300}"
ray=.venv/bin/ray
# Ray's token authentication: off unless RAY_AUTH_MODE says otherwise, as Ray starts a head where no token
# exists. Left to Ray, a token in ~/.ray (one ray.init() of a local cluster writes it) turns it on for the
# head alone, and the worker node cannot join.
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
say() { echo "[start-ray] $*" >&2; }
[ -x "$ray" ] || { say "no $ray: run scripts/setup.sh first (Ray comes with the extra autotuner[ray])"; exit 1; }
address="127.0.0.1:$port"
point() {  # the line that points autotuner at the cluster; with token authentication each client needs the mode
  if [ "$RAY_AUTH_MODE" = token ]; then echo "export RAY_ADDRESS=$address RAY_AUTH_MODE=token"
  else echo "export RAY_ADDRESS=$address"; fi
}

# Nothing listening on the port: no cluster, and `ray status` would wait out its timeout to say so.
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && RAY_ADDRESS="$address" timeout 20 "$ray" status >/dev/null 2>&1; then
  say "a Ray cluster already answers at $address"
  point
  exit 0
fi
mkdir -p "$dir"
log="$dir/start.log"
common=(--node-ip-address 127.0.0.1 --num-gpus "$gpus" --object-store-memory $((store_mb << 20))
        --disable-usage-stats --temp-dir "$dir")
"$ray" start --head --port "$port" --include-dashboard=false --resources '{"autotuner-head": 1}' \
  --num-cpus "$cpus" "${common[@]}" >"$log" 2>&1 || { cat "$log" >&2; say "the head did not start"; exit 1; }
"$ray" start --address "$address" --resources '{"autotuner-worker": 1}' --num-cpus "$worker_cpus" "${common[@]}" \
  >>"$log" 2>&1 || { cat "$log" >&2; say "the worker node did not start"; exit 1; }
say "two nodes at $address (head and worker, $cpus and $worker_cpus CPU(s), $gpus GPU(s) each declared); logs in $dir"
point
