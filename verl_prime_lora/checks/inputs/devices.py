"""Input check 1 of `checks.inputs`, before Ray starts: devices.

`check_devices`, from the config only:
- with `ray_kwargs.ray_init.num_cpus` or `.num_gpus` set: `ray.init` must start a cluster, not join one.
  Ray joins the cluster `RAY_ADDRESS` names, else `ray_kwargs.ray_init.address`, else (no address, or
  `auto`) the last one `ray start` left on this machine (`ray_current_cluster` in Ray's temp dir), and
  refuses both keys when it joins;
- with `ray_kwargs.ray_init.num_gpus` set: the GPUs the layout asks Ray for fit in it. That is the
  trainer pool (`trainer.n_gpus_per_node` x `trainer.nnodes`), plus the standalone rollout pool of the
  split trainers (`separate_async`, `prime_separate_async`: `actor_rollout_ref.rollout.n_gpus_per_node`
  x `.nnodes`), plus the reward-model pool when `reward.reward_model.enable_resource_pool`;
- with `ray_kwargs.ray_init.num_cpus` set: the CPUs that actors hold for the whole run (`cpus_held`) fit in it,
  else one of them stays pending and veRL hangs without a message. The holders are the TransferQueue (V1
  trainer: its controller (1) and `transfer_queue.backend.SimpleStorage.num_data_storage_units` storage
  actors (1 each); and the placement groups: 3 CPUs per trainer-pool and reward-pool GPU
  (`ResourcePoolManager`'s `max_colocate_count`), 2 per standalone-rollout GPU. Agent-loop and
  reward-loop workers are default Ray actors, which need no free CPU, so
  `actor_rollout_ref.rollout.agent.num_workers` is not counted.

`check_host_cpus`, on this machine: with `ray_kwargs.ray_init.num_cpus` unset (the GPU recipes') and no cluster to
join, `ray.init` starts a cluster with the CPUs Ray counts here (`ray_cpu_count`), and the same CPUs must fit in
those. The driver runs it; the preflight, which may plan on another machine, does not.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import NamedTuple

from omegaconf import DictConfig

from verl_prime_lora.checks.inputs.errors import fail
from verl_prime_lora.config.run import has_standalone_rollout, reward_pool_gpus, rollout_pool_gpus, training_ranks
from verl_prime_lora.config.section import key_of
from verl_prime_lora.config.verl_view import VerlView

# veRL 0.9.1: V1 ResourcePoolManager's max_colocate_count (single_controller/ray/base.py) and the
# standalone rollout's (workers/rollout/replica.py): CPUs of each GPU's placement-group bundle.
CPUS_PER_POOL_GPU = 3
CPUS_PER_STANDALONE_ROLLOUT_GPU = 2
# Where Ray 2.60 reads a container's CPU limit (ray/_private/utils.py, `_get_docker_cpus`'s default files).
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_V1_QUOTA, CGROUP_V1_PERIOD = Path("cpu/cpu.cfs_quota_us"), Path("cpu/cpu.cfs_period_us")
CGROUP_V1_CPUSET, CGROUP_V2_MAX = Path("cpuset/cpuset.cpus"), Path("cpu.max")


class CpuNeed(NamedTuple):
    """The CPUs a run's Ray actors hold for the whole run (`cpus_held`), and who holds them."""

    held: int  # all of them
    units: int  # the TransferQueue's storage actors, 1 CPU each
    holders: str  # who holds them, in words, with the keys that set each part


