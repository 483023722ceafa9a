#!/usr/bin/env bash
# Build llama.cpp's llama-server from the pinned llama-cpp-python sdist (the only place PyPI ships the
# llama.cpp source), once per version, into the user cache. Prints the binary's path on stdout.
# Nothing is downloaded from a model hub: the web UI download is switched off.
set -euo pipefail

version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
cache="${AUTOTUNER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/autotuner}"
# Built for this CPU (GGML_NATIVE: AVX-512 where present, about twice AVX2's speed here), so the cache is
# keyed by the CPU's feature flags too: another CPU gets its own build instead of an illegal instruction.
cpu="$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null | sha256sum | cut -c1-8)"
# Without AMX: ggml's AMX kernels died of SIGILL (tilezero in tinygemm_kernel_amx, serving a q8_0 model)
# on a Xeon VM whose cpuid shows AMX. GCC's explicit -mno-* win over -march=native in any order. The
# folder's suffix is autotuner/util/paths.py's LLAMA_BUILD (a build without it is not this one).
flavour=noamx
dest="$cache/llama-server/$version-$(uname -m)-$cpu-$flavour"
bin="$dest/llama-server"

say() { echo "[build-llama-server] $*" >&2; }

if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  say "cached: $bin"
  echo "$bin"
  exit 0
fi

for tool in cmake ninja cc c++; do
  command -v "$tool" >/dev/null || { say "missing $tool: install cmake, ninja-build and a C++ compiler"; exit 1; }
done

work="$(mktemp -d "${TMPDIR:-/tmp}/llama-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
start=$SECONDS

say "1/4 downloading llama-cpp-python==$version source (about 76 MB)"
python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work" >&2
say "2/4 unpacking"
tar -xzf "$work"/llama_cpp_python-*.tar.gz -C "$work"
src="$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)"

say "3/4 configuring"
no_amx=(-mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
if [ "$(uname -m)" = x86_64 ] && echo 'int main() { return 0; }' | c++ -x c++ "${no_amx[@]}" -o /dev/null - 2>/dev/null; then
  flags="${no_amx[*]}"
else
  flags=""  # another architecture, or a compiler that knows no AMX (and so never emits it)
fi
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
  -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON >"$work/configure.log" 2>&1 \
  || { tail -n 30 "$work/configure.log" >&2; exit 1; }

say "4/4 compiling llama-server (about 5 minutes on 2 cores)"
# Ninja prints [done/total] per step; show one line in twenty so progress is visible but short.
cmake --build "$work/build" --target llama-server -j "$(nproc)" 2>&1 \
  | awk '/^\[[0-9]+\/[0-9]+\]/ { if (++n % 20 == 1) { print "[build-llama-server]   " $1 > "/dev/stderr" } next }
         /error|Error/ { print > "/dev/stderr" }'
[ -x "$work/build/bin/llama-server" ] || { say "build failed"; exit 1; }

mkdir -p "$dest"
cp "$work/build/bin/llama-server" "$bin.tmp" && mv "$bin.tmp" "$bin"
say "built in $((SECONDS - start)) s: $bin"
echo "$bin"
