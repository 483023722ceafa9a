#!/usr/bin/env bash
# Stops the cluster scripts/start-ray.sh started on this machine: the processes that name its folder
# (GCS, raylets, monitors, task workers) and every process under them (any engine a task runs).
# Other Ray clusters on the machine are left alone (unlike `ray stop`, which stops them all).
# TERM first; a raylet may start a worker while it stops, so the folder is searched again and whatever
# still runs gets KILL.
set -euo pipefail
port="${RAY_PORT:-6390}"
dir="${AUTOTUNER_RAY_DIR:-/tmp/autotuner-ray-$(id -u)-$port}"
say() { echo "[stop-ray] $*" >&2; }

# The cluster's own processes and their descendants, one PID a line.
cluster() {
  local frontier all children
  mapfile -t frontier < <(pgrep -u "$(id -u)" -f -- "$dir" || true)
  all=("${frontier[@]}")
  while [ "${#frontier[@]}" -gt 0 ]; do
    mapfile -t children < <(for p in "${frontier[@]}"; do pgrep -P "$p" || true; done)
    all+=("${children[@]}")
    frontier=("${children[@]}")
  done
  [ "${#all[@]}" -gt 0 ] && printf '%s\n' "${all[@]}" | sort -un
  return 0
}

stopped=0
for signal in TERM KILL KILL; do
  mapfile -t pids < <(cluster)
  [ "${#pids[@]}" -eq 0 ] && break
  stopped=$((stopped + ${#pids[@]}))
  kill "-$signal" "${pids[@]}" 2>/dev/null || true
  # Up to 3 s for them to go: GCS and raylets outlast a TERM by many seconds, and nothing of theirs is worth keeping.
  for _ in $(seq 1 6); do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && [ "$(ps -o stat= -p "$p")" != Z ] && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.5
  done
done
if [ -n "$(cluster)" ]; then
  say "processes of the cluster in $dir still run: $(cluster | tr '\n' ' ')"
  exit 1
fi
if [ "$stopped" -eq 0 ]; then say "no cluster of $dir is running"; else say "stopped the cluster in $dir"; fi
