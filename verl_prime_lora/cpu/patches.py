"""Every monkeypatch the CPU platform needs, in one place.

`apply_all()` runs at `import verl` (verl_prime_lora/cpu/register.py) and in vLLM's own processes
(verl_prime_lora/cpu/vllm_plugin.py), only when the CPU platform is selected, so on a CUDA machine none of these
runs. A patch of a module is applied where that module is imported (`MODULE_PATCHES`,
`verl_prime_lora.patching.when_each_imported`). Each patch is idempotent (it marks what it wrapped) and names the
veRL / vLLM function it works around. Nothing is edited on disk.
"""

import os

import torch
import torch.distributed

from verl_prime_lora.patching import ModulePatch, is_patched, mark, when_each_imported, wrap


def dedupe_process_group_backend() -> None:
    """De-duplicate the `cpu:gloo,cpu:gloo` backend string before torch parses it.

    verl/utils/distributed.py build `f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"`;
    on the CPU platform that is `cpu:gloo,cpu:gloo`, which `torch.distributed.init_process_group`
    rejects ("Duplicate device type cpu in backend string"). The wrapper keeps the first entry per
    device type.
    """

    def deduplicated(original):
        def init_process_group(backend=None, *args, **kwargs):
            if isinstance(backend, str) and "," in backend:
                by_device: dict[str, str] = {}
                for entry in backend.split(","):
                    by_device.setdefault(entry.split(":", 1)[0], entry)
                backend = ",".join(by_device.values())
            return original(backend, *args, **kwargs)

        return init_process_group

    wrap(torch.distributed, "init_process_group", deduplicated)


def select_cuda_registered_engines() -> None:
    """Let veRL's FSDP training engines be found for device `cpu`.

    verl/workers/engine/fsdp/transformer_impl.py register the FSDP/FSDP2 engines for
    `device=["cuda", "npu"]` only, so `EngineRegistry.get_engine_cls` (verl/workers/engine/base.py)
    raises "No engine registered for device='cpu'". The engines are device-agnostic (they go through
    `get_device_id()` / `get_torch_device()`, i.e. this platform), so engine selection is pointed at
    the cuda registrations through veRL's own override, VERL_ENGINE_DEVICE (base.py), instead of
    importing every engine at `import verl` to re-register it. An explicit user value is kept.
    """
    os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")


def keep_plain_vllm_linear_weights(vllm_layer_utils) -> None:
    """Keep vLLM-CPU's linear weights as plain parameters, so veRL can overwrite them in place.

    vllm/model_executor/layers/linear.py (`UnquantizedLinearMethod.process_weights_after_loading`)
    calls `dispatch_cpu_unquantized_gemm(layer, remove_weight=True)`
    (vllm/model_executor/layers/utils.py), which packs the weight into a oneDNN/sgl-kernel handle
    and replaces `layer.weight` with an empty Parameter. veRL's full-weight sync then calls
    `model.load_weights(...)` on the live engine and fails with "'Parameter' object has no attribute
    'weight_loader'", and the run hangs (full-parameter training, and LoRA's base-weight sync with
    `load_format=dummy`). Here 2-D linear layers compute with `F.linear` on their own, live weight;
    other layers keep vLLM's dispatch. The price, losing oneDNN weight packing, is nothing at the
    scale one trains on a CPU.

    Applied to `vllm.model_executor.layers.utils` where it is imported.
    """

    def plain_linear(original):
        def dispatch_cpu_unquantized_gemm(layer, remove_weight):
            if layer.weight.ndim != 2 or layer.weight.is_meta:
                return original(layer, remove_weight)
            layer.cpu_linear = torch.nn.functional.linear
            return None

        return dispatch_cpu_unquantized_gemm

    wrap(vllm_layer_utils, "dispatch_cpu_unquantized_gemm", plain_linear)


def unpinned_offload_for_forward_only_engines(transformer_impl) -> None:
    """Let veRL build forward-only FSDP2 engines (a frozen reference model) on the CPU platform.

    verl/workers/engine/fsdp/transformer_impl.py wraps every forward-only (or offloading)
    FSDP2 engine with `CPUOffloadPolicy(pin_memory=True)`; pinning host memory needs an accelerator,
    so building the engine fails on a machine without one. On CPU the "offload" target is the compute
    device itself, so the policy is kept and only `pin_memory` is turned off.
    """
    original = transformer_impl.CPUOffloadPolicy
    if original is None or is_patched(original):
        return

    class CPUOffloadPolicy(original):
        def __init__(self, pin_memory: bool = True, **kwargs):
            super().__init__(pin_memory=False, **kwargs)

    transformer_impl.CPUOffloadPolicy = mark(CPUOffloadPolicy)


