"""Input checks before Ray starts (verl_prime_lora.checks.inputs), `resume_checkpoint`: the checkpoint a run
resumes from can be resumed, on this many ranks, with every file it reads whole; `resume_mode=auto` steps past
an incomplete latest checkpoint."""

import json
from pathlib import Path

import pytest
import torch
from input_configs import GRPO, PARTIAL_CREDIT_REWARD, REWARD_FN, config, esc, fails

from verl_prime_lora.checks.inputs import check_inputs


def fake_checkpoint(root: Path, step: int, actor_ranks: int, prm_ranks: int | None) -> Path:
    """A veRL checkpoint as PRIME writes it, each file a small torch.save archive: `root/global_step_N/{actor,prm}`
    with the model, optimizer and extra-state shard of every rank, `data.pt`, `prime_state.json`, and the tracker."""
    folder = root / f"global_step_{step}"
    for part, ranks in (("actor", actor_ranks), ("prm", prm_ranks)):
        if ranks is not None:
            (folder / part).mkdir(parents=True)
            for rank in range(ranks):
                for prefix in ("model", "optim", "extra_state"):
                    torch.save({"w": torch.zeros(4)}, folder / part / f"{prefix}_world_size_{ranks}_rank_{rank}.pt")
    torch.save({"dataloader": 0}, folder / "data.pt")
    (folder / "prime_state.json").write_text(json.dumps({"prm_pairwise_ema": 0.5}))
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    return folder


def test_resume_from_a_checkpoint_of_another_world_size(assets, tmp_path):
    folder = fake_checkpoint(tmp_path / "ckpt", 3, actor_ranks=2, prm_ranks=2)
    resume = ("trainer.resume_mode=resume_path", f"trainer.resume_from_path={folder}")
    message = fails(config(assets, *resume), r"^trainer\.n_gpus_per_node: trainer\.resume_mode=resume_path resumes")
    assert "actor was saved by 2 ranks" in message and "this run has 1" in message
    ranks = ("trainer.n_gpus_per_node=2", "ray_kwargs.ray_init.num_gpus=2")
    check_inputs(config(assets, *resume, *ranks))  # the same 2 ranks: fine
    # auto mode finds the latest step under default_local_dir; the PRM is checked as the actor
    (folder / "actor" / "model_world_size_1_rank_0.pt").touch()
    auto = (f"trainer.default_local_dir={tmp_path / 'ckpt'}",)
    message = fails(config(assets, *auto), r"^trainer\.n_gpus_per_node: trainer\.resume_mode=auto resumes")
    assert "PRM was saved by 2 ranks" in message
    check_inputs(config(assets, *auto, "trainer.resume_mode=disable"))


def test_prime_resume_needs_the_prm_state(assets, tmp_path):
    folder = fake_checkpoint(tmp_path / "ckpt", 2, actor_ranks=1, prm_ranks=None)
    pattern = (
        rf"^trainer\.default_local_dir: trainer\.resume_mode=auto: the latest checkpoint, {esc(folder)}, holds no "
        r"PRM state .*, and no other step folder of .* is complete\. Nothing was deleted"
    )
    fails(config(assets, f"trainer.default_local_dir={tmp_path / 'ckpt'}"), pattern)
    fails(config(assets, *resume(folder)), rf"^trainer\.resume_from_path: .*{esc(folder)}, which holds no PRM state")
    # a plain veRL trainer has no PRM to restore
    check_inputs(
        config(
            assets,
            f"trainer.default_local_dir={tmp_path / 'ckpt'}",
            *GRPO,
            REWARD_FN + "=" + str(PARTIAL_CREDIT_REWARD),
        )
    )


def resume(folder: Path) -> tuple[str, str]:
    return "trainer.resume_mode=resume_path", f"trainer.resume_from_path={folder}"


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_whole_checkpoint_resumes(assets, tmp_path):
    check_inputs(config(assets, *resume(fake_checkpoint(tmp_path / "ckpt", 2, actor_ranks=1, prm_ranks=1))))


def test_a_truncated_prm_shard_is_named_before_ray(assets, tmp_path):
    folder = fake_checkpoint(tmp_path / "ckpt", 1, actor_ranks=1, prm_ranks=1)
    shard = folder / "prm" / "optim_world_size_1_rank_0.pt"
    truncate(shard)
    pattern = (
        rf"^trainer\.resume_from_path: trainer\.resume_mode=resume_path resumes from {esc(folder)}, which has 1 "
        rf"file the resume reads that cannot be opened: {esc(shard)} is not the zip archive torch\.save writes "
        r"\(\d+ bytes; BadZipFile"
    )
    message = fails(config(assets, *resume(folder)), pattern)
    assert "Nothing was deleted" in message and shard.exists()


