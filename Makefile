# The two commands of the README's quick start, and the pieces they call.
VENV ?= .venv
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup setup-demo demo test test-fast lint bench sim-default clean

setup:  ## everything: the tests, the benchmarks, every command
	bash scripts/setup.sh

setup-demo:  ## what the demo needs (a later `make setup` adds the rest)
	bash scripts/setup.sh demo

demo: setup-demo  ## set everything up and run the main job (offline, no keys, no GPU)
	$(VENV)/bin/dreamgym demo

test: setup  ## set everything up and run every test, the slow end-to-end ones included
	$(VENV)/bin/python -m pytest

test-fast: setup
	$(VENV)/bin/python -m pytest -m "not slow"

lint: setup
	$(VENV)/bin/ruff check dreamgym tests benchmarks
	$(VENV)/bin/ruff format --check dreamgym tests benchmarks
	$(VENV)/bin/mypy

bench: setup
	$(VENV)/bin/python benchmarks/replay_bench.py

sim-default: setup-demo  ## build the offline default experience model once (collect in Chromium, then train)
	$(VENV)/bin/dreamgym sim build-default

clean:
	rm -rf $(VENV) .cache
