"""The CPU preset's weight sync, chosen from the placement: `${cpu_weight_sync:${actor_rollout_ref.hybrid_engine}}`.

On CPU, veRL's own checkpoint engines that ship weights to a standalone vLLM (`nccl`, `delta_sharded`,
...) need CUDA or RDMA libraries, and the split trainer refuses `naive`. So `recipe/cpu.yaml` sets
`actor_rollout_ref.rollout.checkpoint_engine.backend` through this OmegaConf resolver: `naive` (in
process) when vLLM is colocated with the actor (`hybrid_engine: true`), else `cpu_zmq`
(`verl_prime_lora.cpu.zmq_checkpoint_engine`). `+recipe=[prime_lora,cpu]` thus runs the seed's split
layout on CPU without naming the engine; an explicit `...checkpoint_engine.backend=...` still wins.

The resolver is registered at `import verl` (our plugin), in every process that may resolve the config.
"""

from omegaconf import OmegaConf

RESOLVER = "cpu_weight_sync"
COLOCATED_BACKEND = "naive"
STANDALONE_BACKEND = "cpu_zmq"  # verl_prime_lora.cpu.zmq_checkpoint_engine.BACKEND (that module imports Ray)


def cpu_weight_sync(hybrid_engine: bool) -> str:
    """The checkpoint engine for a CPU run: `naive` when vLLM is colocated, `cpu_zmq` otherwise."""
    return COLOCATED_BACKEND if bool(hybrid_engine) else STANDALONE_BACKEND


def register() -> None:
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, cpu_weight_sync)
