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
- with `ray_kwargs.ray_init.num_cpus` set: the CPUs that actors hold for the whole run fit in it, else
  one of them stays pending and veRL hangs without a message. The holders are the TransferQueue (V1
  trainer: its controller (1) and `transfer_queue.backend.SimpleStorage.num_data_storage_units` storage
  actors (1 each); and the placement groups: 3 CPUs per trainer-pool and reward-pool GPU
  (`ResourcePoolManager`'s `max_colocate_count`), 2 per standalone-rollout GPU. Agent-loop and
  reward-loop workers are default Ray actors, which need no free CPU, so
  `actor_rollout_ref.rollout.agent.num_workers` is not counted.
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig

from verl_prime_lora.checks.inputs.errors import fail
from verl_prime_lora.config.run import has_standalone_rollout, reward_pool_gpus, rollout_pool_gpus, training_ranks
from verl_prime_lora.config.section import key_of
from verl_prime_lora.config.verl_view import VerlView

# veRL 0.9.1: V1 ResourcePoolManager's max_colocate_count (single_controller/ray/base.py) and the
# standalone rollout's (workers/rollout/replica.py): CPUs of each GPU's placement-group bundle.
CPUS_PER_POOL_GPU = 3
CPUS_PER_STANDALONE_ROLLOUT_GPU = 2


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
    if num_cpus is None:
        return
    pool_cpus = CPUS_PER_POOL_GPU * (trainer_gpus + reward_gpus) + CPUS_PER_STANDALONE_ROLLOUT_GPU * rollout_gpus
    queue = view.transfer_queue
    units_key = key_of(queue, "num_data_storage_units")
    v1_queue = view.trainer.use_v1 or queue.enable
    units = queue.num_data_storage_units if v1_queue and queue.storage_backend == "SimpleStorage" else 0
    held = (1 + units if v1_queue else 0) + pool_cpus
    if held <= float(num_cpus):
        return
    holders = (f"the TransferQueue controller (1), {units} storage units ({units_key}), " if v1_queue else "") + (
        f"the placement groups' {pool_cpus} ({CPUS_PER_POOL_GPU} per trainer/reward-pool GPU, "
        f"{CPUS_PER_STANDALONE_ROLLOUT_GPU} per standalone rollout GPU)"
    )
    problem = (
        f"the run holds {held} CPUs ({holders}), more than ray_kwargs.ray_init.num_cpus={num_cpus}: one actor "
        "would stay pending and veRL hang without a message."
    )
    room = int(float(num_cpus)) - (held - units)
    if units > 1 and room >= 1:
        fail(units_key, f"is {units}: {problem} Set it <= {room} or raise ray_kwargs.ray_init.num_cpus to {held}.")
    fail(key_of(view.ray, "num_cpus"), f"is {num_cpus}: {problem} Raise it to {held}.")


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
