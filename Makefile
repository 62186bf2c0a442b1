# Quick start: `make test` sets up .venv and runs the whole test suite (what CI runs).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTEST_ARGS ?= -n 2

.PHONY: test venv bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

test: venv
	$(PY) -m pytest $(PYTEST_ARGS)

bench: venv
	$(PY) bench/bench_models.py

clean:
	rm -rf $(VENV) build *.egg-info
