#!/bin/bash
# Start one KRaft node (broker + controller) from environment variables; see ../Dockerfile.
#
# Every KAFKA_<NAME> variable becomes the broker setting <name> (lower case, `_` -> `.`, `__` -> `_`,
# `___` -> `-`), as in the apache/kafka image: KAFKA_ADVERTISED_LISTENERS -> advertised.listeners.
# Not settings: KAFKA_HEAP_OPTS, KAFKA_OPTS (JVM options), KAFKA_CLUSTER_ID (used when formatting),
# KAFKA_DATA_DIR (default /var/lib/kafka/data), and the KAFKA_PORT*/KAFKA_SERVICE_* variables Kubernetes
# injects for a Service named "kafka". The defaults below make a single node that needs no settings.
set -euo pipefail

DATA_DIR=${KAFKA_DATA_DIR:-/var/lib/kafka/data}
CONFIG_DIR=${KAFKA_CONFIG_DIR:-$(dirname "$DATA_DIR")/config}
CONFIG=$CONFIG_DIR/server.properties
mkdir -p "$DATA_DIR" "$CONFIG_DIR"

declare -A props=(
  [process.roles]=broker,controller
  [node.id]=1
  [listeners]=PLAINTEXT://:9092,CONTROLLER://:9093
  [advertised.listeners]=PLAINTEXT://localhost:9092
  [controller.listener.names]=CONTROLLER
  [listener.security.protocol.map]=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT
  [log.dirs]=$DATA_DIR
  [num.partitions]=1
  [default.replication.factor]=1
  [offsets.topic.replication.factor]=1
  [transaction.state.log.replication.factor]=1
  [transaction.state.log.min.isr]=1
  [share.coordinator.state.topic.replication.factor]=1
  [share.coordinator.state.topic.min.isr]=1
  [group.initial.rebalance.delay.ms]=0
)

while IFS='=' read -r name value; do
  case $name in
    KAFKA_HEAP_OPTS | KAFKA_OPTS | KAFKA_CLUSTER_ID | KAFKA_DATA_DIR | KAFKA_CONFIG_DIR | KAFKA_HOME) continue ;;
    KAFKA_PORT | KAFKA_PORT_* | KAFKA_SERVICE_*) continue ;;
  esac
  key=$(printf '%s' "${name#KAFKA_}" | tr '[:upper:]' '[:lower:]' | sed -e 's/___/-/g' -e 's/__/@/g' -e 's/_/./g' -e 's/@/_/g')
  props[$key]=$value
done < <(env | grep -E '^KAFKA_[A-Z0-9_]+=' || true)

# The controller's own port (from the CONTROLLER listener) makes the single-voter quorum, and the
# broker listener that is not the controller's carries inter-broker traffic, unless set explicitly.
controller_name=${props[controller.listener.names]%%,*}
controller_port=$(tr ',' '\n' <<<"${props[listeners]}" | sed -n "s|^${controller_name}://.*:\([0-9]*\)$|\1|p")
: "${props[controller.quorum.voters]:=${props[node.id]}@localhost:${controller_port:-9093}}"
if [[ -z ${props[inter.broker.listener.name]:-} && -z ${props[security.inter.broker.protocol]:-} ]]; then
  props[inter.broker.listener.name]=$(tr ',' '\n' <<<"${props[listeners]}" | sed 's|://.*||' | grep -vx "$controller_name" | head -1)
fi

: >"$CONFIG"
for key in "${!props[@]}"; do printf '%s=%s\n' "$key" "${props[$key]}" >>"$CONFIG"; done

JAVA=(java ${KAFKA_HEAP_OPTS:--Xmx512m -Xms128m} ${KAFKA_OPTS:-} -XX:-UsePerfData -Djava.awt.headless=true
  -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties -cp '/opt/kafka/libs/*')

if [[ ! -f ${props[log.dirs]%%,*}/meta.properties ]]; then
  cluster_id=${KAFKA_CLUSTER_ID:-$(kafka-storage.sh random-uuid)}
  echo "kafka-entrypoint: formatting KRaft storage in ${props[log.dirs]} (cluster id $cluster_id)"
  "${JAVA[@]}" -XX:TieredStopAtLevel=1 kafka.tools.StorageTool format --ignore-formatted \
    --cluster-id "$cluster_id" --config "$CONFIG"
fi
exec "${JAVA[@]}" kafka.Kafka "$CONFIG"