def test_every_broken_file_of_the_resume_is_named(assets, tmp_path):
    """Missing shards of a rank, a truncated dataloader state: one message, each with its path."""
    folder = fake_checkpoint(tmp_path / "ckpt", 1, actor_ranks=2, prm_ranks=2)
    (folder / "actor" / "extra_state_world_size_2_rank_1.pt").unlink()
    truncate(folder / "data.pt")
    (folder / "prm" / "model_world_size_2_rank_1.pt").write_bytes(b"not a zip")
    ranks = ("trainer.n_gpus_per_node=2", "ray_kwargs.ray_init.num_gpus=2")
    message = fails(config(assets, *resume(folder), *ranks), r"^trainer\.resume_from_path: .*has 3 files the resume")
    assert f"{folder / 'actor' / 'extra_state_world_size_2_rank_1.pt'} is missing" in message
    assert f"{folder / 'data.pt'} is not the zip archive torch.save writes" in message
    assert f"{folder / 'prm' / 'model_world_size_2_rank_1.pt'} is not the zip archive torch.save writes" in message


def test_a_checkpoint_file_cut_inside_its_records(assets, tmp_path):
    """A zip whose central directory survived but whose last record reaches past the end of the file."""
    folder = fake_checkpoint(tmp_path / "ckpt", 1, actor_ranks=1, prm_ranks=1)
    shard = folder / "actor" / "model_world_size_1_rank_0.pt"
    data = shard.read_bytes()
    directory = data.index(b"PK\x01\x02")  # the central directory's first entry
    shard.write_bytes(data[: directory - 64] + data[directory:])  # 64 bytes of the last tensor's data lost
    fails(
        config(assets, *resume(folder)), rf"^trainer\.resume_from_path: .*{esc(shard)} is cut short or corrupt: record "
    )


def test_only_the_contents_the_resume_loads_are_checked(assets, tmp_path):
    folder = fake_checkpoint(tmp_path / "ckpt", 1, actor_ranks=1, prm_ranks=1)
    (folder / "prm" / "optim_world_size_1_rank_0.pt").unlink()
    fails(config(assets, *resume(folder)), r"^trainer\.resume_from_path: .*optim_world_size_1_rank_0\.pt is missing")
    check_inputs(config(assets, *resume(folder), "prime.prm.checkpoint.load_contents=[model,extra]"))


def test_prime_state_may_be_absent_but_not_corrupt(assets, tmp_path):
    folder = fake_checkpoint(tmp_path / "ckpt", 1, actor_ranks=1, prm_ranks=1)
    state = folder / "prime_state.json"
    state.write_text('{"prm_pairwise_ema": ')
    message = fails(config(assets, *resume(folder)), rf"^trainer\.resume_from_path: .*{esc(state)} does not hold")
    assert "JSONDecodeError" in message
    state.write_text('{"prm_pairwise_ema": NaN}')
    fails(config(assets, *resume(folder)), rf".*{esc(state)} holds prm_pairwise_ema = nan, not a finite number")
    state.unlink()  # a checkpoint older than the file: the trainer warns and restarts the gate at 1/2
    (folder / "data.pt").unlink()  # veRL too starts its dataloader afresh without it
    check_inputs(config(assets, *resume(folder)))


def auto_resume(assets, root: Path):
    return config(assets, f"trainer.default_local_dir={root}")


def test_auto_resume_steps_past_an_incomplete_latest_checkpoint(assets, tmp_path, caplog):
    """A crash while step 2 was saved (its PRM shard cut short) after the tracker had moved on: the newest complete
    step resumes instead, the config says so, one line names what was skipped, and nothing is deleted."""
    root = tmp_path / "ckpt"
    complete = fake_checkpoint(root, 1, actor_ranks=1, prm_ranks=1)
    broken = fake_checkpoint(root, 2, actor_ranks=1, prm_ranks=1)
    truncate(broken / "prm" / "model_world_size_1_rank_0.pt")
    cfg = auto_resume(assets, root)
    with caplog.at_level("WARNING"):
        check_inputs(cfg)
    assert (cfg.trainer.resume_mode, cfg.trainer.resume_from_path) == ("resume_path", str(complete))
    (line,) = [r.getMessage() for r in caplog.records if "trainer.resume_mode=auto" in r.getMessage()]
    assert f"the latest checkpoint, {broken}, has 1 file the resume reads that cannot be opened" in line
    assert f"Resuming from the newest complete checkpoint, {complete}" in line and "nothing was deleted" in line
    assert (broken / "prm" / "model_world_size_1_rank_0.pt").exists()


@pytest.mark.parametrize("tracker", ["", "2\x00", "7"])
def test_auto_resume_past_a_torn_tracker_or_a_missing_folder_takes_the_newest_complete_step(assets, tmp_path, tracker):
    root = tmp_path / "ckpt"
    fake_checkpoint(root, 1, actor_ranks=1, prm_ranks=1)
    newest = fake_checkpoint(root, 2, actor_ranks=1, prm_ranks=1)
    (root / "latest_checkpointed_iteration.txt").write_text(tracker)  # a torn write, or a step that is not there
    cfg = auto_resume(assets, root)
    check_inputs(cfg)
    assert (cfg.trainer.resume_mode, cfg.trainer.resume_from_path) == ("resume_path", str(newest))


def test_an_auto_resume_whose_checkpoint_is_whole_is_left_to_verl(assets, tmp_path):
    root = tmp_path / "ckpt"
    fake_checkpoint(root, 1, actor_ranks=1, prm_ranks=1)
    fake_checkpoint(root, 2, actor_ranks=1, prm_ranks=1)
    cfg = auto_resume(assets, root)
    check_inputs(cfg)
    assert cfg.trainer.resume_mode == "auto"
