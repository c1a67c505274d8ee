"""The colocated weight sync's socket is each run's own (`plugin/patches.py`, patch 7).

Two runs on one machine each start a Ray cluster, whose first job id is `01000000` in both: veRL's socket name
(job id, replica, rank) is then the same for both, and one run's actor sends its weights into the other's vLLM. The
sender's side is faked here with veRL's format (its source is pinned by tests/verl_surface/test_verl_canaries.py);
the receiver's is veRL's own `_get_zmq_handle`, in a vLLM worker process that inherits the environment its server
set.
"""

import os
import types

import pytest
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension

from verl_prime_lora.plugin import patches

JOB = "01000000"  # every fresh Ray cluster's first job


class Context:
    def __init__(self, node_id: str):
        self.node_id = node_id

    def get_job_id(self) -> str:
        return JOB

    def get_node_id(self) -> str:
        return self.node_id


def fake_verl_modules() -> tuple[types.ModuleType, types.ModuleType]:
    """`vllm_rollout` and `vllm_async_server` as far as the socket goes, as veRL 0.9.1 has them."""
    import ray

    class ServerAdapter:
        def __init__(self, replica_rank: int = 0, local_rank: int = 0):
            job_id = ray.get_runtime_context().get_job_id()
            self.zmq_handle = f"ipc:///tmp/rl-colocate-zmq-{job_id}-replica-{replica_rank}-rank-{local_rank}.sock"

    class vLLMHttpServer:
        def __init__(self, replica_rank: int = 0):
            os.environ["VERL_REPLICA_RANK"] = str(replica_rank)
            os.environ["VERL_RAY_JOB_ID"] = ray.get_runtime_context().get_job_id()

    return types.SimpleNamespace(ServerAdapter=ServerAdapter), types.SimpleNamespace(vLLMHttpServer=vLLMHttpServer)


def one_run(monkeypatch, node_id: str, patched: bool) -> tuple[str, str]:
    """(the actor's socket, the vLLM worker's socket) of a run whose Ray cluster has node `node_id`."""
    import ray

    monkeypatch.setattr(ray, "get_runtime_context", lambda: Context(node_id))
    rollout, server = fake_verl_modules()
    if patched:
        patches.install_run_unique_colocated_ipc(rollout)
        patches.name_vllm_workers_ipc_by_run(server)
    sender = rollout.ServerAdapter().zmq_handle
    server.vLLMHttpServer()
    worker = types.SimpleNamespace(local_rank=0, model_runner=types.SimpleNamespace(vllm_config=None))
    return sender, vLLMColocateWorkerExtension._get_zmq_handle(worker)


@pytest.fixture(autouse=True)
def own_environment(monkeypatch):
    for key in ("VERL_REPLICA_RANK", "VERL_RAY_JOB_ID", "VERL_ZMQ_BASE_TRAINER_RANK"):
        monkeypatch.delenv(key, raising=False)


def test_two_runs_on_one_machine_sync_through_sockets_of_their_own(monkeypatch):
    first = one_run(monkeypatch, "a" * 56, patched=True)
    second = one_run(monkeypatch, "b" * 56, patched=True)
    assert first[0] == first[1] and second[0] == second[1]  # each actor reaches its own vLLM
    assert first[0] != second[0]
    assert first[0] == f"ipc:///tmp/rl-colocate-zmq-{JOB}-{'a' * 16}-replica-0-rank-0.sock"


def test_without_the_patch_both_runs_name_one_socket(monkeypatch):
    """veRL 0.9.1 alone: the bug the patch fixes. Should this fail after a veRL upgrade, drop the patch."""
    first = one_run(monkeypatch, "a" * 56, patched=False)
    second = one_run(monkeypatch, "b" * 56, patched=False)
    assert first == second


def test_a_socket_without_the_job_id_is_refused():
    with pytest.raises(RuntimeError, match="names no job"):
        patches.with_run_tag("ipc:///tmp/rl-colocate-zmq-replica-0-rank-0.sock", JOB, f"{JOB}-aaaa")
