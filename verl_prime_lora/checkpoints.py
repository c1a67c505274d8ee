"""A run's checkpoints: where they lie, and how a PRIME run saves them, complete or absent.

`trainer.default_local_dir` holds one `global_step_N` folder per saved step and veRL's tracker,
`latest_checkpointed_iteration.txt`, naming the last published step. PRIME adds the PRM (`global_step_N/prm`) and
the step's own state (`global_step_N/prime_state.json`). The checks before Ray (`checks.inputs.resume_checkpoint`)
and the trainer's saves and loads (`prime.trainer`) read the layout here.

A step's checkpoint is `<default_local_dir>/global_step_N/` (the PRM in `prm/` and the step's state first, then
veRL's actor, dataloader and TransferQueue state) and is published when veRL writes the step into
`latest_checkpointed_iteration.txt`, last (atomically: `plugin.patches`). So a crash mid-save leaves the tracker
on the previous step, and `resume_mode=auto` resumes from there (`checks.inputs.resume_checkpoint` also
steps past a torn tracker or an incomplete folder to the newest complete one).

veRL's checkpoint managers, given `trainer.max_actor_ckpt_to_keep = K ≥ 2`, delete the oldest actor folders *before*
they save the new one, leaving step folders without their actor. The PRIME trainers instead save with nothing
removed (`saving_without_removal`) and, once the tracker names the new step, remove whole step folders beyond the
newest K (`remove_old_checkpoints`). A save that runs out of disk stops the run with the folder, the bytes a
checkpoint takes and the bytes free (`CheckpointSpaceError`); the tracker still names the previous step. Imports
nothing of veRL, torch or Ray.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from verl_prime_lora.config.section import write
from verl_prime_lora.config.verl_view import TrainerView

# veRL's tracker of the last published checkpoint step, in `trainer.default_local_dir`
CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"
_STEP_FOLDER = re.compile(r"global_step_(\d+)")


def tracker_text(root: str | os.PathLike) -> str | None:
    """What veRL's tracker in `root` holds, stripped (a step, or whatever a torn write left); None without one."""
    tracker = Path(root) / CHECKPOINT_TRACKER
    return tracker.read_text(errors="replace").strip() if tracker.is_file() else None


def step_folders(root: str | os.PathLike) -> list[tuple[int, Path]]:
    """(N, folder) of every `global_step_N` folder under `root` (veRL's checkpoint folders), by step."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(match.group(1)), path) for path in root.iterdir() if (match := _STEP_FOLDER.fullmatch(path.name))]
    return sorted(found)


def prm_checkpoint_dir(global_step_folder: str) -> str:
    """The PRM nests inside veRL's step folder: `<default_local_dir>/global_step_N/prm`."""
    return os.path.join(global_step_folder, "prm")


def prime_state_file(global_step_folder: str) -> str:
    """The PRIME trainer's own state (the process gate's running mean) beside veRL's:
    `<default_local_dir>/global_step_N/prime_state.json`."""
    return os.path.join(global_step_folder, "prime_state.json")


class CheckpointSpaceError(OSError):
    """A checkpoint save ran out of disk space; the message names the folder and the bytes."""


def checkpoints_to_keep(trainer: TrainerView) -> int | None:
    """How many step checkpoints the run keeps (`trainer.max_actor_ckpt_to_keep`, 1 with veRL's deprecated
    `remove_previous_ckpt_in_save`), None for all."""
    if trainer.remove_previous_ckpt_in_save:
        return 1
    keep = trainer.max_actor_ckpt_to_keep
    return int(keep) if keep else None


@contextlib.contextmanager
def saving_without_removal(trainer: TrainerView) -> Iterator[None]:
    """veRL's managers remove no old checkpoint during the save (set so in the run's `trainer` config node, which
    they read, and set back after it)."""
    saved = {name: getattr(trainer, name) for name in ("max_actor_ckpt_to_keep", "remove_previous_ckpt_in_save")}
    write(trainer, "max_actor_ckpt_to_keep", None)
    write(trainer, "remove_previous_ckpt_in_save", False)
    try:
        yield
    finally:
        for name, value in saved.items():
            write(trainer, name, value)


def remove_old_checkpoints(root: str | Path, keep: int | None, published_step: int) -> list[Path]:
    """Remove the step folders before `published_step` beyond the newest `keep` (None: none removed); returns them."""
    if not keep:
        return []
    older = [path for step, path in step_folders(root) if step < published_step]
    removed = older[: max(len(older) - (keep - 1), 0)]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def no_space_left(exc: BaseException) -> bool:
    """Whether `exc`, or an exception it wraps (a Ray task error keeps the worker's as its cause), is ENOSPC."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return True
        if "No space left on device" in str(exc):
            return True
        exc = getattr(exc, "cause", None) or exc.__cause__ or exc.__context__
    return False


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in Path(folder).rglob("*") if path.is_file())


def space_error(root: str | Path, step: int, exc: BaseException) -> CheckpointSpaceError:
    """The error that stops a run whose step-`step` checkpoint ran out of disk: the folder, the size of the newest
    complete checkpoint (what one needs) and the space free; the tracker still names the previous step."""
    root = Path(root)
    published = tracker_text(root) or ""
    previous = root / f"global_step_{published}" if published.isdigit() else None
    needed = f"; a checkpoint takes {folder_bytes(previous) / 1e9:.2f} GB ({previous.name})" if previous else ""
    free = shutil.disk_usage(root).free if root.exists() else 0
    kept = f"the last complete checkpoint, {previous}, is intact" if previous else "no earlier checkpoint exists"
    return CheckpointSpaceError(
        errno.ENOSPC,
        f"trainer.default_local_dir: no space left on the device of {root} while saving step {step} to "
        f"{root / f'global_step_{step}'}{needed}, {free / 1e9:.2f} GB are free. The run stops; {kept} and "
        f"{CHECKPOINT_TRACKER} still names it, so trainer.resume_mode=auto resumes from there. Free space, or keep "
        f"fewer checkpoints (trainer.max_actor_ckpt_to_keep). The save's error: {type(exc).__name__}: {exc}",
    )


def write_atomically(path: str | os.PathLike, text: str) -> None:
    """`text` into `path`, written beside it and renamed over it: a reader sees the old file or the new one."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    with open(partial, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)
