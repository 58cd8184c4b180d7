# kappaflow developer entry points.
#   make run   - set everything up, start a local Kafka broker and run the word count example
#   make test  - lint, type-check and run every test tier (unit, Kafka, Kubernetes, Spark)
# Downloads and builds are cached under $(KAPPAFLOW_CACHE), outside the clone.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export KAPPAFLOW_CACHE ?= $(HOME)/.cache/kappaflow
export PIP_CACHE_DIR ?= $(KAPPAFLOW_CACHE)/pip
KAFKA_PORT ?= 9092
KAFKA_DIR ?= .run/kafka
KUBE_DIR ?= .run/kube
PYTEST_ARGS ?=

.PHONY: run bench bench-reprocess spark-jars test-spark setup test test-unit test-kafka chaos test-kube lint typecheck crds crds-check chart-lint describe \
	kafka-up kafka-down kafka-status kafka-download kube-build kube-up kube-down kube-status operator-run test-operator kind-up kind-down clean

# The main job: broker (downloaded and started if needed), topics, word count and a line generator;
# prints the counts as they change. RUN_SECONDS=0 runs until Ctrl-C.
RUN_SECONDS ?= 30
run: setup kafka-download
	$(PY) examples/run_wordcount.py --seconds $(RUN_SECONDS)

bench: setup kafka-download
	$(PY) bench/throughput.py

$(VENV)/.installed: pyproject.toml
	@echo "==> creating virtualenv and installing kappaflow (pip cache: $(PIP_CACHE_DIR))"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,operator,spark]'
	@touch $@

setup: $(VENV)/.installed

# The servers the tiers need are fetched/built first, with progress, so no single test pays for them.
test: lint typecheck crds-check kafka-download kube-build spark-jars
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-unit: setup
	$(PY) -m pytest -q tests/runtime tests/operator -m "not kube and not kafka"

test-kafka: setup
	$(PY) -m pytest -q -m kafka tests/kafka

# A long kill loop (kill -9 and restart at random, broker restarts) per guarantee and membership mode,
# against a broker of its own; audits the committed output. CHAOS_MINUTES per mode.
CHAOS_MINUTES ?= 10
chaos: setup kafka-download
	$(PY) -m tests.kafka.chaos --minutes $(CHAOS_MINUTES)

test-spark: spark-jars
	$(PY) -m pytest -q tests/spark

# Spark's Kafka connector jars from Maven Central (pinned to the pyspark version, cached)
spark-jars: setup
	$(PY) -m kappaflow.spark.jars

bench-reprocess: setup kafka-download spark-jars
	$(PY) bench/reprocess.py --lines 400000

test-kube: kube-build
	$(PY) -m pytest -q -m kube

lint: setup
	$(VENV)/bin/ruff check runtime operator tests examples bench
	$(VENV)/bin/ruff format --check runtime operator tests examples bench
	$(VENV)/bin/lint-imports

typecheck: setup
	$(VENV)/bin/mypy runtime/kappaflow operator/kappaflow_operator

crds: setup
	$(PY) -m kappaflow_operator.crdgen

crds-check: setup
	$(PY) -m kappaflow_operator.crdgen --check

chart-lint: setup
	@helm=$$($(PY) -m tests.harness.helm) && \
	  $$helm lint --strict charts/kappaflow && \
	  $$helm template kf charts/kappaflow -n kappaflow-system >/dev/null && \
	  $$helm template kf charts/kappaflow --set 'watchNamespaces={a,b}' >/dev/null

# run the operator locally against a cluster (e.g. after `make kube-up kafka-up`)
operator-run: setup
	KUBECONFIG=$${KUBECONFIG:-$(KUBE_DIR)/admin.kubeconfig} $(VENV)/bin/kopf run -m kappaflow_operator.main \
	  --all-namespaces --standalone --verbose

test-operator: kube-build
	$(PY) -m pytest -q tests/operator tests/e2e

# For users with Docker: kind cluster, images, Kafka, the operator chart and the word count StreamApp.
kind-up: setup
	examples/k8s/kind/kind-up.sh

kind-down:
	kind delete cluster --name $${KIND_CLUSTER:-kappaflow}

describe: setup
	$(VENV)/bin/kappaflow describe examples.wordcount:build_topology

kafka-up: setup
	$(PY) -m tests.harness.kafka_broker start --port $(KAFKA_PORT) --dir $(KAFKA_DIR)

kafka-down:
	@if [ -x $(PY) ]; then $(PY) -m tests.harness.kafka_broker stop --dir $(KAFKA_DIR); fi

kafka-status: setup
	$(PY) -m tests.harness.kafka_broker status --dir $(KAFKA_DIR)

kafka-download: setup
	$(PY) -m tests.harness.kafka_broker download

# etcd + kube-apiserver + kube-controller-manager built from the Go module proxy (~5.5 min cold, cached)
kube-build: setup
	$(PY) -m tests.harness.kube_control_plane build

# a detached local control plane (no kubelet/scheduler); prints the kubeconfig path
kube-up: kube-build
	$(PY) -m tests.harness.kube_control_plane start --dir $(KUBE_DIR)

kube-down:
	@if [ -x $(PY) ]; then $(PY) -m tests.harness.kube_control_plane stop --dir $(KUBE_DIR); fi

kube-status: setup
	$(PY) -m tests.harness.kube_control_plane status --dir $(KUBE_DIR)

clean: kafka-down kube-down
	rm -rf $(VENV) .state .run
