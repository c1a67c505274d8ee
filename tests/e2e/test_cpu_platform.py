"""Fast checks of the CPU platform's pieces (seconds, no main_ppo): what the e2e runs rely on."""

import asyncio
import subprocess
import sys

import pytest
import torch
import verl  # noqa: F401 - loads our plugin, which registers the `cpu` platform on this host

from verl_prime_lora.cpu import detect, install, platform
from verl_prime_lora.cpu.zmq_checkpoint_engine import ZmqCheckpointEngine
from verl_prime_lora.tools.tiny import write_assets

pytestmark = pytest.mark.skipif(detect.accelerator_present(), reason="checks the CPU-only host path")


def test_verl_resolves_the_cpu_platform():
    from verl.utils.device import get_device_id, get_device_name, get_nccl_backend, get_resource_name

    assert (get_device_name(), get_nccl_backend(), get_resource_name()) == ("cpu", "gloo", "GPU")
    device_id = get_device_id()
    assert torch.zeros(1).to(device_id).device.type == "cpu"
    assert f"{get_device_name()}:{device_id}" == "cpu:0"


def test_cuda_host_is_left_alone(monkeypatch):
    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert not detect.cpu_platform_wanted()
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    assert detect.cpu_platform_wanted()


def test_missing_vllm_shim_is_one_clear_error(monkeypatch):
    real_version = detect._version
    monkeypatch.setattr(detect, "_version", lambda name: None if name == "vllm" else real_version(name))
    with pytest.raises(platform.CpuStackMissing, match="python -m verl_prime_lora.cpu.install"):
        platform.PlatformCPU().is_available()


def test_process_group_backend_is_deduplicated(tmp_path):
    torch.distributed.init_process_group(
        backend="cpu:gloo,cpu:gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        assert torch.distributed.get_backend() == "cpu:gloo"
    finally:
        torch.distributed.destroy_process_group()


def test_forward_only_engines_do_not_pin_memory():
    """A frozen reference (forward-only FSDP2 engine) must build without an accelerator."""
    from verl.workers.engine.fsdp import transformer_impl

    assert transformer_impl.CPUOffloadPolicy(pin_memory=True).pin_memory is False


def test_install_is_idempotent():
    assert install.install_vllm_name_shim() is None  # the environment's shim is already in place
    rerun = subprocess.run([sys.executable, "-m", "verl_prime_lora.cpu.install"], capture_output=True, text=True)
    assert rerun.returncode == 0 and "already in place" in rerun.stdout, rerun.stderr


def test_zmq_checkpoint_engine_round_trip():
    sender, receiver = ZmqCheckpointEngine(0, is_master=True), ZmqCheckpointEngine(0)
    actor_kwargs, rollout_kwargs = ZmqCheckpointEngine.build_topology(1, 1, [sender.prepare(), receiver.prepare()])
    sender.init_process_group(**{key: values[0] for key, values in actor_kwargs.items()})
    receiver.init_process_group(**{key: values[0] for key, values in rollout_kwargs.items()})
    weights = {"w": torch.randn(3, 4, dtype=torch.bfloat16), "b": torch.arange(5)}

    async def transfer():
        received = {}

        async def receive():
            async for name, tensor in receiver.receive_weights():
                received[name] = tensor

        await asyncio.gather(sender.send_weights(iter(weights.items())), receive())
        return received

    try:
        received = asyncio.run(transfer())
    finally:
        sender.finalize()
        receiver.finalize()
    assert received.keys() == weights.keys()
    assert all(torch.equal(received[name], weights[name]) for name in weights)


def test_tiny_assets_are_deterministic(tmp_path):
    first, second = write_assets(tmp_path / "a"), write_assets(tmp_path / "b")
    for name in ("train", "test"):
        assert first[name].read_bytes() == second[name].read_bytes()
    for file in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (first["model"] / file).read_bytes() == (second["model"] / file).read_bytes()
