#!/usr/bin/env bash
# Starts the demo broker: a key pair on first start (kept in the keys volume), KRaft storage formatted once,
# the broker's config checked by `kts config check`, then Kafka in the foreground.
set -euo pipefail
props="${1:-/etc/kafka/server.properties}"
keys=/etc/kafka/tiered
if [[ ! -f "$keys/k1-private.pem" ]]; then
    kts keys generate --id k1 --bits 3072 --out "$keys"
fi
kts config check "$props"
kafka-storage.sh format --ignore-formatted --cluster-id "${KAFKA_CLUSTER_ID:-a3RzLWRlbW8tY2x1c3Rlcg}" --config "$props"
exec kafka-server-start.sh "$props"
