#!/usr/bin/env bash
# System tools the tests need beyond Python: a JDK 17 (javac/jar/java for the shim and the interop tests), Maven
# (builds the shim against Kafka's jars, which it fetches from Maven Central into ~/.m2), node/npm (Azurite) and Prometheus (the server and promtool, for the dashboard and alert-rule tests).
# Installed from Debian's packages only when missing.
set -euo pipefail
missing=()
command -v javac >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
need_prometheus=0
command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || need_prometheus=1
((${#missing[@]} || need_prometheus)) || exit 0

SUDO=""
[[ $(id -u) -eq 0 ]] || SUDO="sudo"
$SUDO apt-get update -qq
if ((${#missing[@]})); then
    echo "ensure_system_deps: installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
if ((need_prometheus)); then
    # Debian's package starts a server on :9090 and enables it at boot (its recommended node exporter would add
    # one on :9100). The tests start their own servers on free ports and need only the binaries: a temporary
    # policy-rc.d stops the install from starting any service (unless the machine has a policy of its own),
    # and the unit is disabled afterwards.
    echo "ensure_system_deps: installing prometheus (for promtool and the tests' own servers)"
    policy=/usr/sbin/policy-rc.d
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
        $SUDO chmod 755 "$policy"
        trap '$SUDO rm -f "$policy"' EXIT
    fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus
    if command -v systemctl >/dev/null 2>&1; then
        $SUDO systemctl disable --now prometheus.service >/dev/null 2>&1 || true
    fi
fi
