"""A PRIME run's checkpoints: published atomically, old ones removed only after a new one is published, a full disk
named with the folder and the bytes, the previous checkpoint intact."""

import errno
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

import verl_prime_lora.plugin.patches  # noqa: F401 - installs the tracker patch under test
from verl_prime_lora import checkpoints as cf
from verl_prime_lora.config import run_config
from verl_prime_lora.config.verl_view import verl_view
from verl_prime_lora.prime.trainer import PrimeTrainerMixin


def step_folder(root, step, size=1000):
    folder = root / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    (folder / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"x" * size)
    return folder


def test_the_tracker_is_the_one_veRL_writes_and_reads():
    """The atomic write (`plugin.patches`) and the pre-Ray resume check find veRL's tracker by this name."""
    from verl.utils.checkpoint.checkpoint_manager import get_checkpoint_tracker_filename

    assert os.path.basename(get_checkpoint_tracker_filename("ckpt")) == cf.CHECKPOINT_TRACKER


def test_veRLs_tracker_write_is_atomic(tmp_path):
    """veRL's `_save_checkpoint` writes the tracker with `open(path, "w")` in its module: that name now writes
    beside the file and renames it over, so a reader sees the old step or the new one, never an empty file."""
    from verl.trainer.ppo.v1 import trainer_base

    tracker = tmp_path / cf.CHECKPOINT_TRACKER
    tracker.write_text("1")
    with trainer_base.open(tracker, "w") as handle:
        handle.write("2")
        assert tracker.read_text() == "1"  # not yet published
    assert tracker.read_text() == "2" and not list(tmp_path.glob(".*partial"))
    with pytest.raises(RuntimeError), trainer_base.open(tracker, "w") as handle:
        handle.write("3")
        raise RuntimeError("the save failed after the write began")
    assert tracker.read_text() == "2"  # nothing published by a failed save
    other = tmp_path / "other.txt"
    with trainer_base.open(other, "w") as handle:  # every other file opens as before
        handle.write("plain")
    assert other.read_text() == "plain"


def test_veRL_still_publishes_through_its_modules_open():
    """The canary of the patch above: veRL's save writes the tracker with the module-level `open`."""
    import inspect

    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    source = inspect.getsource(PPOTrainer._save_checkpoint)
    assert 'with open(local_latest_checkpointed_iteration, "w") as f:' in source


@pytest.mark.parametrize("keep, left", [(None, [1, 2, 3, 4]), (1, [4]), (2, [3, 4]), (5, [1, 2, 3, 4])])
def test_old_step_folders_beyond_keep_are_removed_whole(tmp_path, keep, left):
    for step in (1, 2, 3, 4):
        step_folder(tmp_path, step)
    removed = cf.remove_old_checkpoints(tmp_path, keep, published_step=4)
    assert [step for step, _ in cf.step_folders(tmp_path)] == left
    assert len(removed) == 4 - len(left)


def test_a_folder_newer_than_the_published_step_is_never_removed(tmp_path):
    for step in (1, 2, 3):
        step_folder(tmp_path, step)
    cf.remove_old_checkpoints(tmp_path, 1, published_step=2)  # step 3: a save that stopped midway
    assert [step for step, _ in cf.step_folders(tmp_path)] == [2, 3]


def test_veRLs_managers_remove_nothing_during_the_save():
    config = OmegaConf.create({"trainer": {"max_actor_ckpt_to_keep": 3, "remove_previous_ckpt_in_save": False}})
    trainer = config.trainer
    assert cf.checkpoints_to_keep(verl_view(config).trainer) == 3
    with cf.saving_without_removal(verl_view(config).trainer):
        assert (trainer.max_actor_ckpt_to_keep, trainer.remove_previous_ckpt_in_save) == (None, False)
    assert trainer.max_actor_ckpt_to_keep == 3
    removing = OmegaConf.create({"trainer": {"remove_previous_ckpt_in_save": True}})
    assert cf.checkpoints_to_keep(verl_view(removing).trainer) == 1


