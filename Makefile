# Mesa: every target bootstraps .venv itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-test

.PHONY: up test lint bench load chaos venv lock clean

$(BIN)/python:
	$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Mesa needs Python 3.11+")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Every dependency comes pinned, with hashes, from the lock file; the project itself after it.
$(STAMP): pyproject.toml requirements/dev.lock | $(BIN)/python
	$(BIN)/python -m pip install -q --require-hashes -r requirements/dev.lock
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

up: $(STAMP)
	$(BIN)/mesa up $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint
	$(BIN)/pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench $(ARGS)

# Load and crash tests against a real `mesa up` on loopback; bounded in count and time.
load: $(STAMP)
	$(BIN)/python -m bench.load $(ARGS)

chaos: $(STAMP)
	$(BIN)/python -m bench.chaos $(ARGS)

# Re-pin after changing pyproject.toml's dependencies: the image installs runtime.lock,
# `make venv` (and so CI) dev.lock. Both resolve for every platform Python 3.11+ runs on.
lock: | $(BIN)/python
	$(BIN)/python -m pip install -q uv
	$(BIN)/uv pip compile pyproject.toml --universal --python-version 3.11 --generate-hashes -q -o requirements/runtime.lock
	$(BIN)/uv pip compile pyproject.toml --universal --python-version 3.11 --generate-hashes -q --extra test -o requirements/dev.lock

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
