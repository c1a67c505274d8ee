"""From a composed config to the `Layout` the estimate needs: the config composed and checked as `main_ppo`
composes and checks it before Ray starts, its values read with their defaults (a key's default, dtype names as
bytes, a model's `config.json`, tokens per micro-batch), the models' shapes, every worker's engine and the rollout.

Reads the config only (and the models' `config.json`: no weights, nothing downloaded). `prime.*` comes
typed from `verl_prime_lora.algo.prime_config`; `prime.prm.model.*` and `prime.prm.engine.*` (veRL's own schemas,
untyped there) and veRL's keys are read from the config as they are.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from verl_prime_lora.algo.prime_config import PrimeConfigError, prime_config
from verl_prime_lora.algo.run_config import (
    REF_FROZEN,
    actor_lora_rank,
    actor_uses_lora,
    has_standalone_rollout,
    is_prime_trainer,
    prm_is_lora,
    reference_source,
    trainer_mode,
)
from verl_prime_lora.checks.config_checks import PRECISION_NAMES
from verl_prime_lora.preflight.memory import EngineSpec, ModelShape, PreflightConfigError, RolloutSpec, lora_targets

# Bytes per element under each of veRL's names of a dtype (config_checks.PRECISION_NAMES).
DTYPE_BYTES = {
    name: {"fp32": 4, "bf16": 2, "fp16": 2}[short] for short, names in PRECISION_NAMES.items() for name in names
}


def select(cfg: Any, key: str, default: Any = None) -> Any:
    """`cfg.<key>` (dotted); `default` when absent or null."""
    from omegaconf import OmegaConf

    value = OmegaConf.select(cfg, key, default=default)
    return default if value is None else value


def dtype_bytes(key: str, value: Any) -> int:
    """Bytes per element of the dtype `value` (set at `key`, named in the error)."""
    name = str(value).lower()
    if name not in DTYPE_BYTES:
        raise PreflightConfigError(f"{key}: dtype {value!r} unknown (fp32, bf16, fp16).")
    return DTYPE_BYTES[name]


_SHAPES: dict[tuple[str, str], ModelShape] = {}


def load_model_shape(model_key: str, cfg: Any) -> ModelShape:
    """`<model_key>.hf_config_path` or `.path`: a local folder's config.json, with `.override_config` applied."""
    from omegaconf import OmegaConf

    source = select(cfg, f"{model_key}.hf_config_path") or select(cfg, f"{model_key}.path")
    key = f"{model_key}.hf_config_path" if select(cfg, f"{model_key}.hf_config_path") else f"{model_key}.path"
    if not source:
        raise PreflightConfigError(f"{key}: not set; the preflight reads the model's config.json from a local folder.")
    override = select(cfg, f"{model_key}.override_config", {}) or {}
    override = OmegaConf.to_container(override, resolve=True) if not isinstance(override, dict) else override
    cache_key = (str(source), json.dumps(override, sort_keys=True, default=str))
    if cache_key in _SHAPES:
        return _SHAPES[cache_key]
    path = Path(str(source)).expanduser()
    config_json = path / "config.json" if path.is_dir() else path
    if not config_json.is_file():
        raise PreflightConfigError(
            f"{key}: {source} is not a local folder with a config.json (the preflight reads nothing remote; "
            "download the model, or only its config.json, to a folder first)."
        )
    hf = json.loads(config_json.read_text())
    hf.update({k: v for k, v in override.items() if not isinstance(v, dict)})
    shape = ModelShape.from_hf_config(hf)
    _SHAPES[cache_key] = shape
    return shape


def micro_batch_tokens(cfg: Any, use_dynamic: bool, micro_key: str, budget_key: str, seq_len: int, what: str) -> int:
    """Tokens per micro-batch: the token budget at `budget_key` with dynamic batch sizes, else
    `micro_key` responses × `seq_len`."""
    if use_dynamic:
        budget = select(cfg, budget_key)
        if not budget:
            raise PreflightConfigError(f"{budget_key}: not set, but {what} uses dynamic batch sizes.")
        return int(budget)
    micro = select(cfg, micro_key)
    if not micro:
        raise PreflightConfigError(f"{micro_key}: not set ({what} micro-batch, responses per GPU).")
    return int(micro) * seq_len


