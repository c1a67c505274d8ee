"""The CPU preset's OmegaConf resolvers: values of `recipe/cpu.yaml` that follow from the placement.

* `${cpu_weight_sync:${actor_rollout_ref.hybrid_engine}}` — the checkpoint engine. On CPU, veRL's own
  engines that ship weights to a standalone vLLM (`nccl`, `delta_sharded`, ...) need CUDA or RDMA
  libraries, and the split trainer refuses `naive`: so `naive` (in process) when vLLM is colocated with
  the actor (`hybrid_engine: true`), else `cpu_zmq` (`verl_prime_lora.cpu.zmq_checkpoint_engine`).
* `${cpu_ray_gpus:…}` — the fake Ray GPUs a local cluster needs: the trainer pool
  (`trainer.n_gpus_per_node × trainer.nnodes`) plus the standalone rollout pool
  (`actor_rollout_ref.rollout.n_gpus_per_node × .nnodes`, 0 when vLLM is colocated): veRL's resource pools
  always ask for "GPU".

So `+recipe=[prime_lora,cpu]` runs the seed's split layout on CPU without naming either; an explicit
override still wins. The resolvers are registered at `import verl` (our plugin), in every process that may
resolve the config.
"""

from omegaconf import OmegaConf

COLOCATED_BACKEND = "naive"
STANDALONE_BACKEND = "cpu_zmq"  # verl_prime_lora.cpu.zmq_checkpoint_engine.BACKEND (that module imports Ray)


def cpu_weight_sync(hybrid_engine: bool) -> str:
    """The checkpoint engine for a CPU run: `naive` when vLLM is colocated, `cpu_zmq` otherwise."""
    return COLOCATED_BACKEND if bool(hybrid_engine) else STANDALONE_BACKEND


def cpu_ray_gpus(trainer_gpus_per_node: int, trainer_nodes: int, rollout_gpus_per_node: int, rollout_nodes: int) -> int:
    """Fake GPUs of a local Ray cluster: the trainer pool's, plus the standalone rollout pool's."""
    return int(trainer_gpus_per_node) * int(trainer_nodes) + int(rollout_gpus_per_node) * int(rollout_nodes)


RESOLVERS = {"cpu_weight_sync": cpu_weight_sync, "cpu_ray_gpus": cpu_ray_gpus}


def register() -> None:
    for name, resolver in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)
