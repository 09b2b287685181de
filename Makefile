# Two entry points: `make app` and `make test`. Both create .venv if needed and install once
# (a stamp file keyed on the requirement files makes reruns fast).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DB ?= $(HOME)/.creditlens/runs.duckdb
PORT ?= 8501

.PHONY: app test test-fast lint bench browser-deps

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q "setuptools>=68" wheel
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -r requirements.txt -r requirements-dev.txt
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

# Debian's chromium drives the browser tests (Playwright never downloads a browser here).
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq chromium chromium-driver >/dev/null; fi; }

app: $(STAMP)
	$(BIN)/creditlens app --db $(DB) --port $(PORT)

# The whole suite on every CPU (`-n logical`: `-n auto` counts physical cores, one on a 2-thread machine).
# pytest-xdist spreads tests one by one, except the groups tests/conftest.py sets (the browser tests that
# share a Streamlit server stay on one worker). The slowest 25 are printed (pyproject.toml addopts).
# The project's modules are compiled once, first, and Python may keep its bytecode for this run even where
# the machine sets PYTHONDONTWRITEBYTECODE: otherwise each of the two workers, every Streamlit server and
# every command a test starts compiles them again (3.4 s of a worker's collection alone).
test: $(STAMP) browser-deps
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m compileall -q -j 0 app pages backend bench creditlens tests
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n logical --dist loadgroup

# A quicker loop while working: the tests marked `slow` (whole-run imports, CLI round trips, Ray,
# parallel seeds) are left out; `make test` runs everything.
test-fast: $(STAMP) browser-deps
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n logical --dist loadgroup -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/python -m bench all