def compose_config(overrides: list[str]) -> Any:
    """veRL's `ppo_trainer` config from veRL's config dir with `overrides`, as `main_ppo`'s @hydra.main."""
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def check_config(cfg: Any) -> None:
    """What main_ppo checks before Ray starts, minus the files, in its order: the layout vs
    `ray_kwargs.ray_init.num_gpus`, PRIME's config checks, and veRL's `validate_config` (the original, not the
    plugin's wrapper, which also reads data files and dry-runs the reward)."""
    import verl.utils.config as verl_config
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    from verl_prime_lora.checks.config_checks import validate_prime_config
    from verl_prime_lora.checks.inputs import check_devices

    check_devices(cfg)
    validate_prime_config(cfg, check_tokenizers=False)
    validate = getattr(verl_config.validate_config, "__wrapped__", verl_config.validate_config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Disabled critic as algorithm.adv_estimator != gae"
        validate(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))


# veRL's messages for keys it has no default for (the recipes set them; an override may unset them), and what to set
HINTS = {
    "ppo_micro_batch_size": "set actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=N (responses per actor "
    "forward/backward) and actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=N (responses per actor "
    "log-prob forward); veRL has no default; the recipes set 2 and 4, as the PRM's",
    "log_prob_micro_batch_size": "set actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=N (responses per "
    "actor log-prob forward); veRL has no default; the recipes set 4, as the PRM's infer_micro_batch_size_per_gpu",
}


def hint_for(message: str) -> str:
    """A `hint: …` line for a veRL message about a key in `HINTS` ("" for any other)."""
    hints = [text for needle, text in HINTS.items() if needle in message]
    return f"\nhint: {hints[0]}" if hints else ""


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


@dataclass(frozen=True)
class _Reading:
    """What every part of the layout reads first: the sequence length, the trainer pool and the rollout
    temperature (a temperature other than 1 makes veRL copy the logits once more)."""

    cfg: Any
    seq: int
    trainer_gpus: int
    temperature: float

    def shards(self, engine_key: str) -> int:
        fsdp_size = int(select(self.cfg, f"{engine_key}.fsdp_size", -1))
        return self.trainer_gpus if fsdp_size < 0 or fsdp_size >= self.trainer_gpus else fsdp_size

    def compute_bytes(self, engine_key: str) -> int:
        mp = select(self.cfg, f"{engine_key}.mixed_precision.param_dtype", "bf16")
        return dtype_bytes(f"{engine_key}.mixed_precision.param_dtype", mp)

    def param_bytes(self, engine_key: str) -> int:
        return dtype_bytes(f"{engine_key}.model_dtype", select(self.cfg, f"{engine_key}.model_dtype", "fp32"))

    def sp(self, engine_key: str) -> int:
        return max(1, int(select(self.cfg, f"{engine_key}.ulysses_sequence_parallel_size", 1)))

    def flag(self, key: str, default: bool) -> bool:
        return bool(select(self.cfg, key, default))


def _check_strategies(cfg: Any) -> None:
    for key in ("actor_rollout_ref.actor.strategy", "prime.prm.engine.strategy"):
        if select(cfg, key, "fsdp") not in ("fsdp", "fsdp2"):
            raise PreflightConfigError(
                f"{key}: is {select(cfg, key)!r}; the estimator covers veRL's FSDP engines only."
            )


def _sync_buffers(cfg: Any) -> tuple[str, int]:
    """(weight-sync backend, bytes of one bucket)."""
    backend = str(select(cfg, "actor_rollout_ref.rollout.checkpoint_engine.backend", "naive"))
    bucket = int(select(cfg, "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes", 2048)) << 20
    return backend, bucket


