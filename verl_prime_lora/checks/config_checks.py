"""Checks of a composed veRL config for PRIME, run in the driver before Ray starts.

`validate_prime_config(config)` raises `PrimeConfigError` (a `ValueError`) whose message names the
offending key, and returns the run's `RunConfig` (`verl_prime_lora.config.run_config`; None for a run that is
not PRIME's). It is called

* in the driver, from veRL's own `validate_config` (main_ppo.py, before `run_ppo` calls
  `ray.init`), through the one wrapper installed by `verl_prime_lora.plugin.patches` — veRL has no
  config hook before Ray starts; and
* again in the PRIME trainers' `__init__` (inside the TaskRunner), which keep the `RunConfig` it returns: for
  entry points that bypass `main_ppo.main` it is their check.

The `prime.*` and `algorithm.prime.*` keys are checked by building their typed sections
(`verl_prime_lora.config.prime`); the checks here are those that span sections. It only reads the
config (plus the two tokenizers when the PRM has its own model/tokenizer path, and the file of
`prime.process_rewards_fn` when one is set).
Nothing here imports torch or Ray.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

from omegaconf import DictConfig

from verl_prime_lora.config import RunConfig, run_config
from verl_prime_lora.config.prime import PrmConfig
from verl_prime_lora.config.run import (
    PRIME_ESTIMATORS,
    PRIME_TRAINERS,
    REF_ACTOR_BASE,
    REF_ACTOR_REF,
    actor_uses_lora,
    has_standalone_rollout,
    is_prime_estimator,
    is_prime_run,
    is_prime_trainer,
    reference_source,
    training_ranks,
    uses_reference_policy,
)
from verl_prime_lora.config.section import PrimeConfigError, key_of
from verl_prime_lora.config.verl_view import EngineView, ModelView, VerlView, verl_view


def estimator_takes_process_rewards(name: str) -> bool | None:
    """True/False once the estimator is registered in veRL; None if it is unknown (not importable here)."""
    try:
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn

        fn = get_adv_estimator_fn(name)
    except Exception:  # noqa: BLE001 - unknown name or veRL not importable: decided by the name alone
        return None
    return "process_rewards" in inspect.signature(fn).parameters


def _fail(key: str, message: str) -> None:
    raise PrimeConfigError(f"{key}: {message}")


def validate_prime_config(config: Any, check_tokenizers: bool = True, view: VerlView | None = None) -> RunConfig | None:
    """Raise `PrimeConfigError` naming the key if `config` cannot run PRIME correctly; else its `RunConfig`.

    `view`: the config's `VerlView`, when the caller has read it already. A config that neither selects a PRIME
    trainer nor a PRIME estimator is left alone (None is returned), so plain veRL runs are unaffected.
    """
    if not is_prime_run(config):
        return None
    view = verl_view(config) if view is None else view
    trainer_mode = view.trainer.mode
    estimator = view.algorithm.adv_estimator

    # 1. estimator <-> trainer pairing
    if is_prime_estimator(view) and not is_prime_trainer(view):
        _fail(
            key_of(view.trainer, "mode"),
            f"algorithm.adv_estimator={estimator} needs process rewards, which only a PRIME trainer "
            f"computes; got trainer_mode={trainer_mode!r}, use one of {sorted(PRIME_TRAINERS)} "
            "(or a non-PRIME estimator such as grpo).",
        )
    if is_prime_trainer(view) and not is_prime_estimator(view):
        takes = estimator_takes_process_rewards(str(estimator))
        if not takes:
            _fail(
                key_of(view.algorithm, "adv_estimator"),
                f"trainer_mode={trainer_mode} computes process rewards, but estimator {estimator!r} "
                f"{'does not accept' if takes is False else 'is not a registered estimator that accepts'} "
                f"a `process_rewards` argument; use one of {list(PRIME_ESTIMATORS)} (or "
                "trainer.v1.trainer_mode=sync for a PRM-free run).",
            )
    if not view.trainer.use_v1:
        _fail(key_of(view.trainer, "use_v1"), "PRIME runs on veRL's V1 trainer only; set trainer.use_v1=true.")

    # 2. group size
    if view.rollout.n < 2:
        _fail(
            key_of(view.rollout, "n"),
            f"is {view.rollout.n}; PRIME's group baselines need at least 2 responses per prompt.",
        )

    # 3. split placement: LoRA reaches vLLM only merged (veRL issue #7495)
    if has_standalone_rollout(view) and actor_uses_lora(view) and not view.model.lora_merge:
        _fail(
            key_of(view.model, "lora_merge"),
            "must be True when the actor is LoRA and rollout runs on its own GPUs "
            f"(trainer_mode={trainer_mode}, hybrid_engine={view.hybrid_engine}): "
            "veRL 0.9.1 syncs only base weights to a separate vLLM otherwise, so the rollout would "
            "silently keep sampling the initial policy (veRL issue #7495).",
        )

    # 4. prime.* and algorithm.prime.*: types, ranges and choices (verl_prime_lora.config.prime)
    if view.prm.node is None:
        _fail(view.prm.root, "is missing; select the recipe with `+recipe=prime_lora` (or _colocated).")
    run = run_config(config, view)
    prm = run.prime.prm

    # 5. the PRM's mini-batches against the actor's
    actor_mini = actor_mini_batch(view)
    prm_mini = prm.mini_batch_size or actor_mini
    if actor_mini % prm_mini != 0:
        _fail(
            key_of(prm, "mini_batch_size"),
            f"is {prm_mini}; it must divide actor_rollout_ref.actor.ppo_mini_batch_size ({actor_mini}), "
            "both counted in prompts (x rollout.n responses), so every PRM mini-batch is full.",
        )
    check_micro_batches(view, prm_mini, prm)

    # 6. the compute precision each FSDP engine is asked for is the one it uses
    check_compute_dtype(view)

    # 7. an untrained PRM scores exactly as its reference where the actor computes that reference
    check_reference_computed_alike(view, prm)

    # 8. same tokenizer for PRM and policy
    if check_tokenizers:
        check_prm_tokenizer(view)
    return run


def actor_mini_batch(view: VerlView) -> int:
    """The actor's `ppo_mini_batch_size` in prompts (1 when unset)."""
    actor_mini = view.actor.ppo_mini_batch_size
    return 1 if actor_mini is None else int(actor_mini)


