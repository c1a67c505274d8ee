"""From a composed config to the `Layout` the estimate needs: the config composed and checked as `main_ppo`
composes and checks it before Ray starts, its values read from its `VerlView` (`verl_prime_lora.config`, with veRL's
defaults), dtype names as bytes, a model's `config.json`, tokens per micro-batch, the models' shapes, every worker's
engine and the rollout.

Reads the config only (and the models' `config.json`: no weights, nothing downloaded). `prime.*` comes
typed from `verl_prime_lora.config.prime_config`; `prime.prm.model.*` and `prime.prm.engine.*` (veRL's own schemas)
and veRL's keys from the view.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from verl_prime_lora.checks.config_checks import PRECISION_NAMES
from verl_prime_lora.config import RunConfig, prime_config
from verl_prime_lora.config.prime import PrmConfig
from verl_prime_lora.config.run import (
    REF_FROZEN,
    actor_lora_rank,
    actor_uses_lora,
    has_standalone_rollout,
    is_prime_trainer,
    prm_is_lora,
    reference_source,
)
from verl_prime_lora.config.section import PrimeConfigError, key_of
from verl_prime_lora.config.verl_view import EngineView, ModelView, VerlView, verl_view
from verl_prime_lora.preflight.memory import EngineSpec, RolloutSpec
from verl_prime_lora.preflight.model_shape import ModelShape, PreflightConfigError, lora_targets

# Bytes per element under each of veRL's names of a dtype (config_checks.PRECISION_NAMES).
DTYPE_BYTES = {
    name: {"fp32": 4, "bf16": 2, "fp16": 2}[short] for short, names in PRECISION_NAMES.items() for name in names
}


def dtype_bytes(key: str, value: Any) -> int:
    """Bytes per element of the dtype `value` (set at `key`, named in the error)."""
    name = str(value).lower()
    if name not in DTYPE_BYTES:
        raise PreflightConfigError(f"{key}: dtype {value!r} unknown (fp32, bf16, fp16).")
    return DTYPE_BYTES[name]


_SHAPES: dict[tuple[str, str], ModelShape] = {}


def load_model_shape(model: ModelView) -> ModelShape:
    """A model section's `hf_config_path` or `path`: a local folder's config.json, with `override_config` applied."""
    from omegaconf import OmegaConf

    source = model.hf_config_path or model.path
    key = key_of(model, "hf_config_path" if model.hf_config_path else "path")
    if not source:
        raise PreflightConfigError(f"{key}: not set; the preflight reads the model's config.json from a local folder.")
    override = model.override_config or {}
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


def micro_batch_tokens(section: Any, use_dynamic: bool, micro: str, budget: str, seq_len: int, what: str) -> int:
    """Tokens per micro-batch of a view `section`: its token budget (field `budget`) with dynamic batch sizes, else
    its responses per micro-batch (field `micro`) × `seq_len`."""
    if use_dynamic:
        tokens = getattr(section, budget)
        if not tokens:
            raise PreflightConfigError(f"{key_of(section, budget)}: not set, but {what} uses dynamic batch sizes.")
        return int(tokens)
    responses = getattr(section, micro)
    if not responses:
        raise PreflightConfigError(f"{key_of(section, micro)}: not set ({what} micro-batch, responses per GPU).")
    return int(responses) * seq_len


def compose_config(overrides: list[str]) -> Any:
    """veRL's `ppo_trainer` config from veRL's config dir with `overrides`, as `main_ppo`'s @hydra.main."""
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def check_config(cfg: Any) -> RunConfig | None:
    """What main_ppo checks before Ray starts, minus the files, in its order: the layout vs
    `ray_kwargs.ray_init.num_gpus`, PRIME's config checks, and veRL's `validate_config` (the original, not the
    plugin's wrapper, which also reads data files and dry-runs the reward). Returns the `RunConfig` PRIME's checks
    built (None for a run that is not PRIME's)."""
    import verl.utils.config as verl_config
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    from verl_prime_lora.checks.config_checks import validate_prime_config
    from verl_prime_lora.checks.inputs import check_devices

    view = verl_view(cfg)
    check_devices(view)
    run = validate_prime_config(cfg, check_tokenizers=False, view=view)
    validate = getattr(verl_config.validate_config, "__wrapped__", verl_config.validate_config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Disabled critic as algorithm.adv_estimator != gae"
        validate(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    return run


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
    """Everything the estimate needs, read from a composed config (`view`; `prm`: its typed `prime.prm`)."""

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
    view: VerlView
    prm: PrmConfig
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Reading:
    """What every part of the layout reads first: the sequence length, the trainer pool and the rollout
    temperature (a temperature other than 1 makes veRL copy the logits once more)."""

    view: VerlView
    seq: int
    trainer_gpus: int
    temperature: float

    def shards(self, engine: EngineView) -> int:
        fsdp_size = engine.fsdp_size
        return self.trainer_gpus if fsdp_size < 0 or fsdp_size >= self.trainer_gpus else fsdp_size

    def compute_bytes(self, engine: EngineView) -> int:
        return dtype_bytes(key_of(engine, "param_dtype"), engine.param_dtype)

    def param_bytes(self, engine: EngineView) -> int:
        return dtype_bytes(key_of(engine, "model_dtype"), engine.model_dtype)

    def sp(self, engine: EngineView) -> int:
        return max(1, engine.ulysses_sequence_parallel_size)


def _check_strategies(view: VerlView) -> None:
    for section in (view.actor, view.prm.engine):
        if section.strategy not in ("fsdp", "fsdp2"):
            raise PreflightConfigError(
                f"{key_of(section, 'strategy')}: is {section.strategy!r}; the estimator covers veRL's FSDP engines "
                "only."
            )


def _sync_buffers(view: VerlView) -> tuple[str, int]:
    """(weight-sync backend, bytes of one bucket)."""
    return view.rollout.sync_backend, view.rollout.sync_bucket_megabytes << 20


def _log_prob_dynamic(section: Any, actor_dynamic: bool) -> bool:
    """Whether a log-prob forward (`rollout`, `ref`) uses dynamic batch sizes: its own setting, else the actor's."""
    own = section.log_prob_use_dynamic_bsz
    return actor_dynamic if own is None else bool(own)


def _actor_spec(r: _Reading, standalone: bool, notes: list[str]) -> EngineSpec:
    """The LoRA (or full) actor: its training and log-prob micro-batches, the weight-sync buffers."""
    view = r.view
    lora_rank = actor_lora_rank(view)
    actor_lora = actor_uses_lora(view)
    if actor_lora and lora_rank <= 0:
        notes.append("actor: a LoRA adapter from lora_adapter_path, rank unknown here: counted as rank 32")
        lora_rank = 32
    dynamic = view.actor.use_dynamic_bsz
    a_train = micro_batch_tokens(
        view.actor, dynamic, "ppo_micro_batch_size_per_gpu", "ppo_max_token_len_per_gpu", r.seq, "the actor update"
    )
    a_infer = micro_batch_tokens(
        view.rollout,
        _log_prob_dynamic(view.rollout, dynamic),
        "log_prob_micro_batch_size_per_gpu",
        "log_prob_max_token_len_per_gpu",
        r.seq,
        "the actor's log-probs",
    )
    backend, bucket = _sync_buffers(view)
    return _trained_model_spec(
        r,
        view.model,
        view.actor.engine,
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
    ref = r.view.ref
    tokens = micro_batch_tokens(
        ref,
        _log_prob_dynamic(ref, r.view.actor.use_dynamic_bsz),
        "log_prob_micro_batch_size_per_gpu",
        "log_prob_max_token_len_per_gpu",
        r.seq,
        "the actor reference's log-probs",
    )
    return EngineSpec(
        name="actor reference (frozen)",
        trainable=False,
        param_bytes=r.param_bytes(ref.engine),
        compute_bytes=r.compute_bytes(ref.engine),
        shards=r.shards(ref.engine),
        infer_tokens=math.ceil(tokens / r.sp(ref.engine)),
        infer_temperature_copy=r.temperature != 1.0,
        fused_logits=r.view.model.use_fused_kernels,
        forward_only=True,
    )


def _typed_prm(view: VerlView) -> PrmConfig:
    """`prime.prm`, typed, with its defaults (null infer_* = the training values)."""
    try:
        return prime_config(view).prm
    except PrimeConfigError as err:
        raise PreflightConfigError(str(err)) from None


def _prm_spec(r: _Reading, prm: PrmConfig) -> EngineSpec:
    """The PRM (full or LoRA): trainable unless `prime.prm.update=none`, its micro-batches from the typed config."""
    model = r.view.prm.model
    p_lora = prm_is_lora(model)
    p_rank = model.lora_rank or (32 if p_lora else 0)
    # prime_config requires a token budget with use_dynamic_bsz and micro-batches > 0
    if prm.use_dynamic_bsz:
        p_train = prm.max_token_len_per_gpu
        p_infer = int(prm.infer_max_token_len_per_gpu or prm.max_token_len_per_gpu or 0)
    else:
        p_train = prm.micro_batch_size_per_gpu * r.seq
        p_infer = prm.infer_micro_batch_size_per_gpu * r.seq
    return _trained_model_spec(
        r,
        model,
        r.view.prm.engine,
        name=f"PRM (LoRA r={p_rank})" if p_lora else "PRM (full)",
        trainable=prm.update != "none",
        lora_rank=p_rank if p_lora else 0,
        train_tokens=p_train if prm.update != "none" else 0,
        infer_tokens=p_infer,
    )


def _trained_model_spec(
    r: _Reading, model: ModelView, engine: EngineView, *, train_tokens: int, infer_tokens: int, **own: object
) -> EngineSpec:
    """The engine of a model that trains (the actor, the PRM): what both read alike from their `model` and
    `engine` sections (precision, shards, LoRA targets and dropout, offload, resharding, gradient checkpointing,
    fused logits; tokens per micro-batch ÷ Ulysses SP), and `own`, the rest."""
    return EngineSpec(
        param_bytes=r.param_bytes(engine),
        compute_bytes=r.compute_bytes(engine),
        shards=r.shards(engine),
        targets=lora_targets(model.target_modules),
        lora_dropout=model.lora_dropout,
        param_offload=engine.param_offload,
        optimizer_offload=engine.optimizer_offload,
        reshard_after_forward=engine.reshard_after_forward,
        checkpointing=model.enable_gradient_checkpointing,
        train_tokens=math.ceil(train_tokens / r.sp(engine)),
        infer_tokens=math.ceil(infer_tokens / r.sp(engine)),
        fused_logits=model.use_fused_kernels,
        **own,
    )


def _frozen_prm_copy(prm_spec: EngineSpec) -> EngineSpec:
    """The forward-only copy of a full-parameter PRM's initial weights (`config.run.REF_FROZEN`)."""
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
    rollout = r.view.rollout
    max_model_len = int(rollout.max_model_len or 0) or (
        int(rollout.prompt_length or 0) + int(rollout.response_length or 0) or r.seq
    )
    backend, bucket = _sync_buffers(r.view)
    return RolloutSpec(
        gpu_memory_utilization=rollout.gpu_memory_utilization,
        tensor_parallel=rollout.tensor_model_parallel_size,
        pipeline_parallel=rollout.pipeline_model_parallel_size,
        weight_bytes=dtype_bytes(key_of(rollout, "dtype"), rollout.dtype),
        max_model_len=max_model_len,
        sequences_per_step=r.view.data.train_batch_size * rollout.n,
        receive_buffer_bytes=2 * bucket if backend == "nccl" else 0,
        free_cache_engine=rollout.free_cache_engine,
    )


def _placement_problems(layout: Layout) -> list[str]:
    """What vLLM or veRL would refuse about where the rollout runs."""
    view, rollout, shape = layout.view, layout.rollout, layout.actor_shape
    tp_key = key_of(view.rollout, "tensor_model_parallel_size")
    standalone, tp, pp = layout.standalone_rollout, rollout.tensor_parallel, rollout.pipeline_parallel
    rollout_gpus = layout.rollout_gpus if standalone else layout.trainer_gpus
    pool = key_of(view.rollout if standalone else view.trainer, "n_gpus_per_node")
    problems = []
    if standalone and rollout_gpus <= 0:
        problems.append(
            f"{pool}: the split trainer {layout.trainer_mode} needs a standalone rollout pool, but it has "
            f"{layout.rollout_nodes} node(s) x {layout.rollout_gpus_per_node} GPU(s)."
        )
    elif rollout_gpus % (tp * pp):
        problems.append(f"{tp_key}: TP {tp} x PP {pp} does not divide the {rollout_gpus} rollout GPU(s) ({pool}).")
    gpus_per_rollout_node = layout.rollout_gpus_per_node if standalone else layout.trainer_gpus_per_node
    if tp > max(1, gpus_per_rollout_node):
        problems.append(
            f"{tp_key}: TP {tp} spans more GPUs than one node has for rollout "
            f"({gpus_per_rollout_node}); vLLM keeps a TP group on one node."
        )
    if shape.num_heads % tp:
        problems.append(f"{tp_key}: {shape.num_heads} attention heads do not split over TP {tp}.")
    if shape.max_position_embeddings and rollout.max_model_len > int(shape.max_position_embeddings):
        problems.append(
            f"{key_of(view.data, 'max_response_length')}: prompt + response = {rollout.max_model_len} tokens exceeds "
            f"the model's max_position_embeddings {shape.max_position_embeddings} (vLLM refuses that max_model_len)."
        )
    return problems


def layout_from_config(cfg: Any, run: RunConfig | None = None) -> Layout:
    """Reads the composed config (`run`: its `RunConfig`, when built already) into a `Layout` (no weights, only
    the models' config.json): the actor, veRL's reference (a KL term with a full-parameter actor), the PRM and its
    frozen copy where `config.run.reference_source` picks one, the rollout, the pools, and what veRL or vLLM would
    refuse."""
    from verl.trainer.ppo.utils import need_reference_policy

    view = verl_view(cfg) if run is None else run.verl
    _check_strategies(view)
    nodes, per_node = view.trainer.nnodes, view.trainer.n_gpus_per_node
    seq = view.data.max_prompt_length + view.data.max_response_length
    r = _Reading(view, seq, nodes * per_node, view.rollout.temperature)
    standalone = has_standalone_rollout(view)
    actor_shape = load_model_shape(view.model)
    prm_shape = load_model_shape(view.prm.model)

    notes: list[str] = []
    workers: list[tuple[ModelShape, EngineSpec]] = [(actor_shape, _actor_spec(r, standalone, notes))]
    use_ref = bool(need_reference_policy(cfg))
    if use_ref and not actor_uses_lora(view):  # a LoRA actor's reference is its adapter off: no copy
        workers.append((actor_shape, _reference_spec(r)))
    prm = _typed_prm(view) if run is None else run.prime.prm
    prm_reference = reference_source(view, prm, use_ref)
    if is_prime_trainer(view):  # veRL's own trainers (a GRPO baseline on the recipe's layout) build no PRM
        prm_spec = _prm_spec(r, prm)
        workers.append((prm_shape, prm_spec))
        if prm_reference == REF_FROZEN:
            workers.append((prm_shape, _frozen_prm_copy(prm_spec)))

    r_nodes = view.rollout.nnodes if standalone else 0
    r_per_node = view.rollout.n_gpus_per_node if standalone else 0
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
        trainer_mode=view.trainer.mode,
        prm_reference=prm_reference,
        view=view,
        prm=prm,
        notes=notes,
    )
    layout.problems.extend(_placement_problems(layout))
    return layout
