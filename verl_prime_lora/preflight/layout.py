"""The layout a composed config asks for: the models' shapes, every worker's engine and the rollout.

Reads the config only (and the models' `config.json`: no weights, nothing downloaded). `prime.*` comes
typed from `verl_prime_lora.algo.prime_config`; `prime.prm.model.*` and `prime.prm.engine.*` (veRL's own schemas,
untyped there) and veRL's keys are read from the config as they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from verl_prime_lora.algo.prime_config import PrimeConfigError, prime_config
from verl_prime_lora.algo.run_config import (
    REF_FROZEN,
    actor_lora_rank,
    actor_uses_lora,
    has_standalone_rollout,
    prm_is_lora,
    reference_source,
    trainer_mode,
)
from verl_prime_lora.preflight.config_values import dtype_bytes, load_model_shape, micro_batch_tokens, select
from verl_prime_lora.preflight.errors import PreflightConfigError
from verl_prime_lora.preflight.model_shape import ModelShape, lora_targets
from verl_prime_lora.preflight.vllm_memory import RolloutSpec
from verl_prime_lora.preflight.worker_memory import EngineSpec


@dataclass
class Layout:
    """Everything the estimate needs, read from a composed config."""

    actor_shape: ModelShape
    prm_shape: ModelShape
    workers: list[tuple[ModelShape, EngineSpec]]
    rollout: RolloutSpec
    standalone_rollout: bool  # split trainer: vLLM on its own pool
    trainer_gpus: int
    trainer_nodes: int
    trainer_gpus_per_node: int
    rollout_gpus: int
    rollout_nodes: int
    rollout_gpus_per_node: int
    trainer_mode: str
    prm_reference: str
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def layout_from_config(cfg: Any) -> Layout:
    """Reads the composed config into a `Layout` (no weights, only the models' config.json)."""
    from verl.trainer.ppo.utils import need_reference_policy

    for key in ("actor_rollout_ref.actor.strategy", "prime.prm.engine.strategy"):
        if select(cfg, key, "fsdp") not in ("fsdp", "fsdp2"):
            raise PreflightConfigError(
                f"{key}: is {select(cfg, key)!r}; the estimator covers veRL's FSDP engines only."
            )

    notes: list[str] = []
    problems: list[str] = []
    actor_shape = load_model_shape("actor_rollout_ref.model", cfg)
    prm_shape = load_model_shape("prime.prm.model", cfg)
    seq = int(select(cfg, "data.max_prompt_length", 512)) + int(select(cfg, "data.max_response_length", 512))
    nodes = int(select(cfg, "trainer.nnodes", 1))
    per_node = int(select(cfg, "trainer.n_gpus_per_node", 1))
    trainer_gpus = nodes * per_node
    mode = trainer_mode(cfg)
    standalone = has_standalone_rollout(cfg)
    r_nodes = int(select(cfg, "actor_rollout_ref.rollout.nnodes", 0)) if standalone else 0
    r_per_node = int(select(cfg, "actor_rollout_ref.rollout.n_gpus_per_node", 0)) if standalone else 0
    temperature = float(select(cfg, "actor_rollout_ref.rollout.temperature", 1.0))

    def shards(engine_key: str) -> int:
        fsdp_size = int(select(cfg, f"{engine_key}.fsdp_size", -1))
        return trainer_gpus if fsdp_size < 0 or fsdp_size >= trainer_gpus else fsdp_size

    def compute_bytes(engine_key: str) -> int:
        mp = select(cfg, f"{engine_key}.mixed_precision.param_dtype", "bf16")
        return dtype_bytes(f"{engine_key}.mixed_precision.param_dtype", mp)

    def sp(engine_key: str) -> int:
        return max(1, int(select(cfg, f"{engine_key}.ulysses_sequence_parallel_size", 1)))

    # -- actor ---------------------------------------------------------------------------------------
    a_eng = "actor_rollout_ref.actor.fsdp_config"
    lora_rank = actor_lora_rank(cfg)
    actor_lora = actor_uses_lora(cfg)
    if actor_lora and lora_rank <= 0:
        notes.append("actor: a LoRA adapter from lora_adapter_path, rank unknown here: counted as rank 32")
        lora_rank = 32
    a_targets = lora_targets(select(cfg, "actor_rollout_ref.model.target_modules", "all-linear"))
    dynamic = bool(select(cfg, "actor_rollout_ref.actor.use_dynamic_bsz", False))
    a_train = micro_batch_tokens(
        cfg,
        dynamic,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
        seq,
        "the actor update",
    )
    a_infer = micro_batch_tokens(
        cfg,
        bool(select(cfg, "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", dynamic)),
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
        seq,
        "the actor's log-probs",
    )
    backend = str(select(cfg, "actor_rollout_ref.rollout.checkpoint_engine.backend", "naive"))
    bucket = int(select(cfg, "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes", 2048)) << 20
    sync_buffers = (2 if backend == "nccl" else 1) * bucket
    actor = EngineSpec(
        name=f"actor (LoRA r={lora_rank})" if actor_lora else "actor (full)",
        trainable=True,
        param_bytes=dtype_bytes(f"{a_eng}.model_dtype", select(cfg, f"{a_eng}.model_dtype", "fp32")),
        compute_bytes=compute_bytes(a_eng),
        shards=shards(a_eng),
        lora_rank=lora_rank if actor_lora else 0,
        targets=a_targets,
        lora_dropout=float(select(cfg, "actor_rollout_ref.model.lora.dropout", 0.0) or 0.0),
        param_offload=bool(select(cfg, f"{a_eng}.param_offload", False)),
        optimizer_offload=bool(select(cfg, f"{a_eng}.optimizer_offload", False)),
        reshard_after_forward=bool(select(cfg, f"{a_eng}.reshard_after_forward", True)),
        checkpointing=bool(select(cfg, "actor_rollout_ref.model.enable_gradient_checkpointing", True)),
        train_tokens=math.ceil(a_train / sp(a_eng)),
        infer_tokens=math.ceil(a_infer / sp(a_eng)),
        train_temperature_copy=temperature != 1.0,
        infer_temperature_copy=temperature != 1.0,
        sync_buffer_bytes=sync_buffers,
        empties_cache_before_rollout=not standalone,
    )
    workers: list[tuple[ModelShape, EngineSpec]] = [(actor_shape, actor)]

    # veRL's own reference: only with a KL term, and none for a LoRA actor (its adapter off is the reference)
    use_ref = bool(need_reference_policy(cfg))
    if use_ref and not actor_lora:
        r_eng = "actor_rollout_ref.ref.fsdp_config"
        r_dynamic = bool(select(cfg, "actor_rollout_ref.ref.log_prob_use_dynamic_bsz", dynamic))
        r_tokens = micro_batch_tokens(
            cfg,
            r_dynamic,
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
            "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
            seq,
            "the actor reference's log-probs",
        )
        workers.append(
            (
                actor_shape,
                EngineSpec(
                    name="actor reference (frozen)",
                    trainable=False,
                    param_bytes=dtype_bytes(f"{r_eng}.model_dtype", select(cfg, f"{r_eng}.model_dtype", "fp32")),
                    compute_bytes=compute_bytes(r_eng),
                    shards=shards(r_eng),
                    infer_tokens=math.ceil(r_tokens / sp(r_eng)),
                    infer_temperature_copy=temperature != 1.0,
                    forward_only=True,
                ),
            )
        )

    # -- PRM -----------------------------------------------------------------------------------------
    try:
        prm = prime_config(cfg).prm  # typed, with its defaults (null infer_* = the training values)
    except PrimeConfigError as err:
        raise PreflightConfigError(str(err)) from None
    p_eng = "prime.prm.engine"
    p_lora = prm_is_lora(cfg.prime.prm)
    p_rank = int(select(cfg, "prime.prm.model.lora_rank", 0) or 0) or (32 if p_lora else 0)
    update = prm.update
    # prime_config requires a token budget with use_dynamic_bsz and micro-batches > 0
    if prm.use_dynamic_bsz:
        p_train = prm.max_token_len_per_gpu
        p_infer = int(prm.infer_max_token_len_per_gpu or prm.max_token_len_per_gpu or 0)
    else:
        p_train = prm.micro_batch_size_per_gpu * seq
        p_infer = prm.infer_micro_batch_size_per_gpu * seq
    p_param_bytes = dtype_bytes(f"{p_eng}.model_dtype", select(cfg, f"{p_eng}.model_dtype", "fp32"))
    prm_spec = EngineSpec(
        name=f"PRM (LoRA r={p_rank})" if p_lora else "PRM (full)",
        trainable=update != "none",
        param_bytes=p_param_bytes,
        compute_bytes=compute_bytes(p_eng),
        shards=shards(p_eng),
        lora_rank=p_rank if p_lora else 0,
        targets=lora_targets(select(cfg, "prime.prm.model.target_modules", "all-linear")),
        lora_dropout=float(select(cfg, "prime.prm.model.lora.dropout", 0.0) or 0.0),
        param_offload=bool(select(cfg, f"{p_eng}.param_offload", False)),
        optimizer_offload=bool(select(cfg, f"{p_eng}.optimizer_offload", False)),
        reshard_after_forward=bool(select(cfg, f"{p_eng}.reshard_after_forward", True)),
        checkpointing=bool(select(cfg, "prime.prm.model.enable_gradient_checkpointing", True)),
        train_tokens=math.ceil(p_train / sp(p_eng)) if update != "none" else 0,
        infer_tokens=math.ceil(p_infer / sp(p_eng)),
    )
    workers.append((prm_shape, prm_spec))

    prm_reference = reference_source(cfg, use_ref)
    if prm_reference == REF_FROZEN:
        workers.append(
            (
                prm_shape,
                replace(
                    prm_spec,
                    name="PRM reference (frozen copy)",
                    trainable=False,
                    lora_rank=0,
                    param_offload=False,
                    optimizer_offload=False,
                    train_tokens=0,
                    forward_only=True,
                ),
            )
        )

    # -- rollout -------------------------------------------------------------------------------------
    ro = "actor_rollout_ref.rollout"
    tp = int(select(cfg, f"{ro}.tensor_model_parallel_size", 1))
    pp = int(select(cfg, f"{ro}.pipeline_model_parallel_size", 1))
    max_model_len = int(select(cfg, f"{ro}.max_model_len", 0) or 0) or (
        int(select(cfg, f"{ro}.prompt_length", 0) or 0) + int(select(cfg, f"{ro}.response_length", 0) or 0) or seq
    )
    rollout = RolloutSpec(
        gpu_memory_utilization=float(select(cfg, f"{ro}.gpu_memory_utilization", 0.5)),
        tensor_parallel=tp,
        pipeline_parallel=pp,
        weight_bytes=dtype_bytes(f"{ro}.dtype", select(cfg, f"{ro}.dtype", "bfloat16")),
        max_model_len=max_model_len,
        sequences_per_step=int(select(cfg, "data.train_batch_size", 1)) * int(select(cfg, f"{ro}.n", 1)),
        receive_buffer_bytes=2 * bucket if backend == "nccl" else 0,
        free_cache_engine=bool(select(cfg, f"{ro}.free_cache_engine", True)),
    )

    # -- placement problems (vLLM / veRL would refuse these) -----------------------------------------
    rollout_gpus = r_nodes * r_per_node if standalone else trainer_gpus
    pool = "actor_rollout_ref.rollout.n_gpus_per_node" if standalone else "trainer.n_gpus_per_node"
    if standalone and rollout_gpus <= 0:
        problems.append(
            f"{pool}: the split trainer {mode} needs a standalone rollout pool, but it has "
            f"{r_nodes} node(s) x {r_per_node} GPU(s)."
        )
    elif rollout_gpus % (tp * pp):
        problems.append(
            f"{ro}.tensor_model_parallel_size: TP {tp} x PP {pp} does not divide the {rollout_gpus} "
            f"rollout GPU(s) ({pool})."
        )
    gpus_per_rollout_node = r_per_node if standalone else per_node
    if tp > max(1, gpus_per_rollout_node):
        problems.append(
            f"{ro}.tensor_model_parallel_size: TP {tp} spans more GPUs than one node has for rollout "
            f"({gpus_per_rollout_node}); vLLM keeps a TP group on one node."
        )
    if actor_shape.num_heads % tp:
        problems.append(
            f"{ro}.tensor_model_parallel_size: {actor_shape.num_heads} attention heads do not split over TP {tp}."
        )
    if actor_shape.max_position_embeddings and max_model_len > int(actor_shape.max_position_embeddings):
        problems.append(
            f"data.max_response_length: prompt + response = {max_model_len} tokens exceeds the model's "
            f"max_position_embeddings {actor_shape.max_position_embeddings} (vLLM refuses that max_model_len)."
        )
    return Layout(
        actor_shape=actor_shape,
        prm_shape=prm_shape,
        workers=workers,
        rollout=rollout,
        standalone_rollout=standalone,
        trainer_gpus=trainer_gpus,
        trainer_nodes=nodes,
        trainer_gpus_per_node=per_node,
        rollout_gpus=rollout_gpus if standalone else 0,
        rollout_nodes=r_nodes,
        rollout_gpus_per_node=r_per_node,
        trainer_mode=mode,
        prm_reference=prm_reference,
        notes=notes,
        problems=problems,
    )