def _actor_spec(r: _Reading, standalone: bool, notes: list[str]) -> EngineSpec:
    """The LoRA (or full) actor: its training and log-prob micro-batches, the weight-sync buffers."""
    cfg, a_eng = r.cfg, "actor_rollout_ref.actor.fsdp_config"
    lora_rank = actor_lora_rank(cfg)
    actor_lora = actor_uses_lora(cfg)
    if actor_lora and lora_rank <= 0:
        notes.append("actor: a LoRA adapter from lora_adapter_path, rank unknown here: counted as rank 32")
        lora_rank = 32
    dynamic = r.flag("actor_rollout_ref.actor.use_dynamic_bsz", False)
    a_train = micro_batch_tokens(
        cfg,
        dynamic,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
        r.seq,
        "the actor update",
    )
    a_infer = micro_batch_tokens(
        cfg,
        r.flag("actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", dynamic),
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
        r.seq,
        "the actor's log-probs",
    )
    backend, bucket = _sync_buffers(cfg)
    return _trained_model_spec(
        r,
        "actor_rollout_ref.model",
        a_eng,
        name=f"actor (LoRA r={lora_rank})" if actor_lora else "actor (full)",
        trainable=True,
        lora_rank=lora_rank if actor_lora else 0,
        train_tokens=a_train,
        infer_tokens=a_infer,
        train_temperature_copy=r.temperature != 1.0,
        infer_temperature_copy=r.temperature != 1.0,
        sync_buffer_bytes=(2 if backend == "nccl" else 1) * bucket,
        sync_buffers_resident=backend == "nccl",
        empties_cache_before_rollout=not standalone,
    )


def _reference_spec(r: _Reading) -> EngineSpec:
    """veRL's own frozen reference of a full-parameter actor (with a KL term)."""
    cfg, r_eng = r.cfg, "actor_rollout_ref.ref.fsdp_config"
    dynamic = r.flag(
        "actor_rollout_ref.ref.log_prob_use_dynamic_bsz", r.flag("actor_rollout_ref.actor.use_dynamic_bsz", False)
    )
    tokens = micro_batch_tokens(
        cfg,
        dynamic,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
        r.seq,
        "the actor reference's log-probs",
    )
    return EngineSpec(
        name="actor reference (frozen)",
        trainable=False,
        param_bytes=r.param_bytes(r_eng),
        compute_bytes=r.compute_bytes(r_eng),
        shards=r.shards(r_eng),
        infer_tokens=math.ceil(tokens / r.sp(r_eng)),
        infer_temperature_copy=r.temperature != 1.0,
        fused_logits=r.flag("actor_rollout_ref.model.use_fused_kernels", False),
        forward_only=True,
    )


def _prm_spec(r: _Reading) -> EngineSpec:
    """The PRM (full or LoRA): trainable unless `prime.prm.update=none`, its micro-batches from the typed config."""
    cfg, p_eng = r.cfg, "prime.prm.engine"
    try:
        prm = prime_config(cfg).prm  # typed, with its defaults (null infer_* = the training values)
    except PrimeConfigError as err:
        raise PreflightConfigError(str(err)) from None
    p_lora = prm_is_lora(cfg.prime.prm)
    p_rank = int(select(cfg, "prime.prm.model.lora_rank", 0) or 0) or (32 if p_lora else 0)
    # prime_config requires a token budget with use_dynamic_bsz and micro-batches > 0
    if prm.use_dynamic_bsz:
        p_train = prm.max_token_len_per_gpu
        p_infer = int(prm.infer_max_token_len_per_gpu or prm.max_token_len_per_gpu or 0)
    else:
        p_train = prm.micro_batch_size_per_gpu * r.seq
        p_infer = prm.infer_micro_batch_size_per_gpu * r.seq
    return _trained_model_spec(
        r,
        "prime.prm.model",
        p_eng,
        name=f"PRM (LoRA r={p_rank})" if p_lora else "PRM (full)",
        trainable=prm.update != "none",
        lora_rank=p_rank if p_lora else 0,
        train_tokens=p_train if prm.update != "none" else 0,
        infer_tokens=p_infer,
    )


