# The two README commands. Both make (or reuse) the virtualenv .venv in the repo root.
#   make demo    the main job: PRIME on chain arithmetic on CPU (warm-started tiny Qwen2, ~8 min)
#   make test    the test-suite (unit, packaging, CPU end-to-end runs, the main job as written)
# Also: make smoke (3 PRIME steps on a random tiny model: the plumbing in ~1.5 min), make unit (no e2e),
# make lint (ruff check + format check, veRL's settings; part of make test).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-cpu

.PHONY: demo smoke test unit lint venv
venv: $(STAMP)

# torch first: `pip install torch==2.13.0` takes the CPU build; everything after must keep it.
$(STAMP): setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[cpu,test]' torch==2.13.0
	$(PY) -m verl_prime_lora.cpu.install
	touch $(STAMP)

demo: $(STAMP)
	PYTHON=$(abspath $(PY)) bash examples/run_cpu_demo.sh

smoke: $(STAMP)
	PYTHON=$(abspath $(PY)) bash examples/run_cpu_smoke.sh

test: lint
	$(PY) -m pytest -q --durations=30

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

unit: $(STAMP)
	$(PY) -m pytest -q -m "not e2e"
