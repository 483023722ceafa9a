#!/usr/bin/env bash
# Set up everything autotuner needs on this machine, idempotently; each step is skipped when done.
#   1. a Python venv with autotuner and its dependencies (cached per pyproject.toml, linked as .venv)
#   2. llama.cpp's llama-server, built once per version into the user cache
#   3. the quickstart's random-weight model (models/quickstart.gguf)
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${AUTOTUNER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/autotuner}"
python="${PYTHON:-python3}"
say() { echo "[setup] $*" >&2; }
# This machine's pip config names local package folders that may not exist; hide that noise only.
pip() { "$venv/bin/python" -m pip "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

key="$("$python" -c 'import sys; print(f"py{sys.version_info[0]}.{sys.version_info[1]}")')-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-12)"
venv="$cache/venv/$key"
if [ ! -f "$venv/.complete" ]; then
  say "1/3 creating the Python environment (about 1-2 minutes, once): $venv"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  pip install --quiet --upgrade pip 'setuptools>=68' wheel
  pip install --quiet --no-build-isolation -e '.[test]'
  touch "$venv/.complete"
else
  say "1/3 Python environment cached: $venv"
  pip install --quiet --no-deps --no-build-isolation -e . >/dev/null
fi
ln -sfn "$venv" .venv

say "2/3 llama-server"
AUTOTUNER_CACHE="$cache" scripts/build-llama-server.sh >/dev/null

if [ ! -f models/quickstart.gguf ]; then
  say "3/3 writing the quickstart model (random weights, ~104M params)"
  .venv/bin/autotuner make-model --out models/quickstart.gguf --size small >/dev/null
else
  say "3/3 quickstart model present: models/quickstart.gguf"
fi