# Seconds between two looks of veRL's V1 replay buffer at TransferQueue (see `poll_replay_buffer_often`).
REPLAY_BUFFER_POLL_S = 0.2


def poll_replay_buffer_often(replay_buffer) -> None:
    """Let veRL's V1 replay buffer notice finished rollouts within 0.2 s instead of 2 s.

    `ReplayBuffer.sample` (verl/trainer/ppo/v1/replay_buffer.py) re-reads every rollout status from
    TransferQueue (`tq.kv_list()`) and, while the batch is incomplete, sleeps `self.poll_interval`:
    2.0 s by default, and `trainer_base._build_replay_buffer` never passes one, for
    the built-in buffer or a custom sampler. Training batches and validation passes therefore end on the next
    multiple of 2 s after their rollouts finish, which a step of seconds feels and a GPU step of minutes does
    not. 0.2 s keeps the wait short without re-listing TransferQueue many times a second on two cores (what it
    bought: docs/cpu.md). Only the default changes: an explicit `poll_interval` is kept.
    """
    # `poll_interval` is the 6th argument after self: trainer_mode, trainer_config, max_off_policy_threshold,
    # max_off_policy_strategy, sampler_kwargs, poll_interval
    poll_interval_position = 5

    def polling_often(original):
        def __init__(self, *args, **kwargs):
            if len(args) <= poll_interval_position and "poll_interval" not in kwargs:
                kwargs["poll_interval"] = REPLAY_BUFFER_POLL_S
            original(self, *args, **kwargs)

        return __init__

    wrap(replay_buffer.ReplayBuffer, "__init__", polling_often)


# Longest a vLLM shared-memory queue reader sleeps before it looks again (see `sleep_in_vllm_queue_waits`).
VLLM_QUEUE_POLL_MS = 1


def sleep_in_vllm_queue_waits(shm_broadcast) -> None:
    """Let vLLM's engine core and worker sleep on their shared-memory queues instead of spinning.

    A reader of vLLM's `MessageQueue` (the worker reading the scheduler's batch, the engine core reading the
    worker's result) spins on `os.sched_yield()` for a second after each message (`SpinCondition`,
    `busy_loop_s=1`, no setting), so while a batch is generated both processes keep a core busy waiting for
    each other, on the cores the agent-loop worker, the vLLM server and the trainer need (docs/cpu.md, "Where
    a CPU step goes"). Here a reader never spins: it waits on the queue's write notification (a zmq poll) for
    at most 1 ms, then looks at the buffer again. Waiting on the notification alone is not enough: some are
    missed, and the reader then sleeps until vLLM's 60 s warning timeout. On a GPU the spin is what keeps a
    decode step's latency in microseconds; this runs on the CPU platform only.
    """

    def sleeping(original):
        def wait(self, timeout_ms=None):
            self.busy_loop_s = 0
            poll_ms = VLLM_QUEUE_POLL_MS if timeout_ms is None else min(timeout_ms, VLLM_QUEUE_POLL_MS)
            return original(self, timeout_ms=poll_ms)

        return wait

    wrap(shm_broadcast.SpinCondition, "wait", sleeping)


# module -> its patch, applied where the module is imported (`patching.when_each_imported`)
MODULE_PATCHES = {
    "vllm.model_executor.layers.utils": ModulePatch(keep_plain_vllm_linear_weights, ("dispatch_cpu_unquantized_gemm",)),
    "vllm.distributed.device_communicators.shm_broadcast": ModulePatch(
        sleep_in_vllm_queue_waits, ("SpinCondition.wait",)
    ),
    "verl.workers.engine.fsdp.transformer_impl": ModulePatch(
        unpinned_offload_for_forward_only_engines, ("CPUOffloadPolicy",)
    ),
    "verl.trainer.ppo.v1.replay_buffer": ModulePatch(poll_replay_buffer_often, ("ReplayBuffer.__init__",)),
}


def apply_all() -> None:
    """The CPU platform's patches, in this process: at once where nothing needs importing, else on import."""
    dedupe_process_group_backend()
    select_cuda_registered_engines()
    when_each_imported(MODULE_PATCHES)
