# Two entry points for a fresh machine (Python 3.10+ and make):
#   make demo   installs sharedserve with CPU TensorFlow and runs the quickstart
#   make test   installs the dev extras and runs lint, type checks, layer contracts and tests
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint unit install-dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[tensorflow]"
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@ $(VENV)/.installed-run

install-dev: $(VENV)/.installed-dev

demo: $(VENV)/.installed-run
	$(BIN)/sharedserve demo

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check sharedserve tests benchmarks
	$(BIN)/ruff format --check sharedserve tests benchmarks
	$(BIN)/mypy sharedserve benchmarks
	$(BIN)/lint-imports
	$(BIN)/hadolint Dockerfile

test: lint
	$(BIN)/pytest

unit: $(VENV)/.installed-dev
	$(BIN)/pytest tests/unit

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
