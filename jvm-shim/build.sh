#!/usr/bin/env bash
# Builds the broker plugin jar with Maven (jvm-shim/pom.xml), against Kafka's own API jars of the oldest release
# we support (provided scope: the broker supplies them, the jar holds our classes only):
#   rsm/_jars/kafka-tiered-storage-shim.jar   Java 11 class files; manifest version from rsm/_version.py
#   jvm-shim/build/main/                      test jars (harness, fake kafka.Kafka) and kafka-api.classpath
#
#   build.sh                  the plugin jar and the test jars
#   build.sh --kafka X [...]  also compile the shim and its test harness against Kafka release X, into
#                             jvm-shim/build/kafka-X/ (what the tests run the shim on; see tests/support/jvm_testing.py).
#                             X may be `test` (the releases marked so in kafka-releases.txt) or `all`.
#   build.sh --no-main ...    only the --kafka releases (the plugin jar stays as it is)
#
# Maven downloads what it needs into ~/.m2 once; later builds run offline. It is quiet unless a build fails.
# Maven's own JVM runs with jvm-shim/.mvn/jvm.config (C1 only and the serial collector: a build this short then
# takes about half the CPU); MAVEN_OPTS adds to it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
MVN="${MVN:-mvn}"

releases=()
main=1
# Every release but the first (the main build's), or only those marked `test`.
listed() { sed -n '/^[0-9]/p' "$here/kafka-releases.txt" | tail -n +2 | { [[ $1 == all ]] && cut -d' ' -f1 || sed -n 's/^\([^ ]*\) .*test.*/\1/p'; }; }
while (($#)); do
    case "$1" in
        --kafka)
            case "${2:?--kafka needs a release (e.g. 3.9.2), test or all}" in
                test | all) mapfile -t -O "${#releases[@]}" releases < <(listed "$2") ;;
                *) releases+=("$2") ;;
            esac
            shift 2 ;;
        --no-main) main=0; shift ;;
        *) echo "build.sh: unknown argument $1 (use --kafka X, --no-main)" >&2; exit 2 ;;
    esac
done

command -v "$MVN" >/dev/null 2>&1 || {
    echo "build.sh: Maven ($MVN) is not on PATH: install it (e.g. apt-get install maven) and build again" >&2
    exit 1
}
# The release version lives in rsm/_version.py only; the jar's manifest carries the same one.
version="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$repo/rsm/_version.py")"
[[ -n "$version" ]] || { echo "build.sh: no __version__ in $repo/rsm/_version.py" >&2; exit 1; }

mkdir -p "$here/build"
# Offline first (no network once ~/.m2 holds everything); online only when that fails, e.g. on a fresh machine.
mvn_quiet() {
    local log="$here/build/mvn${2:+-${2#-Dkafka.version=}}.log"
    if "$MVN" -B -q -o -f "$here/pom.xml" -Dkts.version="$version" "$@" package >"$log" 2>&1; then
        return 0
    fi
    if "$MVN" -B -q -f "$here/pom.xml" -Dkts.version="$version" "$@" package >"$log" 2>&1; then
        return 0
    fi
    sed 's/\x1b\[[0-9;]*m//g' "$log" >&2
    echo "build.sh: mvn package $* failed (log above, also in $log)" >&2
    exit 1
}

if ((main)); then
    mvn_quiet
    echo "built $repo/rsm/_jars/kafka-tiered-storage-shim.jar"
fi
for release in "${releases[@]}"; do
    mvn_quiet -Pkafka-release -Dkafka.version="$release"
    echo "built $here/build/kafka-$release (compiled against Kafka $release)"
done
