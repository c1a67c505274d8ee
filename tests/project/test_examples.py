"""The example scripts: valid bash, and every seed override they pass composes with the recipe they
select (a misspelt key would otherwise only fail on a GPU machine, minutes into start-up)."""

import inspect
import subprocess
from pathlib import Path

import pytest
from main_ppo_driver import compose_ppo
from omegaconf import OmegaConf

from verl_prime_lora.rewards.math_format import compute_score

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def seed_overrides(*arrays):
    script = f'source "{EXAMPLES}/seed_overrides.sh"; printf "%s\\n" ' + " ".join(f'"${{{a}[@]}}"' for a in arrays)
    out = subprocess.run(["bash", "-c", script], check=True, capture_output=True, text=True, env={"HOME": "/home/u"})
    return out.stdout.splitlines()


@pytest.mark.parametrize("script", sorted(p.name for p in EXAMPLES.glob("*.sh")))
def test_scripts_are_valid_bash(script):
    subprocess.run(["bash", "-n", str(EXAMPLES / script)], check=True)


@pytest.mark.parametrize("recipe", ["prime_lora", "prime_lora_colocated"])
def test_seed_overrides_compose(recipe):
    cfg = compose_ppo(f"+recipe={recipe}", *seed_overrides("SEED_ARGS", "PRM_ARGS"))
    assert cfg.actor_rollout_ref.model.lora.dropout == 0.05
    assert cfg.reward.custom_reward_function.path == "pkg://verl_prime_lora.rewards.math_format"
    assert cfg.prime.prm.micro_batch_size_per_gpu == 2
    assert cfg.data.train_files == "/home/u/data/open_rs/train.parquet"


def test_baseline_overrides_compose_without_prm():
    cfg = compose_ppo(
        "+recipe=prime_lora",
        *seed_overrides("SEED_ARGS"),
        "algorithm.adv_estimator=grpo",
        "trainer.v1.trainer_mode=separate_async",
    )
    assert (cfg.algorithm.adv_estimator, cfg.trainer.v1.trainer_mode) == ("grpo", "separate_async")


REWARD_KWARGS = "reward.custom_reward_function.reward_kwargs."
# Keys of the seed overrides that name this machine's files or its logging: the recipe leaves them to the command
# line. (The run's length, its checkpoint and validation cadence and its project are the recipe's, checked below.)
RUN_SPECIFIC = {
    "data.train_files",
    "data.val_files",
    "actor_rollout_ref.model.path",
    "trainer.logger",
}


@pytest.mark.parametrize("recipe", ["prime_lora", "prime_lora_colocated"])
def test_recipe_alone_carries_every_seed_value(recipe):
    """`+recipe=…` without the scripts' overrides is the seed run: each seed value agrees with the recipe's."""
    overrides = seed_overrides("SEED_ARGS", "PRM_ARGS")
    plain, seeded = compose_ppo(f"+recipe={recipe}"), compose_ppo(f"+recipe={recipe}", *overrides)
    checked = 0
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+")
        if key in RUN_SPECIFIC:
            continue
        seed_value = OmegaConf.select(seeded, key)
        if key.startswith(REWARD_KWARGS):  # the recipe leaves these to compute_score's defaults
            recipe_value = inspect.signature(compute_score).parameters[key.removeprefix(REWARD_KWARGS)].default
        else:
            recipe_value = OmegaConf.select(plain, key)
        assert recipe_value == seed_value, (
            f"{key}: recipe/{recipe}.yaml gives {recipe_value!r}, examples/seed_overrides.sh {seed_value!r}"
        )
        checked += 1
    assert checked >= 25  # the guard against a parser that silently reads no override


@pytest.mark.parametrize("recipe", ["prime_lora", "prime_lora_colocated"])
def test_the_recipe_alone_is_the_seeds_run_length_with_saves_and_validation(recipe):
    """`python -m verl.trainer.main_ppo +recipe=prime_lora ...`, the README's headline, runs the seed's 1500 steps
    with a checkpoint and a validation every 50 (veRL's own defaults: 30 epochs, no checkpoint, no validation),
    and its warm-up is 10 % of those 1500 steps. The CPU preset keeps the length and saves, not the validation."""
    trainer = compose_ppo(f"+recipe={recipe}").trainer
    assert (trainer.total_training_steps, trainer.save_freq, trainer.test_freq) == (1500, 50, 50)
    assert compose_ppo(f"+recipe={recipe}").actor_rollout_ref.actor.optim.lr_warmup_steps_ratio == 0.1
    cpu = compose_ppo(f"+recipe=[{recipe},cpu]").trainer
    assert (cpu.total_training_steps, cpu.save_freq, cpu.test_freq) == (1500, 50, -1)


