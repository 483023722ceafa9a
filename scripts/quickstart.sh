#!/usr/bin/env bash
# The main job on the embedded default: set up, then tune llama-server on this CPU.
# Extra arguments go to `autotuner run` (e.g. --trials 100). Rerun to resume the same study.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/autotuner run --experiment experiments/quickstart.yaml "${@:---trials=12}"
