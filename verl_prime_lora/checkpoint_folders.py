"""Where a run's checkpoints lie: veRL's `global_step_N` folders and its tracker, and PRIME's parts inside a step.

`trainer.default_local_dir` holds one `global_step_N` folder per saved step and veRL's tracker,
`latest_checkpointed_iteration.txt`, naming the last published step. PRIME adds the PRM (`global_step_N/prm`) and
the trainer's own state (`global_step_N/prime_state.json`). The checks before Ray (`checks.inputs.
resume_checkpoint`) and the trainer's saves and loads (`integration.trainer`, `integration.checkpoint_files`) read
the layout here. Imports nothing of veRL, torch or Ray.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

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
