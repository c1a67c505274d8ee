"""Input check 6 of `checks.inputs`, before Ray starts: the checkpoint being resumed.

`check_resume_checkpoint`, with `trainer.resume_mode` auto (the
latest `global_step_N` under `trainer.default_local_dir`, if any) or `resume_path`: veRL's FSDP
checkpoints hold one shard per rank (`model_world_size_W_rank_R.pt`) and reload only on W ranks, the
actor's as the PRM's; a checkpoint of another W is refused, naming both. For a PRIME trainer the step
folder must hold the PRM's state (`prm/`), else the PRM would restart from its init while the policy
resumes. Then every file the resume reads is opened (`_resume_file_problems`): for each FSDP part
(actor, PRM) and rank R < W the `model_` / `optim_` / `extra_state_world_size_W_rank_R.pt` its
`checkpoint.load_contents` names, the dataloader state `data.pt` when present, and `prime_state.json`
when present (older checkpoints lack it). A `.pt` file must be a torch.save zip archive whose central
directory reads (a truncated file loses it) and whose records fit in the file; its tensor data is not
read. All broken files are named in one message; nothing is deleted. With `resume_mode=auto`, a latest
checkpoint that cannot resume (a torn tracker, the step folder it names missing, or any problem above but
the rank count) gives way to the newest complete `global_step_N`: the config is set to `resume_path` of it
and one line names what was skipped.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import struct
import zipfile
from pathlib import Path
from typing import Any

from verl_prime_lora.checkpoints import (
    CHECKPOINT_TRACKER,
    prime_state_file,
    prm_checkpoint_dir,
    step_folders,
    tracker_text,
)
from verl_prime_lora.checks.inputs.errors import fail
from verl_prime_lora.config.run import is_prime_trainer, resume_folder, resume_from, training_ranks
from verl_prime_lora.config.section import key_of
from verl_prime_lora.config.verl_view import VerlView

logger = logging.getLogger(__name__)


_SHARD = re.compile(r"model_world_size_(\d+)_rank_0\.pt")
# veRL's FSDPCheckpointManager.load_checkpoint: the file each `checkpoint.load_contents` entry reads, per rank.
FSDP_FILES = {"model": "model", "optimizer": "optim", "extra": "extra_state"}
FSDP_STRATEGIES = ("fsdp", "fsdp2")
ZIP_LOCAL_HEADER_BYTES = 30  # a zip record's fixed local header, before its name, extra field and data
ZIP_LOCAL_HEADER_MAGIC = b"PK\x03\x04"
MAX_FILES_NAMED = 8


def _shard_world_sizes(folder: Path) -> list[int]:
    """The world sizes W of the `model_world_size_W_rank_0.pt` shards in a veRL FSDP checkpoint folder."""
    if not folder.is_dir():
        return []
    return sorted(int(match.group(1)) for name in os.listdir(folder) if (match := _SHARD.fullmatch(name)))


def _record_problem(handle: Any, record: zipfile.ZipInfo, size: int) -> str | None:
    """Why one record of a zip archive is not where its central directory says, whole; None if it is. Reads the
    record's local header only (Python's zipfile shifts the offsets of an archive that lost bytes before its
    directory, so a record may then point before the file's start or at other bytes)."""
    offset = record.header_offset
    header = b""
    if offset >= 0:
        handle.seek(offset)
        header = handle.read(ZIP_LOCAL_HEADER_BYTES)
    if len(header) < ZIP_LOCAL_HEADER_BYTES or header[:4] != ZIP_LOCAL_HEADER_MAGIC:
        return f"is cut short or corrupt: record {record.filename} has no header at byte {offset}"
    name_bytes, extra_bytes = struct.unpack("<HH", header[26:30])
    end = offset + ZIP_LOCAL_HEADER_BYTES + name_bytes + extra_bytes + record.compress_size
    if end > size:
        return f"is cut short: record {record.filename} ends at byte {end}, the file has {size}"
    return None


