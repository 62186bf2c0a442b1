#!/usr/bin/env bash
# Installs the Debian packages Kiln needs when they are missing: a C compiler/linker and libgomp (gcc),
# the AArch64 cross toolchain and qemu-user (Arm targets are cross-linked and validated under emulation)
# always; for the tests also redis-server (the Redis-broker test), chromium (the browser tests), postgresql
# (the service tests' second database) and iproute2 (the multi-host test).
#   scripts/system-deps.sh          # serve: gcc, the AArch64 cross toolchain, qemu-user
#   scripts/system-deps.sh --test   # test: the same, redis-server, chromium, postgresql, iproute2
# Each entry is "COMMAND-OR-/PATH:PACKAGE": the package is missing when the command (or file, a glob) is.
set -euo pipefail
arm=("aarch64-linux-gnu-gcc:gcc-aarch64-linux-gnu" "/usr/aarch64-linux-gnu/lib/libc.so:libc6-dev-arm64-cross"
     "qemu-aarch64:qemu-user")
wanted=("cc:gcc" "${arm[@]}")
if [[ "${1:-}" == "--test" ]]; then
  # Debian keeps initdb off PATH (/usr/lib/postgresql/VERSION/bin); `ip netns` is the multi-host test's.
  wanted+=("redis-server:redis-server" "chromium:chromium" "/usr/lib/postgresql/*/bin/initdb:postgresql" "ip:iproute2"
           "curl:curl")  # curl: the README's curl recipe is run as it is (tests/test_readme_curl.py)
fi
missing=()
needed=0  # something other than the Arm toolchain is missing (serving can go on without that one)
for pair in "${wanted[@]}"; do
  have="${pair%%:*}"
  if [[ "$have" == /* ]]; then compgen -G "$have" >/dev/null && continue
  else command -v "$have" >/dev/null && continue; fi
  missing+=("${pair##*:}")
  [[ " ${arm[*]} " == *" $pair "* ]] || needed=1
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null; then
  echo "installing system packages: ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "missing system packages: ${missing[*]} (install them, e.g. sudo apt-get install ${missing[*]})" >&2
  # Serving works without the Arm toolchain: Arm targets then fail with a message saying what to install.
  [[ "${1:-}" != "--test" && $needed -eq 0 ]] && exit 0
  exit 1
fi
