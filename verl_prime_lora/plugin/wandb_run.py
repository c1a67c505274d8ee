"""One W&B run across a PRIME run's resumes: the id kept beside the checkpoints, given to the job before Ray starts.

veRL 0.9.1's tracker calls `wandb.init(project=, name=, entity=, config=)` with no run id
(`verl/utils/tracking.py`), so every launch makes a W&B run of its own: a 62-hour run resumed twice shows as three
runs of one name. wandb takes the id and the resume mode from `WANDB_RUN_ID` and `WANDB_RESUME` in the environment of
the process that calls `wandb.init` (the TaskRunner). `continue_wandb_run`, in the driver of a PRIME run that logs to
wandb, puts both into the job's runtime env (`ray_kwargs.ray_init.runtime_env.env_vars`), which Ray gives every
process of the job, on one node and on a cluster:

* a run that resumes from a checkpoint continues the W&B run whose id `RUN_ID_FILE` beside that checkpoint's
  `global_step_N` folder holds (written at the run's first launch);
* a run that starts fresh, or resumes a checkpoint without that file, gets a new id, written into
  `trainer.default_local_dir` (replacing an older one: a fresh start in the same folder is a new W&B run);
* `WANDB_RUN_ID` set in the driver's environment wins, and is passed on to the job as well.

`WANDB_RESUME=allow` (unless set): the id's run is continued if W&B has it, made otherwise. The steps between the
resumed checkpoint and the crash run again; W&B keeps the values first logged at a step and drops those logged below
its last step, with a warning, so its curves keep the first run's values there.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from verl_prime_lora.checks.inputs.errors import fail
from verl_prime_lora.config.run import resume_folder, trainer_loggers
from verl_prime_lora.config.section import key_of
from verl_prime_lora.config.verl_view import VerlView

RUN_ID_FILE = "wandb_run_id"
ENV_VARS_KEY = "ray_kwargs.ray_init.runtime_env.env_vars"


def new_run_id() -> str:
    """A W&B run id: 8 characters of [0-9a-z], as wandb's own."""
    digits, value, out = "0123456789abcdefghijklmnopqrstuvwxyz", uuid.uuid4().int, []
    for _ in range(8):
        value, index = divmod(value, 36)
        out.append(digits[index])
    return "".join(out)


def run_id_for(view: VerlView) -> str:
    """The W&B run id of this launch (the module docstring), written beside the checkpoints when new."""
    resumed = resume_folder(view)
    if resumed is not None:
        kept = Path(resumed).parent / RUN_ID_FILE
        if kept.is_file() and kept.read_text().strip():
            return kept.read_text().strip()
    run_id = new_run_id()
    folder = Path(os.path.abspath(str(view.trainer.default_local_dir)))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{RUN_ID_FILE}.tmp"
        partial.write_text(run_id + "\n")
        os.replace(partial, folder / RUN_ID_FILE)
    except OSError as err:
        fail(
            key_of(view.trainer, "default_local_dir"),
            f"the W&B run id cannot be kept in {folder} ({err}): the checkpoints will not be writable there either.",
        )
    return run_id


def continue_wandb_run(config: DictConfig, view: VerlView) -> str | None:
    """With wandb in `trainer.logger`: the run id (and `WANDB_RESUME=allow`) in the job's env vars; the id, or None
    when the run does not log to wandb."""
    if "wandb" not in trainer_loggers(view):
        return None
    run_id = os.environ.get("WANDB_RUN_ID") or run_id_for(view)
    env = {"WANDB_RUN_ID": run_id, "WANDB_RESUME": os.environ.get("WANDB_RESUME", "allow")}
    with open_dict(config):
        for name, value in env.items():
            OmegaConf.update(config, f"{ENV_VARS_KEY}.{name}", value, merge=True, force_add=True)
    return run_id
