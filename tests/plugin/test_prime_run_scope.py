"""A run that is not PRIME is veRL's own: no process of it applies a patch of the plugin (`plugin.prime_run`).

Each probe is a fresh interpreter that records every object of each patched veRL module (and of the classes it
defines) right after the module executes, before any patch can run (`patching.when_imported`, registered before
`import verl`), then goes through the step that decides PRIME-ness for its kind of process and compares:

* a Ray process (TaskRunner, worker): started with the env vars the run's config gives its Ray job, exactly as
  `main_ppo.run_ppo` builds them, it imports verl (and so the plugin) and every patched module;
* the driver: veRL's `main_ppo.main` under Hydra with the run's overrides, stopped before Ray by a config error
  (and, should no check stop it, by `ray.init`, which the probe replaces).

A plain `grpo` config leaves every object identical; a PRIME one changes exactly what `MODULE_PATCHES` lists.
"""

import importlib
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import verl
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

from verl_prime_lora.config.run import PRIME_RUN_ENV
from verl_prime_lora.plugin import plugin_state, prime_run
from verl_prime_lora.plugin.patches import DRIVER_TASK_NAME, MODULE_PATCHES

VERL_CONFIG_DIR = str(Path(verl.__file__).parent / "trainer" / "config")
SETUP_PY = Path(__file__).resolve().parents[2] / "setup.py"
MAIN_PPO = "verl.trainer.main_ppo"
GRPO = ["algorithm.adv_estimator=grpo"]  # veRL's own trainer (sync), no recipe: a plain veRL run
PRIME = ["+recipe=prime_lora_colocated"]

PROBE = r"""
import importlib, json, sys, warnings
from verl_prime_lora.patching import when_imported  # imports nothing of veRL

spec = json.loads(sys.argv[1])
MISSING = object()
recorded = {}


def objects(module):
    found = {name: value for name, value in vars(module).items() if name != "__warningregistry__"}
    for value in list(found.values()):
        if isinstance(value, type) and value.__module__ == module.__name__:
            found.update({f"{value.__name__}.{name}": item for name, item in vars(value).items()})
    return found


for name in spec["modules"]:
    when_imported(name, lambda module: recorded.__setitem__(module.__name__, objects(module)))

stopped = None
if spec["driver_overrides"] is None:
    import verl  # a Ray process: veRL loads the plugin at its import
else:
    import ray

    def no_ray(*args, **kwargs):
        raise RuntimeError("ray.init reached: no check stopped the driver")

    ray.init = no_ray
    sys.argv = ["main_ppo", *spec["driver_overrides"]]
    import verl.trainer.main_ppo as main_ppo
    try:
        main_ppo.main()
    except BaseException as exc:  # HYDRA_FULL_ERROR=1: the config error itself
        stopped = f"{type(exc).__name__}: {exc}"

changed = {}
for name in spec["modules"]:
    now, before = objects(importlib.import_module(name)), recorded[name]
    keys = before.keys() | now.keys()
    changed[name] = sorted(key for key in keys if before.get(key, MISSING) is not now.get(key, MISSING))
filtered = any("engine is not available" in str(getattr(f[1], "pattern", f[1])) for f in warnings.filters)
print(json.dumps({"changed": changed, "stopped": stopped, "engine_filter": filtered}))
"""


def compose_ppo(*overrides):
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def ray_job_env_vars(config) -> dict[str, str]:
    """The env vars `main_ppo.run_ppo` gives `ray.init` for `config`: veRL's defaults, then the config's runtime env."""
    runtime_env = OmegaConf.merge(get_ppo_ray_runtime_env(config), config.ray_kwargs.ray_init.get("runtime_env", {}))
    return {key: str(value) for key, value in runtime_env.get("env_vars", {}).items()}


def probe(tmp_path, env_vars: dict[str, str], driver_overrides: list[str] | None) -> dict:
    spec = {"modules": [*MODULE_PATCHES, MAIN_PPO], "driver_overrides": driver_overrides}
    env = {key: value for key, value in os.environ.items() if key != PRIME_RUN_ENV}
    # VERL_PLATFORM=nvidia: the CPU platform (`verl_prime_lora.cpu`, not the product) stays a no-op, as on a GPU host
    env.update(env_vars, VERL_PLATFORM="nvidia", HYDRA_FULL_ERROR="1", HF_HUB_OFFLINE="1")
    run = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(spec)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def patched_objects(driver: bool) -> dict[str, list[str]]:
    """What a PRIME process has replaced: `MODULE_PATCHES`, and in the driver main_ppo's own `validate_config`."""
    expected = {name: sorted(patch.replaces) for name, patch in MODULE_PATCHES.items()}
    expected[MAIN_PPO] = [DRIVER_TASK_NAME] if driver else []
    return expected


