# The two README commands. Both make (or reuse) the virtualenv .venv in the repo root.
#   make smoke   the main job: a CPU run of the whole PRIME loop on the built-in tiny model and data
#   make test    the test-suite (unit, packaging, CPU end-to-end)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-cpu

.PHONY: smoke test venv
venv: $(STAMP)

# torch first: `pip install torch==2.13.0` takes the CPU build; everything after must keep it.
$(STAMP): setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[cpu,test]' torch==2.13.0
	$(PY) -m verl_prime_lora.cpu.install
	touch $(STAMP)

smoke: $(STAMP)
	PYTHON=$(abspath $(PY)) bash examples/run_cpu_smoke.sh

test: $(STAMP)
	$(PY) -m pytest -q
