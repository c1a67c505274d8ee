#!/usr/bin/env bash
# The seed recipe on ONE GPU: actor, PRM and vLLM colocated (veRL V1 `sync` trainer, vLLM sleeps while
# the actor and the PRM train).
#   DATA_DIR=~/data/open_rs bash examples/run_prime_lora_colocated.sh [extra overrides...]
set -euo pipefail
source "$(dirname "$0")/seed_overrides.sh"
"$PYTHON" -m verl.trainer.main_ppo "+recipe=[prime_lora_colocated$EXTRA_RECIPES]" \
  "${SEED_ARGS[@]}" "${PRM_ARGS[@]}" \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.5   `# leave room for actor + PRM on the shared GPU` \
  prime.prm.engine.param_offload=true                   `# 80 GB: the full PRM's weights and Adam wait in CPU RAM` \
  prime.prm.engine.optimizer_offload=true               `# between its phases (README, Hardware)` \
  trainer.experiment_name=prime_lora_colocated \
  "$@"
