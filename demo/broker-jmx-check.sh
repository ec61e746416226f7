#!/usr/bin/env bash
# The metrics where a Kafka operator looks: a real broker (KAFKA_HOME, Kafka 3.6+) with JMX on 127.0.0.1 tiers
# a topic through our shim (sidecar transport), a consumer reads it back from remote storage, and Kafka's own
# JmxTool reads our beans under Aiven's names. Passes when object-upload-total,
# segment-fetch-requested-bytes-total, the chunk cache's misses and our segment-copy-time-p99 are above zero. Not part of CI (needs Kafka).
#
#   KAFKA_HOME=/path/to/kafka bash demo/broker-jmx-check.sh      # KEEP=1 keeps the scratch folder
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
KH="${KAFKA_HOME:?set KAFKA_HOME to a Kafka distribution}"
PY="${PYTHON:-$REPO/.venv/bin/python}"
N="${N:-20000}"
DEADLINE_S="${DEADLINE_S:-180}"
say() { echo "[broker-jmx $(date +%T)] $*"; }
fail() { echo "[broker-jmx] FAIL: $*" >&2; exit 1; }
[ -x "$KH/bin/kafka-server-start.sh" ] || fail "$KH is not a Kafka distribution"
[ -f "$REPO/rsm/_jars/kafka-tiered-storage-shim.jar" ] || fail "shim jar missing: bash jvm-shim/build.sh"
"$PY" -c 'import kafka' 2>/dev/null || fail "$PY has no kafka-python (pip install -e '.[test]')"

WORK="$(mktemp -d /tmp/broker-jmx.XXXXXX)"
BROKER=""
finish() {
  if [ -n "$BROKER" ] && kill -0 "$BROKER" 2>/dev/null; then
    kill "$BROKER" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$BROKER" 2>/dev/null || break; sleep 1; done
    kill -9 "$BROKER" 2>/dev/null || true
  fi
  if [ "${KEEP:-0}" = 1 ]; then say "kept $WORK"; else rm -rf "$WORK"; fi
}
trap finish EXIT

