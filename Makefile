# The README's two commands: `make run` (set up and start the broker) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DATA_DIR ?= ./data
LISTENERS ?= PLAINTEXT://127.0.0.1:9092

.PHONY: run test venv bench lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed

run: venv
	$(VENV)/bin/sharebroker serve --listeners $(LISTENERS) --data-dir $(DATA_DIR)

test: venv
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

bench: venv
	$(PY) -m pip install --quiet -e '.[test,bench]'
	$(PY) -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(DATA_DIR) *.egg-info
