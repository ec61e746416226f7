#!/usr/bin/env bash
# Apicurio Registry as one runnable jar for the tests, built once into the cache (make setup runs this; the jar's
# dependencies come from Maven Central into ~/.m2). KTS_APICURIO_JAR moves it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
jar="${KTS_APICURIO_JAR:-$HOME/.cache/kafka-tiered-storage/apicurio/apicurio-registry.jar}"
if [ -s "$jar" ]; then
    exit 0
fi
command -v mvn >/dev/null || { echo "apicurio/build.sh: no mvn; the registry tests will use the fake only" >&2; exit 0; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$here/pom.xml" "$here/src" "$work/"
# The parent POM's own checks (checkstyle, license, enforcer) need files of Apicurio's source tree: off.
(cd "$work" && mvn -B -q -DskipTests -Dcheckstyle.skip -Denforcer.skip -Dlicense.skip -Djacoco.skip \
    -Dmaven.javadoc.skip -Dmaven.source.skip -Dquarkus.package.type=uber-jar \
    -Dquarkus.index-dependency.app.group-id=io.apicurio -Dquarkus.index-dependency.app.artifact-id=apicurio-registry-app \
    package)
mkdir -p "$(dirname "$jar")"
cp "$work"/target/*-runner.jar "$jar.tmp"
mv "$jar.tmp" "$jar"
echo "apicurio/build.sh: $jar"
