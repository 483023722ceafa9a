#!/usr/bin/env bash
# Start a private Docker daemon for autotuner's Docker launcher and its tests, idempotently.
# No systemd is assumed: dockerd runs detached (setsid) with its data, exec root, socket, pidfile and log
# under one folder, $AUTOTUNER_DOCKERD_DIR (default ${XDG_RUNTIME_DIR:-/tmp}/autotuner-dockerd).
# Installs Debian's docker.io first when dockerd is missing (needs root). On success prints one line for
# the caller to eval:  export DOCKER_HOST=unix://.../docker.sock
# Stop it with scripts/stop-dockerd.sh (by the PID in its pidfile).
set -euo pipefail

dir="${AUTOTUNER_DOCKERD_DIR:-${XDG_RUNTIME_DIR:-/tmp}/autotuner-dockerd}"
sock="$dir/docker.sock"
pidfile="$dir/docker.pid"
say() { echo "[start-dockerd] $*" >&2; }
answers() { DOCKER_HOST="unix://$sock" timeout 5 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
  [ "$(id -u)" = 0 ] || { say "dockerd is missing: install docker.io (apt-get install docker.io) as root"; exit 1; }
  say "installing Debian's docker.io (dockerd, containerd, runc; about 15 s)"
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends docker.io >&2
fi

if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null && answers; then
  say "already running (pid $(cat "$pidfile")): $sock"
  echo "export DOCKER_HOST=unix://$sock"
  exit 0
fi

mkdir -p "$dir"
rm -f "$pidfile" "$sock"
# The default bridge is kept: with --bridge=none, published ports silently do nothing.
setsid dockerd --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$pidfile" -H "unix://$sock" \
  >"$dir/dockerd.log" 2>&1 </dev/null &
started=$SECONDS
until answers; do
  if ! kill -0 $! 2>/dev/null; then
    say "dockerd exited while starting; last lines of $dir/dockerd.log:"
    tail -n 20 "$dir/dockerd.log" >&2
    exit 1
  fi
  if [ $((SECONDS - started)) -ge 30 ]; then
    say "dockerd did not answer within 30 s; see $dir/dockerd.log"
    exit 1
  fi
  sleep 0.2
done
say "dockerd $(DOCKER_HOST="unix://$sock" docker version --format '{{.Server.Version}}') ready (pid $(cat "$pidfile")): $sock"
echo "export DOCKER_HOST=unix://$sock"
