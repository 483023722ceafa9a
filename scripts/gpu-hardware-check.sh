#!/usr/bin/env bash
# The tuner's GPU-side code on this machine's real NVIDIA GPUs, with no Docker, inference engine or model
# (scripts/gpu-check.sh is the end-to-end check that needs them). In about a minute it
#   1. saves what nvidia-smi prints for the commands the tuner runs and reads (inventory and limits
#      queries, `topo -m`, `topo -p2p r`, `nvlink --status`/`-s`, `nvlink --getthroughput d`, a few
#      seconds of `dmon -s pucvmt`), and `nvidia-smi -q` and the plain header for the record,
#   2. runs scripts/gpu-hardware-check.py: the host fingerprint (NVML and nvidia-smi), the topology parse
#      and the device pool, the GPU preflight's probes on the host, and the telemetry sampler over ~10 s
#      of bf16 matrix products (torch in `python3`), saying what each found,
#   3. runs the GPU code's unit tests where pytest and the test dependencies import,
# each step under a timeout; a failing step prints its error and the next one runs. Every output lands
# in OUTDIR, named `<what>-<count>x-<gpu>.txt` like the recorded fixtures in tests/data/gpu (see its
# README), with commands.tsv (file, exit status, seconds, command) and summary.txt. Exits 0; the
# summary says which steps passed and which failed.
#   scripts/gpu-hardware-check.sh OUTDIR
# Env: PYTHON (the python that runs the checks: default .venv/bin/python, else python3), TORCH_PYTHON
# (the python with torch, for the CUDA probe and the load: default python3), LOAD_S (seconds of load: 10).
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: scripts/gpu-hardware-check.sh OUTDIR" >&2; exit 2; }
out=$1
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
python=${PYTHON:-}
[ -n "$python" ] || { [ -x .venv/bin/python ] && python=.venv/bin/python || python=python3; }
torch_python=${TORCH_PYTHON:-python3}
load_s=${LOAD_S:-10}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
started=$(date +%s)
results=() failures=0

say() { printf '\n== %s\n' "$*"; }
# count NAME RC: a step's end, said and counted.
count() {
  if [ "$2" -eq 0 ]; then
    results+=("PASS $1")
  else
    results+=("FAIL $1 (exit $2)")
    failures=$((failures + 1))
  fi
}
# step NAME TIMEOUT_S COMMAND...: runs the command under a timeout, says how it ended, and counts it.
step() {
  local name=$1 limit=$2 t0 rc
  shift 2
  say "$name"
  t0=$(date +%s)
  timeout -k 5 "$limit" "$@"
  rc=$?
  count "$name" "$rc"
  if [ "$rc" -eq 0 ]; then
    echo "-- PASS $name ($(( $(date +%s) - t0 )) s)"
  else
    [ "$rc" -eq 124 ] && echo "-- timed out after $limit s"
    echo "-- FAIL $name: exit $rc ($(( $(date +%s) - t0 )) s)"
  fi
  return 0
}
# capture FILE TIMEOUT_S COMMAND...: its stdout to OUTDIR/FILE, stderr to FILE.stderr (kept if not empty),
# and a line in commands.tsv; the first SHOW_LINES lines shown; counted as a step.
capture() {
  local file=$1 limit=$2 t0 rc
  shift 2
  say "$*"
  t0=$(date +%s)
  timeout -k 5 "$limit" "$@" >"$out/$file" 2>"$out/$file.stderr"
  rc=$?
  [ -s "$out/$file.stderr" ] || rm -f "$out/$file.stderr"
  printf '%s\t%s\t%s\t%s\n' "$file" "$rc" "$(( $(date +%s) - t0 ))" "$*" >>"$out/commands.tsv"
  printf -- '-- %s: exit %s, %s lines -> %s\n' "$*" "$rc" "$(wc -l <"$out/$file")" "$file"
  head -n "${SHOW_LINES:-25}" "$out/$file" | sed 's/^/   | /'
  [ -f "$out/$file.stderr" ] && head -n 5 "$out/$file.stderr" | sed 's/^/   ! /'
  [ "$rc" -eq 124 ] && echo "-- timed out after $limit s"
  count "$*" "$rc"
  return 0
}