class VerlSave:
    """veRL's save, as far as these tests need it: the actor's folder, then the tracker (last)."""

    def _save_checkpoint(self):
        root = Path(self.config.trainer.default_local_dir)
        step_folder(root, self.global_steps)
        (root / cf.CHECKPOINT_TRACKER).write_text(str(self.global_steps))


class FakeSave(PrimeTrainerMixin, VerlSave):
    """The PRIME trainer's save with its workers replaced: the PRM's writes `prm/`, veRL's the actor and the tracker."""

    def __init__(self, root, step, keep=None, fail=None):
        self.config = OmegaConf.create(
            {
                "trainer": {"default_local_dir": str(root), "default_hdfs_dir": None, "max_actor_ckpt_to_keep": keep},
                "actor_rollout_ref": {"actor": {"checkpoint": {}}},
            }
        )
        self.run = run_config(self.config)
        self.global_steps, self.fail = step, fail
        self.prime_step = SimpleNamespace(state_dict=lambda: {"prm_pairwise_ema": 0.5})
        self.watchdog = SimpleNamespace(enter=lambda *args: None)
        self.prm = SimpleNamespace(save=self._save_prm)
        self.keep_seen = []

    def _save_prm(self, local, remote, step, max_ckpt_to_keep):
        self.keep_seen.append((max_ckpt_to_keep, self.config.trainer.max_actor_ckpt_to_keep))
        if self.fail:
            raise self.fail
        Path(local).mkdir(parents=True)


def test_the_save_publishes_then_removes_the_old_steps(tmp_path):
    for step in (1, 2, 3):
        trainer = FakeSave(tmp_path, step, keep=2)
        trainer._save_checkpoint()
        assert trainer.keep_seen == [(None, None)]  # no manager removed anything while it saved
        assert trainer.config.trainer.max_actor_ckpt_to_keep == 2
    assert [step for step, _ in cf.step_folders(tmp_path)] == [2, 3]
    assert (tmp_path / cf.CHECKPOINT_TRACKER).read_text() == "3"
    assert json.loads((tmp_path / "global_step_3" / "prime_state.json").read_text()) == {"prm_pairwise_ema": 0.5}


def test_a_full_disk_names_the_folder_and_the_bytes_and_keeps_the_last_checkpoint(tmp_path):
    FakeSave(tmp_path, 1)._save_checkpoint()
    disk_full = OSError(errno.ENOSPC, "No space left on device")
    wrapped = RuntimeError("ray::TrainingWorker.save_checkpoint() failed")  # as a Ray task error carries it
    wrapped.cause = disk_full
    trainer = FakeSave(tmp_path, 2, keep=1, fail=wrapped)
    with pytest.raises(cf.CheckpointSpaceError) as err:
        trainer._save_checkpoint()
    message = str(err.value)
    assert message.startswith(f"[Errno {errno.ENOSPC}] trainer.default_local_dir: no space left on the device of")
    assert f"while saving step 2 to {tmp_path / 'global_step_2'}" in message
    assert "a checkpoint takes 0.00 GB (global_step_1)" in message and "GB are free" in message
    assert f"the last complete checkpoint, {tmp_path / 'global_step_1'}, is intact" in message
    assert (tmp_path / cf.CHECKPOINT_TRACKER).read_text() == "1"
    assert (tmp_path / "global_step_1" / "actor" / "model_world_size_1_rank_0.pt").exists()
    assert trainer.config.trainer.max_actor_ckpt_to_keep == 1  # restored after the failed save


def test_other_save_errors_pass_through(tmp_path):
    with pytest.raises(ValueError, match="a bug"):
        FakeSave(tmp_path, 1, fail=ValueError("a bug"))._save_checkpoint()
    assert not cf.no_space_left(ValueError("a bug"))
