#!/usr/bin/env bash
# The first thing to run on a GPU machine: does this tool work here, end to end? On one NVIDIA GPU
# (8 GB or more) with Docker and the NVIDIA Container Toolkit, it
#   1. fetches a small model (Qwen/Qwen2.5-0.5B-Instruct, ~1 GB) into models/ unless it is there,
#   2. runs the GPU preflight in vLLM's image (CUDA on the GPU, P2P, NUMA; a known host fault stops here
#      with its fix) and then three trials of vLLM in that image (experiments/vllm-gpu-check.yaml),
#   3. says what it did and where the report is.
# Rerun to resume the same study (three more trials). Not for CI: it needs a GPU and pulls an image.
#   scripts/gpu-check.sh [extra `autotuner run` arguments, e.g. --trials 5]
set -euo pipefail
cd "$(dirname "$0")/.."
experiment=experiments/vllm-gpu-check.yaml
model=models/Qwen2.5-0.5B-Instruct
results=results
autotuner=.venv/bin/autotuner
[ -x "$autotuner" ] || autotuner=autotuner

say() { printf '\n== %s\n' "$*" >&2; }

say "machine"
command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: this script needs an NVIDIA GPU and its driver" >&2; exit 2; }
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader >&2
docker version --format 'docker {{.Server.Version}}' >&2 || { echo "no Docker daemon answers" >&2; exit 2; }

if [ ! -f "$model/config.json" ]; then
  say "model: fetching Qwen/Qwen2.5-0.5B-Instruct into $model"
  if command -v hf >/dev/null; then
    hf download Qwen/Qwen2.5-0.5B-Instruct --local-dir "$model"
  elif command -v huggingface-cli >/dev/null; then
    huggingface-cli download Qwen/Qwen2.5-0.5B-Instruct --local-dir "$model"
  else
    echo "put a copy of Qwen/Qwen2.5-0.5B-Instruct in $model (pip install huggingface_hub gives hf)" >&2
    exit 2
  fi
fi

say "what will run (dry run: the preflight's commands, then the first trials')"
"$autotuner" run --experiment "$experiment" --dry-run --trials 3 | grep -E '^(# |docker run )' >&2

say "preflight, then three trials (the image is pulled if missing)"
start=$(date +%s)
"$autotuner" run --experiment "$experiment" --results "$results" --trials 3 \
  --storage "sqlite:///autotuner-gpu-check.db" "$@"
study=vllm-gpu-check

say "done in $(( $(date +%s) - start )) s"
echo "report:      $results/$study/report.md  (autotuner report --experiment $experiment)" >&2
echo "server logs: $results/$study/" >&2
echo "best config: autotuner best --experiment $experiment" >&2
