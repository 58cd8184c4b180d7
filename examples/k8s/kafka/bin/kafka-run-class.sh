#!/bin/bash
# kafka-run-class.sh CLASS [ARGS...]: run a Kafka tool on the image's jars, logging warnings to stderr.
set -euo pipefail
exec java ${KAFKA_HEAP_OPTS:--Xmx256m} ${KAFKA_OPTS:-} -XX:-UsePerfData -XX:TieredStopAtLevel=1 \
  -Djava.awt.headless=true -Dlog4j2.configurationFile=/opt/kafka/config/tools-log4j2.properties \
  -cp '/opt/kafka/libs/*' "$@"
