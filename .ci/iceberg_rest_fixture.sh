#!/usr/bin/env bash
# Iceberg's REST catalog test server from Maven Central (org.apache.iceberg:iceberg-open-api:<v>:test-fixtures;
# the apache/iceberg-rest-fixture image runs the same class): Maven resolves its classpath into ~/.m2 once
# (`make setup`), then this prints it, offline. Run it with
#   CATALOG_WAREHOUSE=file:///path CATALOG_REST_PORT=8181 java -cp "$(bash .ci/iceberg_rest_fixture.sh)" \
#       org.apache.iceberg.rest.RESTCatalogServer
# Used by tests/integration/test_iceberg_catalogs.py.
set -euo pipefail
cd "$(dirname "$0")/iceberg-rest-fixture"
out=target/classpath.txt
if [[ ! -s $out || pom.xml -nt $out ]]; then
    mkdir -p target
    mvn -q -B dependency:build-classpath -Dmdep.outputFile="$out" >&2
fi
cat "$out"
echo
