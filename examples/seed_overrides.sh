# Sourced by the run_*.sh scripts: the seed recipe (Tina-PRIME, model card of the adapters) as Hydra
# overrides, each with its source. `+recipe=prime_lora` already sets these; they are repeated here so a
# script shows the whole run and so that changing one line changes the run.
# Env: MODEL, DATA_DIR, PROJECT (below); PYTHON (default python), the interpreter that runs main_ppo;
# RECIPES, the recipe list after the script's own (e.g. RECIPES=prompt_filter adds the accuracy-band filter).
MODEL=${MODEL:-deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B}   # seed base model (actor, PRM and reference)
DATA_DIR=${DATA_DIR:-$HOME/data/open_rs}                      # examples/data_preprocess/open_rs.py + eval_sets.py
PYTHON=${PYTHON:-python}
EXTRA_RECIPES=${RECIPES:+,$RECIPES}
SEED_ARGS=(
  data.train_files="$DATA_DIR/train.parquet"
  data.val_files="$DATA_DIR/math_500.parquet"
  actor_rollout_ref.model.path="$MODEL"
  data.max_prompt_length=512                        # seed: prompt 512 tokens
  data.max_response_length=3584                     # seed: completion 3584 tokens
  data.train_batch_size=4                           # seed: 24 completions per optimizer step = 4 prompts x 6
  data.seed=42                                      # seed 42
  actor_rollout_ref.rollout.n=6                     # seed: K = 6 samples per prompt
  actor_rollout_ref.rollout.temperature=0.7         # seed: sampling temperature
  actor_rollout_ref.model.lora_rank=32              # seed LoRA: r = 32
  actor_rollout_ref.model.lora_alpha=128            #            alpha = 128
  actor_rollout_ref.model.lora.dropout=0.05         #            dropout 0.05
  "actor_rollout_ref.model.target_modules=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]"
  actor_rollout_ref.actor.ppo_mini_batch_size=4     # one policy optimizer step per RL step
  actor_rollout_ref.actor.optim.lr=1e-6             # seed: lr 1e-6
  actor_rollout_ref.actor.use_kl_loss=true          # seed: KL term, TRL 0.15's beta 0.04, k3 estimator
  actor_rollout_ref.actor.kl_loss_coef=0.04
  actor_rollout_ref.actor.kl_loss_type=low_var_kl
  actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean  # seed: per-response token mean, then batch mean
  actor_rollout_ref.actor.optim.lr_scheduler_type=cosine   # seed: cosine ...
  actor_rollout_ref.actor.optim.min_lr_ratio=0.1    #       ... down to 0.1 x lr
  actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.1  # seed: warmup 10 %
  actor_rollout_ref.actor.fsdp_config.seed=42
  actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16  # seed: bf16 (fp32 master weights)
  reward.custom_reward_function.path=pkg://verl_prime_lora.rewards.math_format   # math-verify accuracy + <think> format
  reward.custom_reward_function.name=compute_score
  +reward.custom_reward_function.reward_kwargs.accuracy_weight=1.0  # seed reward weights: accuracy 1.0 ...
  +reward.custom_reward_function.reward_kwargs.format_weight=1.0    # ... + format 1.0
  trainer.total_training_steps=1500                 # seed: max_steps 1500
  trainer.save_freq=50                              # seed: save every 50 steps
  trainer.test_freq=50
  "trainer.logger=[console,wandb]"                  # seed: report_to wandb
  trainer.project_name=${PROJECT:-prime_lora}
)
PRM_ARGS=(
  prime.prm.beta=0.05                               # seed: implicit-reward beta
  prime.prm.optim.lr=1e-6                           # seed: PRM lr 1e-6, full-parameter
  prime.prm.model.lora_rank=0                       # seed: full-parameter PRM (fp32 master weights)
  prime.prm.engine.mixed_precision.param_dtype=bf16 # seed: bf16 compute
  prime.prm.micro_batch_size_per_gpu=2              # seed: PRM micro-batch 2
  prime.prm.optim.clip_grad=1.0                     # seed: PRM grad clip 1.0
  algorithm.prime.process_std_threshold=0.01        # seed: 1e-2 ...
  algorithm.prime.process_std_threshold_per_token=4e-4  # ... ours: + 4e-4 x mean length, above bf16's rounding of z
  # Ours, not the seed's: the length-free process advantage. `=token` is the seed's exact formula, whose
  # process term is exactly 0 at 3584 tokens (or O(L) below the threshold); see docs/math.md.
  algorithm.prime.process_norm=sequence
  # Ours, not the seed's (which has the term at full weight from step 1, `=null`): the term waits until the PRM
  # ranks fresh responses better than chance (0 at chance, full from 0.75); pre-registered studies chose it
  # (docs/findings.md, "What carries PRIME's gain over GRPO in bf16").
  algorithm.prime.process_gate=0.75
)