read -r BPORT CPORT JPORT < <("$PY" -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
BOOT="127.0.0.1:$BPORT"
cat > "$WORK/server.properties" <<PROPERTIES
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CPORT
listeners=PLAINTEXT://$BOOT,CONTROLLER://127.0.0.1:$CPORT
advertised.listeners=PLAINTEXT://$BOOT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$WORK/data
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
remote.log.manager.task.interval.ms=1000
log.retention.check.interval.ms=1000
log.segment.delete.delay.ms=1000
remote.log.storage.system.enable=true
remote.log.storage.manager.class.name=io.kts.shim.PythonRemoteStorageManager
remote.log.storage.manager.class.path=$REPO/rsm/_jars/*
rsm.config.python.executable=$PY
rsm.config.python.path=$REPO
rsm.config.chunk.size=65536
rsm.config.storage.backend.class=filesystem
rsm.config.storage.root=$WORK/remote
rsm.config.compression.enabled=true
remote.log.metadata.manager.listener.name=PLAINTEXT
rlmm.config.remote.log.metadata.topic.replication.factor=1
PROPERTIES

export LOG_DIR="$WORK/logs" KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx1g -Xms1g}"
"$KH/bin/kafka-storage.sh" format -t "$("$KH/bin/kafka-storage.sh" random-uuid)" -c "$WORK/server.properties" \
  > "$WORK/format.out" 2>&1 || { cat "$WORK/format.out"; fail "kafka-storage.sh format"; }
# JMX on 127.0.0.1 only, no authentication (a throwaway local broker).
JMX_OPTS="-Dcom.sun.management.jmxremote=true -Dcom.sun.management.jmxremote.authenticate=false"
JMX_OPTS="$JMX_OPTS -Dcom.sun.management.jmxremote.ssl=false -Dcom.sun.management.jmxremote.host=127.0.0.1"
JMX_OPTS="$JMX_OPTS -Djava.rmi.server.hostname=127.0.0.1"
KAFKA_JMX_OPTS="$JMX_OPTS" JMX_PORT="$JPORT" "$KH/bin/kafka-server-start.sh" "$WORK/server.properties" \
  > "$WORK/broker.out" 2>&1 &
BROKER=$!
for _ in $(seq 240); do
  grep -q 'Kafka Server started' "$WORK/broker.out" 2>/dev/null && break
  kill -0 "$BROKER" 2>/dev/null || { tail -30 "$WORK/broker.out"; fail "the broker exited while starting"; }
  sleep 0.5
done
grep -q 'Kafka Server started' "$WORK/broker.out" || fail "the broker did not start in 120 s"
say "broker pid $BROKER on $BOOT, JMX on 127.0.0.1:$JPORT"

"$KH/bin/kafka-topics.sh" --bootstrap-server "$BOOT" --create --topic tiered --partitions 1 \
  --replication-factor 1 --config remote.storage.enable=true --config segment.bytes=100000 \
  --config local.retention.bytes=1 > "$WORK/topic.out" 2>&1 || { cat "$WORK/topic.out"; fail "create topic"; }

BOOT="$BOOT" N="$N" WORK="$WORK" DEADLINE_S="$DEADLINE_S" "$PY" - <<'PYTHON'
import glob, os, sys, time
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

boot, n, work = os.environ["BOOT"], int(os.environ["N"]), os.environ["WORK"]
deadline = time.monotonic() + int(os.environ["DEADLINE_S"])
producer = KafkaProducer(bootstrap_servers=boot, acks="all", linger_ms=5)
for i in range(n):
    producer.send("tiered", key=b"%d" % i, value=b"record-%08d-" % i + b"y" * (i % 61 + 30))
producer.flush()
producer.close()
local = os.path.join(work, "data", "tiered-0")
while True:  # until the rolled segments are remote and gone locally
    remote = glob.glob(os.path.join(work, "remote", "tiered-*", "0", "*.log"))
    if remote and len(glob.glob(os.path.join(local, "*.log"))) == 1 and not glob.glob(os.path.join(local, "*.deleted")):
        break
    if time.monotonic() > deadline:
        sys.exit("segments were not tiered in time")
    time.sleep(1)
first_local = int(os.path.basename(sorted(glob.glob(os.path.join(local, "*.log")))[0]).split(".")[0])
consumer = KafkaConsumer(bootstrap_servers=boot, enable_auto_commit=False, consumer_timeout_ms=30000)
tp = TopicPartition("tiered", 0)
consumer.assign([tp])
consumer.seek_to_beginning(tp)
seen = 0
for record in consumer:
    assert record.value.startswith(b"record-%08d-" % record.offset), record.offset
    seen += 1
    if seen >= n:
        break
consumer.close()
print(f"[broker-jmx] {len(remote)} segments tiered; consumed {seen} records, offsets 0..{first_local - 1} from remote")
if seen != n or first_local == 0:
    sys.exit("not every record came back, or nothing was read from remote")
PYTHON

jmx() {  # JmxTool in its own JVM: the broker's JMX_PORT must not leak into it
  env -u JMX_PORT KAFKA_JMX_OPTS=" " "$KH/bin/kafka-run-class.sh" org.apache.kafka.tools.JmxTool \
    --jmx-url "service:jmx:rmi:///jndi/rmi://127.0.0.1:$JPORT/jmxrmi" --one-time true \
    --report-format properties --object-name "$1" ${2:+--attributes "$2"} 2>>"$WORK/jmxtool.err"
}
sleep 6  # the shim looks for new beans every 5 s; a snapshot is at most 1 s old
RSM_BEAN='aiven.kafka.server.tieredstorage:type=remote-storage-manager-metrics'
CACHE_BEAN='aiven.kafka.server.tieredstorage.cache:type=chunk-cache-metrics'
OUT="$(jmx "$RSM_BEAN" object-upload-total,segment-fetch-requested-bytes-total,segment-copy-time-avg,segment-copy-time-p99)"
OUT="$OUT"$'\n'"$(jmx "$CACHE_BEAN" cache-hits-total,cache-misses-total)"
OUT="$OUT"$'\n'"$(jmx "$RSM_BEAN,topic=tiered,partition=0,object-type=log" object-upload-total)"
echo "$OUT" | sed 's/^/[broker-jmx]   /'
value() { echo "$OUT" | grep -F "$1" | head -1 | sed 's/.*=//'; }
positive() { "$PY" -c 'import sys; sys.exit(0 if float(sys.argv[1] or 0) > 0 else 1)' "$1"; }
for attr in object-upload-total segment-fetch-requested-bytes-total cache-misses-total segment-copy-time-p99; do
  v="$(value ":$attr=")"
  positive "${v:-0}" || { cat "$WORK/jmxtool.err" >&2; fail "$attr is '${v}' (expected > 0)"; }
done
say "PASS: our beans are in the broker's JMX under Aiven's names"
