#!/usr/bin/env bash
# Set up, then run the whole test suite (unit, integration against real llama-server, e2e CLI).
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
