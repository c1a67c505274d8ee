"""The `+recipe=prime_lora` config group: it resolves (Hydra would otherwise silently run plain PPO),
carries the seed recipe, and command-line overrides still win."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import verl
import yaml
from main_ppo_driver import compose_ppo
from omegaconf import OmegaConf

import verl_prime_lora.plugin.plugin as verl_plugin
from verl_prime_lora.plugin import hydra_search_path

VERL_CONFIG_DIR = str(Path(verl.__file__).parent / "trainer" / "config")


def test_recipe_group_resolves_and_sets_prime():
    cfg = compose_ppo("+recipe=prime_lora")
    # A missing group would leave `recipe: prime_lora` as a stray key and veRL's defaults untouched.
    assert "recipe" not in cfg
    assert cfg.algorithm.adv_estimator == "prime_grpo"
    assert cfg.algorithm.prime.process_std_threshold_per_token == pytest.approx(4e-4)


def test_recipe_carries_seed_hyperparameters():
    cfg = compose_ppo("+recipe=prime_lora")
    model, actor, rollout = cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert (model.lora_rank, model.lora_alpha) == (32, 128)
    assert sorted(model.target_modules) == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    assert (rollout.n, rollout.temperature) == (6, 0.7)
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length) == (512, 3584)
    assert actor.optim.lr == pytest.approx(1e-6)
    assert (actor.optim.lr_scheduler_type, actor.optim.min_lr_ratio, actor.optim.lr_warmup_steps_ratio) == (
        "cosine",
        0.1,
        0.1,
    )


def test_command_line_overrides_win_over_recipe():
    cfg = compose_ppo("+recipe=prime_lora", "algorithm.adv_estimator=prime_rloo", "actor_rollout_ref.rollout.n=4")
    assert cfg.algorithm.adv_estimator == "prime_rloo"
    assert cfg.actor_rollout_ref.rollout.n == 4


def test_unknown_recipe_is_an_error_not_a_silent_fallthrough():
    from hydra.errors import MissingConfigException

    with pytest.raises(MissingConfigException):
        compose_ppo("+recipe=no_such_recipe")


def test_search_path_points_at_the_recipe_group():
    root = hydra_search_path.config_root()
    assert (root / "recipe" / "prime_lora.yaml").is_file()


def test_failed_registration_is_loud(monkeypatch, caplog):
    monkeypatch.setattr(verl_plugin, "REGISTERING_MODULES", ("verl_prime_lora.algo.core_algos", "no_such_module_xyz"))
    with caplog.at_level(logging.ERROR), pytest.raises(ImportError, match="no_such_module_xyz"):
        verl_plugin.register_all()
    assert any(r.levelno == logging.ERROR and "no_such_module_xyz" in r.getMessage() for r in caplog.records)


# Run in a fresh interpreter that imports `verl` and never `verl_prime_lora`: everything it finds registered
# comes from veRL loading our `verl.plugins` entry point.
IMPORT_VERL_ONLY = f"""
import json, sys
import verl
plugin_loaded = "verl_prime_lora.plugin.plugin" in sys.modules
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
with initialize_config_dir(config_dir={VERL_CONFIG_DIR!r}, version_base=None):
    cfg = compose(config_name="ppo_trainer", overrides=["+recipe=prime_lora"])
print(json.dumps({{
    "plugin_loaded": plugin_loaded,
    "estimators": sorted(ADV_ESTIMATOR_REGISTRY),
    "trainers": sorted(TRAINER_REGISTRY),
    "recipe_adv_estimator": cfg.algorithm.adv_estimator,
    "stray_recipe_key": "recipe" in cfg,
}}))
"""


def test_import_verl_alone_registers_the_plugin(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_PLUGINS"}  # veRL's default: "auto"
    run = subprocess.run(
        [sys.executable, "-c", IMPORT_VERL_ONLY], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-4000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    hint = f"`import verl` did not register verl-prime-lora through its `verl.plugins` entry point: {found}"
    assert found["plugin_loaded"], hint
    assert {"prime_grpo", "prime_rloo"} <= set(found["estimators"]), hint
    assert {"prime_sync", "prime_separate_async"} <= set(found["trainers"]), hint
    # the Hydra search path: without it `+recipe=prime_lora` becomes a stray key and plain PPO runs
    assert found["recipe_adv_estimator"] == "prime_grpo" and not found["stray_recipe_key"], hint


@pytest.mark.parametrize("recipes", ["[prime_lora,cpu]", "[prime_lora_colocated,cpu]"])
def test_cpu_preset_computes_in_fp32_where_verl_reads_it(recipes):
    """veRL's FSDP engine computes in `mixed_precision.param_dtype` (bf16 when unset; it ignores `dtype`): the
    CPU preset sets fp32 there for the actor and its reference, as vLLM samples (the PRM's:
    tests/prime/test_prm_worker.py::test_prm_worker_config_fp32_master_bf16_compute)."""
    cfg = compose_ppo(f"+recipe={recipes}")
    for role in ("actor", "ref"):
        assert cfg.actor_rollout_ref[role].fsdp_config.mixed_precision.param_dtype == "fp32", role
    assert cfg.actor_rollout_ref.rollout.dtype == "float32"


@pytest.mark.parametrize(
    "recipe, backend", [("prime_lora", "cpu_zmq"), ("prime_lora_colocated", "naive"), (None, "naive")]
)
def test_cpu_preset_picks_the_weight_sync_from_the_placement(recipe, backend):
    """Split layout (hybrid_engine false): vLLM-CPU replicas get weights over `cpu_zmq`; colocated: `naive`."""
    recipes = "[cpu]" if recipe is None else f"[{recipe},cpu]"
    cfg = compose_ppo(f"+recipe={recipes}")
    assert cfg.actor_rollout_ref.rollout.checkpoint_engine.backend == backend
    explicit = compose_ppo(f"+recipe={recipes}", "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl")
    assert explicit.actor_rollout_ref.rollout.checkpoint_engine.backend == "nccl"


@pytest.mark.parametrize(
    "recipe, overrides, gpus",
    [
        ("prime_lora", (), 2),  # the seed's split: 1 trainer GPU + 1 standalone vLLM GPU
        ("prime_lora", ("trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.n_gpus_per_node=3"), 5),
        ("prime_lora_colocated", (), 1),  # vLLM shares the trainer's GPU
        ("prime_lora_colocated", ("trainer.n_gpus_per_node=2",), 2),
        (None, (), 1),  # a plain veRL run on the CPU preset
    ],
)
def test_cpu_preset_gives_ray_the_gpus_of_the_layout(recipe, overrides, gpus):
    """The local cluster's fake GPUs follow the placement, so the split recipe runs on one CPU node as it is."""
    recipes = "[cpu]" if recipe is None else f"[{recipe},cpu]"
    cfg = compose_ppo(f"+recipe={recipes}", *overrides)
    assert cfg.ray_kwargs.ray_init.num_gpus == gpus
    explicit = compose_ppo(f"+recipe={recipes}", *overrides, "ray_kwargs.ray_init.num_gpus=7")
    assert explicit.ray_kwargs.ray_init.num_gpus == 7