def test_smoke_script_launches_the_colocated_cpu_recipe(tmp_path):
    """`make smoke` as written, up to the launch: with a stand-in PYTHON that records its arguments, the
    script writes the tiny assets, then hands the launcher a main_ppo command line that composes with the
    recipe (the loop itself runs in the end-to-end tests: tests/e2e/test_prime_e2e.py, same recipe and
    model)."""
    calls = tmp_path / "calls"
    fake = tmp_path / "python"
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" >> {calls}\necho --- >> {calls}\n')
    fake.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(fake), "STEPS": "2"}
    subprocess.run(["bash", str(EXAMPLES / "run_cpu_smoke.sh"), str(tmp_path / "out")], check=True, env=env)
    tiny, launch = [call.strip().splitlines() for call in calls.read_text().split("---\n")[:2]]
    assert tiny[:2] == ["-m", "verl_prime_lora.tools.tiny"]
    assert launch[:2] == ["-m", "verl_prime_lora.cpu.launch"]
    overrides = launch[launch.index("--") + 1 :]
    cfg = compose_ppo(*overrides)
    assert cfg.trainer.v1.trainer_mode == "prime_sync" and cfg.trainer.total_training_steps == 2
    assert cfg.actor_rollout_ref.model.path == str(tmp_path / "out" / "assets" / "model")
    assert cfg.trainer.device == "cpu"  # the CPU preset came last


def launched_overrides(script: str, tmp_path, **env) -> list[str]:
    """The overrides `examples/<script>` hands main_ppo, recorded by a stand-in PYTHON."""
    calls = tmp_path / f"{script}.calls"
    fake = tmp_path / "python"
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > {calls}\n')
    fake.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/u", "PYTHON": str(fake), **env}
    subprocess.run(["bash", str(EXAMPLES / script)], check=True, env=env)
    argv = calls.read_text().splitlines()
    assert argv[:2] == ["-m", "verl.trainer.main_ppo"]
    return argv[2:]


# Each GPU script, the GPUs the README gives it (Hardware), and its layout.
GPU_SCRIPTS = [
    ("run_prime_lora_r1_distill_qwen_1.5b.sh", 80, 2),
    ("run_grpo_lora_baseline.sh", 80, 2),
    ("run_prime_lora_colocated.sh", 80, 1),
]


@pytest.mark.parametrize("script, gib, gpus", GPU_SCRIPTS)
def test_each_gpu_script_fits_the_gpus_the_readme_gives_it(script, gib, gpus, tmp_path):
    """The script's exact command line, with the seed model's config.json, passes the preflight at that size."""
    import json

    from verl_prime_lora import preflight as pf
    from verl_prime_lora.preflight import memory as mem
    from verl_prime_lora.preflight.model_shape import R1_DISTILL_QWEN_1_5B_CONFIG

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(R1_DISTILL_QWEN_1_5B_CONFIG))
    overrides = launched_overrides(script, tmp_path, MODEL=str(model))
    report = pf.estimate(pf.layout_from_config(pf.compose_config(overrides)), gib * mem.GIB)
    assert len(report.gpus) == gpus
    assert report.fits, [(gpu.title, round(gpu.total / mem.GIB, 1)) for gpu in report.gpus]
    has_prm = any(row.label.startswith("PRM") for row in report.gpus[0].rows)
    assert has_prm == (script != "run_grpo_lora_baseline.sh")  # veRL's own trainer: no PRM


def test_extra_recipes_follow_the_scripts_own(tmp_path):
    overrides = launched_overrides("run_prime_lora_r1_distill_qwen_1.5b.sh", tmp_path, RECIPES="prompt_filter")
    assert overrides[0] == "+recipe=[prime_lora,prompt_filter]"
    assert compose_ppo(*overrides).trainer.v1.sampler.custom_sampler.name == "accuracy_band_replay_buffer"