def _torch_archive_problem(path: Path) -> str | None:
    """Why `path` is not a torch.save archive that torch.load can open, from its zip central directory and the
    records' headers only (no tensor data is read): missing, not a zip archive (a truncated file loses the
    directory at its end), no `data.pkl` record, or a record not whole in the file. None when none of these."""
    if not path.is_file():
        return "is missing"
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as archive:
            records = archive.infolist()
            if not any(record.filename.rsplit("/", 1)[-1] == "data.pkl" for record in records):
                return "is a zip archive without data.pkl, not a torch.save archive"
            with path.open("rb") as handle:
                return next((problem for record in records if (problem := _record_problem(handle, record, size))), None)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        return f"is not the zip archive torch.save writes ({size} bytes; {type(exc).__name__}: {exc})"


def _prime_state_problem(path: Path) -> str | None:
    """Why a present `prime_state.json` cannot be read as the trainer reads it (`_load_prime_state`); None if it can."""
    try:
        value = float(json.loads(path.read_text())["prm_pairwise_ema"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"does not hold a JSON object with a number prm_pairwise_ema ({type(exc).__name__}: {exc})"
    if not math.isfinite(value):
        return f"holds prm_pairwise_ema = {value}, not a finite number"
    return None


def _reloaded(view: VerlView, name: str) -> tuple[str, Any]:
    """(its engine's strategy, its `checkpoint.load_contents`) of a part of a checkpoint that the trainer reloads:
    the `actor` or the `PRM`."""
    if name == "actor":
        return view.actor.strategy, view.actor.load_contents
    return view.prm.engine.strategy, view.prm.load_contents


def _resume_file_problems(view: VerlView, folder: str, parts: list[tuple[str, Path]]) -> list[tuple[Path, str]]:
    """(path, problem) for each file of `folder` that the resume reads and cannot open (see module doc).

    `parts`: (`actor` or `PRM`, folder) of the checkpoints the trainer reloads on `training_ranks` ranks."""
    ranks = training_ranks(view)
    files = []
    for name, shards in parts:
        strategy, contents = _reloaded(view, name)
        if strategy not in FSDP_STRATEGIES:
            continue  # another engine's checkpoint layout
        for content in list(FSDP_FILES) if contents is None else contents:
            if content in FSDP_FILES:
                prefix = FSDP_FILES[content]
                files += [shards / f"{prefix}_world_size_{ranks}_rank_{rank}.pt" for rank in range(ranks)]
    data = Path(folder) / "data.pt"  # veRL's dataloader state: read when present (trainer_base._load_checkpoint)
    if data.exists():
        files.append(data)
    problems = [(path, problem) for path in files if (problem := _torch_archive_problem(path)) is not None]
    state = Path(prime_state_file(folder))
    if is_prime_trainer(view) and state.exists() and (problem := _prime_state_problem(state)) is not None:
        problems.append((state, problem))
    return problems


def _checkpoint_problems(view: VerlView, folder: str, mode: str) -> list[str]:
    """What keeps `folder` from resuming this run, each a phrase after "`folder` ...": its PRM state missing, or the
    files the resume reads that do not open. A checkpoint written by another rank count fails at once, naming both
    counts: no other checkpoint of the run would load either."""
    ranks = training_ranks(view)
    parts = [("actor", Path(folder) / "actor")]
    problems = []
    if is_prime_trainer(view):
        prm = Path(prm_checkpoint_dir(folder))
        if not prm.is_dir():
            problems.append(
                f"holds no PRM state ({prm}): the PRM would restart from its initial weights while the policy resumes"
            )
        parts.append(("PRM", prm))
    for name, shards in parts:
        sizes = _shard_world_sizes(shards)
        if sizes and ranks not in sizes:
            fail(
                key_of(view.trainer, "n_gpus_per_node"),
                f"trainer.resume_mode={mode} resumes from {folder}, whose {name} was saved by "
                f"{' or '.join(map(str, sizes))} ranks ({shards}/model_world_size_{sizes[0]}_rank_*.pt); this run has "
                f"{ranks} (trainer.n_gpus_per_node x trainer.nnodes). veRL's FSDP checkpoints reload only on the "
                f"ranks that wrote them: resume with trainer.n_gpus_per_node x trainer.nnodes = {sizes[0]}, or "
                "start afresh from merged weights (python -m verl.model_merger; trainer.resume_mode=disable).",
            )
    files = _resume_file_problems(view, folder, parts)
    if files:
        named = [f"{path} {problem}" for path, problem in files[:MAX_FILES_NAMED]]
        if len(files) > MAX_FILES_NAMED:
            named.append(f"and {len(files) - MAX_FILES_NAMED} more")
        problems.append(
            f"has {len(files)} file{'s' if len(files) > 1 else ''} the resume reads that cannot be opened: "
            + "; ".join(named)
        )
    return problems


def _published_folder(local_dir: str, text: str) -> tuple[int | None, str | None, str | None]:
    """(the step veRL's tracker, holding `text`, publishes, and its folder, or None, None; why it names no folder
    that exists, or None)."""
    tracker = Path(local_dir) / CHECKPOINT_TRACKER
    if not text.isdigit():
        return None, None, f"{tracker} holds {text!r}, not a step (a save that stopped while publishing)"
    folder = Path(local_dir) / f"global_step_{int(text)}"
    if not folder.is_dir():
        return None, None, f"{tracker} names step {text}, and {folder} is missing"
    return int(text), str(folder), None


def _fall_back_to_a_complete_checkpoint(view: VerlView, local_dir: str, skipped: str, below: int | None) -> None:
    """`trainer.resume_mode=auto` whose latest checkpoint cannot resume: resume from the newest complete step
    folder before step `below` (any, when the tracker names none) instead (the config is set to `resume_path` of
    it), with one line naming what was skipped; nothing is deleted. Fails when no folder is complete."""
    for step, folder in reversed(step_folders(local_dir)):
        if (below is not None and step >= below) or _checkpoint_problems(view, str(folder), "auto"):
            continue
        resume_from(view, str(folder))
        logger.warning(
            "trainer.resume_mode=auto: %s. Resuming from the newest complete checkpoint, %s, instead "
            "(trainer.resume_from_path); nothing was deleted.",
            skipped,
            folder,
        )
        return
    fail(
        key_of(view.trainer, "default_local_dir"),
        f"trainer.resume_mode=auto: {skipped}, and no other step folder of {local_dir} is complete. Nothing was "
        "deleted. Resume from a checkpoint of your own (trainer.resume_mode=resume_path "
        "trainer.resume_from_path=.../global_step_N), or start afresh (trainer.resume_mode=disable).",
    )


def check_resume_checkpoint(view: VerlView) -> None:
    """Refuse a resume whose checkpoint cannot load on this run's ranks, lacks the PRM, or has a file the resume
    reads that does not open (see module doc). Under `trainer.resume_mode=auto`, a latest checkpoint that cannot
    resume (a torn tracker, a folder it names that is missing or incomplete) gives way to the newest complete one."""
    mode = view.trainer.resume_mode
    if mode == "auto":
        local_dir = os.path.abspath(view.trainer.default_local_dir)
        text = tracker_text(local_dir)
        if text is None:
            return  # a fresh start (veRL's lookup would print that the tracker is missing)
        step, folder, why = _published_folder(local_dir, text)
        if folder is None:
            _fall_back_to_a_complete_checkpoint(view, local_dir, why, below=None)
        elif problems := _checkpoint_problems(view, folder, mode):
            skipped = f"the latest checkpoint, {folder}, {problems[0]}"
            _fall_back_to_a_complete_checkpoint(view, local_dir, skipped, below=step)
        return
    folder = resume_folder(view)
    if folder is None or not os.path.isdir(folder):
        return  # a fresh start, or a resume_path veRL itself refuses
    problems = _checkpoint_problems(view, folder, mode)
    if problems:
        fail(
            key_of(view.trainer, "resume_from_path"),
            f"trainer.resume_mode={mode} resumes from {folder}, which {'; and '.join(problems)}. Nothing was "
            "deleted. Resume from another checkpoint (trainer.resume_from_path=.../global_step_N), or start afresh "
            "(trainer.resume_mode=disable).",
        )