def check_devices(view: VerlView) -> None:
    """The GPUs and CPUs the layout holds fit in what Ray is given (check 1 of the module docstring)."""
    if not isinstance(view.node, DictConfig):
        return
    _check_no_cluster_to_join(view)
    mode = view.trainer.mode
    split = has_standalone_rollout(view)
    trainer_gpus = training_ranks(view)
    rollout_gpus = rollout_pool_gpus(view)
    reward_gpus = reward_pool_gpus(view)
    parts = [f"{trainer_gpus} for the trainer pool (trainer.n_gpus_per_node x trainer.nnodes)"]
    if split:
        parts.append(
            f"{rollout_gpus} for the standalone rollout of trainer.v1.trainer_mode={mode} "
            "(actor_rollout_ref.rollout.n_gpus_per_node x actor_rollout_ref.rollout.nnodes)"
        )
    if reward_gpus:
        parts.append(f"{reward_gpus} for the reward-model pool (reward.reward_model.n_gpus_per_node x nnodes)")

    num_gpus = view.ray.num_gpus
    total_gpus = trainer_gpus + rollout_gpus + reward_gpus
    if num_gpus is not None and total_gpus > float(num_gpus):
        fail(
            key_of(view.trainer, "n_gpus_per_node"),
            f"the layout needs {total_gpus} GPUs ({' + '.join(parts)}), but Ray gets "
            f"ray_kwargs.ray_init.num_gpus={num_gpus}. Lower trainer.n_gpus_per_node"
            + (" or actor_rollout_ref.rollout.n_gpus_per_node" if split else "")
            + f", or raise ray_kwargs.ray_init.num_gpus to {total_gpus} (on CPU each 'GPU' is one process, "
            "not a device)"
            + ("; one device fits the colocated recipe (+recipe=prime_lora_colocated)." if split else "."),
        )

    num_cpus = view.ray.num_cpus
    if num_cpus is not None:
        need = cpus_held(view)
        more = f"raise {key_of(view.ray, 'num_cpus')} to {need.held}"
        _check_cpus_fit(view, need, float(num_cpus), f"ray_kwargs.ray_init.num_cpus={num_cpus}", more)


def check_host_cpus(view: VerlView) -> None:
    """With `ray_kwargs.ray_init.num_cpus` unset and no cluster to join: the CPUs the layout holds fit in the ones
    Ray counts on this machine (`ray_cpu_count`), where `ray.init` starts the run's cluster."""
    if not isinstance(view.node, DictConfig) or view.ray.num_cpus is not None or _cluster_to_join(view):
        return
    need = cpus_held(view)
    counted, why = ray_cpu_count()
    more = (
        f"set {key_of(view.ray, 'num_cpus')}={need.held} (Ray's CPUs are slots it schedules by, not cores: these "
        f"actors mostly wait on the GPUs), or run where Ray counts {need.held} CPUs "
        f"(e.g. docker run --cpus={need.held})"
    )
    _check_cpus_fit(view, need, counted, f"the {counted} CPUs Ray counts on this machine ({why})", more)


def cpus_held(view: VerlView) -> CpuNeed:
    """The CPUs the run's Ray actors hold for the whole run (the module docstring's accounting)."""
    trainer_gpus, rollout_gpus, reward_gpus = training_ranks(view), rollout_pool_gpus(view), reward_pool_gpus(view)
    pool_cpus = CPUS_PER_POOL_GPU * (trainer_gpus + reward_gpus) + CPUS_PER_STANDALONE_ROLLOUT_GPU * rollout_gpus
    queue = view.transfer_queue
    v1_queue = view.trainer.use_v1 or queue.enable
    units = queue.num_data_storage_units if v1_queue and queue.storage_backend == "SimpleStorage" else 0
    holders = (
        f"the TransferQueue controller (1), {units} storage units ({key_of(queue, 'num_data_storage_units')}), "
        if v1_queue
        else ""
    ) + (
        f"the placement groups' {pool_cpus} ({CPUS_PER_POOL_GPU} per trainer/reward-pool GPU, "
        f"{CPUS_PER_STANDALONE_ROLLOUT_GPU} per standalone rollout GPU)"
    )
    return CpuNeed((1 + units if v1_queue else 0) + pool_cpus, units, holders)


def _check_cpus_fit(view: VerlView, need: CpuNeed, available: float, what: str, more: str) -> None:
    """Fail when `need` exceeds the `available` CPUs (`what`, in words), naming the storage units when fewer of
    them make it fit, and the other way out, `more`."""
    if need.held <= available:
        return
    problem = (
        f"the run holds {need.held} CPUs ({need.holders}), more than {what}: one actor would stay pending and veRL "
        "hang without a message."
    )
    room = int(available) - (need.held - need.units)
    if need.units > 1 and room >= 1:
        fail(
            key_of(view.transfer_queue, "num_data_storage_units"),
            f"is {need.units}: {problem} Set it <= {room} or {more}.",
        )
    num_cpus = view.ray.num_cpus
    fail(
        key_of(view.ray, "num_cpus"),
        f"is {'unset' if num_cpus is None else num_cpus}: {problem} {more[0].upper()}{more[1:]}.",
    )


