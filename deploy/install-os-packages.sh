#!/bin/sh
# Installs what the plugin needs from the base image's own package manager, as root, inside an image build:
#   install-os-packages.sh runtime   Python 3.11+ with venv
#   install-os-packages.sh build     that, plus a JDK and a C compiler (the wheel carries the shim jar and an
#                                    optional compiled record walk)
# apt-get (Debian, Ubuntu), microdnf (Red Hat UBI: Strimzi's images) and apk (Alpine: Apache's image); `make
# deploy-image-check` runs each branch (the last two on stand-ins: deploy/standin/package-manager.sh).
# The interpreter's path goes to /tmp/kts-python (or $KTS_PYTHON_FILE) for the next step of the build.
set -eu
mode="${1:?usage: install-os-packages.sh runtime|build}"
case "$mode" in runtime | build) ;; *) echo "install-os-packages.sh: unknown mode $mode" >&2; exit 2 ;; esac

if command -v apt-get >/dev/null 2>&1; then
    pkgs="python3 python3-venv"
    [ "$mode" = build ] && pkgs="$pkgs openjdk-17-jdk-headless gcc libc6-dev python3-dev"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $pkgs
    rm -rf /var/lib/apt/lists/*
    python=/usr/bin/python3
    manager=apt-get
elif command -v microdnf >/dev/null 2>&1; then
    pkgs="python3.11"
    [ "$mode" = build ] && pkgs="$pkgs python3.11-devel gcc java-21-openjdk-devel"
    microdnf --setopt=install_weak_deps=0 --setopt=tsflags=nodocs install -y $pkgs
    microdnf clean all
    python=/usr/bin/python3.11
    manager=microdnf
elif command -v apk >/dev/null 2>&1; then
    pkgs="python3"
    [ "$mode" = build ] && pkgs="$pkgs python3-dev gcc musl-dev openjdk17-jdk bash"
    apk add --no-cache $pkgs
    python=/usr/bin/python3
    manager=apk
else
    echo "install-os-packages.sh: no apt-get, microdnf or apk in this base image" >&2
    exit 2
fi

"$python" -c 'import sys; assert sys.version_info >= (3, 11), sys.version' || {
    echo "install-os-packages.sh: $python is older than 3.11" >&2
    exit 2
}
echo "$python" > "${KTS_PYTHON_FILE:-/tmp/kts-python}"
echo "install-os-packages.sh: $mode: $("$python" --version) at $python via $manager"
