"""Checks of a run's inputs in the driver, before Ray starts: the files, folders and devices a config names.

`check_inputs(config)` raises `InputCheckError` (a `ValueError` whose message starts with the config key,
and names the path or row) for inputs that veRL 0.9.1 would otherwise reject only minutes later inside a
Ray actor, or on which it hangs. It runs for every PRIME `main_ppo` run with this plugin, from the driver-side
wrapper of veRL's `validate_config` (`plugin.patches.install_driver_validation`), in three parts: `check_devices`
(on the config's `VerlView`) before the config checks of `config_checks.validate_prime_config` (whose micro-batch
arithmetic assumes the devices are there, so a missing device is blamed as such), `check_host_cpus` and
`check_files_and_code` (2-6) after them, on the `RunConfig` they return. In order,
one module each:

1. `devices`: the devices and CPUs the layout asks Ray for (`check_devices`, config only), and, with
   `ray_kwargs.ray_init.num_cpus` unset, the CPUs Ray counts on this machine (`check_host_cpus`);
2. `model_folders`: the actor's and the PRM's model folders hold a config, weights and a tokenizer;
3. `data_files`: every train and validation file exists, has rows and the columns veRL reads;
4. `reward_dry_run`: the reward function scores the first train row, with the keys the run reads;
5. `agent_loops`: every agent loop a PRIME run can use returns one output per session;
6. `resume_checkpoint`: the checkpoint a run resumes from can be resumed, on this many ranks.

Each module's docstring states its check in full. Nothing here imports torch or Ray at module level; all but the
reward dry run take well under a second.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from verl_prime_lora.checks.config_checks import check_prm_tokenizer
from verl_prime_lora.checks.inputs.agent_loops import check_agent_loops
from verl_prime_lora.checks.inputs.data_files import check_data_files
from verl_prime_lora.checks.inputs.devices import check_devices, check_host_cpus
from verl_prime_lora.checks.inputs.errors import InputCheckError
from verl_prime_lora.checks.inputs.model_folders import check_model_paths
from verl_prime_lora.checks.inputs.resume_checkpoint import check_resume_checkpoint
from verl_prime_lora.checks.inputs.reward_dry_run import dry_run_reward
from verl_prime_lora.config import RunConfig, run_config
from verl_prime_lora.config.run import is_prime_trainer
from verl_prime_lora.config.verl_view import verl_view

__all__ = ["InputCheckError", "check_devices", "check_files_and_code", "check_host_cpus", "check_inputs"]


def check_inputs(config: Any) -> None:
    """Run every check (see the module docstring) on a composed config; raise `InputCheckError` on the first
    failure."""
    view = verl_view(config)
    check_devices(view)
    check_host_cpus(view)
    check_files_and_code(run_config(config, view))


def check_files_and_code(run: RunConfig) -> None:
    """Checks 2-6: model folders, data files, reward dry run, agent loops, the resumed checkpoint."""
    view = run.verl
    if not isinstance(view.node, DictConfig):
        return
    check_model_paths(view)
    if is_prime_trainer(view):
        check_prm_tokenizer(view)
    first_row = check_data_files(view)
    if first_row is not None:
        dry_run_reward(run, *first_row)
    if is_prime_trainer(view):
        check_agent_loops(view)
    check_resume_checkpoint(view)
