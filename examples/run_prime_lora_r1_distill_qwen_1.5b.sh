#!/usr/bin/env bash
# The seed run (Tina-PRIME): DeepSeek-R1-Distill-Qwen-1.5B, LoRA actor, implicit PRM trained online,
# on 2 GPUs — GPU 0: actor + PRM (+ reference), GPU 1: vLLM (veRL V1 `separate_async`, hybrid_engine=false).
#   DATA_DIR=~/data/open_rs bash examples/run_prime_lora_r1_distill_qwen_1.5b.sh [extra overrides...]
set -euo pipefail
source "$(dirname "$0")/seed_overrides.sh"
"$PYTHON" -m verl.trainer.main_ppo "+recipe=[prime_lora$EXTRA_RECIPES]" \
  "${SEED_ARGS[@]}" "${PRM_ARGS[@]}" \
  trainer.n_gpus_per_node=1                         `# GPU 0: the trainer pool (actor + PRM)` \
  actor_rollout_ref.rollout.n_gpus_per_node=1       `# GPU 1: the standalone vLLM pool` \
  actor_rollout_ref.model.lora.merge=true           `# split placement: LoRA reaches vLLM only merged` \
  trainer.experiment_name=prime_lora_r1_distill_1.5b \
  "$@"
