#!/usr/bin/env bash
# Step 1 of scripts/setup.sh: this checkout's own Python venv (.venv), idempotently.
# The dependencies are installed once per dependency list (and Python version) into the user cache and
# shared by every checkout; .venv holds only this checkout's code (installed editable) and reaches the
# cached dependencies through one .pth line. So two checkouts on one machine each run their own code,
# and setting up a second one takes seconds. What pip says goes to a log, shown only when it fails.
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${AUTOTUNER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/autotuner}"
python="${PYTHON:-python3}"
say() { echo "[setup] $*" >&2; }
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { say "autotuner needs Python 3.11 or newer; $python is $("$python" -V 2>&1) (set PYTHON=...)"; exit 1; }
purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_path("purelib"))'; }
# Runs a command with its output in $log; on failure shows the log and stops.
quietly() { "$@" >>"$log" 2>&1 || { cat "$log" >&2; say "failed: $*"; exit 1; }; }

# The shared dependencies: keyed by the Python version and the dependency list itself (not by the
# checkout), so a second clone, or a change elsewhere in pyproject.toml, reuses them.
reqs="$("$python" scripts/requirements.py test)"
key="$("$python" -c 'import sys; print(f"py{sys.version_info[0]}.{sys.version_info[1]}")')-$(printf '%s\n' "$reqs" | sha256sum | cut -c1-12)"
deps="$cache/deps/$key"
if [ ! -f "$deps/.complete" ]; then
  say "1/3 installing the dependencies (about 1-2 minutes, once per dependency list): $deps"
  rm -rf "$deps"
  mkdir -p "$deps"
  log="$(mktemp)"
  quietly "$python" -m venv "$deps"
  printf '%s\n' "$reqs" >"$deps/requirements.txt"
  quietly "$deps/bin/python" -m pip install --upgrade pip 'setuptools>=68' wheel
  quietly "$deps/bin/python" -m pip install -r "$deps/requirements.txt"
  rm -f "$log"
  touch "$deps/.complete"
fi

# This checkout's venv: no packages of its own but autotuner (editable, from this folder); the cached
# dependencies come in through one .pth line. Rebuilt when the dependencies or the folder change.
want="$deps $PWD"
[ -L .venv ] && rm .venv  # earlier versions linked .venv to a venv shared by every checkout
if [ "$(cat .venv/.autotuner-env 2>/dev/null)" = "$want" ]; then
  say "1/3 Python environment ready: .venv (dependencies cached in $deps)"
else
  say "1/3 creating this checkout's Python environment (seconds): .venv on $deps"
  rm -rf .venv
  "$python" -m venv --without-pip .venv
  log=.venv/setup.log
  purelib "$deps/bin/python" >"$(purelib .venv/bin/python)/autotuner-deps.pth"
  quietly .venv/bin/python -m pip install --no-deps --no-build-isolation -e .
  # The dependencies' commands (mlflow, pytest, optuna-dashboard) in .venv/bin, run by this venv's python.
  for f in "$deps"/bin/*; do
    name="${f##*/}"
    case "$name" in python*|pip*|activate*|Activate*) continue ;; esac
    [ -f "$f" ] && [ ! -e ".venv/bin/$name" ] && [ "$(head -c 2 "$f")" = "#!" ] || continue
    [ "$(head -n 1 "$f")" = "#!$deps/bin/python" ] || continue
    { echo "#!$PWD/.venv/bin/python"; tail -n +2 "$f"; } >".venv/bin/$name"
    chmod +x ".venv/bin/$name"
  done
  echo "$want" >.venv/.autotuner-env
fi
