# Quick start: `make serve` runs the service (API, web UI, embedded worker); `make test` runs every test (what CI runs).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTEST_ARGS ?= -n 2
HOST ?= 127.0.0.1
PORT ?= 8000
DATA_DIR ?= kiln-data

.PHONY: test serve venv bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

serve: venv
	scripts/system-deps.sh
	$(VENV)/bin/kiln serve --host $(HOST) --port $(PORT) --data-dir $(DATA_DIR)

test: venv
	scripts/system-deps.sh --test
	$(PY) -m pytest $(PYTEST_ARGS)

bench: venv
	$(PY) bench/bench_models.py

clean:
	rm -rf $(VENV) build *.egg-info