say "machine"
echo "date: $(date -u +%FT%TZ)  host: $(hostname)  kernel: $(uname -r)  arch: $(uname -m)  cpus: $(nproc)"
echo "python (checks): $python ($("$python" -V 2>&1))  torch python: $torch_python ($("$torch_python" -V 2>&1))"
echo "nvidia-smi: $(command -v nvidia-smi || echo 'not on PATH')"
[ -r /proc/driver/nvidia/version ] && cat /proc/driver/nvidia/version
if ! command -v nvidia-smi >/dev/null; then
  echo "no nvidia-smi: the checks below find no GPU"
fi

# The machine tag in file names, e.g. 1x-h200 (as the fixtures in tests/data/gpu are named).
names=$(timeout 30 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sed '/^\s*$/d')
if [ -n "$names" ]; then
  slug=$(head -n 1 <<<"$names" | tr 'A-Z' 'a-z' | sed -e 's/^nvidia //' -e 's/[^a-z0-9]\{1,\}/-/g' -e 's/^-//' -e 's/-$//')
  tag="$(wc -l <<<"$names")x-$slug"
else
  tag=no-gpu
fi
echo "tag: $tag"
: >"$out/commands.tsv"

raw() {
  local file=$1
  shift
  capture "$file" 20 "$@"
}
# What the tuner runs (host.py, gpu_preflight.py, gpu_telemetry.py, kernel_stage.py), then the record.
SHOW_LINES=8 raw "nvidia-smi-$tag.txt" nvidia-smi
raw "query-gpu-inventory-$tag.csv" nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
raw "query-gpu-inventory-nounits-$tag.csv" nvidia-smi --query-gpu=index,name,driver_version,memory.total \
  --format=csv,noheader,nounits
raw "query-gpu-limits-$tag.csv" nvidia-smi --query-gpu=index,power.limit,clocks.max.sm,pcie.link.gen.max,pcie.link.width.max \
  --format=csv,noheader,nounits
raw "query-gpu-name-i0-$tag.txt" nvidia-smi --query-gpu=name --format=csv,noheader -i 0
raw "topo-m-$tag.txt" nvidia-smi topo -m
raw "topo-p2p-r-$tag.txt" nvidia-smi topo -p2p r
raw "nvlink-status-$tag.txt" nvidia-smi nvlink --status
raw "nvlink-s-$tag.txt" nvidia-smi nvlink -s
raw "nvlink-gt-d-$tag.txt" nvidia-smi nvlink --getthroughput d
raw "dmon-pucvmt-$tag-idle.txt" nvidia-smi dmon -s pucvmt -d 1 -c 3
raw "query-gpu-wide-$tag.csv" nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version,vbios_version,memory.total,memory.used,power.draw,power.limit,power.default_limit,power.max_limit,clocks.sm,clocks.max.sm,clocks.max.memory,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,compute_cap,persistence_mode,mig.mode.current,ecc.mode.current,temperature.gpu,utilization.gpu \
  --format=csv
SHOW_LINES=0 raw "nvidia-smi-q-$tag.txt" nvidia-smi -q
SHOW_LINES=0 raw "help-query-gpu-$tag.txt" nvidia-smi --help-query-gpu
SHOW_LINES=0 raw "dmon-help-$tag.txt" nvidia-smi dmon -h

step "the tuner's GPU code on this machine (scripts/gpu-hardware-check.py)" 200 \
  "$python" scripts/gpu-hardware-check.py "$out" --tag "$tag" --load-s "$load_s" --torch-python "$torch_python"

tests=(tests/unit/test_gpu_preflight.py tests/unit/test_gpu_topology.py tests/unit/test_gpu_telemetry.py
       tests/unit/test_host.py tests/unit/test_pool.py)
if "$python" -c 'import pytest, optuna' 2>/dev/null; then
  step "unit tests of the GPU code, with this machine's nvidia-smi on PATH" 120 \
    "$python" -m pytest -q -p no:cacheprovider "${tests[@]}"
else
  say "unit tests of the GPU code: skipped ($python cannot import pytest and optuna)"
fi

say "summary ($(( $(date +%s) - started )) s, outputs in $out)"
{
  echo "tag: $tag"
  printf '%s\n' "${results[@]}"
  [ -f "$out/checks.json" ] && echo "python checks:" && "$python" -c '
import json, sys
for c in json.load(open(sys.argv[1]))["checks"]:
    print("  %s %s%s" % (c["status"], c["check"], ": " + c["detail"] if c["status"] != "PASS" else ""))
' "$out/checks.json"
  echo "steps: $(( ${#results[@]} - failures )) passed, $failures failed"
} | tee "$out/summary.txt"
exit 0
