#!/bin/sh
# Stand-in for microdnf (Red Hat UBI, Strimzi's base) or apk (Alpine, Apache's base), by the name it is called
# with, on a Debian stand-in whose apt-get is moved out of the PATH: `make deploy-image-check` runs those two
# branches of deploy/install-os-packages.sh with it, since neither base nor its package repositories can be
# reached here. It takes the real tool's command line, refuses a package name that the real repositories
# (UBI 9, Alpine 3.20+) do not hold, and installs the Debian packages that give the same files.
set -eu
tool="$(basename "$0")"
# the real apt-get (moved) and its lists; the tests give a recorder and a folder of their own
apt="${KTS_STANDIN_APT:-/usr/lib/kts-standin/apt-get}"
lists="${KTS_STANDIN_APT_LISTS:-/var/lib/apt/lists}"

debian_names() {
    case "$tool:$1" in
        microdnf:python3.11) echo "python3.11 python3.11-venv" ;;
        microdnf:python3.11-devel) echo "python3.11-dev" ;;
        microdnf:gcc) echo "gcc libc6-dev" ;;
        microdnf:java-21-openjdk-devel) echo "openjdk-17-jdk-headless" ;;  # Debian 12 has no 21: the JDK it has
        apk:python3) echo "python3 python3-venv" ;;
        apk:python3-dev) echo "python3-dev" ;;
        apk:gcc) echo "gcc" ;;
        apk:musl-dev) echo "libc6-dev" ;;
        apk:openjdk17-jdk) echo "openjdk-17-jdk-headless" ;;
        apk:bash) echo "bash" ;;
        *) echo "$tool (stand-in): no package $1 in the repositories this stand-in knows" >&2; return 1 ;;
    esac
}

install() {
    pkgs=""
    for name in "$@"; do
        pkgs="$pkgs $(debian_names "$name")"
    done
    "$apt" update -q
    DEBIAN_FRONTEND=noninteractive "$apt" install -y -q --no-install-recommends $pkgs
}

case "$tool" in
    microdnf)
        verb=""
        names=""
        for arg in "$@"; do
            case "$arg" in
                --setopt=install_weak_deps=0 | --setopt=tsflags=nodocs | -y) ;;
                -*) echo "microdnf (stand-in): option $arg not known" >&2; exit 1 ;;
                *) if [ -z "$verb" ]; then verb="$arg"; else names="$names $arg"; fi ;;
            esac
        done
        case "$verb" in
            install) [ -n "$names" ] || { echo "microdnf (stand-in): install of nothing" >&2; exit 1; }
                     install $names ;;
            clean) [ "$names" = " all" ] || { echo "microdnf (stand-in): clean$names" >&2; exit 1; }
                   rm -rf "${lists:?}"/* ;;
            *) echo "microdnf (stand-in): command $verb not known" >&2; exit 1 ;;
        esac
        ;;
    apk)
        [ "${1:-}" = add ] || { echo "apk (stand-in): command ${1:-} not known" >&2; exit 1; }
        shift
        [ "${1:-}" = --no-cache ] || { echo "apk (stand-in): expected --no-cache (nothing kept in the image)" >&2; exit 1; }
        shift
        install "$@"
        rm -rf "${lists:?}"/*
        ;;
    *) echo "package-manager.sh: call it as microdnf or apk, not $tool" >&2; exit 2 ;;
esac
