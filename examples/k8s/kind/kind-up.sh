#!/usr/bin/env bash
# `make kind-up`: a local Kubernetes (kind) with Kafka, the kappaflow operator and the word count
# StreamApp. Needs Docker, kind and kubectl; helm is built from the Go module proxy if not on PATH.
#
# Images: by default the Dockerfiles' official bases (python:3.11-slim-bookworm, rust, debian), pulled
# from Docker Hub. KAPPAFLOW_IMAGES=local builds everything on this machine instead (`make images`: Debian
# bases from debootstrap, wheels and jars prepared on the host, no registry), Kafka included
# (kappaflow-kafka, examples/k8s/kafka/Dockerfile). kind's node image itself still comes from a registry.
#   make kind-up                      # official bases
#   KAPPAFLOW_IMAGES=local make kind-up   # local bases (what CI's real-node tier runs)
#   KAPPAFLOW_SPARK=1 make kind-up    # also the Spark images and the Kubeflow Spark operator, for
#                                     # `upgrade: reprocess` (its controller built from its Go module)
# Kafka, the chart values and the example are the real-node tier's own: examples/k8s/kafka/kafka.yaml,
# examples/k8s/operator-values.yaml, `kubectl apply -k examples/k8s`.
set -euo pipefail
cd "$(dirname "$0")/../../.."

CLUSTER=${KIND_CLUSTER:-kappaflow}
VERSION=${KAPPAFLOW_VERSION:-0.1.0}
step() { printf '\n==> %s\n' "$*"; }

for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { echo "kind-up: '$tool' is required (see README: On Kubernetes)" >&2; exit 1; }
done
HELM=$(command -v helm || .venv/bin/python -m tests.harness.helm)

step "cluster '$CLUSTER'"
if ! kind get clusters | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --config examples/k8s/kind/cluster.yaml --wait 120s
fi
kubectl config use-context "kind-$CLUSTER" >/dev/null

SPARK=${KAPPAFLOW_SPARK:-0}
SPARK_OPERATOR_TAG=2.5.0  # tests/harness/spark_operator.py's VERSION, without the v
IMAGES=("kappaflow-runtime:$VERSION" "kappaflow-operator:$VERSION" "kappaflow-examples:$VERSION" "kappaflow-kafka:4.3.1")
SPARK_IMAGES=("kappaflow-spark:$VERSION" "kappaflow-examples-spark:$VERSION" "kappaflow-spark-operator:$SPARK_OPERATOR_TAG")
[ "$SPARK" = 1 ] && IMAGES+=("${SPARK_IMAGES[@]}")
if [ "${KAPPAFLOW_IMAGES:-official}" = local ]; then
  step "images on local bases (make images: runtime, operator, examples, kafka$([ "$SPARK" = 1 ] && echo ', spark, examples-spark, spark-operator'))"
  only=(runtime operator examples kafka)
  [ "$SPARK" = 1 ] && only+=(spark examples-spark spark-operator)
  .venv/bin/python -m tests.harness.images build --only "${only[@]}"
else
  step "images on the official bases (runtime, operator, examples, kafka)"
  export DOCKER_BUILDKIT=1  # the Dockerfiles need BuildKit (stage selection, RUN --mount)
  docker build -f runtime/Dockerfile -t "kappaflow-runtime:$VERSION" .
  docker build -f operator/Dockerfile -t "kappaflow-operator:$VERSION" .
  docker build -f examples/k8s/Dockerfile.wordcount --build-arg "RUNTIME_IMAGE=kappaflow-runtime:$VERSION" \
    -t "kappaflow-examples:$VERSION" .
  docker build -f examples/k8s/kafka/Dockerfile -t kappaflow-kafka:4.3.1 .
  if [ "$SPARK" = 1 ]; then
    step "Spark images on the official bases (spark, examples-spark, spark-operator)"
    docker build -f runtime/Dockerfile.spark --build-arg "RUNTIME_IMAGE=kappaflow-runtime:$VERSION" \
      -t "kappaflow-spark:$VERSION" .
    docker build -f examples/k8s/Dockerfile.wordcount --build-arg "RUNTIME_IMAGE=kappaflow-spark:$VERSION" \
      -t "kappaflow-examples-spark:$VERSION" .
    docker build -f runtime/Dockerfile.spark-operator --build-arg "SPARK_IMAGE=kappaflow-spark:$VERSION" \
      -t "kappaflow-spark-operator:$SPARK_OPERATOR_TAG" .
  fi
fi
for image in "${IMAGES[@]}"; do
  kind load docker-image --name "$CLUSTER" "$image"
done

# The same manifests and chart values the real-node tests apply (tests/realnode).
step "Kafka (single KRaft node on a volume) and the example topics"
kubectl apply -f examples/k8s/kafka/kafka.yaml
kubectl -n kafka rollout status statefulset/kafka --timeout=300s
kubectl -n kafka wait --for=condition=complete job/create-example-topics --timeout=300s

step "kappaflow operator (Helm chart, two replicas electing a leader)"
"$HELM" upgrade --install kappaflow charts/kappaflow --namespace kappaflow-system --create-namespace \
  -f examples/k8s/operator-values.yaml --set "image.tag=$VERSION" --wait --timeout 300s

step "the word count StreamApp (GitOps folder examples/k8s)"
kubectl apply -k examples/k8s
kubectl -n kappaflow-examples wait --for=condition=Ready streamapp/wordcount --timeout=600s

if [ "$SPARK" = 1 ]; then
  # the apps' namespace exists now (the chart puts the Spark ServiceAccount and Role there)
  step "Kubeflow Spark operator v$SPARK_OPERATOR_TAG (its own chart, controller only) watching kappaflow-examples"
  "$HELM" upgrade --install spark-operator "$(.venv/bin/python -m tests.harness.spark_operator chart)" \
    --namespace spark-operator --create-namespace -f examples/k8s/spark-operator-values.yaml \
    --set "spark.jobNamespaces={kappaflow-examples}" --wait --timeout 300s
fi

cat <<MSG

kappaflow is running on kind. Try:
  kubectl -n kappaflow-examples get streamapps,statefulsets,pods
  kubectl -n kafka exec -it kafka-0 -- kafka-console-producer.sh \\
      --bootstrap-server kafka-0.kafka.kafka.svc.cluster.local:9092 --topic wordcount-input
  kubectl -n kappaflow-examples scale streamapp/wordcount --replicas=3
Tear down with: make kind-down
MSG
if [ "$SPARK" = 1 ]; then
  cat <<MSG
Reprocess the word count on Spark (a new application id, its state rebuilt from the retained input):
  kubectl -n kappaflow-examples patch streamapp wordcount --type=merge -p '{"spec": {"image":
      "kappaflow-examples-spark:$VERSION", "upgrade": {"mode": "reprocess", "spark": {"serviceAccountName":
      "kappaflow-spark", "driver": {"coreRequest": "100m", "memory": "512m"}, "executor": {"instances": 1,
      "coreRequest": "100m", "memory": "512m"}}}}}'
  kubectl -n kappaflow-examples get sparkapplications,pods -l spark-role
MSG
fi