def _trained_model_spec(
    r: _Reading, model_key: str, engine_key: str, *, train_tokens: int, infer_tokens: int, **own: object
) -> EngineSpec:
    """The engine of a model that trains (the actor, the PRM): what both read alike from their `model_key`
    (`….model`) and `engine_key` sections (precision, shards, LoRA targets and dropout, offload, resharding,
    gradient checkpointing, fused logits; tokens per micro-batch ÷ Ulysses SP), and `own`, the rest."""
    cfg = r.cfg
    return EngineSpec(
        param_bytes=r.param_bytes(engine_key),
        compute_bytes=r.compute_bytes(engine_key),
        shards=r.shards(engine_key),
        targets=lora_targets(select(cfg, f"{model_key}.target_modules", "all-linear")),
        lora_dropout=float(select(cfg, f"{model_key}.lora.dropout", 0.0) or 0.0),
        param_offload=r.flag(f"{engine_key}.param_offload", False),
        optimizer_offload=r.flag(f"{engine_key}.optimizer_offload", False),
        reshard_after_forward=r.flag(f"{engine_key}.reshard_after_forward", True),
        checkpointing=r.flag(f"{model_key}.enable_gradient_checkpointing", True),
        train_tokens=math.ceil(train_tokens / r.sp(engine_key)),
        infer_tokens=math.ceil(infer_tokens / r.sp(engine_key)),
        fused_logits=r.flag(f"{model_key}.use_fused_kernels", False),
        **own,
    )


def _frozen_prm_copy(prm_spec: EngineSpec) -> EngineSpec:
    """The forward-only copy of a full-parameter PRM's initial weights (`run_config.REF_FROZEN`)."""
    return replace(
        prm_spec,
        name="PRM reference (frozen copy)",
        trainable=False,
        lora_rank=0,
        param_offload=False,
        optimizer_offload=False,
        train_tokens=0,
        forward_only=True,
    )


def _rollout_spec(r: _Reading) -> RolloutSpec:
    cfg, ro = r.cfg, "actor_rollout_ref.rollout"
    max_model_len = int(select(cfg, f"{ro}.max_model_len", 0) or 0) or (
        int(select(cfg, f"{ro}.prompt_length", 0) or 0) + int(select(cfg, f"{ro}.response_length", 0) or 0) or r.seq
    )
    backend, bucket = _sync_buffers(cfg)
    return RolloutSpec(
        gpu_memory_utilization=float(select(cfg, f"{ro}.gpu_memory_utilization", 0.5)),
        tensor_parallel=int(select(cfg, f"{ro}.tensor_model_parallel_size", 1)),
        pipeline_parallel=int(select(cfg, f"{ro}.pipeline_model_parallel_size", 1)),
        weight_bytes=dtype_bytes(f"{ro}.dtype", select(cfg, f"{ro}.dtype", "bfloat16")),
        max_model_len=max_model_len,
        sequences_per_step=int(select(cfg, "data.train_batch_size", 1)) * int(select(cfg, f"{ro}.n", 1)),
        receive_buffer_bytes=2 * bucket if backend == "nccl" else 0,
        free_cache_engine=r.flag(f"{ro}.free_cache_engine", True),
    )


