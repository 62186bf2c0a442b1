# Quick start: `make serve` runs the service (API, web UI, embedded worker); `make test` runs every test (what CI runs).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTEST_ARGS ?= -n 2
HOST ?= 127.0.0.1
PORT ?= 8000
DATA_DIR ?= kiln-data

.PHONY: test serve venv serve-venv bench clean

# Serving needs only the runtime dependencies (`pip install -e .`); testing adds the dev ones (`.[dev]`:
# pytest, playwright, ptxas, fuzzers). Each has its own stamp, so `make serve` never pulls the test toolchain.
$(VENV)/.installed-serve: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@ $(VENV)/.installed-serve

venv: $(VENV)/.installed

serve-venv: $(VENV)/.installed-serve

serve: serve-venv
	scripts/system-deps.sh
	$(VENV)/bin/kiln serve --host $(HOST) --port $(PORT) --data-dir $(DATA_DIR)

test: venv
	scripts/system-deps.sh --test
	$(PY) -m pytest $(PYTEST_ARGS)

bench: venv
	$(PY) bench/bench_models.py

clean:
	rm -rf $(VENV) build *.egg-info
