#!/bin/bash
# The Spark image's entrypoint: what Spark's Kubernetes backend runs in the pods it creates, and
# `kappaflow` for anything else (so `docker run kappaflow-spark:0.1.0 reprocess ...` still works).
#
# Spark (spark-submit --master k8s://... --deploy-mode cluster, run by the Spark operator) starts the
# driver pod with the arguments `driver --properties-file ... --class ... <main file> <args>`, and the
# driver starts executor pods with the argument `executor`, passing everything else as environment:
#   driver:   SPARK_DRIVER_BIND_ADDRESS (the pod IP), SPARK_CONF_DIR (its properties, a ConfigMap)
#   executor: SPARK_DRIVER_URL, SPARK_EXECUTOR_ID, SPARK_EXECUTOR_CORES, SPARK_EXECUTOR_MEMORY,
#             SPARK_APPLICATION_ID, SPARK_EXECUTOR_POD_IP, SPARK_EXECUTOR_POD_NAME,
#             SPARK_RESOURCE_PROFILE_ID and the JVM options as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ...
# Spark's jars (and the Kafka connector's, copied beside them) are $SPARK_HOME/jars, the installed
# PySpark's own directory; Python is the image's venv, which has kappaflow and the user's code.
set -euo pipefail

role="${1:-}"
case "$role" in
  driver)
    shift
    : "${SPARK_DRIVER_BIND_ADDRESS:?the driver pod sets SPARK_DRIVER_BIND_ADDRESS to its pod IP}"
    # The pod is the cluster-mode driver: it runs the application in client mode inside itself.
    exec "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=$SPARK_DRIVER_BIND_ADDRESS" \
      --deploy-mode client "$@"
    ;;
  executor)
    shift
    for name in SPARK_DRIVER_URL SPARK_EXECUTOR_ID SPARK_EXECUTOR_CORES SPARK_EXECUTOR_MEMORY \
      SPARK_APPLICATION_ID SPARK_EXECUTOR_POD_IP SPARK_EXECUTOR_POD_NAME; do
      if [ -z "${!name:-}" ]; then
        echo "spark-entrypoint: executor pod without $name (is this pod made by Spark's driver?)" >&2
        exit 64
      fi
    done
    # SPARK_JAVA_OPT_<n>, in the order n says (not the environment's order).
    java_opts=()
    while IFS= read -r -d '' entry; do
      java_opts+=("${entry#*=}")
    done < <(env -0 | grep -z '^SPARK_JAVA_OPT_[0-9]*=' | sort -z -t_ -k4 -n)
    java="${JAVA_HOME:+$JAVA_HOME/bin/}java"
    exec "$java" "${java_opts[@]}" \
      -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
      -cp "$SPARK_HOME/jars/*${SPARK_CLASSPATH:+:$SPARK_CLASSPATH}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" \
      --executor-id "$SPARK_EXECUTOR_ID" \
      --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" \
      --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "$SPARK_EXECUTOR_POD_NAME"
    ;;
  *)
    exec kappaflow "$@"
    ;;
esac
