# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test lint pytest pytest-sqlite pytest-postgres bench soak chaos lock clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "chatgate needs Python 3.11 or newer; set PYTHON=python3.11")'
	$(PYTHON) -m venv $(VENV)

# The locks are installed by the pip pinned in requirements/pip.lock, not the one the venv came
# with (see requirements/pip.in for why).
$(VENV)/.pip: requirements/pip.lock | $(BIN)/python
	$(BIN)/pip install --quiet --require-hashes -r requirements/pip.lock
	@touch $@

# Every dependency comes from a hashed lock (requirements/*.lock, made by `make lock`); the
# project itself is installed on top without touching them.
$(VENV)/.installed-run: pyproject.toml requirements/run.lock $(VENV)/.pip
	$(BIN)/pip install --quiet --require-hashes -r requirements/run.lock
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	@touch $@

$(VENV)/.installed-test: pyproject.toml requirements/test.lock $(VENV)/.pip
	$(BIN)/pip install --quiet --require-hashes -r requirements/test.lock
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	@touch $@ $(VENV)/.installed-run

## lock: pin every dependency, with hashes, from pyproject.toml's ranges
lock: $(VENV)/.installed-test
	$(BIN)/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras \
		--no-emit-index-url --no-emit-find-links --output-file requirements/pip.lock requirements/pip.in
	$(BIN)/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras \
		--no-emit-index-url --no-emit-find-links --build-deps-for=editable \
		--extra test --output-file requirements/test.lock pyproject.toml
	$(BIN)/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras \
		--no-emit-index-url --no-emit-find-links --build-deps-for=editable \
		--output-file requirements/run.lock pyproject.toml

## run: install, migrate and start everything on this machine (SQLite, web chat on :8080)
run: $(VENV)/.installed-run
	scripts/ensure-bubblewrap --optional
	$(BIN)/chatgate migrate
	exec $(BIN)/chatgate run

## test: install with test extras, lint, type-check, then the suite on SQLite and PostgreSQL
test: $(VENV)/.installed-test lint pytest

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

pytest: pytest-sqlite pytest-postgres

pytest-sqlite: $(VENV)/.installed-test
	scripts/ensure-chromium
	scripts/ensure-bubblewrap
	CHATGATE_TEST_DATABASE=sqlite $(BIN)/pytest

pytest-postgres: $(VENV)/.installed-test
	scripts/ensure-bubblewrap
	CHATGATE_TEST_DATABASE=postgresql $(BIN)/pytest

## soak: the scale-out test at ten times the size `make test` runs it (2,000 messages over
## 50 conversations; 2 gateways, 2 workers, 2 beats on PostgreSQL and Redis, one of each killed)
soak: $(VENV)/.installed-test
	CHATGATE_TEST_DATABASE=postgresql CHATGATE_SOAK_MESSAGES=2000 CHATGATE_SOAK_CONVERSATIONS=50 \
		$(BIN)/pytest -p no:cacheprovider -s tests/scenario/test_scale_out.py

## chaos: 2 gateways, 2 workers, 2 beats on a PostgreSQL and a Redis of their own, Slack,
## Telegram and web traffic, a random process SIGKILLed every few seconds for 10 minutes
## (200+ kills), database and broker crashes, model 429s and hangs; prints its figures
## (CHATGATE_CHAOS_SECONDS, CHATGATE_CHAOS_CONVERSATIONS, CHATGATE_CHAOS_SEED change it)
chaos: $(VENV)/.installed-test
	scripts/ensure-bubblewrap
	$(BIN)/python -m tests.chaos

## bench: benchmarks that print ratios against a baseline run side by side
bench: $(VENV)/.installed-test
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
