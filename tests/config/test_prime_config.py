"""The typed PRIME config (`verl_prime_lora.config.prime`): its defaults are the recipe's values, key for
key; a composed config round-trips into it; each invalid value fails with a message that starts with its key."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import verl
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from verl.trainer.config import AlgoConfig

from verl_prime_lora.algo import core_algos
from verl_prime_lora.checks.config_checks import validate_prime_config
from verl_prime_lora.config import prime_config
from verl_prime_lora.config.prime import (
    PRM_VERL_SECTIONS,
    PROCESS_NORMS,
    AdvantageConfig,
    PrimeConfig,
    PrmConfig,
    ProcessRewardsFn,
    advantage_config,
)
from verl_prime_lora.config.section import PrimeConfigError, config_value
from verl_prime_lora.config.verl_view import verl_view

VERL_CONFIG_DIR = str(Path(verl.__file__).parent / "trainer" / "config")
ACTOR_MINI_BATCH = "${actor_rollout_ref.actor.ppo_mini_batch_size}"
ACTOR_LOG_PROB_MICRO_BATCH = "${actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu}"


def compose_ppo(*overrides):
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def recipe(*overrides, name="prime_lora"):
    return compose_ppo(f"+recipe={name}", "actor_rollout_ref.model.path=/m", *overrides)


@pytest.fixture(scope="module")
def seed_recipe():
    return recipe()


def field_names(cls):
    return [f.name for f in dataclasses.fields(cls)]


def recipe_section(config, path, skip=()):
    """The section as the recipe writes it (interpolations unresolved), without the keys in `skip`."""
    section = OmegaConf.to_container(OmegaConf.select(config, path), resolve=False)
    return {key: value for key, value in section.items() if key not in skip}


# --------------------------------------------------------------------------------------------------
# one default per key: the recipe's
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cls, path, skip",
    [
        (PrmConfig, "prime.prm", PRM_VERL_SECTIONS),
        (PrimeConfig, "prime", ("prm", "process_rewards_fn")),
        (ProcessRewardsFn, "prime.process_rewards_fn", ()),
        (AdvantageConfig, "algorithm.prime", ()),
    ],
)
def test_every_default_is_the_recipes_value(seed_recipe, cls, path, skip):
    written = recipe_section(seed_recipe, path, skip)
    names = [name for name in field_names(cls) if name not in skip]
    assert sorted(written) == sorted(names), f"{path}: the recipe and {cls.__name__} name different keys"
    defaults = cls()
    for name in names:
        default, value = getattr(defaults, name), written[name]
        if (cls, name) == (PrmConfig, "mini_batch_size"):
            # null means "the actor's ppo_mini_batch_size", which the recipe interpolates
            assert default is None and value == ACTOR_MINI_BATCH, (name, value)
        elif (cls, name) == (PrmConfig, "infer_micro_batch_size_per_gpu"):
            # the recipe ties it to the actor's log-prob micro-batches (4 in the recipe)
            assert value == ACTOR_LOG_PROB_MICRO_BATCH and default == seed_recipe[path.split(".")[0]].prm[name] == 4
        elif (cls, name) == (AdvantageConfig, "process_std_threshold_per_token"):
            # 0 for the pure functions and the CPU preset (fp32); the GPU recipe's 4e-4 per token is 2.6 times the
            # pooled fit of bf16's rounding floor of z per token at the seed's depth (docs/findings.md)
            assert default == 0.0 and value == 4e-4, (name, default, value)
        else:
            assert default == value and type(default) is type(value), f"{path}.{name}: {default!r} vs {value!r}"


def test_the_colocated_recipe_and_the_prompt_filter_keep_the_same_prime_settings(seed_recipe):
    expected = prime_config(verl_view(seed_recipe)), advantage_config(seed_recipe.algorithm)
    for config in (recipe(name="prime_lora_colocated"), recipe(name="[prime_lora,prompt_filter]")):
        assert (prime_config(verl_view(config)), advantage_config(config.algorithm)) == expected


def test_core_algos_implements_each_process_norm_the_config_accepts():
    """`config.prime.PROCESS_NORMS` is the one list of the names: core_algos maps each to the function of its name."""
    assert tuple(core_algos.PROCESS_ADVANTAGES) == PROCESS_NORMS
    for name, fn in core_algos.PROCESS_ADVANTAGES.items():
        assert fn is getattr(core_algos, f"{name}_norm_process_advantage")


# --------------------------------------------------------------------------------------------------
# round trip from a composed config
# --------------------------------------------------------------------------------------------------


def test_the_recipe_round_trips_into_the_defaults(seed_recipe):
    actor_mini = seed_recipe.actor_rollout_ref.actor.ppo_mini_batch_size
    assert prime_config(verl_view(seed_recipe)) == PrimeConfig(prm=PrmConfig(mini_batch_size=actor_mini))
    # the typed default is 0 per token (the pure functions' and the CPU preset's); the GPU recipe adds 4e-4 per token
    # of the group's mean length, above bf16's rounding floor of z (docs/findings.md)
    assert advantage_config(seed_recipe.algorithm) == AdvantageConfig(process_std_threshold_per_token=4e-4)


OVERRIDES = [
    ("prime.max_failed_rollout_ratio=0.25", lambda c: c.max_failed_rollout_ratio, 0.25),
    ("prime.diagnostics=true", lambda c: c.diagnostics, True),
    ("prime.prm.beta=0.1", lambda c: c.prm.beta, 0.1),
    ("prime.prm.beta=1", lambda c: c.prm.beta, 1.0),  # an int on the command line becomes the float field
    ("prime.prm.update=after", lambda c: c.prm.update, "after"),
    ("prime.prm.reference=policy", lambda c: c.prm.reference, "policy"),
    ("prime.prm.label_key=correct", lambda c: c.prm.label_key, "correct"),
    ("prime.prm.balance_labels=true", lambda c: c.prm.balance_labels, True),
    ("prime.prm.mini_batch_size=2", lambda c: c.prm.mini_batch_size, 2),
    ("actor_rollout_ref.actor.ppo_mini_batch_size=8", lambda c: c.prm.mini_batch_size, 8),  # follows the actor
    ("prime.prm.micro_batch_size_per_gpu=8", lambda c: c.prm.micro_batch_size_per_gpu, 8),
    # follows the actor's log-prob micro-batches (in bf16 the two must be equal: config_checks)
    (
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=12",
        lambda c: c.prm.infer_micro_batch_size_per_gpu,
        12,
    ),
    (
        (
            "prime.prm.infer_micro_batch_size_per_gpu=null",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        ),
        lambda c: c.prm.infer_micro_batch_size_per_gpu,
        2,
    ),
    ("prime.prm.max_token_len_per_gpu=4096", lambda c: c.prm.infer_max_token_len_per_gpu, 4096),
    ("prime.prm.epochs=2", lambda c: c.prm.epochs, 2),
    ("prime.prm.shuffle=true", lambda c: c.prm.shuffle, True),
    ("prime.prm.seed=7", lambda c: c.prm.seed, 7),
]

ADVANTAGE_OVERRIDES = [
    ("algorithm.prime.outcome_coef=0.5", "outcome_coef", 0.5),
    ("algorithm.prime.process_coef=0", "process_coef", 0.0),
    ("algorithm.prime.process_norm=token", "process_norm", "token"),
    ("algorithm.prime.process_std_threshold=0", "process_std_threshold", 0.0),
    ("algorithm.prime.process_gate=null", "process_gate", None),
    ("algorithm.prime.process_gate=1", "process_gate", 1.0),
    ("algorithm.prime.whiten_advantages=true", "whiten_advantages", True),
    ("algorithm.prime.epsilon=1e-8", "epsilon", 1e-8),
]


@pytest.mark.parametrize("override, read, expected", OVERRIDES)
def test_prime_overrides_reach_the_typed_config(override, read, expected):
    config = recipe(*(override if isinstance(override, tuple) else (override,)))
    typed = prime_config(verl_view(config))
    assert read(typed) == expected and type(read(typed)) is type(expected)
    validate_prime_config(config, check_tokenizers=False)


@pytest.mark.parametrize("override, name, expected", ADVANTAGE_OVERRIDES)
def test_advantage_overrides_reach_the_typed_config(override, name, expected):
    config = recipe(override)
    value = getattr(advantage_config(config.algorithm), name)
    assert value == expected and type(value) is type(expected)
    validate_prime_config(config, check_tokenizers=False)


def test_typed_sections_are_read_only(seed_recipe):
    with pytest.raises(dataclasses.FrozenInstanceError):
        prime_config(verl_view(seed_recipe)).prm.update = "none"


def test_advantage_config_takes_every_form_the_estimators_get():
    """veRL hands the estimators `config.algorithm`: a DictConfig, or its `AlgoConfig` (no `prime` field)."""
    assert advantage_config(None) == advantage_config(AlgoConfig()) == AdvantageConfig()
    assert advantage_config({"prime": {"process_norm": "token"}}).process_norm == "token"
    typed = AdvantageConfig(process_coef=0.5)
    assert advantage_config({"prime": typed}) is typed
    assert prime_config(verl_view(OmegaConf.create({}))) == PrimeConfig()


# --------------------------------------------------------------------------------------------------
# each error starts with its key
# --------------------------------------------------------------------------------------------------

INVALID = [
    ("prime.max_failed_rollout_ratio=1.5", "prime.max_failed_rollout_ratio"),
    ("prime.max_failed_rollout_ratio=-0.1", "prime.max_failed_rollout_ratio"),
    ("prime.max_failed_rollout_ratio=true", "prime.max_failed_rollout_ratio"),
    ("+prime.max_failed_ratio=0.5", "prime.max_failed_ratio"),
    ("prime.diagnostics=sometimes", "prime.diagnostics"),
    ("prime.prm.beta=0", "prime.prm.beta"),
    ("prime.prm.beta=null", "prime.prm.beta"),
    ("prime.prm.update=reverse", "prime.prm.update"),
    ("prime.prm.reference=sft", "prime.prm.reference"),
    ("prime.prm.label_key=format", "prime.prm.label_key"),
    ("prime.prm.label_key=score", "prime.prm.label_key"),
    ("prime.prm.balance_labels=sometimes", "prime.prm.balance_labels"),
    ("prime.prm.mini_batch_size=0", "prime.prm.mini_batch_size"),
    ("prime.prm.micro_batch_size_per_gpu=0", "prime.prm.micro_batch_size_per_gpu"),
    ("prime.prm.infer_micro_batch_size_per_gpu=-1", "prime.prm.infer_micro_batch_size_per_gpu"),
    ("prime.prm.use_dynamic_bsz=true", "prime.prm.max_token_len_per_gpu"),
    ("prime.prm.epochs=0", "prime.prm.epochs"),
    ("prime.prm.seed=abc", "prime.prm.seed"),
    ("+prime.prm.updat=before", "prime.prm.updat"),
    ("algorithm.prime.process_norm=length", "algorithm.prime.process_norm"),
    ("algorithm.prime.process_std_threshold=-1", "algorithm.prime.process_std_threshold"),
    ("algorithm.prime.process_gate=0.5", "algorithm.prime.process_gate"),
    ("algorithm.prime.process_gate=1.5", "algorithm.prime.process_gate"),
    ("algorithm.prime.process_gate=high", "algorithm.prime.process_gate"),
    ("algorithm.prime.epsilon=-1e-6", "algorithm.prime.epsilon"),
    ("algorithm.prime.whiten_advantages=maybe", "algorithm.prime.whiten_advantages"),
    ("+algorithm.prime.process_coeff=0.5", "algorithm.prime.process_coeff"),
]


@pytest.mark.parametrize("override, key", INVALID)
def test_each_error_starts_with_its_key(override, key):
    config = recipe(override)
    with pytest.raises(PrimeConfigError) as err:
        prime_config(verl_view(config))
        advantage_config(config.algorithm)
    assert str(err.value).startswith(key + ":"), str(err.value)
    with pytest.raises(PrimeConfigError) as err:  # the same error from the driver's check, before Ray
        validate_prime_config(config, check_tokenizers=False)
    assert str(err.value).startswith(key + ":"), str(err.value)


@pytest.mark.parametrize(
    "config",
    [
        OmegaConf.create({"a": {"b": 2, "c": None, "m": "???", "i": "${a.b}"}}),
        {"a": {"b": 2, "c": None, "i": 2}},
        AlgoConfig(),  # a dataclass: only its absent keys are read here
    ],
)
def test_config_value_reads_dotted_keys_and_falls_back_on_absent_none_and_missing(config):
    if not isinstance(config, AlgoConfig):
        assert config_value(config, "a.b") == 2 and config_value(config, "a.i") == 2  # interpolations resolve
    for key in ("a.c", "a.m", "a.x", "x.y.z"):
        assert config_value(config, key, "default") == "default"


def test_an_estimator_refuses_an_invalid_algorithm_prime():
    rewards = torch.zeros(2, 3)
    with pytest.raises(PrimeConfigError, match=r"^algorithm\.prime\.process_norm: "):
        core_algos.compute_prime_grpo_advantage(
            rewards, rewards + 1, ["a", "a"], config=OmegaConf.create({"prime": {"process_norm": "length"}})
        )


def test_importing_the_config_imports_neither_verl_nor_torch(tmp_path):
    code = (
        "import json, sys; import verl_prime_lora.config.run; "
        "print(json.dumps([name for name in ('verl', 'torch', 'ray') if name in sys.modules]))"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.splitlines()[-1]) == []


# --------------------------------------------------------------------------------------------------
# compute precision: veRL's FSDP engine reads mixed_precision.param_dtype, never `dtype`
# --------------------------------------------------------------------------------------------------

ENGINES = ["actor_rollout_ref.actor.fsdp_config", "actor_rollout_ref.ref.fsdp_config", "prime.prm.engine"]


@pytest.mark.parametrize("section", ENGINES)
@pytest.mark.parametrize("dtype", ["float32", "fp16"])
def test_a_dtype_the_fsdp_engine_would_not_compute_in_is_refused(section, dtype):
    config = recipe(f"{section}.dtype={dtype}")
    with pytest.raises(PrimeConfigError) as err:
        validate_prime_config(config, check_tokenizers=False)
    message = str(err.value)
    assert message.startswith(f"{section}.dtype: is {dtype}"), message
    assert f"{section}.mixed_precision.param_dtype=" in message  # the key that takes effect


@pytest.mark.parametrize("section", ENGINES)
def test_a_dtype_that_agrees_with_param_dtype_passes(section):
    # every engine in fp32: the PRM must compute as the actor that gives its reference (see below)
    fp32 = [f"++{engine}.mixed_precision.param_dtype=fp32" for engine in ENGINES]
    validate_prime_config(recipe(f"{section}.dtype=float32", *fp32), check_tokenizers=False)


@pytest.mark.parametrize("name", ["[prime_lora,cpu]", "[prime_lora_colocated,cpu]", "prime_lora"])
def test_the_recipes_pass_the_precision_check(name):
    # the CPU preset computes in fp32 through param_dtype and leaves veRL's bfloat16 `dtype` default alone
    validate_prime_config(recipe(name=name), check_tokenizers=False)


# --------------------------------------------------------------------------------------------------
# an untrained PRM scores exactly as its reference: the seed's reference is the actor with its adapter off
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "override, key",
    [
        ("prime.prm.model.use_fused_kernels=false", "prime.prm.model.use_fused_kernels"),
        ("prime.prm.model.use_remove_padding=false", "prime.prm.model.use_remove_padding"),
        ("++prime.prm.model.override_config.attn_implementation=sdpa", "prime.prm.model.override_config"),
        ("prime.prm.engine.mixed_precision.param_dtype=fp32", "prime.prm.engine.mixed_precision.param_dtype"),
        ("prime.prm.infer_micro_batch_size_per_gpu=2", "prime.prm.infer_micro_batch_size_per_gpu"),
        (("prime.prm.use_dynamic_bsz=true", "prime.prm.max_token_len_per_gpu=4096"), "prime.prm.use_dynamic_bsz"),
    ],
)
def test_a_prm_computed_unlike_its_actor_reference_is_refused(override, key):
    with pytest.raises(PrimeConfigError) as err:
        validate_prime_config(
            recipe(*(override if isinstance(override, tuple) else (override,))), check_tokenizers=False
        )
    assert str(err.value).startswith(key), str(err.value)
    assert "adapter off" in str(err.value)


def test_the_seed_recipe_ties_the_prm_forward_to_its_reference():
    config = recipe("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8")
    assert config.prime.prm.infer_micro_batch_size_per_gpu == 8  # follows the actor's log-prob micro-batches
    assert config.prime.prm.model.use_fused_kernels is True  # fp32 log-probs from the bf16 model, as the actor's
    validate_prime_config(config, check_tokenizers=False)


@pytest.mark.parametrize(
    "overrides",
    [
        # fp32 compute: the micro-batches do not change the result beyond fp32 rounding
        (
            "prime.prm.infer_micro_batch_size_per_gpu=2",
            "prime.prm.engine.mixed_precision.param_dtype=fp32",
            "++actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
        ),
        # a LoRA PRM is its own reference (adapter off): one worker, one forward set-up
        ("prime.prm.infer_micro_batch_size_per_gpu=2", "prime.prm.model.lora_rank=8"),
        # the same token budgets on both sides
        (
            "prime.prm.use_dynamic_bsz=true",
            "prime.prm.max_token_len_per_gpu=4096",
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=4096",
        ),
    ],
)
def test_prm_forwards_that_match_their_reference_pass(overrides):
    validate_prime_config(recipe(*overrides), check_tokenizers=False)


def test_megatron_reads_dtype_and_is_not_checked():
    config = recipe("actor_rollout_ref.actor.fsdp_config.dtype=float16")
    config.actor_rollout_ref.actor.fsdp_config.strategy = "megatron"
    validate_prime_config(config, check_tokenizers=False)


@pytest.mark.parametrize(
    "name, short", [("bf16", "bf16"), ("bfloat16", "bf16"), ("float16", "fp16"), (32, "fp32"), ("fp8", None)]
)
def test_precision_names_follow_verl(name, short):
    from verl.utils.torch_dtypes import PrecisionType

    from verl_prime_lora.checks.config_checks import precision

    assert precision(name) == short
    if short is not None:
        assert PrecisionType.to_dtype(name) == PrecisionType.to_dtype(short)
