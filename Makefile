# kappaflow developer entry points.
#   make run   - set everything up, start a local Kafka broker and run the word count example
#   make test  - lint, type-check, build the docs and run every test tier (unit, Kafka, Kubernetes, Spark)
#   make docs  - the docs site (MkDocs, --strict) into .run/site; `make docs-serve` to browse it
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
# What `make test` runs a second time with --python-drain: the unit tier and the Kafka tests that run the
# stream thread in-process (the drain, its failures), not the tests of other processes or control planes.
# (the native core's own tests, its produce, restore and Spark shuffle paths' and the fused-vs-generic
# comparisons need the core this tier turns off)
PYTHON_DRAIN_TESTS ?= tests/runtime --ignore=tests/runtime/test_native_core.py \
	--ignore=tests/runtime/test_native_produce.py --ignore=tests/runtime/test_native_restore.py \
	--ignore=tests/runtime/test_native_shuffle.py --ignore=tests/runtime/test_native_table_flush.py \
	--deselect tests/runtime/test_fusion.py::test_wordcount_is_identical_fused_and_not \
	--deselect tests/runtime/test_fusion.py::test_every_fused_processor_is_identical_with_generic_nodes_between \
	tests/kafka/test_dead_letter.py tests/kafka/test_runner_recovery.py tests/kafka/test_task_idling.py \
	tests/kafka/test_wordcount_e2e.py

.PHONY: config-docs docs docs-serve prometheus conformance-golden conformance-jars run bench bench-latency bench-scaling bench-ttl bench-reprocess spark-jars test-spark setup test test-unit test-kafka chaos test-kube lint typecheck crds crds-check chart-lint describe \
	kafka-up kafka-down kafka-status kafka-download images test-images kube-build flux-build test-gitops kube-up kube-down kube-status operator-run test-operator kind-up kind-down clean \
	cluster-build cluster-up cluster-down cluster-status cluster-selftest test-real e2e-real

# The main job: broker (downloaded and started if needed), topics, word count and a line generator;
# prints the counts as they change. RUN_SECONDS=0 runs until Ctrl-C.
RUN_SECONDS ?= 30
run: setup kafka-download
	@$(PY) examples/run_wordcount.py --seconds $(RUN_SECONDS) --port $(KAFKA_PORT) --kafka-dir $(KAFKA_DIR)

# Every target of the performance issues with its verdict (~1 h on the 2-core build box): throughput,
# restore, restore after kill -9, memory, workers, asynchronous calls, latency and the scaling table without
# its 10M-key column (make bench-scaling has it). Spark reprocessing is make bench-reprocess.
bench: setup kafka-download
	$(PY) bench/throughput.py
	$(PY) bench/restore.py
	$(PY) bench/restore.py --crash
	$(PY) bench/memory.py
	$(PY) bench/workers.py
	$(PY) bench/async_calls.py
	$(PY) bench/latency.py
	$(PY) bench/scaling_cost.py --keys 1000,1000000

# End-to-end latency at 25/50/80% of kappaflow's maximum rate, kappaflow and Java Kafka Streams side by side.
bench-latency: setup kafka-download
	$(PY) bench/latency.py --tuned

# Store size with a TTL against none: 10M distinct keys through a count (KEYS=... to change the count).
bench-ttl: setup
	$(PY) bench/ttl_store.py --keys $(or $(KEYS),10000000)

# Throughput and peak RSS over 4/16/64 partitions x 1k/1M/10M keys, with the within-20% and memory-bound
# verdicts (~1 h on the 2-core build box; KEYS=1000,100000,1000000 for a ~15 min run).
bench-scaling: setup kafka-download
	$(PY) bench/scaling_cost.py $(if $(KEYS),--keys $(KEYS))

# State restoration alone: kappaflow vs a raw consume-into-rocksdict loop vs Java Kafka Streams.
bench-restore: setup kafka-download
	$(PY) bench/restore.py

# recovery from kill -9 under exactly_once_v2, kappaflow vs Java Kafka Streams (bench/restore_crash.py)
bench-restore-crash: setup kafka-download
	$(PY) bench/restore.py --crash

