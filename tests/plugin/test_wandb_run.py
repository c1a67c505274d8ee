"""One W&B run across resumes (`plugin.wandb_run`): the id beside the checkpoints, given to the job's env."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl_prime_lora.config.verl_view import verl_view
from verl_prime_lora.plugin.wandb_run import RUN_ID_FILE, continue_wandb_run, new_run_id


def run_config(folder: Path, logger=("console", "wandb"), resume_mode="auto", resume_from_path=None):
    return OmegaConf.create(
        {
            "trainer": {
                "logger": list(logger),
                "default_local_dir": str(folder),
                "resume_mode": resume_mode,
                "resume_from_path": resume_from_path,
            },
            "ray_kwargs": {"ray_init": {"runtime_env": {"env_vars": {"VERL_PRIME_LORA_PRIME_RUN": "1"}}}},
        }
    )


def checkpoint(folder: Path, step: int) -> Path:
    """A `global_step_N` folder and veRL's tracker naming it (what `find_latest_ckpt_path` reads)."""
    (folder / f"global_step_{step}").mkdir(parents=True)
    (folder / "latest_checkpointed_iteration.txt").write_text(str(step))
    return folder / f"global_step_{step}"


def job_env(config) -> dict:
    return dict(config.ray_kwargs.ray_init.runtime_env.env_vars)


@pytest.fixture(autouse=True)
def no_user_run_id(monkeypatch):
    monkeypatch.delenv("WANDB_RUN_ID", raising=False)
    monkeypatch.delenv("WANDB_RESUME", raising=False)


def test_a_fresh_run_gets_a_new_id_kept_beside_its_checkpoints(tmp_path):
    config = run_config(tmp_path / "ckpt")
    run_id = continue_wandb_run(config, verl_view(config))
    assert len(run_id) == 8 and run_id.isalnum() and run_id == run_id.lower()
    assert (tmp_path / "ckpt" / RUN_ID_FILE).read_text().strip() == run_id
    assert job_env(config) == {"VERL_PRIME_LORA_PRIME_RUN": "1", "WANDB_RUN_ID": run_id, "WANDB_RESUME": "allow"}


def test_a_resumed_run_continues_the_id_kept_beside_the_checkpoint_it_resumes(tmp_path):
    folder = tmp_path / "ckpt"
    first = run_config(folder)
    run_id = continue_wandb_run(first, verl_view(first))
    checkpoint(folder, 50)
    again = run_config(folder)  # the same launch command after a crash
    assert continue_wandb_run(again, verl_view(again)) == run_id
    assert job_env(again)["WANDB_RUN_ID"] == run_id
    # resume_path into that folder: the same
    explicit = run_config(
        tmp_path / "other", resume_mode="resume_path", resume_from_path=str(folder / "global_step_50")
    )
    assert continue_wandb_run(explicit, verl_view(explicit)) == run_id


def test_a_fresh_start_in_the_same_folder_is_a_new_wandb_run(tmp_path):
    folder = tmp_path / "ckpt"
    (folder).mkdir()
    (folder / RUN_ID_FILE).write_text("oldrun12\n")
    checkpoint(folder, 50)
    fresh = run_config(folder, resume_mode="disable")
    run_id = continue_wandb_run(fresh, verl_view(fresh))
    assert run_id != "oldrun12" and (folder / RUN_ID_FILE).read_text().strip() == run_id


def test_a_resume_without_a_kept_id_starts_a_new_wandb_run_and_keeps_its_id(tmp_path):
    folder = tmp_path / "ckpt"
    checkpoint(folder, 50)  # a checkpoint of a run from before the id was kept
    config = run_config(folder)
    run_id = continue_wandb_run(config, verl_view(config))
    assert (folder / RUN_ID_FILE).read_text().strip() == run_id


def test_the_users_run_id_and_resume_mode_win(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_RUN_ID", "mine0001")
    monkeypatch.setenv("WANDB_RESUME", "must")
    config = run_config(tmp_path / "ckpt")
    assert continue_wandb_run(config, verl_view(config)) == "mine0001"
    assert job_env(config)["WANDB_RUN_ID"] == "mine0001" and job_env(config)["WANDB_RESUME"] == "must"
    assert not (tmp_path / "ckpt" / RUN_ID_FILE).exists()


def test_a_run_without_wandb_is_left_alone(tmp_path):
    config = run_config(tmp_path / "ckpt", logger=("console", "file"))
    assert continue_wandb_run(config, verl_view(config)) is None
    assert job_env(config) == {"VERL_PRIME_LORA_PRIME_RUN": "1"} and not (tmp_path / "ckpt").exists()


def test_run_ids_differ():
    assert len({new_run_id() for _ in range(200)}) == 200


# What the TaskRunner does with the job's env: veRL's own tracker, wandb offline, in a process of its own.
TRACKER = """
import sys
from verl.utils.tracking import Tracking
tracker = Tracking(project_name="p", experiment_name="e", default_backend=["wandb"], config={})
import wandb
print("RUN", wandb.run.id)
tracker.log({"x": float(sys.argv[1])}, step=int(sys.argv[1]))
wandb.finish()
"""


def test_two_launches_of_a_resumed_run_log_to_one_wandb_run(tmp_path):
    """The first launch and a resume (after a checkpoint) each start veRL's tracker with the job env the driver set:
    wandb (offline) opens the same run id both times."""
    folder = tmp_path / "ckpt"
    ids = []
    for step in (1, 2):
        config = run_config(folder)
        continue_wandb_run(config, verl_view(config))
        env = {**os.environ, **job_env(config), "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path)}
        env.pop("VERL_PRIME_LORA_PRIME_RUN")
        out = subprocess.run(
            [sys.executable, "-c", TRACKER, str(step)], env=env, capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, out.stderr[-3000:]
        ids.append(next(line.split()[1] for line in out.stdout.splitlines() if line.startswith("RUN ")))
        if step == 1:
            checkpoint(folder, 1)
    assert ids[0] == ids[1] == (folder / RUN_ID_FILE).read_text().strip()
    assert {path.name.rsplit("-", 1)[-1] for path in (tmp_path / "wandb").glob("offline-run-*")} == {ids[0]}
