# The README's two commands. Both make (or reuse) the virtualenv .venv in the repo root.
#   make demo    the main job: PRIME on chain arithmetic on CPU (the CPU demo; warm-started tiny Qwen2)
#   make test    the test-suite (unit, packaging, the lab's tests, CPU end-to-end runs, the CPU demo as written)
# Also: make smoke (3 PRIME steps on a random tiny model: the plumbing in ~1.5 min), make unit (the product's tests
# without e2e), make lab (the tests of benchmarks/, the lab),
# make lint (ruff check + format check, veRL's settings; part of make test), make constraints (re-freeze
# constraints/cpu.txt from .venv), make gpu-lock (re-resolve '.[gpu]' into constraints/gpu.txt), make check-gpu-extra
# (does '.[gpu]' resolve to exactly constraints/gpu.txt?); each ~4 min of downloads, not in CI.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-cpu

.PHONY: demo smoke test unit lab lint venv constraints check-gpu-extra gpu-lock
venv: $(STAMP)

# torch first: `pip install torch==2.13.0` takes the CPU build; everything after must keep it.
# Byte-code: pip's own compile step is serial (--no-compile skips it); compileall then compiles the venv on
# every core. The .pyc files are needed: where PYTHONDONTWRITEBYTECODE is set (as in CI) Python never writes
# them, and every process of a run (driver, Ray workers, vLLM engines) would recompile torch, vLLM and veRL
# from source on import, about twice the import time. One torch test file uses Python 3.12 syntax: excluded.
# setup.py holds ranges; constraints/cpu.txt the exact set tested here (see its header).
$(STAMP): setup.py constraints/cpu.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile torch==2.13.0
	$(PY) -m pip install -q --no-compile -c constraints/cpu.txt -e '.[cpu,test,lab]' torch==2.13.0
	$(PY) -m verl_prime_lora.cpu.install
	$(PY) -m compileall -q -j 0 -x py312_intrinsics $(VENV)/lib
	touch $(STAMP)

# Re-freeze the exact CPU set from .venv as it is now (after installing a changed set into it), less what
# verl_prime_lora.cpu.install adds (the `vllm` name shim) or removes (torch companions); the venv matches
# the new file by construction, so the stamp is refreshed rather than reinstalling.
constraints:
	test -x $(PY) || { echo "no $(VENV): run make venv first" >&2; exit 1; }
	mkdir -p constraints
	{ echo "# The exact set \`make venv\` installs and tests on CPU (Python 3.11): pip constraints (-c), not requirements."; \
	  echo "# Regenerate: \`make constraints\` (pip freeze --exclude-editable of .venv). Not pinned here: what python -m"; \
	  echo "# verl_prime_lora.cpu.install adds or removes (vllm name shim; torchvision, torchaudio, torchcodec)."; \
	  $(PY) -m pip freeze --exclude-editable | grep -v -i -E '^(vllm|torchvision|torchaudio|torchcodec)=='; \
	} > constraints/cpu.txt.new
	mv constraints/cpu.txt.new constraints/cpu.txt
	test ! -e $(STAMP) || touch $(STAMP)

# constraints/gpu.txt, the GPU set's lock: what '.[gpu]' resolves to on PyPI (pip --dry-run --report in a throwaway
# venv of GPU_PYTHON, Linux x86_64). gpu-lock re-resolves without constraints and rewrites it (header: date, pip,
# command); check-gpu-extra resolves with -c constraints/gpu.txt and fails unless it gets exactly that set. Each
# downloads ~4 min of metadata: not in make test (tests/project/test_gpu_lock.py checks the file offline).
GPU_PYTHON ?= python3.11
gpu-lock:
	PYTHON=$(GPU_PYTHON) WRITE_LOCK=constraints/gpu.txt bash examples/check_gpu_extra.sh

check-gpu-extra:
	PYTHON=$(GPU_PYTHON) CONSTRAINTS=constraints/gpu.txt bash examples/check_gpu_extra.sh

demo: $(STAMP)
	PYTHON=$(abspath $(PY)) bash examples/run_cpu_demo.sh

smoke: $(STAMP)
	PYTHON=$(abspath $(PY)) bash examples/run_cpu_smoke.sh

# The unit tier on both cores (pytest-xdist; no unit test starts Ray or binds a fixed port), the lab's tier, then the e2e runs of
# main_ppo two at a time (each test file keeps the tests of one run on one worker: xdist_group; two launches
# side by side finish sooner than one after the other, their start-ups being largely single-threaded).
test: lint
	$(PY) -m pytest -q -m "not e2e" --ignore=tests/lab -n 2 --durations=30
	$(PY) -m pytest -q tests/lab -n 2 --durations=10
	$(PY) -m pytest -q -m e2e -n 2 --dist loadgroup --no-loadscope-reorder --durations=30

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

unit: $(STAMP)
	$(PY) -m pytest -q -m "not e2e" --ignore=tests/lab -n 2 --durations=30

lab: $(STAMP)
	$(PY) -m pytest -q tests/lab -n 2 --durations=10