def step_batch_rows(view: VerlView) -> tuple[int, int]:
    """(B, M): the rows of a training step's batch, B = data.train_batch_size x rollout.n responses padded by
    veRL to a multiple of M = lcm(D training ranks, ppo_mini_batch_size x rollout.n)."""
    n = view.rollout.n
    multiple = math.lcm(training_ranks(view), actor_mini_batch(view) * n)
    return -(-view.data.train_batch_size * n // multiple) * multiple, multiple


def check_micro_batches(view: VerlView, prm_mini: int, prm: PrmConfig) -> None:
    """Every fixed-size micro-batch divides each training rank's share of the rows it is cut from.

    veRL gives each of the D = trainer.n_gpus_per_node x trainer.nnodes ranks an equal share of a batch and
    cuts it into micro-batches of the configured size (engine/utils.py `prepare_micro_batches`), stopping
    with an assertion when the share is not a whole number of them. The shares:
    * a step's batch (old log-probs, reference and PRM log-probs): B = data.train_batch_size x n responses,
      which veRL pads to a multiple of M = lcm(D, ppo_mini_batch_size x n) (`_get_required_batch_multiple`),
      so ⌈B/M⌉·M/D rows per rank;
    * an actor mini-batch: ppo_mini_batch_size x n / D; a PRM mini-batch: prime.prm.mini_batch_size x n / D.
    A part with dynamic micro-batches (token budgets) is not checked.
    """
    n = view.rollout.n
    ranks = training_ranks(view)
    actor_mini = actor_mini_batch(view) * n
    step_rows, multiple = step_batch_rows(view)
    step = (
        step_rows,
        f"a step's batch of {step_rows} responses (data.train_batch_size x actor_rollout_ref.rollout.n={n}, "
        f"padded by veRL to a multiple of {multiple})",
    )
    actor_dynamic = view.actor.use_dynamic_bsz
    parts = [
        (view.rollout, "log_prob_micro_batch_size_per_gpu", actor_dynamic, *step, "old-log-prob forward"),
        (
            view.actor,
            "ppo_micro_batch_size_per_gpu",
            actor_dynamic,
            actor_mini,
            f"an actor mini-batch of {actor_mini} responses (ppo_mini_batch_size x rollout.n={n})",
            "actor update",
        ),
        (prm, "infer_micro_batch_size_per_gpu", prm.use_dynamic_bsz, *step, "PRM log-prob forward"),
        (
            prm,
            "micro_batch_size_per_gpu",
            prm.use_dynamic_bsz,
            prm_mini * n,
            f"a PRM mini-batch of {prm_mini * n} responses (prime.prm.mini_batch_size={prm_mini} prompts x "
            f"rollout.n={n})",
            "PRM update",
        ),
    ]
    if uses_reference_policy(view) and not actor_uses_lora(
        view
    ):  # veRL's own reference worker (a LoRA actor's is its adapter off)
        ref_dynamic = bool(view.ref.log_prob_use_dynamic_bsz)
        parts.append((view.ref, "log_prob_micro_batch_size_per_gpu", ref_dynamic, *step, "reference"))
    for section, name, dynamic, rows, what, phase in parts:
        micro = getattr(section, name)
        if dynamic or micro is None:
            continue
        micro = int(micro)
        if rows % ranks or (rows // ranks) % micro:
            divisors = [d for d in range(1, rows // ranks + 1) if (rows // ranks) % d == 0] if rows % ranks == 0 else []
            _fail(
                key_of(section, name),
                f"is {micro}; {what} over {ranks} training rank{'s' if ranks > 1 else ''} "
                f"(trainer.n_gpus_per_node x trainer.nnodes) gives each rank {rows / ranks:g} rows, which must be "
                f"a whole number of micro-batches: veRL stops at the first {phase} otherwise. "
                + (f"Pick one of {divisors}" if divisors else "Change the batch sizes")
                + ", or use dynamic micro-batches (token budgets).",
            )


# veRL's precision names (verl.utils.torch_dtypes.PrecisionType), by the dtype each means.
PRECISION_NAMES = {
    "bf16": ("bf16", "bfloat16"),
    "fp16": ("fp16", "float16", "16"),
    "fp32": ("fp32", "float32", "32"),
}


def precision(name: Any) -> str | None:
    """'bf16' / 'fp16' / 'fp32' for any of veRL's names of that dtype, None for an unknown name."""
    text = str(name).lower()
    return next((short for short, names in PRECISION_NAMES.items() if text in names), None)


def check_compute_dtype(view: VerlView) -> None:
    """Refuse an FSDP engine `dtype` that asks for a precision the engine will not compute in.

    The FSDP engines of a PRIME run: the actor, veRL's reference worker and the PRM.
    veRL 0.9.1's FSDP engine computes in `mixed_precision.param_dtype` (bf16 when `mixed_precision` or the
    key is unset; verl/workers/engine/fsdp/transformer_impl.py) and never reads the engine's `dtype`,
    which only the Megatron engine reads; veRL's FSDP config documents `dtype` as the mixed-precision
    dtype and sets it to bfloat16. So `fsdp_config.dtype=float32` (or float16) left alone would still
    compute in bf16. A `dtype` other than veRL's bfloat16 default is a request, and it must agree with
    `param_dtype`; the bfloat16 default is not checked (it cannot be told from an unset key).
    """
    for engine in (view.actor.engine, view.ref.engine, view.prm.engine):
        if not isinstance(engine.node, DictConfig) or (engine.strategy or "fsdp") not in ("fsdp", "fsdp2"):
            continue
        asked = precision(engine.dtype)
        if asked in (None, "bf16"):
            continue
        param_dtype = key_of(engine, "param_dtype")
        if precision(engine.param_dtype) != asked:
            _fail(
                key_of(engine, "dtype"),
                f"is {engine.dtype}, but veRL 0.9.1's FSDP engine never reads it: it computes in "
                f"{param_dtype}, which is {engine.param_dtype} here (bf16 when unset). Set "
                f"{param_dtype}={asked} for {asked} compute (and keep reduce_dtype fp32), or drop the dtype override.",
            )


def compute_precision(engine: EngineView) -> str | None:
    """'bf16' / 'fp16' / 'fp32': what an FSDP engine computes in (`mixed_precision.param_dtype`, bf16 when unset)."""
    return precision(engine.param_dtype)


# How the PRM's log-prob forward is set up (`prime.prm.model`) against the actor's forward that gives its reference.
_FORWARD_ALIKE = ("use_fused_kernels", "use_remove_padding", "attn_implementation")


def check_reference_computed_alike(view: VerlView, prm: PrmConfig) -> None:
    """Where the PRM's reference log-probs come from the actor (a full-parameter PRM on a LoRA actor's base: the
    actor with its adapter off, as in the seed), the PRM's forward must compute what the actor's does, so that a PRM
    still equal to its reference has z = 0 exactly and no process term (`algorithm.prime.process_std_threshold`).

    Same kernels (fused log-prob kernels, remove-padding, attention) and compute precision always; outside fp32
    also the same micro-batches: bf16 results depend on the shapes a kernel is given, and an untrained PRM scored
    in micro-batches of another size than its reference differs from it by rounding (measured on CPU, bf16: whole
    bf16 steps of a log-prob, 0.06 nats at log p ≈ -10, on a few tokens per step; docs/findings.md, "The compute
    precision").
    """
    source = reference_source(view, prm, uses_reference_policy(view))
    if source not in (REF_ACTOR_BASE, REF_ACTOR_REF):
        return
    why = (
        "the PRM's reference is the actor with its adapter off (a full-parameter PRM starting from the LoRA "
        "actor's base), so an untrained PRM scores exactly 0 only if both forwards compute alike"
    )
    alike: list[tuple[ModelView | EngineView, ModelView | EngineView, str]] = [
        (view.prm.model, view.model, name) for name in _FORWARD_ALIKE
    ]
    alike.append((view.prm.engine, view.actor.engine, "param_dtype"))
    for prm_section, actor_section, name in alike:
        prm_value, actor_value = getattr(prm_section, name), getattr(actor_section, name)
        if name == "param_dtype":
            prm_value, actor_value = precision(prm_value), precision(actor_value)
        if prm_value != actor_value:
            _fail(
                key_of(prm_section, name),
                f"is {prm_value}, {key_of(actor_section, name)} is {actor_value}: {why}. Set them alike.",
            )
    prm_precision = compute_precision(view.prm.engine)
    if prm_precision == "fp32":
        return
    actor_part = view.ref if source == REF_ACTOR_REF else view.rollout
    actor_micro = actor_part.log_prob_micro_batch_size_per_gpu
    actor_dynamic = bool(actor_part.log_prob_use_dynamic_bsz)
    if prm.use_dynamic_bsz or actor_dynamic:
        prm_budget = prm.infer_max_token_len_per_gpu
        actor_budget = actor_part.log_prob_max_token_len_per_gpu
        if (prm.use_dynamic_bsz, prm_budget) != (actor_dynamic, actor_budget):
            _fail(
                key_of(prm, "use_dynamic_bsz"),
                f"the PRM's log-prob micro-batches (dynamic {prm.use_dynamic_bsz}, token budget {prm_budget}) differ "
                f"from its reference's ({key_of(actor_part, 'log_prob_use_dynamic_bsz')}={actor_dynamic}, "
                f"log_prob_max_token_len_per_gpu={actor_budget}): {why}, and in {prm_precision} the micro-batches "
                "too. Set them alike.",
            )
    elif prm.infer_micro_batch_size_per_gpu != actor_micro:
        _fail(
            key_of(prm, "infer_micro_batch_size_per_gpu"),
            f"is {prm.infer_micro_batch_size_per_gpu}, {key_of(actor_part, 'log_prob_micro_batch_size_per_gpu')} is "
            f"{actor_micro}: {why}, and in {prm_precision} the micro-batches too (bf16 rounding depends on "
            "them: an untrained PRM would carry rounding noise into the process term). Set both to one value "
            "(the recipe ties the PRM's to the actor's), or compute in fp32.",
        )


def _tokenizer_path(model: ModelView) -> Any:
    return model.tokenizer_path or model.path


def check_prm_tokenizer(view: VerlView) -> None:
    """The PRM scores the policy's token ids, so both must share one tokenizer."""
    actor_path = _tokenizer_path(view.model)
    prm_path = _tokenizer_path(view.prm.model)
    if not actor_path or not prm_path or str(actor_path) == str(prm_path):
        return
    from transformers import AutoTokenizer

    trust = view.model.trust_remote_code
    actor_tok = AutoTokenizer.from_pretrained(str(actor_path), trust_remote_code=trust)
    prm_tok = AutoTokenizer.from_pretrained(str(prm_path), trust_remote_code=trust)
    problems = tokenizer_differences(actor_tok, prm_tok)
    if problems:
        _fail(
            key_of(view.prm.model, "tokenizer_path" if view.prm.model.tokenizer_path else "path"),
            f"the PRM tokenizer ({prm_path}) differs from the policy's ({actor_path}): "
            + "; ".join(problems)
            + ". The PRM must read the policy's token ids unchanged.",
        )


def tokenizer_differences(a: Any, b: Any) -> list[str]:
    problems = []
    vocab_a, vocab_b = a.get_vocab(), b.get_vocab()
    if vocab_a != vocab_b:
        only_a = len(set(vocab_a.items()) - set(vocab_b.items()))
        only_b = len(set(vocab_b.items()) - set(vocab_a.items()))
        problems.append(f"vocabularies differ ({len(vocab_a)} vs {len(vocab_b)} entries; {only_a}/{only_b} unmatched)")
    for attr in ("eos_token_id", "bos_token_id", "pad_token_id"):
        if getattr(a, attr, None) != getattr(b, attr, None):
            problems.append(f"{attr} {getattr(a, attr, None)} vs {getattr(b, attr, None)}")
    return problems
