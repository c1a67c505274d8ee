"""Every veRL key the plugin reads, as one typed, read-only view built once from the composed config.

`verl_view(config)` reads the composed config (a DictConfig from Hydra, or a plain dict) into a `VerlView`:
sections of `config.section` grouped as veRL groups its config (`trainer`, `data`, `actor`, `model`, `ref`,
`rollout`, `algorithm`, `reward`, `ray`, `transfer_queue`, and `prm`, veRL's schemas under `prime.prm`). Each field
is declared with its key (dotted, relative to its section's node: `key("log_prob_micro_batch_size_per_gpu")`) and
the default veRL's code falls back on when the key is absent or null. The sections are not strict: veRL owns
these keys, and the view reads only those the plugin uses. A section records the key of the node it was read
from, so `key_of(view.rollout, "n")` is `actor_rollout_ref.rollout.n`: error messages name a key through it.

The `prime.*` and `algorithm.prime.*` settings are typed in `config.prime`, not here. Nothing here imports veRL,
torch or Ray.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from verl_prime_lora.config.section import Section, config_value, default_of, key, key_of, node, read_section


@dataclass(frozen=True)
class EngineView(Section):
    """An FSDP engine's section: `actor_rollout_ref.{actor,ref}.fsdp_config`, `prime.prm.engine`."""

    node: Any = node()
    strategy: str = key("strategy", "fsdp")
    dtype: str = key("dtype", "bfloat16")
    param_dtype: str = key("mixed_precision.param_dtype", "bf16")
    model_dtype: str = key("model_dtype", "fp32")
    fsdp_size: int = key("fsdp_size", -1)
    ulysses_sequence_parallel_size: int = key("ulysses_sequence_parallel_size", 1)
    param_offload: bool = key("param_offload", False)
    optimizer_offload: bool = key("optimizer_offload", False)
    reshard_after_forward: bool = key("reshard_after_forward", True)


@dataclass(frozen=True)
class ModelView(Section):
    """A model's section (veRL's `hf_model`): `actor_rollout_ref.model`, `prime.prm.model`."""

    node: Any = node()
    path: Any = key("path")
    tokenizer_path: Any = key("tokenizer_path")
    hf_config_path: Any = key("hf_config_path")
    override_config: Any = key("override_config")
    attn_implementation: Any = key("override_config.attn_implementation", "flash_attention_2")
    trust_remote_code: bool = key("trust_remote_code", False)
    use_fused_kernels: bool = key("use_fused_kernels", False)
    use_remove_padding: bool = key("use_remove_padding", False)
    enable_gradient_checkpointing: bool = key("enable_gradient_checkpointing", True)
    target_modules: Any = key("target_modules", "all-linear")
    lora_rank: int = key("lora_rank", 0)
    lora_config_rank: int = key("lora.rank", 0)
    lora_adapter_path: Any = key("lora_adapter_path")
    lora_dropout: float = key("lora.dropout", 0.0)
    lora_merge: bool = key("lora.merge", False)


@dataclass(frozen=True)
class TrainerView(Section):
    """`trainer`: the pools, the trainer mode, checkpoints, the V1 sampler."""

    node: Any = node()
    use_v1: bool = key("use_v1", True)
    mode: str = key("v1.trainer_mode", "sync")
    n_gpus_per_node: int = key("n_gpus_per_node", 1)
    nnodes: int = key("nnodes", 1)
    device: Any = key("device")
    logger: Any = key("logger")
    resume_mode: str = key("resume_mode", "auto")
    resume_from_path: Any = key("resume_from_path")
    default_local_dir: str = key("default_local_dir", ".")
    default_hdfs_dir: Optional[str] = key("default_hdfs_dir")
    del_local_ckpt_after_load: bool = key("del_local_ckpt_after_load", False)
    max_actor_ckpt_to_keep: Optional[int] = key("max_actor_ckpt_to_keep")
    remove_previous_ckpt_in_save: bool = key("remove_previous_ckpt_in_save", False)
    sampler_path: str = key("v1.sampler.custom_sampler.path", "")
    sampler_accuracy_key: str = key("v1.sampler.sampler_kwargs.accuracy_key", "acc")


@dataclass(frozen=True)
class DataView(Section):
    """`data`: the batch, the sequence lengths, the data files."""

    train_batch_size: int = key("train_batch_size", 1)
    max_prompt_length: int = key("max_prompt_length", 512)
    max_response_length: int = key("max_response_length", 512)
    prompt_key: str = key("prompt_key", "prompt")
    train_files: Any = key("train_files")
    val_files: Any = key("val_files")
    custom_cls_path: Any = key("custom_cls.path")


@dataclass(frozen=True)
class ActorView(Section):
    """`actor_rollout_ref.actor`: the actor's update, its engine and its checkpoint."""

    strategy: str = key("strategy", "fsdp")
    engine: EngineView = key("fsdp_config")
    ppo_mini_batch_size: Optional[int] = key("ppo_mini_batch_size")
    ppo_micro_batch_size_per_gpu: Optional[int] = key("ppo_micro_batch_size_per_gpu")
    ppo_max_token_len_per_gpu: Optional[int] = key("ppo_max_token_len_per_gpu")
    use_dynamic_bsz: bool = key("use_dynamic_bsz", False)
    use_kl_loss: bool = key("use_kl_loss", False)
    load_contents: Any = key("checkpoint.load_contents")
    async_save: bool = key("checkpoint.async_save", False)


@dataclass(frozen=True)
class RefView(Section):
    """`actor_rollout_ref.ref`: veRL's reference worker."""

    engine: EngineView = key("fsdp_config")
    log_prob_micro_batch_size_per_gpu: Optional[int] = key("log_prob_micro_batch_size_per_gpu")
    log_prob_use_dynamic_bsz: Optional[bool] = key("log_prob_use_dynamic_bsz")
    log_prob_max_token_len_per_gpu: Optional[int] = key("log_prob_max_token_len_per_gpu")