# pip's output goes to .run/logs/pip-install.log; the console gets one line (and the log's tail on failure).
$(VENV)/.installed: pyproject.toml
	@mkdir -p .run/logs
	@echo "==> Python packages: installing kappaflow[dev,operator,spark,docs] into $(VENV) (log .run/logs/pip-install.log)"
	@{ $(PYTHON) -m venv $(VENV) && $(PY) -m pip install --upgrade pip && \
	  $(PY) -m pip install -e '.[dev,operator,spark,docs]'; } > .run/logs/pip-install.log 2>&1 || \
	  { tail -n 30 .run/logs/pip-install.log; echo "pip install failed: see .run/logs/pip-install.log"; exit 1; }
	@echo "==> Python packages: $$($(PY) -m pip list --format=freeze 2>/dev/null | wc -l) installed"
	@touch $@

# kappaflow's native core (runtime/native: the tasks' drain loop in Rust, PyO3), built by maturin through
# pip when cargo is on the machine; without it the runtime runs the loops' Python twins (same results,
# slower). Cargo's builds are cached outside the clone; CI must have it (its tests compare both loops).
export CARGO_TARGET_DIR ?= $(KAPPAFLOW_CACHE)/cargo-target
NATIVE_SOURCES := $(wildcard runtime/native/src/*.rs) runtime/native/Cargo.toml runtime/native/Cargo.lock \
	runtime/native/pyproject.toml
$(VENV)/.native: $(VENV)/.installed $(NATIVE_SOURCES)
	@export PATH="$$PATH:$$HOME/.cargo/bin"; \
	if command -v cargo >/dev/null; then \
	  echo "==> native core: building kappaflow_native with $$(cargo --version | cut -d' ' -f1-2) and maturin (log .run/logs/native-build.log)"; \
	  $(PY) -m pip install ./runtime/native > .run/logs/native-build.log 2>&1 || \
	    { tail -n 30 .run/logs/native-build.log; echo "native core build failed: see .run/logs/native-build.log"; exit 1; }; \
	elif [ "$${CI:-}" = true ]; then \
	  echo "native core: cargo not found, and CI tests the native core (install Rust: https://rustup.rs)"; exit 1; \
	else \
	  echo "==> native core: cargo not found - the runtime runs its Python drain loop (install Rust for the native core)"; \
	  $(PY) -m pip uninstall -y -q kappaflow-native >/dev/null 2>&1 || true; \
	fi
	@touch $@

setup: $(VENV)/.installed $(VENV)/.native

# The servers the tiers need are fetched/built first, with progress, so no single test pays for them.
# Then two lanes at once (tests/harness/lanes.py: the suite mostly waits on brokers, groups and control
# planes, so two lanes take about the longer one's time): tests/kafka in one; everything else in the
# other, then the in-process tiers once more with the drain loop in Python (--python-drain), so both the
# native core and its Python twin pass them. Each lane ends naming its slowest tests (--durations).
# The real-node tier runs last, in a session of its own: its node (and Kafka and the operator as pods)
# starts for it and is torn down right after, so it never loads the machine under the other tiers.
test: lint typecheck crds-check docs kafka-download kube-build flux-build cluster-build images spark-jars prometheus conformance-jars
	PYTEST_ARGS='$(PYTEST_ARGS)' PYTHON_DRAIN_TESTS='$(PYTHON_DRAIN_TESTS)' $(PY) -m tests.harness.lanes
	@echo "==> the real-node tier: the project's images as pods on a real kubelet"
	$(PY) -m pytest -q --durations=10 -m realnode tests/realnode $(PYTEST_ARGS)

# The docs site (MkDocs + Material); --strict turns every warning (broken link, missing page) into an error.
docs: setup
	@NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir .run/site && echo "==> docs built in .run/site"

docs-serve: setup
	$(VENV)/bin/mkdocs serve

# Debian's prometheus (the dashboard test scrapes a running app with it); installed once via apt.
prometheus:
	@if command -v prometheus >/dev/null || [ -x /usr/bin/prometheus ]; then \
	  echo "==> Prometheus $$(/usr/bin/prometheus --version 2>&1 | head -1 | cut -d' ' -f3): installed"; \
	else \
	  echo "==> Prometheus: installing Debian's package (apt-get, log .run/logs/apt-prometheus.log)"; \
	  mkdir -p .run/logs; SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  { $$SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y --no-install-recommends prometheus; } \
	    > .run/logs/apt-prometheus.log 2>&1 || { tail -n 20 .run/logs/apt-prometheus.log; exit 1; }; \
	fi

# Rewrite tests/conformance/golden.json from Kafka Streams 4.3.1's TopologyTestDriver (needs a JDK 17+;
# the Kafka Streams and test-utils jars are fetched once, pinned and checksummed, into the cache).
conformance-golden: setup
	$(PY) -m tests.conformance.java_golden

# The Java half's jars and classes, so `make test` can check golden.json is current (skipped without a JDK).
conformance-jars: setup
	@if command -v javac >/dev/null; then $(PY) -m tests.conformance.java_golden --prepare; \
	else echo "==> no JDK: the conformance golden-file check will be skipped"; fi

test-unit: setup
	$(PY) -m pytest -q tests/runtime tests/operator -m "not kube and not kafka"

test-kafka: setup
	$(PY) -m pytest -q -m kafka tests/kafka

# A long kill loop (kill -9 and restart at random, broker restarts) per guarantee and membership mode,
# against a broker of its own; audits the committed output. CHAOS_MINUTES per mode.
# CHAOS_CLUSTER=1: on a three-broker cluster (CHAOS_CONTROLLERS: 1 or 3), with broker faults
# (CHAOS_FAULTS: comma-separated kinds of tests/kafka/cluster_chaos.py, or all) cycling for the whole
# time, each timed; the recovery time per fault kind is printed at the end of each mode.
CHAOS_MINUTES ?= 10
CHAOS_CLUSTER ?= 0
CHAOS_CONTROLLERS ?= 3
CHAOS_FAULTS ?= all
chaos: setup kafka-download
	$(PY) -m pytest -q -m chaos tests/kafka
	$(PY) -m tests.kafka.group_view_hammer --call members --restarts 6
	$(PY) -m tests.kafka.chaos --minutes $(CHAOS_MINUTES) \
	  $(if $(filter 1,$(CHAOS_CLUSTER)),--cluster --controllers $(CHAOS_CONTROLLERS) --faults $(CHAOS_FAULTS))

test-spark: spark-jars
	$(PY) -m pytest -q tests/spark

# Spark's Kafka connector jars from Maven Central (pinned to the pyspark version, cached)
spark-jars: setup
	@$(PY) -m kappaflow.spark.jars

# Spark reprocessing against replay, 1 and 4 input partitions, local[1] and local[2] (issue 31 item 6's
# verdicts; ~6 min here). Three rounds: on this shared machine one slow round decides a best of two. At
# 1M lines a run takes 3-6 s: at 200k Spark's fixed costs per task decide.
bench-reprocess: setup kafka-download spark-jars
	$(PY) bench/reprocess.py --lines 1000000 --rounds 3 --warm

test-kube: kube-build
	$(PY) -m pytest -q -m kube

lint: setup
	@$(VENV)/bin/ruff check --quiet runtime operator tests examples bench
	@$(VENV)/bin/ruff format --check --quiet runtime operator tests examples bench
	@mkdir -p .run/logs && $(VENV)/bin/lint-imports > .run/logs/lint-imports.log 2>&1 || \
	  { cat .run/logs/lint-imports.log; exit 1; }
	@export PATH="$$PATH:$$HOME/.cargo/bin"; if command -v cargo >/dev/null; then \
	  cd runtime/native && cargo fmt --check && cargo clippy --quiet --release -- -D warnings && \
	  echo "==> lint: the native core's cargo fmt and clippy clean"; fi
	@echo "==> lint: ruff check, ruff format and import contracts clean"

typecheck: setup
	@set -o pipefail; $(VENV)/bin/mypy runtime/kappaflow runtime/kappaflow_contract operator/kappaflow_operator | sed 's/^/==> mypy: /'

crds: setup
	$(PY) -m kappaflow_operator.crdgen
	$(PY) -m tests.harness.kopf_peering

# docs/configuration.md from the config definitions (kappaflow.api.config_reference); a test fails on drift.
config-docs: setup
	$(PY) -m kappaflow.api.config_reference

crds-check: setup
	@$(PY) -m kappaflow_operator.crdgen --check
	@$(PY) -m tests.harness.kopf_peering --check

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
	@$(PY) -m tests.harness.kafka_broker download

# Schema Registry: Apicurio Registry (Confluent-compatible API) from Maven Central, pinned and cached;
# `registry-run` serves it on 127.0.0.1:$(REGISTRY_PORT) until Ctrl-C. `test-registry` runs the
# registry serdes' tests (broker, registry, Java reader and Spark reprocessing).
.PHONY: registry-download registry-run test-registry
REGISTRY_PORT ?= 8081
registry-download: setup
	$(PY) -m tests.harness.schema_registry download

registry-run: registry-download
	$(PY) -m tests.harness.schema_registry run --port $(REGISTRY_PORT)

test-registry: registry-download kafka-download spark-jars
	$(PY) -m pytest -q tests/registry tests/spark/test_registry_reprocess.py

# Every image the project ships (pause, Debian and python3 bases, runtime, operator, examples, spark,
# kafka), built with the machine's docker and no registry: bases from Debian packages, wheels and jars
# prepared on the host. Cached by content (an unchanged image takes a second); logs in .run/logs.
# IMAGES_ARGS="--only runtime" builds one image (and its bases), "--rebuild" skips every cache.
IMAGES_ARGS ?=
images: setup
	@$(PY) -m tests.harness.images build $(IMAGES_ARGS)

# Runs the images as a restricted pod would (uid 1000, read-only root, no network).
test-images: images
	$(PY) -m pytest -q -m images tests/images $(PYTEST_ARGS)

# etcd + kube-apiserver + kube-controller-manager built from the Go module proxy (~5.5 min cold, cached)
kube-build: setup
	@$(PY) -m tests.harness.kube_control_plane build

# Flux's source-controller and kustomize-controller (Flux v2.9.5) built from their Go modules (~7 min cold
# at nice 19, cached by version); the GitOps tier runs them out of cluster against a kubeconfig.
flux-build: setup
	@$(PY) -m tests.harness.flux build

# GitOps with Flux against the local control plane: examples/k8s from a loopback git server, Flux's health.
test-gitops: kube-build flux-build kafka-download
	$(PY) -m pytest -q -m gitops tests/gitops $(PYTEST_ARGS)

# a detached local control plane (no kubelet/scheduler); prints the kubeconfig path
kube-up: kube-build
	$(PY) -m tests.harness.kube_control_plane start --dir $(KUBE_DIR)

kube-down:
	@if [ -x $(PY) ]; then $(PY) -m tests.harness.kube_control_plane stop --dir $(KUBE_DIR); fi

kube-status: setup
	$(PY) -m tests.harness.kube_control_plane status --dir $(KUBE_DIR)

# A real one-node Kubernetes on this machine (root): kubelet, kube-scheduler, kube-proxy, a second containerd
# with runc and the CNI bridge, CoreDNS, local-path volumes, and the control plane above; binaries built
# from Go modules (~7 min cold, cached by version), the project's images (`make images`) imported into its
# containerd. No image pull and no connection leaves the machine. Recipe: tests/harness/realnode/node.py.
REAL_NODE := $(PY) -m tests.harness.realnode
cluster-build: kube-build
	@$(REAL_NODE) build

cluster-up: cluster-build images
	@$(REAL_NODE) up

cluster-down:
	@if [ -x $(PY) ]; then $(REAL_NODE) down; fi

cluster-status: setup
	@$(REAL_NODE) status

# start, a pod, DNS, a Service, a volume, no route off the machine, teardown, the host compared
cluster-selftest: cluster-build images
	@$(REAL_NODE) selftest

# The real-node tier alone (part of `make test`): the chart, Kafka and every StreamApp lifecycle on real pods.
test-real: cluster-build images kafka-download flux-build
	$(PY) -m pytest -q -m realnode tests/realnode $(PYTEST_ARGS)

# A longer real-node run: the example under steady input for E2E_REAL_MINUTES of SIGKILLs, pod deletes,
# scaling, rolling upgrades and kubelet restarts, then the exactly-once audit (tests/realnode/soak.py).
E2E_REAL_MINUTES ?= 20
e2e-real: cluster-build images kafka-download
	$(PY) -m tests.realnode.soak --minutes $(E2E_REAL_MINUTES)

clean: kafka-down kube-down cluster-down
	rm -rf $(VENV) .state .run
