# The two commands a new user needs: `make run` and `make test`. Both install what is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck unit stress bench setup browser postgres cluster-tools incus cluster clean node-clients realapps

$(STAMP): pyproject.toml $(wildcard examples/*/__init__.py)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "Python 3.11+ is needed"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

setup: $(STAMP) browser

browser:
	@scripts/ensure-browser $(BIN)/python
	@scripts/ensure-sandbox

postgres: $(STAMP)
	@scripts/ensure-postgres $(BIN)/python

# Incus, for the `incus` sandbox provider's tests (the tests start its daemon and stop it).
incus: $(STAMP)
	@scripts/ensure-incus

# HAProxy and NATS, for the cluster tests and `make cluster`.
cluster-tools: $(STAMP)
	@scripts/ensure-cluster $(BIN)/python

run: setup
	$(BIN)/gateway serve --example

# A cluster on loopback to try: PostgreSQL, NATS, S3, three gateways, HAProxy in front.
cluster: setup postgres cluster-tools
	@scripts/cluster $(BIN)/python

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# The MCP clients and WebMCP consumers written by others, pinned (tests/clients/).
node-clients:
	@scripts/ensure-node-clients

# The real apps the end-to-end smoke test drives (Django's admin), in a virtualenv of their
# own: installed here, not inside the timed suite.
realapps: $(STAMP)
	@$(BIN)/python -m bench.realapps.venv > /dev/null

# Both stores: the PostgreSQL half runs here (a throwaway cluster on loopback), not skipped;
# and both sandbox providers (Incus's daemon started by the tests, stopped after).
unit: setup postgres cluster-tools incus node-clients realapps
	GATEWAY_TEST_REQUIRE_POSTGRES=1 GATEWAY_TEST_REQUIRE_INCUS=1 $(BIN)/pytest -m "not stress" --durations=25
	# The example dashboard's own suite, run as an app team runs theirs: a session of its own.
	$(BIN)/pytest examples/synthetic_app/e2e

test: setup lint typecheck unit

stress: setup
	$(BIN)/pytest -m stress

bench: setup
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