def unchanged() -> dict[str, list[str]]:
    return {name: [] for name in [*MODULE_PATCHES, MAIN_PPO]}


@pytest.mark.parametrize("run", ["grpo", "prime"])
def test_a_ray_process_is_patched_only_in_a_prime_run(run, tmp_path):
    config = compose_ppo(*(GRPO if run == "grpo" else PRIME))
    facts = probe(tmp_path, ray_job_env_vars(config), driver_overrides=None)
    if run == "grpo":
        assert facts["changed"] == unchanged() and not facts["engine_filter"], facts
    else:
        assert facts["changed"] == patched_objects(driver=False) and facts["engine_filter"], facts


@pytest.mark.parametrize("run", ["grpo", "prime"])
def test_the_driver_is_patched_only_in_a_prime_run(run, tmp_path):
    if run == "grpo":  # veRL's own validate_config stops it: no micro-batch size is set
        facts = probe(tmp_path, {}, [*GRPO, f"hydra.run.dir={tmp_path}"])
        assert facts["changed"] == unchanged() and not facts["engine_filter"], facts
        assert "Please set at least one of 'actor.ppo_micro_batch_size'" in facts["stopped"], facts
    else:  # the PRIME checks, which the patched validate_config runs, stop it
        overrides = [*PRIME, "actor_rollout_ref.rollout.n=1", f"hydra.run.dir={tmp_path}"]
        facts = probe(tmp_path, {}, overrides)
        assert facts["changed"] == patched_objects(driver=True) and facts["engine_filter"], facts
        assert facts["stopped"].startswith("PrimeConfigError: actor_rollout_ref.rollout.n:"), facts


def test_only_the_prime_recipes_mark_a_run():
    for recipes in ("prime_lora", "prime_lora_colocated", "[prime_lora_colocated,prompt_filter,cpu]"):
        config = compose_ppo(f"+recipe={recipes}")
        assert ray_job_env_vars(config)[PRIME_RUN_ENV] == "1", recipes
    for overrides in (GRPO, ["+recipe=cpu"]):  # the CPU preset is a platform: a plain veRL run on it is veRL's own
        assert PRIME_RUN_ENV not in ray_job_env_vars(compose_ppo(*overrides)), overrides


def test_the_drivers_callback_is_not_built_without_the_plugin(monkeypatch):
    prime_run.PrimeRunDriver()
    monkeypatch.setattr(plugin_state, "_registered", False)
    monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", "none")
    with pytest.raises(plugin_state.PluginNotLoadedError, match="VERL_USE_EXTERNAL_PLUGINS=none"):
        prime_run.PrimeRunDriver()


# --------------------------------------------------------------------------------------------------
# the one veRL release the plugin registers under
# --------------------------------------------------------------------------------------------------


def test_the_plugin_refuses_to_register_under_another_verl(monkeypatch, caplog):
    monkeypatch.setattr(verl, "__version__", "0.9.2")
    monkeypatch.setattr(plugin_state, "_registered", False)
    monkeypatch.delitem(sys.modules, "verl_prime_lora.plugin.plugin")  # restored afterwards
    with caplog.at_level(logging.ERROR), pytest.raises(ImportError) as err:
        importlib.import_module("verl_prime_lora.plugin.plugin")
    line = str(err.value)
    assert "\n" not in line and line.startswith("verl-prime-lora 0.1.0 supports veRL 0.9.1 only"), line
    assert "veRL 0.9.2" in line and "pip install verl==0.9.1" in line, line
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [line]
    assert not plugin_state._registered


def test_the_supported_verl_is_setup_pys_pin():
    from verl_prime_lora.plugin.plugin import VERL_VERSION

    pin = re.search(r'^VERL = "verl==([^"]+)"', SETUP_PY.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert pin and pin[1] == VERL_VERSION
