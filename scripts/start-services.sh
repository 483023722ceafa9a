#!/usr/bin/env bash
# Start what a shared study runs on, on loopback, idempotently: a private PostgreSQL (Debian's package,
# installed first when missing; needs root then) holding the Optuna study and the MLflow tracking data,
# and an MLflow tracking server in front of it that also serves the artifacts. Everything lives under
# $AUTOTUNER_SERVICES_DIR (default ${XDG_RUNTIME_DIR:-/tmp}/autotuner-services); stop with
# scripts/stop-services.sh (by the PIDs in the pidfiles). Prints two lines for the caller to eval:
#   export AUTOTUNER_POSTGRES_URL=postgresql://autotuner:autotuner@127.0.0.1:PORT/autotuner
#   export AUTOTUNER_MLFLOW_URI=http://127.0.0.1:PORT
set -euo pipefail
cd "$(dirname "$0")/.."
# As root, not under XDG_RUNTIME_DIR (mode 0700): the postgres user must reach its data folder.
if [ "$(id -u)" = 0 ]; then default_dir=/tmp/autotuner-services; else default_dir="${XDG_RUNTIME_DIR:-/tmp}/autotuner-services"; fi
dir="${AUTOTUNER_SERVICES_DIR:-$default_dir}"
pg_port="${AUTOTUNER_PG_PORT:-55432}"
mlflow_port="${AUTOTUNER_MLFLOW_PORT:-55000}"
say() { echo "[start-services] $*" >&2; }

pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$pg_bin" ]; then
  [ "$(id -u)" = 0 ] || { say "PostgreSQL is missing: install Debian's postgresql as root"; exit 1; }
  say "installing Debian's postgresql (about 20 s)"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >&2
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
fi
# PostgreSQL refuses to run as root: as root, its files belong to the package's postgres user.
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
mkdir -p "$dir/pg"
[ "$(id -u)" = 0 ] && chown postgres: "$dir/pg"
url="postgresql://autotuner:autotuner@127.0.0.1:$pg_port"
if ! as_pg "$pg_bin/pg_ctl" -D "$dir/pg/data" status >/dev/null 2>&1; then
  if [ ! -f "$dir/pg/data/PG_VERSION" ]; then
    echo autotuner > "$dir/pg/pw" && { [ "$(id -u)" != 0 ] || chown postgres: "$dir/pg/pw"; }
    as_pg "$pg_bin/initdb" -D "$dir/pg/data" -U autotuner --pwfile="$dir/pg/pw" --auth=scram-sha-256 >/dev/null
  fi
  say "starting PostgreSQL on 127.0.0.1:$pg_port"
  as_pg "$pg_bin/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $pg_port -k '$dir/pg' -c max_connections=200" start >/dev/null
fi
for db in autotuner mlflow; do
  PGPASSWORD=autotuner psql -h 127.0.0.1 -p "$pg_port" -U autotuner -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname='$db'" | grep -q 1 ||
    PGPASSWORD=autotuner psql -h 127.0.0.1 -p "$pg_port" -U autotuner -d postgres -qc "CREATE DATABASE $db"
done

mlflow_uri="http://127.0.0.1:$mlflow_port"
# Python's urllib, not curl: a fresh machine may have no curl.
answers() { .venv/bin/python -c "import urllib.request as u; u.urlopen('$mlflow_uri/health', timeout=3)" >/dev/null 2>&1; }
if ! { [ -f "$dir/mlflow.pid" ] && kill -0 "$(cat "$dir/mlflow.pid")" 2>/dev/null && answers; }; then
  say "starting the MLflow tracking server on $mlflow_uri"
  mkdir -p "$dir/mlflow-artifacts"
  setsid .venv/bin/mlflow server --backend-store-uri "$url/mlflow" --artifacts-destination "$dir/mlflow-artifacts" \
    --host 127.0.0.1 --port "$mlflow_port" --workers 2 >"$dir/mlflow.log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" > "$dir/mlflow.starting.pid"  # for stop-services.sh, should this script be stopped now
  for _ in $(seq 120); do
    answers && break
    kill -0 "$pid" 2>/dev/null || { say "the MLflow server exited:"; tail -n 20 "$dir/mlflow.log" >&2; exit 1; }
    sleep 1
  done
  if ! answers; then
    say "the MLflow server did not answer in 120 s:"; tail -n 20 "$dir/mlflow.log" >&2
    kill -- -"$pid" 2>/dev/null; exit 1
  fi
  mv "$dir/mlflow.starting.pid" "$dir/mlflow.pid"
fi
echo "export AUTOTUNER_POSTGRES_URL=$url/autotuner"
echo "export AUTOTUNER_MLFLOW_URI=$mlflow_uri"
