#!/usr/bin/env bash
# The complete test suite with every service its tests need, the way CI runs it (.ci/run calls this):
# installs the system packages the build and the tests need (Debian's; needs root when one is missing),
# sets up (venv, llama-server, quickstart model), runs scripts/lint.sh (ruff, mypy), starts a private
# Docker daemon (installing Debian's docker.io when missing; stopped by its PID at the end), builds the
# engine image locally (no registry), starts PostgreSQL and an MLflow tracking server on loopback and a two-node
# Ray cluster (stopped at the end too), installs vLLM's
# CPU build (scripts/setup-vllm.sh), then runs scripts/test.sh. Here the Docker, vLLM and shared-study
# tests are mandatory: a missing service fails them instead of skipping (AUTOTUNER_REQUIRE_ALL=1), and a
# skipped Docker test fails the run. Extra arguments go to pytest.
#   scripts/test-all.sh
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v c++ >/dev/null || need+=(g++)
# A real headless browser for the MLflow UI check (tests/e2e/test_study_outputs.py) and PNG plots.
command -v chromium >/dev/null || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
scripts/setup.sh
scripts/lint.sh  # static checks first: a finding fails the run before any service starts

# Only what is started here is stopped here (by PID), whatever way this script ends.
stop=()
trap 'for s in "${stop[@]}"; do "$s"; done' EXIT
dockerd_dir="${AUTOTUNER_DOCKERD_DIR:-${XDG_RUNTIME_DIR:-/tmp}/autotuner-dockerd}"
if ! { [ -f "$dockerd_dir/docker.pid" ] && kill -0 "$(cat "$dockerd_dir/docker.pid")" 2>/dev/null; }; then
  stop+=(scripts/stop-dockerd.sh)
fi
out=$(scripts/start-dockerd.sh)  # not eval "$(...)": that would hide a failed start from set -e
eval "$out"
export DOCKER_HOST AUTOTUNER_REQUIRE_DOCKER=1 AUTOTUNER_REQUIRE_ALL=1
# A registry on loopback for the pull test (the test starts and stops its own; none is started here).
if ! command -v docker-registry >/dev/null; then
  apt-get update -qq && apt-get install -y -qq --no-install-recommends docker-registry
fi
scripts/build-engine-image.sh >/dev/null

# A shared study's services on loopback: PostgreSQL (Debian's package, installed when missing) and an
# MLflow tracking server on it, for the many-workers tests.
services_dir=/tmp/autotuner-services  # as start-services.sh chooses it (root: /tmp)
[ "$(id -u)" = 0 ] || services_dir="${XDG_RUNTIME_DIR:-/tmp}/autotuner-services"
services_dir="${AUTOTUNER_SERVICES_DIR:-$services_dir}"
if ! { [ -f "$services_dir/mlflow.pid" ] && kill -0 "$(cat "$services_dir/mlflow.pid")" 2>/dev/null; }; then
  stop+=(scripts/stop-services.sh)
fi
out=$(scripts/start-services.sh)
eval "$out"
export AUTOTUNER_POSTGRES_URL AUTOTUNER_MLFLOW_URI

# A Ray cluster of two nodes on this machine (a head and a worker) for the executor: ray tests; the
# node-loss test starts a private one of its own, since it kills a node.
# (A port nobody listens on is no cluster: `ray status` would wait out its timeout to say so.)
ray_port="${RAY_PORT:-6390}"
if ! { (exec 3<>"/dev/tcp/127.0.0.1/$ray_port") 2>/dev/null \
       && RAY_ADDRESS="127.0.0.1:$ray_port" timeout 20 .venv/bin/ray status >/dev/null 2>&1; }; then
  stop+=(scripts/stop-ray.sh)
fi
# One CPU declared a node: both share this machine's cores (the tests run one llama.cpp thread a launch).
out=$(RAY_NODE_CPUS=1 scripts/start-ray.sh)
eval "$out"
export RAY_ADDRESS

# vLLM's CPU build (its own venv, cached in the user cache: ~2.5 min the first time, seconds after),
# SGLang's parser source and the 38M-param model, so the vLLM tests run for real.
scripts/setup-vllm.sh >/dev/null

echo "[test-all] the MLflow UI check leaves its screenshots in $PWD/ci-artifacts/" >&2
scripts/test.sh -ra --durations=40 "$@"  # the slowest tests, to keep the run well under an hour