def readme_common_keys() -> list[tuple[str, str]]:
    """(key, recipe value as written) of each row of the README's table of the keys people change most."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("<!-- common-keys:start -->")[1].split("<!-- common-keys:end -->")[0]
    out = []
    for line in block.splitlines():
        if line.startswith("| `"):
            keys, value = (cell.strip() for cell in line.strip().strip("|").split("|")[:2])
            out += [(key.strip("` "), value.strip("`")) for key in keys.split(",")]
    return out


def test_the_readmes_common_keys_exist_with_the_values_it_gives():
    cfg = compose_ppo("+recipe=prime_lora")
    rows = readme_common_keys()
    assert len(rows) >= 10
    for key, value in rows:
        assert OmegaConf.select(cfg, key, default="<absent>") != "<absent>", key
        if value != "–":
            actual = OmegaConf.select(cfg, key)
            expected = float(value) if isinstance(actual, float) else yaml.safe_load(value)
            assert actual == expected, (key, actual, value)


def test_the_readmes_sdpa_way_out_is_the_drivers():
    from verl_prime_lora.checks.environment_checks import SDPA_OVERRIDES

    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    assert SDPA_OVERRIDES in readme


# --------------------------------------------------------------------------------------------------
# a recipe composed where veRL did not load the plugin (plugin_state)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "policy, reason, remedy",
    [
        ("none", "VERL_USE_EXTERNAL_PLUGINS=none turns veRL's plugin loading off", "Unset VERL_USE_EXTERNAL_PLUGINS"),
        (
            "other_plugin",
            "VERL_USE_EXTERNAL_PLUGINS=other_plugin does not name prime_lora",
            "Add prime_lora to VERL_USE_EXTERNAL_PLUGINS",
        ),
    ],
)
def test_a_recipe_composed_without_the_plugin_stops_before_ray_with_the_reason(monkeypatch, policy, reason, remedy):
    from verl_prime_lora.plugin import plugin_state

    cfg = compose_ppo("+recipe=prime_lora")
    assert cfg.trainer.use_v1 is True  # the plugin is loaded in this process
    monkeypatch.setattr(plugin_state, "_registered", False)
    monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", policy)
    with pytest.raises(Exception) as err:
        cfg.trainer.use_v1  # noqa: B018 - main_ppo reads it in the driver, before run_ppo starts Ray
    message = str(err.value)
    assert "a PRIME recipe (+recipe=prime_lora...) is composed, but veRL did not load the plugin" in message
    assert reason in message and remedy in message


def test_a_checkout_that_is_not_installed_is_named(monkeypatch):
    """Run from inside a checkout that was never installed, Python finds the package (and Hydra its recipes) on the
    path, but veRL finds no entry point to load."""
    import importlib.metadata

    from verl_prime_lora.plugin import plugin_state

    cfg = compose_ppo("+recipe=prime_lora")
    monkeypatch.setattr(plugin_state, "_registered", False)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    with pytest.raises(Exception, match=r"\(verl-prime-lora is not installed in this environment .*pip install -e \."):
        cfg.trainer.use_v1  # noqa: B018


def test_a_plugin_that_failed_to_import_is_named_with_its_error(monkeypatch):
    from verl_prime_lora.plugin import plugin_state

    def failing():
        raise ImportError("verl-prime-lora could not register: verl_prime_lora.prime.trainer: boom")

    monkeypatch.setattr(plugin_state, "_registered", False)
    monkeypatch.setattr(plugin_state, "_import_plugin", failing)
    cfg = compose_ppo("+recipe=prime_lora_colocated")
    with pytest.raises(Exception, match="importing verl_prime_lora.plugin.plugin failed: ImportError: verl-") as err:
        cfg.trainer.use_v1  # noqa: B018
    assert "Fix that error: `python -c 'import verl_prime_lora.plugin.plugin'` shows its traceback." in str(err.value)


def test_the_cpu_preset_keeps_the_fp32_threshold():
    """The GPU recipe's std threshold (3) is three times bf16's rounding floor of z at the seed's shape; the CPU
    preset computes in fp32, where no such floor exists, and keeps the seed's 1e-2."""
    cfg = compose_ppo("+recipe=[prime_lora_colocated,cpu]")
    assert cfg.algorithm.prime.process_std_threshold == pytest.approx(1e-2)
