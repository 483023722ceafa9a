#!/usr/bin/env bash
# The main job on the embedded default: set up, then tune llama-server on this CPU.
# Extra arguments go to `autotuner run` (e.g. --trials 100). Rerun to resume the same study.
# `scripts/quickstart.sh --docker ...` runs the same study with llama-server in a container
# (experiments/quickstart-docker.yaml): it uses the Docker daemon at $DOCKER_HOST when one answers, else
# starts a private one (scripts/start-dockerd.sh; stop it with scripts/stop-dockerd.sh), and builds the
# engine image locally first.
set -euo pipefail
cd "$(dirname "$0")/.."
experiment=experiments/quickstart.yaml
if [ "${1:-}" = "--docker" ]; then
  shift
  experiment=experiments/quickstart-docker.yaml
fi
scripts/setup.sh
if [ "$experiment" = experiments/quickstart-docker.yaml ]; then
  if ! timeout 5 docker version >/dev/null 2>&1; then
    eval "$(scripts/start-dockerd.sh)"
    export DOCKER_HOST
  fi
  scripts/build-engine-image.sh >/dev/null
fi
exec .venv/bin/autotuner run --experiment "$experiment" "${@:---trials=12}"
