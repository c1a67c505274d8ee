"""Checks of a composed veRL config for PRIME, run in the driver before Ray starts.

`validate_prime_config(config)` raises `PrimeConfigError` (a `ValueError`) whose message names the
offending key. It is called

* in the driver, from veRL's own `validate_config` (main_ppo.py, before `run_ppo` calls
  `ray.init`), through the one wrapper installed by `verl_prime_lora.integration.patches` — veRL has no
  config hook before Ray starts; and
* again in the PRIME trainers' `__init__` (inside the TaskRunner), for entry points that bypass
  `main_ppo.main`.

The `prime.*` and `algorithm.prime.*` keys are checked by building their typed sections
(`verl_prime_lora.algo.prime_config`); the checks here are those that span sections. It only reads the
config (plus the two tokenizers when the PRM has its own model/tokenizer path, and the file of
`prime.process_rewards_fn` when one is set).
Nothing here imports torch or Ray.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

from omegaconf import DictConfig

from verl_prime_lora.algo.prime_config import PrimeConfigError, ProcessRewardsFn, advantage_config, prime_config
from verl_prime_lora.algo.run_config import (
    PRIME_ESTIMATORS,
    PRIME_TRAINERS,
    REF_ACTOR_BASE,
    REF_ACTOR_REF,
    actor_uses_lora,
    get,
    has_standalone_rollout,
    is_prime_run,
    reference_source,
    training_ranks,
    uses_reference_policy,
)


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


def check_stray_recipe(config: Any) -> None:
    recipe = config.get("recipe") if isinstance(config, DictConfig) else None
    if isinstance(recipe, str):
        _fail(
            "recipe",
            f"is the plain string {recipe!r}: Hydra did not find the config group `recipe`, so "
            f"`+recipe={recipe}` became a stray key and none of the recipe was applied. Reinstall "
            "verl-prime-lora (its Hydra search-path plugin registers the group) and check "
            "`python -m verl.trainer.main_ppo --info searchpath`.",
        )


def validate_prime_config(config: Any, check_tokenizers: bool = True) -> None:
    """Raise `PrimeConfigError` naming the key if `config` cannot run PRIME correctly.

    A config that neither selects a PRIME trainer nor a PRIME estimator is left alone (apart from
    the stray-`recipe` check), so plain veRL runs are unaffected.
    """
    check_stray_recipe(config)
    if not is_prime_run(config):
        return
    trainer_mode = get(config, "trainer.v1.trainer_mode")
    estimator = get(config, "algorithm.adv_estimator")
    prime_trainer = trainer_mode in PRIME_TRAINERS
    prime_estimator = estimator in PRIME_ESTIMATORS

    # 1. estimator <-> trainer pairing
    if prime_estimator and not prime_trainer:
        _fail(
            "trainer.v1.trainer_mode",
            f"algorithm.adv_estimator={estimator} needs process rewards, which only a PRIME trainer "
            f"computes; got trainer_mode={trainer_mode!r}, use one of {sorted(PRIME_TRAINERS)} "
            "(or a non-PRIME estimator such as grpo).",
        )
    if prime_trainer and not prime_estimator:
        takes = estimator_takes_process_rewards(str(estimator))
        if not takes:
            _fail(
                "algorithm.adv_estimator",
                f"trainer_mode={trainer_mode} computes process rewards, but estimator {estimator!r} "
                f"{'does not accept' if takes is False else 'is not a registered estimator that accepts'} "
                f"a `process_rewards` argument; use one of {list(PRIME_ESTIMATORS)} (or "
                "trainer.v1.trainer_mode=sync for a PRM-free run).",
            )
    if not bool(get(config, "trainer.use_v1", True)):
        _fail("trainer.use_v1", "PRIME runs on veRL's V1 trainer only; set trainer.use_v1=true.")

    # 2. group size
    n = int(get(config, "actor_rollout_ref.rollout.n", 1))
    if n < 2:
        _fail(
            "actor_rollout_ref.rollout.n",
            f"is {n}; PRIME's group baselines need at least 2 responses per prompt.",
        )

    # 3. split placement: LoRA reaches vLLM only merged (veRL issue #7495)
    if (
        has_standalone_rollout(config)
        and actor_uses_lora(config)
        and not bool(get(config, "actor_rollout_ref.model.lora.merge", False))
    ):
        _fail(
            "actor_rollout_ref.model.lora.merge",
            "must be True when the actor is LoRA and rollout runs on its own GPUs "
            f"(trainer_mode={trainer_mode}, hybrid_engine={get(config, 'actor_rollout_ref.hybrid_engine')}): "
            "veRL 0.9.1 syncs only base weights to a separate vLLM otherwise, so the rollout would "
            "silently keep sampling the initial policy (veRL issue #7495).",
        )

    # 4. prime.* and algorithm.prime.*: types, ranges and choices (verl_prime_lora.algo.prime_config)
    if get(config, "prime.prm") is None:
        _fail("prime.prm", "is missing; select the recipe with `+recipe=prime_lora` (or _colocated).")
    prime = prime_config(config)
    prm = prime.prm
    advantage_config(get(config, "algorithm"))
    load_process_rewards_fn(prime.process_rewards_fn)

    # 5. the PRM's mini-batches against the actor's
    actor_mini = int(get(config, "actor_rollout_ref.actor.ppo_mini_batch_size", 1))
    prm_mini = prm.mini_batch_size or actor_mini
    if actor_mini % prm_mini != 0:
        _fail(
            "prime.prm.mini_batch_size",
            f"is {prm_mini}; it must divide actor_rollout_ref.actor.ppo_mini_batch_size ({actor_mini}), "
            "both counted in prompts (x rollout.n responses), so every PRM mini-batch is full.",
        )
    check_micro_batches(config, prm_mini, prm)

    # 6. the compute precision each FSDP engine is asked for is the one it uses
    check_compute_dtype(config)

    # 7. an untrained PRM scores exactly as its reference where the actor computes that reference
    check_reference_computed_alike(config)

    # 8. same tokenizer for PRM and policy
    if check_tokenizers:
        check_prm_tokenizer(config)


def load_process_rewards_fn(ref: ProcessRewardsFn):
    """The function `prime.process_rewards_fn` names, or None when its `path` is null (the PRM's own rewards)."""
    if not ref.path:
        return None
    from verl.utils.import_utils import load_extern_object

    try:
        return load_extern_object(ref.path, ref.name)
    except Exception as exc:  # noqa: BLE001 - missing file, import error, missing function
        raise PrimeConfigError(
            f"{ref.KEY}.path: cannot load {ref.name!r} from {ref.path}: {type(exc).__name__}: {exc}"
        ) from None


def step_batch_rows(config: Any) -> tuple[int, int]:
    """(B, M): the rows of a training step's batch, B = data.train_batch_size x rollout.n responses padded by
    veRL to a multiple of M = lcm(D training ranks, ppo_mini_batch_size x rollout.n)."""
    n = int(get(config, "actor_rollout_ref.rollout.n", 1))
    actor_mini = int(get(config, "actor_rollout_ref.actor.ppo_mini_batch_size", 1)) * n
    multiple = math.lcm(training_ranks(config), actor_mini)
    return -(-int(get(config, "data.train_batch_size", 1)) * n // multiple) * multiple, multiple


def check_micro_batches(config: Any, prm_mini: int, prm: Any) -> None:
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
    n = int(get(config, "actor_rollout_ref.rollout.n", 1))
    ranks = training_ranks(config)
    actor_mini = int(get(config, "actor_rollout_ref.actor.ppo_mini_batch_size", 1)) * n
    step_rows, multiple = step_batch_rows(config)
    step = (
        step_rows,
        f"a step's batch of {step_rows} responses (data.train_batch_size x actor_rollout_ref.rollout.n={n}, "
        f"padded by veRL to a multiple of {multiple})",
    )
    actor_dynamic = bool(get(config, "actor_rollout_ref.actor.use_dynamic_bsz", False))
    parts = [
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", actor_dynamic, *step, "old-log-prob forward"),
        (
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
            actor_dynamic,
            actor_mini,
            f"an actor mini-batch of {actor_mini} responses (ppo_mini_batch_size x rollout.n={n})",
            "actor update",
        ),
        ("prime.prm.infer_micro_batch_size_per_gpu", prm.use_dynamic_bsz, *step, "PRM log-prob forward"),
        (
            "prime.prm.micro_batch_size_per_gpu",
            prm.use_dynamic_bsz,
            prm_mini * n,
            f"a PRM mini-batch of {prm_mini * n} responses (prime.prm.mini_batch_size={prm_mini} prompts x "
            f"rollout.n={n})",
            "PRM update",
        ),
    ]
    if uses_reference_policy(config) and not actor_uses_lora(
        config
    ):  # veRL's own reference worker (a LoRA actor's is its adapter off)
        ref_dynamic = bool(get(config, "actor_rollout_ref.ref.log_prob_use_dynamic_bsz", False))
        parts.append(("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", ref_dynamic, *step, "reference"))
    for key, dynamic, rows, what, phase in parts:
        micro = get(config, key)
        if dynamic or micro is None:
            continue
        micro = int(micro)
        if rows % ranks or (rows // ranks) % micro:
            divisors = [d for d in range(1, rows // ranks + 1) if (rows // ranks) % d == 0] if rows % ranks == 0 else []
            _fail(
                key,
                f"is {micro}; {what} over {ranks} training rank{'s' if ranks > 1 else ''} "
                f"(trainer.n_gpus_per_node x trainer.nnodes) gives each rank {rows / ranks:g} rows, which must be "
                f"a whole number of micro-batches: veRL stops at the first {phase} otherwise. "
                + (f"Pick one of {divisors}" if divisors else "Change the batch sizes")
                + ", or use dynamic micro-batches (token budgets).",
            )


# The FSDP engines of a PRIME run: the actor, veRL's reference worker and the PRM.
FSDP_ENGINE_SECTIONS = ("actor_rollout_ref.actor.fsdp_config", "actor_rollout_ref.ref.fsdp_config", "prime.prm.engine")
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


def check_compute_dtype(config: Any) -> None:
    """Refuse an FSDP engine `dtype` that asks for a precision the engine will not compute in.

    veRL 0.9.1's FSDP engine computes in `mixed_precision.param_dtype` (bf16 when `mixed_precision` or the
    key is unset; verl/workers/engine/fsdp/transformer_impl.py) and never reads the engine's `dtype`,
    which only the Megatron engine reads; veRL's FSDP config documents `dtype` as the mixed-precision
    dtype and sets it to bfloat16. So `fsdp_config.dtype=float32` (or float16) left alone would still
    compute in bf16. A `dtype` other than veRL's bfloat16 default is a request, and it must agree with
    `param_dtype`; the bfloat16 default is not checked (it cannot be told from an unset key).
    """
    for section in FSDP_ENGINE_SECTIONS:
        engine = get(config, section)
        if not isinstance(engine, DictConfig) or str(engine.get("strategy") or "fsdp") not in ("fsdp", "fsdp2"):
            continue
        asked = precision(engine.get("dtype", "bfloat16"))
        if asked in (None, "bf16"):
            continue
        param_dtype = (engine.get("mixed_precision") or {}).get("param_dtype", "bf16")
        if precision(param_dtype) != asked:
            _fail(
                f"{section}.dtype",
                f"is {engine.get('dtype')}, but veRL 0.9.1's FSDP engine never reads it: it computes in "
                f"{section}.mixed_precision.param_dtype, which is {param_dtype} here (bf16 when unset). Set "
                f"{section}.mixed_precision.param_dtype={asked} for {asked} compute (and keep reduce_dtype fp32), "
                f"or drop the dtype override.",
            )


def compute_precision(config: Any, engine_section: str) -> str | None:
    """'bf16' / 'fp16' / 'fp32': what an FSDP engine computes in (`mixed_precision.param_dtype`, bf16 when unset)."""
    return precision(get(config, f"{engine_section}.mixed_precision.param_dtype", "bf16"))


# How the PRM's log-prob forward is set up (`prime.prm...`) against the actor's forward that gives its reference.
_FORWARD_ALIKE = (
    ("prime.prm.model.use_fused_kernels", "actor_rollout_ref.model.use_fused_kernels", False),
    ("prime.prm.model.use_remove_padding", "actor_rollout_ref.model.use_remove_padding", False),
    (
        "prime.prm.model.override_config.attn_implementation",
        "actor_rollout_ref.model.override_config.attn_implementation",
        "flash_attention_2",
    ),
    (
        "prime.prm.engine.mixed_precision.param_dtype",
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype",
        "bf16",
    ),
)


def check_reference_computed_alike(config: Any) -> None:
    """Where the PRM's reference log-probs come from the actor (a full-parameter PRM on a LoRA actor's base: the
    actor with its adapter off, as in the seed), the PRM's forward must compute what the actor's does, so that a PRM
    still equal to its reference has z = 0 exactly and no process term (`algorithm.prime.process_std_threshold`).

    Same kernels (fused log-prob kernels, remove-padding, attention) and compute precision always; outside fp32
    also the same micro-batches: bf16 results depend on the shapes a kernel is given, and an untrained PRM scored
    in micro-batches of another size than its reference differs from it by rounding (measured on CPU, bf16: whole
    bf16 steps of a log-prob, 0.06 nats at log p ≈ -10, on a few tokens per step; docs/findings.md, "The compute
    precision").
    """
    source = reference_source(config, uses_reference_policy(config))
    if source not in (REF_ACTOR_BASE, REF_ACTOR_REF):
        return
    why = (
        "the PRM's reference is the actor with its adapter off (a full-parameter PRM starting from the LoRA "
        "actor's base), so an untrained PRM scores exactly 0 only if both forwards compute alike"
    )
    for prm_key, actor_key, default in _FORWARD_ALIKE:
        prm_value, actor_value = get(config, prm_key, default), get(config, actor_key, default)
        if prm_key.endswith("param_dtype"):
            prm_value, actor_value = precision(prm_value), precision(actor_value)
        if prm_value != actor_value:
            _fail(prm_key, f"is {prm_value}, {actor_key} is {actor_value}: {why}. Set them alike.")
    if compute_precision(config, "prime.prm.engine") == "fp32":
        return
    actor_part = "actor_rollout_ref.ref" if source == REF_ACTOR_REF else "actor_rollout_ref.rollout"
    prm_micro, actor_micro = (
        get(config, "prime.prm.infer_micro_batch_size_per_gpu") or get(config, "prime.prm.micro_batch_size_per_gpu"),
        get(config, f"{actor_part}.log_prob_micro_batch_size_per_gpu"),
    )
    prm_dynamic = bool(get(config, "prime.prm.use_dynamic_bsz", False))
    actor_dynamic = bool(get(config, f"{actor_part}.log_prob_use_dynamic_bsz", False))
    if prm_dynamic or actor_dynamic:
        prm_budget = get(config, "prime.prm.infer_max_token_len_per_gpu") or get(
            config, "prime.prm.max_token_len_per_gpu"
        )
        actor_budget = get(config, f"{actor_part}.log_prob_max_token_len_per_gpu")
        if (prm_dynamic, prm_budget) != (actor_dynamic, actor_budget):
            _fail(
                "prime.prm.use_dynamic_bsz",
                f"the PRM's log-prob micro-batches (dynamic {prm_dynamic}, token budget {prm_budget}) differ from "
                f"its reference's ({actor_part}.log_prob_use_dynamic_bsz={actor_dynamic}, "
                f"log_prob_max_token_len_per_gpu={actor_budget}): {why}, and in "
                f"{compute_precision(config, 'prime.prm.engine')} the micro-batches too. Set them alike.",
            )
    elif prm_micro != actor_micro:
        _fail(
            "prime.prm.infer_micro_batch_size_per_gpu",
            f"is {prm_micro}, {actor_part}.log_prob_micro_batch_size_per_gpu is {actor_micro}: {why}, and in "
            f"{compute_precision(config, 'prime.prm.engine')} the micro-batches too (bf16 rounding depends on "
            "them: an untrained PRM would carry rounding noise into the process term). Set both to one value "
            "(the recipe ties the PRM's to the actor's), or compute in fp32.",
        )


def _tokenizer_path(config: Any, prefix: str) -> str | None:
    return get(config, f"{prefix}.tokenizer_path") or get(config, f"{prefix}.path")


def check_prm_tokenizer(config: Any) -> None:
    """The PRM scores the policy's token ids, so both must share one tokenizer."""
    actor_path = _tokenizer_path(config, "actor_rollout_ref.model")
    prm_path = _tokenizer_path(config, "prime.prm.model")
    if not actor_path or not prm_path or str(actor_path) == str(prm_path):
        return
    from transformers import AutoTokenizer

    trust = bool(get(config, "actor_rollout_ref.model.trust_remote_code", False))
    actor_tok = AutoTokenizer.from_pretrained(str(actor_path), trust_remote_code=trust)
    prm_tok = AutoTokenizer.from_pretrained(str(prm_path), trust_remote_code=trust)
    problems = tokenizer_differences(actor_tok, prm_tok)
    if problems:
        key = (
            "prime.prm.model.tokenizer_path"
            if get(config, "prime.prm.model.tokenizer_path")
            else "prime.prm.model.path"
        )
        _fail(
            key,
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
