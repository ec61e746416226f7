#!/usr/bin/env bash
# The broker service's health check: Kafka answers an ApiVersions request on 9092, and the plugin's sidecar
# serves its Prometheus endpoint (the port in the config the entrypoint rendered). Either failing is unhealthy.
set -euo pipefail
KAFKA_HEAP_OPTS="-Xmx64m" kafka-broker-api-versions.sh --bootstrap-server localhost:9092 >/dev/null 2>&1
port="$(sed -n 's/^rsm\.config\.metrics\.prometheus\.port=\([0-9]*\)\s*$/\1/p' /var/lib/kafka/server.properties)"
if [[ -n "$port" ]]; then
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10).read()' \
        "http://127.0.0.1:$port/metrics"
fi
