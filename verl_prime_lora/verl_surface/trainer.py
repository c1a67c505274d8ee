"""The V1 trainer's names (`verl.trainer`) the plugin patches, overrides or relies on."""

from verl_prime_lora.verl_surface.kinds import OVERRIDDEN, PATCHED, RELIED, Entry

TRAINER = [
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer.__init__",
        RELIED,
        "ca0871b9dcfc0c8d",
        "verl_prime_lora/prime/trainer.py: PrimeTrainerMixin.trainer_mode (property/setter) and __init__",
        (
            "the base still sets self.trainer_mode from trainer.v1.trainer_mode and uses it only as the veRL mode "
            "name (sync/separate_async); self.use_reference_policy is still set in __init__"
        ),
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer._setup",
        RELIED,
        "bff547182838a057",
        (
            "verl_prime_lora/prime/trainer.py: PrimeTrainerMixin._load_checkpoint (builds the PRM there); "
            "verl_prime_lora/config/run.py: actor_uses_lora"
        ),
        (
            "_load_checkpoint is still called last, after every resource pool exists; actor_uses_lora still matches "
            "the `ref_in_actor` test (lora.rank, lora_rank, lora_adapter_path)"
        ),
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer._build_replay_buffer",
        RELIED,
        "fdaefcbc2eeeaba2",
        ("verl_prime_lora/prime/prompt_filter.py: accuracy_band_replay_buffer and AccuracyBandFilterMixin.__init__"),
        (
            "the keyword arguments a custom sampler receives (trainer_mode, sampler_kwargs, refill_fn, ...) and that "
            "filter_groups_metric/train_batch_size/gen_batch_size are still left to custom samplers"
        ),
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer._load_checkpoint",
        OVERRIDDEN,
        "4b42daf1e3d5720b",
        (
            "verl_prime_lora/config/run.py: resume_folder; verl_prime_lora/prime/trainer.py: "
            "PrimeTrainerMixin._load_checkpoint"
        ),
        (
            "resume_folder repeats the folder choice (resume_mode disable/auto/resume_path, relative paths, "
            "find_latest_ckpt_path); global_steps > 0 still means 'resumed'"
        ),
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer._save_checkpoint",
        OVERRIDDEN,
        "32d37bd459e00748",
        "verl_prime_lora/prime/trainer.py: PrimeTrainerMixin._save_checkpoint",
        (
            "the global_step_N folder, the hdfs remote path, the max-ckpt-to-keep rule it repeats for the PRM, and "
            "that the tracker file is still written last"
        ),
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer._compute_old_log_prob",
        OVERRIDDEN,
        "44d291a7cc1930e9",
        ("verl_prime_lora/config/run.py: reference_source; prime/prime_step.py: PrimeStep._prm_reference_log_probs"),
        (
            "old_log_probs are still computed at the rollout temperature (reused for the PRM only at 1.0) and stored "
            "under the field name `old_log_probs`"
        ),
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_separate_async:PPOTrainerSeparateAsync._compute_old_log_prob",
        RELIED,
        "90d71addc6867d27",
        "verl_prime_lora/config/run.py: reference_source (REF_POLICY_OLD on prime_separate_async)",
        "the split trainer's old_log_probs still come from the base computation (bypass mode aside)",
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer._compute_ref_log_prob",
        OVERRIDDEN,
        "0083e371d1a9d87d",
        ("verl_prime_lora/config/run.py: reference_source; prime/prime_step.py: PrimeStep._prm_reference_log_probs"),
        (
            "ref log-probs are still computed at the rollout temperature (reused for the PRM only at 1.0) and stored "
            "under the field name `ref_log_prob`"
        ),
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer._compute_values",
        RELIED,
        "1ae811601c54561f",
        "verl_prime_lora/prime/prm_worker.py: ImplicitPRM._infer, log_prob_meta, read_response_log_probs",
        (
            "the PRM forward repeats the critic's protocol: extra_info keys, infer_batch + ray.get, and "
            "response_from_nested on what the worker wrote to TransferQueue"
        ),
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer._update_critic",
        RELIED,
        "e6cd758e086d5b7d",
        "verl_prime_lora/prime/prm_worker.py: ImplicitPRM.update",
        (
            "the PRM update repeats the critic's extra_info (global/mini batch size x rollout.n, epochs, seed, "
            "dataloader_kwargs, temperature) and the metrics it reads back"
        ),
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer._compute_advantage",
        OVERRIDDEN,
        "c9c63319c62aa27b",
        (
            "verl_prime_lora/prime/advantage_writeback.py (the one copy of it): read_step_data, "
            "preprocess_rewards, write_back; verl_prime_lora/prime/prime_step.py: PrimeStep._advantage_step"
        ),
        (
            "read_step_data repeats the read (fields, padding, uid), preprocess_rewards the pre-processing "
            "(token_level_scores, KL penalty, rollout correction) and write_back the fields written back to "
            "TransferQueue; the estimator call (compute_advantage_for_multi_trajectories) is replaced by "
            "prime_step.prime_advantages"
        ),
    ),
    Entry(
        "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._dapo_filtered_keys",
        RELIED,
        "b47266a70d5c2db7",
        "verl_prime_lora/prime/prompt_filter.py: AccuracyBandFilterMixin._dapo_filtered_keys (overrides it)",
        (
            "the return value (uids, Counter), the per-partition classification cache, finished_keys/partitions and "
            "how trajectory keys map to uids"
        ),
    ),
    Entry(
        "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._terminal_eviction_reasons",
        RELIED,
        "2e37b660d8f1b185",
        "verl_prime_lora/prime/prompt_filter.py: AccuracyBandReplayBuffer (sync trainers)",
        "the sync buffer still evicts exactly the uids _dapo_filtered_keys returns",
    ),
    Entry(
        "verl.trainer.ppo.v1.replay_buffer:ReplayBufferAsync._terminal_eviction_reasons",
        RELIED,
        "12739f340dad1430",
        "verl_prime_lora/prime/prompt_filter.py: AccuracyBandReplayBufferAsync (async trainers)",
        "the async buffer still evicts exactly the uids _dapo_filtered_keys returns",
    ),
    Entry(
        "verl.trainer.ppo.v1.agent_loop_tq:AgentLoopWorkerTQ._agent_loop_postprocess",
        RELIED,
        "ed59419296b12b90",
        "verl_prime_lora/prime/prompt_filter.py: AccuracyBandFilterMixin._dapo_filtered_keys",
        (
            "trajectory keys are still `{uid}_...` and their tag still carries `response_len` (read with a default of"
            " 0: a renamed tag would silently disable drop_truncated)"
        ),
    ),
    Entry(
        "verl.trainer.main_ppo:main",
        RELIED,
        "8097a698658043e9",
        "verl_prime_lora/plugin/patches.py: install_driver_validation",
        "the driver still calls validate_config (imported from verl.utils.config) before run_ppo starts Ray",
    ),
    Entry(
        "verl.trainer.ppo.v1.agent_loop_tq:AgentLoopWorkerTQ._run_prompt",
        RELIED,
        "0d3f98d882a2b494",
        "verl_prime_lora/hardening/reward_failures.py: account_rollouts (counts what this drops)",
        (
            "a failed rollout is still left out of TransferQueue (the trainer counts it as dropped) and its "
            "trajectory keys are still `{uid}_{session}_{index}`"
        ),
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_separate_async:PPOTrainerSeparateAsync._setup",
        RELIED,
        "6880d044d64de404",
        "verl_prime_lora/plugin/patches.py: tolerate_flush_kwarg_in_separate_async_logger",
        "whether logger.info(..., flush=True) is gone (then drop the patch)",
    ),
    Entry(
        "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer.__init__",
        PATCHED,
        "a4a18b6415213710",
        "verl_prime_lora/cpu/patches.py: poll_replay_buffer_often",
        (
            "poll_interval is still the 6th argument after self (trainer_mode, trainer_config, "
            "max_off_policy_threshold, max_off_policy_strategy, sampler_kwargs) with a 2 s default, stored as "
            "self.poll_interval"
        ),
    ),
    Entry(
        "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._wait_for_next_poll",
        RELIED,
        "0a5425187a05e2e5",
        "verl_prime_lora/cpu/patches.py: poll_replay_buffer_often",
        "sample() still waits for unfinished rollouts by sleeping self.poll_interval between TransferQueue reads",
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer._get_required_batch_multiple",
        RELIED,
        "e8205ec314c299a8",
        "verl_prime_lora/checks/config_checks.py: check_micro_batches (a step's batch padded to lcm(D, mini x n))",
        "the multiple a step's batch is padded to (dp size, the actor's and critic's mini-batches x n)",
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer.fit",
        OVERRIDDEN,
        "da710d68b09f899d",
        (
            "verl_prime_lora/prime/trainer.py: PrimeTrainerMixin.fit (stopped with the engine's name when a "
            "vLLM replica dies: rollout_health)"
        ),
        (
            "veRL's loop still calls init, the on_* hooks and the step's phases in this order, and raises out of fit "
            "when a step fails (the engine monitor's stop wraps it)"
        ),
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer.init",
        OVERRIDDEN,
        "d3a46adc1e627b13",
        "verl_prime_lora/prime/trainer.py: PrimeTrainerMixin.init (the step watchdog's phases)",
        "init still builds the worker groups and vLLM replicas and ends with on_init_end (the first weight sync)",
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer.on_init_end",
        OVERRIDDEN,
        "11c32595287ee2b6",
        "verl_prime_lora/prime/trainer.py: PrimeTrainerMixin.on_init_end (the step watchdog's phases)",
        "still the first weight sync to the rollout replicas",
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer.on_train_begin",
        OVERRIDDEN,
        "ecf5475259466fd6",
        "verl_prime_lora/prime/trainer.py: PrimeTrainerMixin.on_train_begin (the step watchdog's phases)",
        "still called once before the first step",
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer.on_train_end",
        OVERRIDDEN,
        "bd6f9b4d815be5e7",
        "verl_prime_lora/prime/trainer.py: PrimeTrainerMixin.on_train_end (the step watchdog's phases)",
        "still called once after the last step",
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer.on_step_begin",
        OVERRIDDEN,
        "228804f50e1f35e0",
        "verl_prime_lora/prime/trainer.py: PrimeTrainerMixin.on_step_begin (the step watchdog's phases)",
        "still called at each step's start, before sampling",
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer.on_sample_begin",
        OVERRIDDEN,
        "a57c337aeb35a751",
        "verl_prime_lora/prime/trainer.py: PrimeTrainerMixin.on_sample_begin (the step watchdog's phases)",
        "still called before the step's rollouts and rewards",
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer.on_step_end",
        OVERRIDDEN,
        "0bf72fbacdadc080",
        "verl_prime_lora/prime/trainer.py: PrimeTrainerMixin.on_step_end (the step watchdog's phases)",
        "still called at each step's end, where the weight sync runs",
    ),
    Entry(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer._update_actor",
        OVERRIDDEN,
        "fa391cd3b3105df2",
        (
            "verl_prime_lora/prime/trainer.py: PrimeTrainerMixin._update_actor (the step watchdog's phases; "
            "step_guards.check_actor_update)"
        ),
        ("it still writes actor/pg_loss and actor/grad_norm into the metrics dict it is given and returns the batch"),
    ),
    Entry(
        "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer.sample",
        RELIED,
        "b5d18252bd6fa442",
        "verl_prime_lora/cpu/patches.py: poll_replay_buffer_often; verl_prime_lora/prime/prompt_filter.py",
        (
            "sample still re-reads the rollout statuses and sleeps self.poll_interval while the batch is incomplete, "
            "and still calls the eviction filters the prompt filter overrides"
        ),
    ),
]