def _placement_problems(layout: Layout) -> list[str]:
    """What vLLM or veRL would refuse about where the rollout runs."""
    ro, rollout, shape = "actor_rollout_ref.rollout", layout.rollout, layout.actor_shape
    standalone, tp, pp = layout.standalone_rollout, rollout.tensor_parallel, rollout.pipeline_parallel
    rollout_gpus = layout.rollout_gpus if standalone else layout.trainer_gpus
    pool = "actor_rollout_ref.rollout.n_gpus_per_node" if standalone else "trainer.n_gpus_per_node"
    problems = []
    if standalone and rollout_gpus <= 0:
        problems.append(
            f"{pool}: the split trainer {layout.trainer_mode} needs a standalone rollout pool, but it has "
            f"{layout.rollout_nodes} node(s) x {layout.rollout_gpus_per_node} GPU(s)."
        )
    elif rollout_gpus % (tp * pp):
        problems.append(
            f"{ro}.tensor_model_parallel_size: TP {tp} x PP {pp} does not divide the {rollout_gpus} "
            f"rollout GPU(s) ({pool})."
        )
    gpus_per_rollout_node = layout.rollout_gpus_per_node if standalone else layout.trainer_gpus_per_node
    if tp > max(1, gpus_per_rollout_node):
        problems.append(
            f"{ro}.tensor_model_parallel_size: TP {tp} spans more GPUs than one node has for rollout "
            f"({gpus_per_rollout_node}); vLLM keeps a TP group on one node."
        )
    if shape.num_heads % tp:
        problems.append(
            f"{ro}.tensor_model_parallel_size: {shape.num_heads} attention heads do not split over TP {tp}."
        )
    if shape.max_position_embeddings and rollout.max_model_len > int(shape.max_position_embeddings):
        problems.append(
            f"data.max_response_length: prompt + response = {rollout.max_model_len} tokens exceeds the model's "
            f"max_position_embeddings {shape.max_position_embeddings} (vLLM refuses that max_model_len)."
        )
    return problems


def layout_from_config(cfg: Any) -> Layout:
    """Reads the composed config into a `Layout` (no weights, only the models' config.json): the actor, veRL's
    reference (a KL term with a full-parameter actor), the PRM and its frozen copy where
    `run_config.reference_source` picks one, the rollout, the pools, and what veRL or vLLM would refuse."""
    from verl.trainer.ppo.utils import need_reference_policy

    _check_strategies(cfg)
    nodes, per_node = int(select(cfg, "trainer.nnodes", 1)), int(select(cfg, "trainer.n_gpus_per_node", 1))
    seq = int(select(cfg, "data.max_prompt_length", 512)) + int(select(cfg, "data.max_response_length", 512))
    r = _Reading(cfg, seq, nodes * per_node, float(select(cfg, "actor_rollout_ref.rollout.temperature", 1.0)))
    standalone = has_standalone_rollout(cfg)
    actor_shape = load_model_shape("actor_rollout_ref.model", cfg)
    prm_shape = load_model_shape("prime.prm.model", cfg)

    notes: list[str] = []
    workers: list[tuple[ModelShape, EngineSpec]] = [(actor_shape, _actor_spec(r, standalone, notes))]
    use_ref = bool(need_reference_policy(cfg))
    if use_ref and not actor_uses_lora(cfg):  # a LoRA actor's reference is its adapter off: no copy
        workers.append((actor_shape, _reference_spec(r)))
    prm_reference = reference_source(cfg, use_ref)
    if is_prime_trainer(cfg):  # veRL's own trainers (a GRPO baseline on the recipe's layout) build no PRM
        prm_spec = _prm_spec(r)
        workers.append((prm_shape, prm_spec))
        if prm_reference == REF_FROZEN:
            workers.append((prm_shape, _frozen_prm_copy(prm_spec)))

    r_nodes = int(select(cfg, "actor_rollout_ref.rollout.nnodes", 0)) if standalone else 0
    r_per_node = int(select(cfg, "actor_rollout_ref.rollout.n_gpus_per_node", 0)) if standalone else 0
    layout = Layout(
        actor_shape=actor_shape,
        prm_shape=prm_shape,
        workers=workers,
        rollout=_rollout_spec(r),
        standalone_rollout=standalone,
        trainer_gpus=r.trainer_gpus,
        trainer_nodes=nodes,
        trainer_gpus_per_node=per_node,
        rollout_gpus=r_nodes * r_per_node,
        rollout_nodes=r_nodes,
        rollout_gpus_per_node=r_per_node,
        trainer_mode=trainer_mode(cfg),
        prm_reference=prm_reference,
        notes=notes,
    )
    layout.problems.extend(_placement_problems(layout))
    return layout
