#!/usr/bin/env bash
# Build the engine image for the Docker launcher locally, with no registry: autotuner/llama-server:<version>,
# a root filesystem holding only llama-server, the shared libraries `ldd` lists and the dynamic loader,
# imported with `docker import`. The model is not in the image: the launcher bind-mounts it read-only.
# Idempotent: skipped when the image exists and was made from the same binary (its sha256 is a label).
# Needs a reachable daemon ($DOCKER_HOST; scripts/start-dockerd.sh) and the llama-server build
# ($AUTOTUNER_LLAMA_SERVER, else scripts/build-llama-server.sh's cached build). Prints the image name.
set -euo pipefail
cd "$(dirname "$0")/.."

version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
image="${AUTOTUNER_ENGINE_IMAGE:-autotuner/llama-server:$version}"
say() { echo "[build-engine-image] $*" >&2; }

bin="${AUTOTUNER_LLAMA_SERVER:-$(scripts/build-llama-server.sh)}"
[ -x "$bin" ] || { say "llama-server not found at $bin"; exit 1; }
sha="$(sha256sum "$bin" | cut -c1-64)"

old="$(docker image inspect --format '{{.Id}} {{index .Config.Labels "autotuner.binary.sha256"}}' "$image" 2>/dev/null || true)"
if [ "${old#* }" = "$sha" ]; then
  say "up to date: $image (${old%% *})"
  echo "$image"
  exit 0
fi

start_us=${EPOCHREALTIME/./}
root="$(mktemp -d "${TMPDIR:-/tmp}/engine-rootfs.XXXXXX")"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/local/bin" "$root/tmp" "$root/models"
chmod 1777 "$root/tmp"
cp "$bin" "$root/usr/local/bin/llama-server"
# (`docker import -c` splits its values at commas: no commas in these lines.)
# "libx.so => /lib/.../libx.so (0x...)" and the loader "/lib64/ld-linux-x86-64.so.2 (0x...)"; links resolved.
for lib in $(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done

tar -C "$root" -c . | docker import \
  -c 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
  -c 'EXPOSE 8000/tcp' \
  -c 'CMD ["llama-server", "--help"]' \
  -c "LABEL autotuner.engine=llamacpp autotuner.binary.sha256=$sha" \
  -m "llama-server $version from $bin" - "$image" >/dev/null
if [ -n "$old" ]; then  # the previous build of this tag, now untagged
  docker image rm "${old%% *}" >/dev/null 2>&1 || true
fi
say "built $image from $bin ($(du -sh "$root" | cut -f1)) in $(( (${EPOCHREALTIME/./} - start_us) / 1000 )) ms"
echo "$image"
