#!/usr/bin/env bash
# Spark for reading the Iceberg tables: Iceberg's own Spark runtime is built for one Spark minor, and the newest
# (iceberg-spark-runtime-4.1_2.13) does not load into the project's newer PySpark. This makes .venv-iceberg-spark:
# PySpark 4.1 on top of the project's .venv (a .pth file adds .venv's packages after its own), and fetches the
# matching runtime jar into ~/.m2, with Iceberg's AWS bundle (S3FileIO, for tables on S3) and the SQLite and
# PostgreSQL JDBC drivers that let Spark open the plugin's catalog as Iceberg's JDBC catalog. Prints the jars as one comma-separated list (the value of spark.jars), the
# runtime first. Used by the Iceberg reader tests and bench_iceberg.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PYSPARK_VERSION=${ICEBERG_PYSPARK_VERSION:-4.1.4}
ICEBERG_VERSION=${ICEBERG_SPARK_VERSION:-1.12.0}
ARTIFACT=iceberg-spark-runtime-4.1_2.13
VENV=.venv-iceberg-spark
if [[ ! -x $VENV/bin/python || ! -e $VENV/.installed-$PYSPARK_VERSION ]]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "pyspark==$PYSPARK_VERSION" >&2
    base=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    own=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    # site.addsitedir also runs .venv's own .pth files (the editable install of this repo).
    echo "import site; site.addsitedir('$base')" >"$own/zz-project-venv.pth"
    touch "$VENV/.installed-$PYSPARK_VERSION"
fi
jars=()
for coords in "org.apache.iceberg:$ARTIFACT:$ICEBERG_VERSION" "org.apache.iceberg:iceberg-aws-bundle:$ICEBERG_VERSION" \
    org.xerial:sqlite-jdbc:3.54.1.0 \
    org.postgresql:postgresql:42.7.14; do
    IFS=: read -r group name version <<<"$coords"
    jar="$HOME/.m2/repository/${group//.//}/$name/$version/$name-$version.jar"
    if [[ ! -s $jar ]]; then
        mvn -q -B dependency:get -Dartifact="$coords" -Dtransitive=false >&2
    fi
    jars+=("$jar")
done
(IFS=,; echo "${jars[*]}")
