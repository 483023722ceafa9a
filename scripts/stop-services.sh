#!/usr/bin/env bash
# Stop what scripts/start-services.sh started: the MLflow server (by its pidfile's PID) and PostgreSQL
# (pg_ctl, which reads its own pidfile). The data stay, for the next start.
set -uo pipefail
if [ "$(id -u)" = 0 ]; then default_dir=/tmp/autotuner-services; else default_dir="${XDG_RUNTIME_DIR:-/tmp}/autotuner-services"; fi
dir="${AUTOTUNER_SERVICES_DIR:-$default_dir}"
for pidfile in "$dir/mlflow.pid" "$dir/mlflow.starting.pid"; do
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  # The server runs its workers in the session it leads: stop the whole group, forcibly after 10 s.
  kill -- -"$pid" 2>/dev/null || kill "$pid" 2>/dev/null
  for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$pid" 2>/dev/null && kill -KILL -- -"$pid" 2>/dev/null
  rm -f "$pidfile"
  echo "[stop-services] stopped the MLflow server (pid $pid)" >&2
done
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -n "$pg_bin" ] && [ -f "$dir/pg/data/postmaster.pid" ]; then
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$pg_bin/pg_ctl" -D "$dir/pg/data" -m fast stop >/dev/null
  else "$pg_bin/pg_ctl" -D "$dir/pg/data" -m fast stop >/dev/null; fi
  echo "[stop-services] stopped PostgreSQL" >&2
fi
