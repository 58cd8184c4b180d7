# kappaflow developer entry points. `make run` sets everything up and runs the example;
# `make test` runs every test tier. Downloads are cached under $(KAPPAFLOW_CACHE).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export KAPPAFLOW_CACHE ?= $(HOME)/.cache/kappaflow
export PIP_CACHE_DIR ?= $(KAPPAFLOW_CACHE)/pip

.PHONY: setup test test-unit lint typecheck run describe clean

$(VENV)/.installed: pyproject.toml
	@echo "==> creating virtualenv and installing kappaflow (cached in $(PIP_CACHE_DIR))"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,operator]'
	@touch $@

setup: $(VENV)/.installed

test: setup
	$(PY) -m pytest -q

test-unit: setup
	$(PY) -m pytest -q tests/runtime

lint: setup
	$(VENV)/bin/ruff check runtime operator tests examples bench
	$(VENV)/bin/ruff format --check runtime operator tests examples bench
	$(VENV)/bin/lint-imports

typecheck: setup
	$(VENV)/bin/mypy runtime/kappaflow operator/kappaflow_operator

describe: setup
	$(VENV)/bin/kappaflow describe examples.wordcount:build_topology

clean:
	rm -rf $(VENV) .state .run
