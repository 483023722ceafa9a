#!/usr/bin/env bash
# Set up everything autotuner needs on this machine, idempotently; each step is skipped when done.
#   1. this checkout's Python venv (.venv) on dependencies cached per dependency list (scripts/setup-python.sh)
#   2. llama.cpp's llama-server, built once per version into the user cache
#   3. the quickstart's random-weight model (models/quickstart.gguf) and sample workload files (workloads/)
# Prints one line per step.
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${AUTOTUNER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/autotuner}"
say() { echo "[setup] $*" >&2; }

AUTOTUNER_CACHE="$cache" scripts/setup-python.sh

say "2/3 llama-server"
AUTOTUNER_CACHE="$cache" scripts/build-llama-server.sh >/dev/null

if [ ! -f models/quickstart.gguf ]; then
  say "3/3 writing the quickstart model (random weights, ~104M params)"
  log="$(mktemp)"
  .venv/bin/autotuner make-model --out models/quickstart.gguf --size small >"$log" 2>&1 \
    || { cat "$log" >&2; rm -f "$log"; exit 1; }
  rm -f "$log"
else
  say "3/3 quickstart model present: models/quickstart.gguf"
fi
.venv/bin/python -m autotuner.workloads.samples workloads >/dev/null  # a second or less; same bytes each time
