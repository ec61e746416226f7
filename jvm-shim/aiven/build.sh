#!/usr/bin/env bash
# Builds Aiven's tiered-storage plugin from its source, for the compatibility tests and the broker benchmark.
#
#   jvm-shim/aiven/build.sh     prints the plugin's directory; builds it first unless it is cached
#
# The source is Aiven's tag $AIVEN_TAG (the newest release whose core needs only Maven Central's jars), checked
# against its commit. It is cloned from $KTS_AIVEN_GIT (default: GitHub); set KTS_AIVEN_GIT to a local clone or
# mirror where GitHub is out of reach. The modules commons, storage/core, storage/filesystem, storage/s3 and core
# are compiled together with Maven (pom.xml here) against the dependency versions of Aiven's Gradle build.
#
# Result, in $KTS_AIVEN_CACHE (default ~/.cache/kafka-tiered-storage/aiven-$AIVEN_TAG):
#   tiered-storage-for-apache-kafka-1.0.0.jar   Aiven's classes (RemoteStorageManager and the two backends)
#   lib/*.jar                                   the jars the plugin ships with (not Kafka's, not slf4j)
#   kafka-api.classpath                         Kafka's and slf4j's jars it was compiled against (broker-provided)
# A broker loads it with remote.log.storage.manager.class.path=<dir>/tiered-storage-for-apache-kafka-1.0.0.jar:<dir>/lib/*
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
AIVEN_TAG=v1.0.0
AIVEN_COMMIT=3faec8690cfe02155ff581d06ec62c7bcc1b6a81
MODULES=(commons storage/core storage/filesystem storage/s3 core)
MVN="${MVN:-mvn}"
url="${KTS_AIVEN_GIT:-https://github.com/Aiven-Open/tiered-storage-for-apache-kafka.git}"
out="${KTS_AIVEN_CACHE:-$HOME/.cache/kafka-tiered-storage/aiven-$AIVEN_TAG}"
jar="$out/tiered-storage-for-apache-kafka-${AIVEN_TAG#v}.jar"

# The stamp holds the pinned commit and this script's and the pom's digest: a change to either rebuilds.
stamp_value="$AIVEN_COMMIT $(cat "$here/build.sh" "$here/pom.xml" | sha256sum | cut -c1-16)"
if [[ -f "$jar" && -f "$out/.stamp" && "$(cat "$out/.stamp")" == "$stamp_value" ]]; then
    echo "$out"
    exit 0
fi

command -v "$MVN" >/dev/null 2>&1 || {
    echo "aiven/build.sh: Maven ($MVN) is not on PATH: install it (e.g. apt-get install maven) and run again" >&2
    exit 1
}
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if ! git clone -q --depth 1 --branch "$AIVEN_TAG" "$url" "$work/aiven" 2>"$work/clone.log"; then
    cat "$work/clone.log" >&2
    echo "aiven/build.sh: cannot clone $AIVEN_TAG from $url; set KTS_AIVEN_GIT to a clone of" \
        "Aiven-Open/tiered-storage-for-apache-kafka that has the tag" >&2
    exit 1
fi
got="$(git -C "$work/aiven" rev-parse HEAD)"
[[ "$got" == "$AIVEN_COMMIT" ]] || {
    echo "aiven/build.sh: $url has $AIVEN_TAG at $got, expected $AIVEN_COMMIT: refusing to build it" >&2
    exit 1
}
mkdir -p "$work/src/java" "$work/src/resources"
for m in "${MODULES[@]}"; do
    cp -r "$work/aiven/$m/src/main/java/." "$work/src/java/"
    if [[ -d "$work/aiven/$m/src/main/resources" ]]; then
        cp -r "$work/aiven/$m/src/main/resources/." "$work/src/resources/"
    fi
done
# Offline first (~/.m2 may hold everything), online when that fails, e.g. on a fresh machine.
args=(-B -q -f "$here/pom.xml" -Daiven.src="$work/src" -Daiven.out="$work/target" package)
if ! "$MVN" -o "${args[@]}" >"$work/mvn.log" 2>&1 && ! "$MVN" "${args[@]}" >"$work/mvn.log" 2>&1; then
    sed 's/\x1b\[[0-9;]*m//g' "$work/mvn.log" >&2
    echo "aiven/build.sh: mvn package of Aiven's $AIVEN_TAG failed (log above)" >&2
    exit 1
fi
rm -rf "$out"
mkdir -p "$out"
cp "$work/target/$(basename "$jar")" "$jar"
cp -r "$work/target/lib" "$out/lib"
cp "$work/target/kafka-api.classpath" "$out/kafka-api.classpath"
echo "$stamp_value" >"$out/.stamp"
echo "$out"