@dataclass(frozen=True)
class RolloutView(Section):
    """`actor_rollout_ref.rollout`: sampling, vLLM, its pool, the weight sync, the agent loops, old log-probs."""

    n: int = key("n", 1)
    temperature: float = key("temperature", 1.0)
    nnodes: int = key("nnodes", 0)
    n_gpus_per_node: int = key("n_gpus_per_node", 0)
    tensor_model_parallel_size: int = key("tensor_model_parallel_size", 1)
    pipeline_model_parallel_size: int = key("pipeline_model_parallel_size", 1)
    gpu_memory_utilization: float = key("gpu_memory_utilization", 0.5)
    dtype: str = key("dtype", "bfloat16")
    max_model_len: Any = key("max_model_len")
    prompt_length: Any = key("prompt_length")
    response_length: Any = key("response_length")
    free_cache_engine: bool = key("free_cache_engine", True)
    log_prob_micro_batch_size_per_gpu: Optional[int] = key("log_prob_micro_batch_size_per_gpu")
    log_prob_use_dynamic_bsz: Optional[bool] = key("log_prob_use_dynamic_bsz")
    log_prob_max_token_len_per_gpu: Optional[int] = key("log_prob_max_token_len_per_gpu")
    sync_backend: str = key("checkpoint_engine.backend", "naive")
    sync_bucket_megabytes: int = key("checkpoint_engine.update_weights_bucket_megabytes", 2048)
    agent_loop_config_path: Any = key("agent.agent_loop_config_path")
    default_agent_loop: str = key("agent.default_agent_loop", "single_turn_agent")


@dataclass(frozen=True)
class AlgorithmView(Section):
    """`algorithm`: the estimator and what veRL does around it (KL in the reward, rollout correction)."""

    node: Any = node()
    adv_estimator: Any = key("adv_estimator")
    use_kl_in_reward: bool = key("use_kl_in_reward", False)
    kl_penalty: Any = key("kl_penalty")
    rollout_correction: Any = key("rollout_correction")
    bypass_mode: bool = key("rollout_correction.bypass_mode", False)
    gamma: float = key("gamma", 1.0)
    norm_adv_by_std_in_grpo: bool = key("norm_adv_by_std_in_grpo", True)


@dataclass(frozen=True)
class RewardView(Section):
    """`reward`: the reward function, the reward manager, the reward model and its pool."""

    custom_fn_path: Any = key("custom_reward_function.path")
    custom_fn_name: Any = key("custom_reward_function.name")
    manager_source: str = key("reward_manager.source", "register")
    model_enable: bool = key("reward_model.enable", False)
    model_pool: bool = key("reward_model.enable_resource_pool", False)
    model_nnodes: int = key("reward_model.nnodes", 0)
    model_n_gpus_per_node: int = key("reward_model.n_gpus_per_node", 0)
    sandbox_url: Any = key("sandbox_fusion.url")


@dataclass(frozen=True)
class RayView(Section):
    """`ray_kwargs.ray_init`: what `ray.init` is given."""

    num_cpus: Any = key("num_cpus")
    num_gpus: Any = key("num_gpus")
    address: Any = key("address")
    temp_dir: Any = key("_temp_dir")


@dataclass(frozen=True)
class TransferQueueView(Section):
    """`transfer_queue`: the actors the TransferQueue holds."""

    enable: bool = key("enable", False)
    storage_backend: str = key("backend.storage_backend", "SimpleStorage")
    num_data_storage_units: int = key("backend.SimpleStorage.num_data_storage_units", 0)


@dataclass(frozen=True)
class PrmView(Section):
    """`prime.prm`'s veRL schemas (`config.prime.PRM_VERL_SECTIONS`): the PRM's model, engine and checkpoint."""

    node: Any = node()
    model: ModelView = key("model")
    engine: EngineView = key("engine")
    load_contents: Any = key("checkpoint.load_contents")


@dataclass(frozen=True)
class VerlView(Section):
    """The composed config's veRL keys, by section (see the module docstring); `node` is the config itself."""

    node: Any = node()
    hybrid_engine: Any = key("actor_rollout_ref.hybrid_engine")
    trainer: TrainerView = key("trainer")
    data: DataView = key("data")
    actor: ActorView = key("actor_rollout_ref.actor")
    model: ModelView = key("actor_rollout_ref.model")
    ref: RefView = key("actor_rollout_ref.ref")
    rollout: RolloutView = key("actor_rollout_ref.rollout")
    algorithm: AlgorithmView = key("algorithm")
    reward: RewardView = key("reward")
    ray: RayView = key("ray_kwargs.ray_init")
    transfer_queue: TransferQueueView = key("transfer_queue")
    prm: PrmView = key("prime.prm")


def verl_view(config: Any) -> VerlView:
    """The view of a composed config (DictConfig or dict)."""
    return read_section(VerlView, config)


def raw_value(config: Any, path: str) -> Any:
    """The value of the view's field `path` (as `key_of` takes it) as the composed config has it, unconverted, or
    the field's default: for the keys read before a view is built."""
    return config_value(config, key_of(VerlView, path), default_of(VerlView, path))


def algorithm_view(algorithm: Any) -> AlgorithmView:
    """The view of an `algorithm` section alone, as veRL hands it to an estimator (DictConfig, `AlgoConfig`, dict)."""
    return read_section(AlgorithmView, algorithm, "algorithm")


def model_view(model: Any) -> ModelView:
    """The view of a model section alone (DictConfig, dict, or veRL's `HFModelConfig` inside a worker)."""
    return read_section(ModelView, model)
