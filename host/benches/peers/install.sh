#!/usr/bin/env bash
# Installs the pinned peers of the side-by-side benchmarks (requirements.txt, package.json and
# package-lock.json beside this file) into the ignored target/bench-peers/, once per change of
# the pins. Prints the directory. Needs python3 (venv) and npm, and the package registries.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
dest="${CARGO_TARGET_DIR:-$root/target}/bench-peers"
mkdir -p "$dest"
stamp="$(cat "$here/requirements.txt" "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [ -f "$dest/.stamp" ] && [ "$(cat "$dest/.stamp")" = "$stamp" ]; then
  echo "$dest"
  exit 0
fi
# A registry download cut short is a flake of the network: each install is tried three times.
retry() {
  local attempt
  for attempt in 1 2 3; do
    if "$@" >&2; then
      return 0
    fi
    echo "install.sh: attempt $attempt of 3 failed: $*" >&2
    sleep $((2 * attempt))
  done
  return 1
}
rm -rf "$dest/venv" "$dest/npm"
python3 -m venv "$dest/venv" >&2
retry "$dest/venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
mkdir -p "$dest/npm"
cp "$here/package.json" "$here/package-lock.json" "$dest/npm/"
retry bash -c 'cd "$1" && npm ci --ignore-scripts --no-audit --no-fund' npm-ci "$dest/npm"
echo "$stamp" > "$dest/.stamp"
echo "$dest"
