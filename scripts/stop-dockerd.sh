#!/usr/bin/env bash
# Stop the Docker daemon scripts/start-dockerd.sh started, by the PID in its pidfile (never by name).
# dockerd stops its containers and its own containerd on SIGTERM; after 20 s it gets SIGKILL.
set -euo pipefail

dir="${AUTOTUNER_DOCKERD_DIR:-${XDG_RUNTIME_DIR:-/tmp}/autotuner-dockerd}"
pidfile="$dir/docker.pid"
say() { echo "[stop-dockerd] $*" >&2; }

[ -f "$pidfile" ] || { say "not running (no $pidfile)"; exit 0; }
pid="$(cat "$pidfile")"
if ! kill -0 "$pid" 2>/dev/null; then
  say "not running (stale pidfile, pid $pid)"
  rm -f "$pidfile"
  exit 0
fi
kill -TERM "$pid"
for _ in $(seq 100); do
  kill -0 "$pid" 2>/dev/null || { say "stopped (pid $pid)"; exit 0; }
  sleep 0.2
done
say "dockerd (pid $pid) still running after 20 s: SIGKILL"
kill -KILL "$pid" 2>/dev/null || true
