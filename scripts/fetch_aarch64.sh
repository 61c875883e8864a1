#!/usr/bin/env bash
# Fetch what falcon-mlir needs to RUN aarch64 IREE modules on an x86-64 Debian
# host, without installing anything system-wide (no sudo, no dpkg -i):
#
#   <root>/usr/bin/qemu-aarch64                  qemu-user (Debian package, dpkg -x)
#   <root>/usr/lib/x86_64-linux-gnu/...          qemu's shared libs the host lacks
#   <root>/usr/aarch64-linux-gnu/                aarch64 glibc / libstdc++ / libgcc (qemu -L)
#   <root>/bin/iree-run-module                   from the aarch64 iree-base-runtime wheel
#
# Usage: scripts/fetch_aarch64.sh [ROOT]
#   ROOT defaults to $FALCON_AARCH64_ROOT, else ~/.cache/falcon-mlir/aarch64.
#   Env: IREE_RUNTIME_VERSION (default 3.13.0).
# Idempotent: parts already present are skipped; the last line printed is ROOT.
# Needs only the Debian archive (apt-get download) and the PyPI index pip is
# configured with (pip download). Works on Debian 12 (bookworm) and 13 (trixie):
# the libcapstone package name is looked up with apt-cache.
# falcon_mlir.targets.QemuAarch64Runner uses ROOT.
set -euo pipefail

ROOT="${1:-${FALCON_AARCH64_ROOT:-$HOME/.cache/falcon-mlir/aarch64}}"
IREE_VERSION="${IREE_RUNTIME_VERSION:-3.13.0}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$ROOT"
ROOT="$(cd "$ROOT" && pwd)"
DEBS="$ROOT/debs"
mkdir -p "$DEBS" "$ROOT/bin"

log() { echo "fetch_aarch64: $*" >&2; }

# Name of the first package among the arguments that apt knows about.
first_known() {
  local p
  for p in "$@"; do
    if apt-cache show "$p" >/dev/null 2>&1; then echo "$p"; return 0; fi
  done
  return 1
}

# Debian packages. qemu-user's own dependencies that a minimal host may lack:
# libcapstone (4 on bookworm, 5 on trixie) and liburing2; glib, gnutls, zlib,
# libnuma are usually installed already: add them only when missing.
qemu_stamp="$ROOT/.qemu-ok"
if [[ ! -f "$qemu_stamp" || ! -x "$ROOT/usr/bin/qemu-aarch64" ]]; then
  command -v apt-get >/dev/null || { log "apt-get not found (Debian/Ubuntu host needed)"; exit 1; }
  capstone="$(first_known libcapstone4 libcapstone5 || true)"
  if [[ -z "$capstone" ]]; then
    log "apt-cache knows no libcapstone4/5: running apt-get update"
    apt-get update -qq || true
    capstone="$(first_known libcapstone4 libcapstone5)" || { log "no libcapstone package"; exit 1; }
  fi
  pkgs=(qemu-user "$capstone" liburing2 libc6-arm64-cross libstdc++6-arm64-cross libgcc-s1-arm64-cross)
  have_lib() { ldconfig -p 2>/dev/null | grep -q "$1"; }
  have_lib 'libglib-2.0.so.0 ' || pkgs+=(libglib2.0-0)
  have_lib 'libgnutls.so.30 '  || pkgs+=(libgnutls30)
  have_lib 'libnuma.so.1 '     || pkgs+=(libnuma1)
  have_lib 'libz.so.1 '        || pkgs+=(zlib1g)

  # As root, apt-get download would drop to user _apt, which cannot write ROOT.
  aptopt=()
  [[ "$(id -u)" == 0 ]] && aptopt=(-o APT::Sandbox::User=root)
  need=()
  for p in "${pkgs[@]}"; do
    ls "$DEBS/${p}_"*.deb >/dev/null 2>&1 || need+=("$p")
  done
  if ((${#need[@]})); then
    log "apt-get download ${need[*]}"
    if ! (cd "$DEBS" && apt-get "${aptopt[@]}" download "${need[@]}" >&2); then
      log "download failed: running apt-get update and retrying"
      apt-get update -qq >&2
      (cd "$DEBS" && apt-get "${aptopt[@]}" download "${need[@]}" >&2)
    fi
  fi
  for p in "${pkgs[@]}"; do
    for f in "$DEBS/${p}_"*.deb; do dpkg -x "$f" "$ROOT"; done
  done
  # The interpreter must start: check that its shared libraries resolve.
  missing="$(LD_LIBRARY_PATH="$ROOT/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
             ldd "$ROOT/usr/bin/qemu-aarch64" | grep 'not found' || true)"
  if [[ -n "$missing" ]]; then log "qemu-aarch64 still misses: $missing"; exit 1; fi
  touch "$qemu_stamp"
fi

# aarch64 iree-run-module from the manylinux aarch64 runtime wheel.
stamp="$ROOT/.iree-run-module-$IREE_VERSION"
if [[ ! -f "$stamp" || ! -x "$ROOT/bin/iree-run-module" ]]; then
  wheels="$ROOT/wheels"
  mkdir -p "$wheels"
  whl="$(ls "$wheels"/iree_base_runtime-"$IREE_VERSION"-*aarch64*.whl 2>/dev/null | head -1 || true)"
  if [[ -z "$whl" ]]; then
    log "pip download iree-base-runtime==$IREE_VERSION (manylinux_2_28_aarch64, cp311)"
    "$PYTHON" -m pip download --no-deps --only-binary=:all: \
      --platform manylinux_2_28_aarch64 --python-version 3.11 \
      -d "$wheels" "iree-base-runtime==$IREE_VERSION" >&2
    whl="$(ls "$wheels"/iree_base_runtime-"$IREE_VERSION"-*aarch64*.whl | head -1)"
  fi
  tmp="$(mktemp -d)"
  unzip -q -o -j "$whl" 'iree/_runtime_libs/iree-run-module' -d "$tmp"
  install -m 0755 "$tmp/iree-run-module" "$ROOT/bin/iree-run-module"
  rm -rf "$tmp"
  echo "$whl" >"$stamp"
fi

# Smoke test: the aarch64 binary starts under qemu (qemu's extra libs come from
# ROOT, as in falcon_mlir.targets.QemuAarch64Runner).
if ! LD_LIBRARY_PATH="$ROOT/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
     "$ROOT/usr/bin/qemu-aarch64" -L "$ROOT/usr/aarch64-linux-gnu" "$ROOT/bin/iree-run-module" --help >/dev/null 2>&1; then
  log "qemu-aarch64 could not start $ROOT/bin/iree-run-module"; exit 1
fi
echo "$ROOT"
