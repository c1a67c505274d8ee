#!/usr/bin/env bash
# A smoke test on ONE GPU before the 62-hour run: the colocated seed recipe (run_prime_lora_colocated.sh) with
# 1024-token responses, 16 validation problems and console logging, two steps and a save, then the same command
# resumed to step 3 (the checkpoint read back: actor, PRM, gate). Checkpoints go to checkpoints/smoke (one kept,
# about 29 GB; delete the folder afterwards). Wall time, an estimate until a GPU measures it: 15-25 min on one
# 80 GB GPU (two start-ups of Ray, the models and vLLM, 3 steps, 3 validations, 2 saves).
#   MODEL=models/r1 DATA_DIR=~/data/open_rs bash examples/run_gpu_smoke.sh [extra overrides...]
# What to look at: docs/operations.md, "A first GPU run".
set -euo pipefail
SMOKE=(
  data.max_response_length=1024
  data.val_max_samples=16
  trainer.save_freq=2
  trainer.max_actor_ckpt_to_keep=1
  trainer.default_local_dir=checkpoints/smoke
  trainer.experiment_name=smoke
  "trainer.logger=[console]"
)
bash "$(dirname "$0")/run_prime_lora_colocated.sh" "${SMOKE[@]}" trainer.total_training_steps=2 "$@"
bash "$(dirname "$0")/run_prime_lora_colocated.sh" "${SMOKE[@]}" trainer.total_training_steps=3 "$@"