def ray_cpu_count() -> tuple[int, str]:
    """The CPUs Ray counts on this machine when `ray.init` starts a cluster without `num_cpus`, and why, as Ray
    2.60 counts them (ray/_private/utils.py, `get_num_cpus` and `_get_docker_cpus`): the machine's logical CPUs
    (`multiprocessing.cpu_count()`, which ignores the process's CPU affinity, e.g. `taskset`), replaced by a
    container's limit when one is set and differs: the cgroup CPU quota (v1 `cpu.cfs_quota_us / cpu.cfs_period_us`,
    else v2 `cpu.max`; a quota of 0 counts as 1) and the v1 cpuset's size, the smaller of the two, truncated to a
    whole number. With `RAY_USE_MULTIPROCESSING_CPU_COUNT` set, Ray counts the logical CPUs only."""
    logical = multiprocessing.cpu_count()
    if os.environ.get("RAY_USE_MULTIPROCESSING_CPU_COUNT"):
        return logical, f"the machine's {logical} logical CPUs, as RAY_USE_MULTIPROCESSING_CPU_COUNT is set"
    limits = [limit for limit in (_cgroup_quota(), _cgroup_cpuset()) if limit is not None]
    if not limits or min(limits)[0] == logical:
        return logical, f"the machine's {logical} logical CPUs, no container limit"
    cpus, source = min(limits)
    return int(cpus), f"the container's limit: {source}; the machine has {logical} logical CPUs"


def _cgroup_quota() -> tuple[float, str] | None:
    """(CPUs, in words) of the cgroup CPU quota; None without one, or unreadable (Ray then ignores it too)."""
    quota, period, cpu_max = CGROUP_ROOT / CGROUP_V1_QUOTA, CGROUP_ROOT / CGROUP_V1_PERIOD, CGROUP_ROOT / CGROUP_V2_MAX
    try:
        if quota.exists() and period.exists():
            values = (quota.read_text().strip(), period.read_text().strip())
            source = f"{quota} / {period} = {' / '.join(values)}"
        elif cpu_max.exists():
            values = tuple(cpu_max.read_text().split())
            source = f"{cpu_max}: {' '.join(values)}"
            if len(values) == 2 and not all(value.isnumeric() for value in values):
                return None  # "max 100000": no quota
        else:
            return None
        limit, window = values
        cpus = float(limit) / float(window)
    except (OSError, ValueError, ZeroDivisionError):
        return None
    if cpus < 0:
        return None  # v1's -1: no quota
    return cpus or 1.0, f"a CPU quota of {cpus:g} ({source})"


def _cgroup_cpuset() -> tuple[float, str] | None:
    """(CPUs, in words) of the cgroup v1 cpuset (`0-3,8`: 5 CPUs); None without one."""
    path = CGROUP_ROOT / CGROUP_V1_CPUSET
    try:
        text = path.read_text().strip()
        count = 0
        for part in text.split(","):
            first, _, last = part.partition("-")
            count += int(last or first) - int(first) + 1
    except (OSError, ValueError):
        return None
    return float(count), f"the cpuset {text} ({path})"


def _check_no_cluster_to_join(view: VerlView) -> None:
    """Resources given to `ray.init` need a cluster of its own: Ray refuses them when it joins a running one."""
    given = [key_of(view.ray, name) for name in ("num_cpus", "num_gpus") if getattr(view.ray, name) is not None]
    joined = _cluster_to_join(view) if given else None
    if joined is None:
        return
    address, source = joined
    fail(
        given[0],
        f"is set, but ray.init would join the running Ray cluster at {address} ({source}), and Ray refuses "
        "num_cpus and num_gpus when it joins one. Start this run on a cluster of its own with RAY_ADDRESS=local "
        "in the environment, or join that cluster with " + " ".join(f"{key}=null" for key in given) + ".",
    )


def _cluster_to_join(view: VerlView) -> tuple[str, str] | None:
    """(address, where it comes from) of the Ray cluster `ray.init` would join, in Ray's own order; None
    when it would start one."""
    from_env = os.environ.get("RAY_ADDRESS") or None
    address = from_env or view.ray.address
    if address == "local":
        return None
    if address not in (None, "auto"):
        return str(address), "RAY_ADDRESS" if from_env else key_of(view.ray, "address")
    from ray._common.utils import get_ray_address_file

    record = Path(get_ray_address_file(view.ray.temp_dir))
    recorded = record.read_text().strip() if record.is_file() else ""
    return (recorded, f"recorded by `ray start` in {record}") if recorded else None
