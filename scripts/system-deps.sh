#!/usr/bin/env bash
# Installs the Debian packages Kiln needs when they are missing: a C compiler/linker and libgomp (gcc)
# always; for the tests also redis-server (the Redis-broker test) and chromium (the browser tests).
#   scripts/system-deps.sh          # serve: gcc only
#   scripts/system-deps.sh --test   # test: gcc, redis-server, chromium
set -euo pipefail
wanted=("cc:gcc")
if [[ "${1:-}" == "--test" ]]; then
  wanted+=("redis-server:redis-server" "chromium:chromium")
fi
missing=()
for pair in "${wanted[@]}"; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair##*:}")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null; then
  echo "installing system packages: ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "missing system packages: ${missing[*]} (install them, e.g. sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
