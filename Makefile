# The README's two commands: `make run` (set up and start the broker) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DATA_DIR ?= ./data
LISTENERS ?= PLAINTEXT://127.0.0.1:9092

.PHONY: run test venv bytecode bench fuzz chaos lint clean compose-test browser-env

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,spark]'
	touch $@

venv: $(VENV)/.installed

# Bytecode is written even where PYTHONDONTWRITEBYTECODE is set, so that every broker start (the
# tests start many) skips compiling the sources: that alone is about 40% of start-up.
bytecode: venv
	$(PY) -m compileall -q sharebroker/*.py sharebroker/testing broker cli protocol storage config pipeline bench tests > /dev/null

run: venv bytecode
	$(VENV)/bin/sharebroker serve --listeners $(LISTENERS) --data-dir $(DATA_DIR)

# The live view's browser test needs Debian's chromium and chromium-driver: installed here when
# missing and this runs as root (.ci/browser-env; otherwise that test skips and says why).
browser-env:
	@.ci/browser-env || true

# Three pytest-xdist workers (a module's tests, and the Spark tests, stay together: tests/conftest.py):
# tests mostly wait on brokers and clients, so the suite takes about half the time of one worker.
# The groups go out in the order tests/conftest.py gives them (the long Spark groups first), not
# xdist's own by number of tests.
TEST_WORKERS ?= 3
test: venv bytecode lint browser-env
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS)

# ruff over the whole tree, mypy --strict over the wire codec and storage, mypy with every
# function typed over the server, the settings, the command line and the Spark pipeline (settings in
# pyproject.toml); part of `make test`, so CI enforces them.
lint: venv
	$(PY) -m ruff check --quiet sharebroker/*.py sharebroker/testing broker cli protocol storage config pipeline bench tests docker examples
	$(PY) -m mypy --strict --no-error-summary -p sharebroker.protocol -p sharebroker.storage
	$(PY) -m mypy --disallow-untyped-defs --disallow-incomplete-defs --no-error-summary -m sharebroker -p sharebroker.broker -p sharebroker.config -p sharebroker.pipeline -p sharebroker.cli -p sharebroker.testing

bench: venv bytecode
	$(PY) -m pip install --quiet -e '.[test,spark,bench]'
	$(PY) -m bench $(BENCH_ARGS)

# Mutation fuzzing of the request decoder: FUZZ_EXAMPLES inputs (a short seeded pass runs in `make test`).
FUZZ_EXAMPLES ?= 1000000
fuzz: venv bytecode
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -q -p no:cacheprovider tests/fuzz --timeout=0 --hypothesis-show-statistics

# kill -9 chaos run: CHAOS_CYCLES restarts under producers, share consumers and a classic group.
CHAOS_CYCLES ?= 20
CHAOS_ARGS ?=
chaos: venv bytecode
	$(PY) -m tests.chaos.harness --cycles $(CHAOS_CYCLES) $(CHAOS_ARGS)

# The image and the compose project (needs a Docker engine; .ci/docker-env prepares one): build, wait
# for health, the integration tests against the compose broker, host and network clients, the
# example application, SIGTERM stop, and `down --volumes`.
compose-test: venv bytecode
	PYTHON=$(PY) docker/compose-test.sh

clean:
	rm -rf $(VENV) $(DATA_DIR) *.egg-info
