#!/usr/bin/env bash
# Builds the broker plugin jar with the JDK alone (no Maven, no Kafka jars):
#   rsm/_jars/kafka-tiered-storage-shim.jar   our classes only (the broker provides Kafka's API classes)
#   jvm-shim/build/kafka-api-stubs.jar        signature-exact KIP-405 stubs, compile/test classpath only
#   jvm-shim/build/kts-shim-test.jar          the Java test harness (16-thread lifecycle driver)
#   jvm-shim/build/fake-kafka.jar             a stand-in kafka.Kafka main for testing `kts kafka-server-start`
#   jvm-shim/build/retriable-stub.jar         test only: Kafka's newer RetriableRemoteStorageException, so tests can
#                                             run the shim with and without it on the class path
#   jvm-shim/build/kafka-4x-metadata-stub.jar test only: RemoteLogSegmentMetadata with Kafka 4.0's txnIdxEmpty, put
#                                             ahead of the stubs to run the shim's reflective lookup where it exists
# Everything is compiled for Java 11 (class files of major version 55): the oldest Java a supported broker runs on.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
build="$here/build"
out_jar="$repo/rsm/_jars/kafka-tiered-storage-shim.jar"
JAVAC="${JAVAC:-javac}"
JAR="${JAR:-jar}"

rm -rf "$build"
mkdir -p "$build/stubs" "$build/classes" "$build/test-classes" "$build/fake-kafka" "$build/retriable-stub" "$build/metadata-4x-stub" \
    "$(dirname "$out_jar")"

"$JAVAC" --release 11 -d "$build/stubs" $(find "$here/stubs" -name '*.java' | sort)
"$JAVAC" --release 11 -Xlint:all,-serial -cp "$build/stubs" -d "$build/classes" \
    $(find "$here/src" -name '*.java' | sort)
"$JAVAC" --release 11 -cp "$build/stubs:$build/classes" -d "$build/test-classes" \
    $(find "$here/test-src/io" -name '*.java' | sort)
"$JAVAC" --release 11 -cp "$build/stubs" -d "$build/fake-kafka" $(find "$here/test-src/kafka" -name '*.java' | sort)

"$JAVAC" --release 11 -cp "$build/stubs" -d "$build/retriable-stub" $(find "$here/test-stubs" -name '*.java' | sort)
"$JAVAC" --release 11 -cp "$build/stubs" -d "$build/metadata-4x-stub" $(find "$here/test-stubs-4x" -name '*.java' | sort)

"$JAR" --create --file "$build/kafka-api-stubs.jar" -C "$build/stubs" .
"$JAR" --create --file "$build/retriable-stub.jar" -C "$build/retriable-stub" .
"$JAR" --create --file "$build/kafka-4x-metadata-stub.jar" -C "$build/metadata-4x-stub" .
"$JAR" --create --file "$build/kts-shim-test.jar" -C "$build/test-classes" .
"$JAR" --create --file "$build/fake-kafka.jar" -C "$build/fake-kafka" .
# The release version lives in rsm/_version.py only; the jar's manifest carries the same one.
version="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$repo/rsm/_version.py")"
[[ -n "$version" ]] || { echo "build.sh: no __version__ in $repo/rsm/_version.py" >&2; exit 1; }
printf 'Implementation-Title: kafka-tiered-storage-shim\nImplementation-Version: %s\nImplementation-Vendor: kafka-tiered-storage\n' \
    "$version" >"$build/MANIFEST.MF"
tmp_jar="$out_jar.tmp.$$"
"$JAR" --create --file "$tmp_jar" --manifest "$build/MANIFEST.MF" -C "$build/classes" .
mv -f "$tmp_jar" "$out_jar"
echo "built $out_jar"
