#!/usr/bin/env bash
# The comparison run: the seed's settings and placement (2 GPUs) with the PRM off — plain GRPO with the
# same LoRA actor, rewards, sampling and schedule (veRL's own `separate_async` trainer, `grpo` estimator).
#   DATA_DIR=~/data/open_rs bash examples/run_grpo_lora_baseline.sh [extra overrides...]
set -euo pipefail
source "$(dirname "$0")/seed_overrides.sh"
"$PYTHON" -m verl.trainer.main_ppo "+recipe=[prime_lora$EXTRA_RECIPES]" \
  "${SEED_ARGS[@]}" \
  algorithm.adv_estimator=grpo                      `# outcome-only advantage, no process term` \
  trainer.v1.trainer_mode=separate_async            `# veRL's trainer: no PRM worker at all` \
  trainer.n_gpus_per_node=1 actor_rollout_ref.rollout.n_gpus_per_node=1 \
  actor_rollout_ref.model.lora.merge=true \
  trainer.experiment_name=grpo_lora_r1_distill_1.5b \
  "$@"
