#!/usr/bin/env bash
# Starts the demo broker: fills ${NAME} placeholders of the mounted config from the environment (the AWS
# stack's bucket and region come from demo/.env), a key pair on first start (kept in the keys volume), the
# config checked by `kts config check`, its bucket checked, KRaft storage formatted once, then Kafka.
set -euo pipefail
props="${1:-/etc/kafka/server.properties}"
keys=/etc/kafka/tiered
rendered=/var/lib/kafka/server.properties
kts-demo-init render "$props" "$rendered"
if [[ ! -f "$keys/k1-private.pem" ]]; then
    kts keys generate --id k1 --bits 3072 --out "$keys"
fi
kts config check "$rendered"
# the bucket or container must be there (the init step made it); podman-compose starts the broker once the init
# step has stopped, whatever its exit code, so the broker checks for itself and stops with the reason
kts-demo-init bucket "$rendered" --existing --wait 60
kafka-storage.sh format --ignore-formatted --cluster-id "${KAFKA_CLUSTER_ID:-a3RzLWRlbW8tY2x1c3Rlcg}" --config "$rendered"
exec kafka-server-start.sh "$rendered"
