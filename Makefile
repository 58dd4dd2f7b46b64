# The two commands that matter: `make demo` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint bench screenshots install format clean examples

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

# The embedded demo: SQLite and a filesystem broker unless DATABASE_URL / CELERY_BROKER_URL say
# otherwise. Everything it starts stops on Ctrl-C. `make demo PORT=8001` serves on another port.
PORT ?= 8000
demo: $(STAMP)
	DEBUG=$${DEBUG:-1} PORTAL_RULES_REVIEW=$${PORTAL_RULES_REVIEW:-0} $(PY) manage.py run_demo --port $(PORT)

# The whole suite against PostgreSQL and Redis (DATABASE_URL, REDIS_URL; defaults: the local
# servers on their standard ports).
test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .
	SECRET_KEY=$${SECRET_KEY:-lint-only-not-a-secret} $(PY) manage.py check
	SECRET_KEY=$${SECRET_KEY:-lint-only-not-a-secret} DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres} $(PY) manage.py makemigrations --check --dry-run

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Each benchmark prints its figures beside a floor measured in the same run. Every
# tests/bench/bench_*.py is run as a script: helper modules there are named otherwise.
bench: $(STAMP)
	@set -e; for b in tests/bench/bench_*.py; do echo "== $$b"; SECRET_KEY=$${SECRET_KEY:-bench-only-not-a-secret} $(PY) $$b; done

# Every Workflow in ../shared/reference/argo/examples, then Argo's e2e workflows
# (../shared/reference/argo/e2e/functional, expectedfailures), through the portal end to end
# (REST submit, the sandbox executing steps), with a table of expected and actual outcomes for
# each set. A subset: EXAMPLES_ARGS="--set e2e", "--only NAME ...", "--time-scale 10".
examples: $(STAMP)
	$(PY) tests/examples_runner.py $(EXAMPLES_ARGS)

# PNGs of the runs, submit-with-preview, run and fleet pages from a fresh demo, in headless
# Chromium (Debian's /usr/bin/chromium), written to docs/screenshots/.
screenshots: $(STAMP)
	$(PY) tests/screenshots.py

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache
