#!/usr/bin/env bash
# The first thing to run on a GPU machine: does this tool work here, end to end? On one NVIDIA GPU
# (8 GB or more) with Docker and the NVIDIA Container Toolkit, it
#   1. fetches a small MoE model (ibm-granite/granite-3.1-1b-a400m-instruct, ~2.7 GB) into models/
#      unless it is there,
#   2. runs the GPU preflight in vLLM's image (CUDA on the GPU, P2P, NUMA; a known host fault stops here
#      with its fix), the kernel stage (vLLM's fused-MoE tuner for the model's one shard, once: a rerun
#      reuses it) and then three trials of vLLM in that image (experiments/vllm-gpu-check.yaml),
#   3. says what it did, which MoE config the trials loaded, and where the report is.
# Rerun to resume the same study (three more trials). Not for CI: it needs a GPU and pulls an image.
#   scripts/gpu-check.sh [extra `autotuner run` arguments, e.g. --trials 5]
set -euo pipefail
cd "$(dirname "$0")/.."
experiment=experiments/vllm-gpu-check.yaml
model=models/granite-3.1-1b-a400m-instruct
repo=ibm-granite/granite-3.1-1b-a400m-instruct
results=results
autotuner=.venv/bin/autotuner
[ -x "$autotuner" ] || autotuner=autotuner

say() { printf '\n== %s\n' "$*" >&2; }

say "machine"
command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: this script needs an NVIDIA GPU and its driver" >&2; exit 2; }
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader >&2
docker version --format 'docker {{.Server.Version}}' >&2 || { echo "no Docker daemon answers" >&2; exit 2; }

if [ ! -f "$model/config.json" ]; then
  say "model: fetching $repo into $model"
  if command -v hf >/dev/null; then
    hf download "$repo" --local-dir "$model"
  elif command -v huggingface-cli >/dev/null; then
    huggingface-cli download "$repo" --local-dir "$model"
  else
    echo "put a copy of $repo in $model (pip install huggingface_hub gives hf)" >&2
    exit 2
  fi
fi

say "what will run (dry run: the preflight's commands, the kernel stage's tuner, then the first trials')"
"$autotuner" run --experiment "$experiment" --dry-run --trials 3 | grep -E '^(# |docker run )' >&2

say "preflight, kernel stage (the longest part, once), then three trials (the image is pulled if missing)"
start=$(date +%s)
"$autotuner" run --experiment "$experiment" --results "$results" --trials 3 \
  --storage "sqlite:///autotuner-gpu-check.db" "$@"
study=vllm-gpu-check

say "done in $(( $(date +%s) - start )) s"
echo "MoE configs the servers loaded (a tuned one is under the kernel cache; each trial's autotuner.moe_config tag):" >&2
grep -rhoE --include=server.log "Using configuration from [^ ]+ for MoE layer|Using default MoE config" \
  "$results/$study" | sort | uniq -c >&2 || echo "  (none named in the server logs)" >&2
echo "report:      $results/$study/report.md  (autotuner report --experiment $experiment)" >&2
echo "server logs: $results/$study/" >&2
echo "best config: autotuner best --experiment $experiment" >&2
