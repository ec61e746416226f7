#!/usr/bin/env bash
# Iceberg's own Spark runtime (for Spark 4.0 / Scala 2.13) into ~/.m2, for the tests and benchmarks that read the
# Iceberg tables with Spark (spark.jars). Prints the jar's path. The version is the newest Maven Central served
# when it was chosen (`mvn dependency:get -Dartifact=org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:RELEASE`).
set -euo pipefail
VERSION=${ICEBERG_SPARK_VERSION:-1.11.0}
ARTIFACT=iceberg-spark-runtime-4.0_2.13
JAR="$HOME/.m2/repository/org/apache/iceberg/$ARTIFACT/$VERSION/$ARTIFACT-$VERSION.jar"
if [[ ! -s $JAR ]]; then
    mvn -q -B dependency:get -Dartifact="org.apache.iceberg:$ARTIFACT:$VERSION" -Dtransitive=false >&2
fi
echo "$JAR"
