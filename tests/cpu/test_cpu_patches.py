"""The CPU patches that de-duplicate the process group's backend string, shorten veRL's replay-buffer poll and stop
vLLM's queue readers spinning (verl_prime_lora/cpu/patches.py)."""

import inspect
import time

import pytest
import zmq
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

from verl_prime_lora.cpu import patches
from verl_prime_lora.cpu.detect import cpu_platform_wanted
from verl_prime_lora.patching import is_patched
from verl_prime_lora.prime.prompt_filter import AccuracyBandReplayBuffer

pytestmark = pytest.mark.skipif(not cpu_platform_wanted(), reason="the CPU patches apply on the CPU platform only")

ARGS = {
    "trainer_mode": "sync",
    "trainer_config": {},
    "max_off_policy_threshold": None,
    "max_off_policy_strategy": "drop",
    "sampler_kwargs": {},
}


@pytest.mark.parametrize("positional", [False, True], ids=["keyword", "positional"])
def test_the_backend_string_reaches_torch_once_per_device_type(positional, monkeypatch):
    """veRL passes `backend=` by keyword; torch's own signature also takes it first by position."""
    import torch.distributed

    calls = []
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda *a, **k: calls.append((a, k)))
    patches.dedupe_process_group_backend()
    if positional:
        torch.distributed.init_process_group("cpu:gloo,cpu:gloo", "file:///x", world_size=1)
    else:
        torch.distributed.init_process_group(backend="cpu:gloo,cpu:gloo", init_method="file:///x", world_size=1)
    expected = (
        (("cpu:gloo", "file:///x"), {"world_size": 1})
        if positional
        else (("cpu:gloo",), {"init_method": "file:///x", "world_size": 1})
    )
    assert calls == [expected]


@pytest.mark.parametrize("cls", [ReplayBuffer, ReplayBufferAsync])
def test_default_poll_interval_is_short_on_cpu(cls):
    assert cls(**ARGS).poll_interval == patches.REPLAY_BUFFER_POLL_S < 2.0


def test_custom_sampler_gets_the_short_default_too():
    buffer = AccuracyBandReplayBuffer(
        **ARGS | {"sampler_kwargs": {"train_batch_size": 2, "max_response_length": 8}}, refill_fn=lambda n: n
    )
    assert buffer.poll_interval == patches.REPLAY_BUFFER_POLL_S


def test_an_explicit_poll_interval_is_kept():
    assert ReplayBuffer(**ARGS, poll_interval=0.0).poll_interval == 0.0
    assert ReplayBuffer(*ARGS.values(), 3.0).poll_interval == 3.0


def test_patch_is_idempotent():
    from verl.trainer.ppo.v1 import replay_buffer

    wrapped = ReplayBuffer.__init__
    assert is_patched(wrapped)  # applied when veRL's replay buffer was imported
    patches.poll_replay_buffer_often(replay_buffer)
    assert ReplayBuffer.__init__ is wrapped


@pytest.fixture
def vllm_queue_reader():
    """A reader `SpinCondition` with its writer, as vLLM's `MessageQueue` pairs them."""
    shm_broadcast = pytest.importorskip("vllm.distributed.device_communicators.shm_broadcast")
    from vllm.utils.network_utils import get_open_zmq_ipc_path

    assert is_patched(shm_broadcast.SpinCondition.wait)  # applied when vLLM's module was imported
    context = zmq.Context()
    address = get_open_zmq_ipc_path()
    writer = shm_broadcast.SpinCondition(is_reader=False, context=context, notify_address=address)
    reader = shm_broadcast.SpinCondition(is_reader=True, context=context, notify_address=address)
    yield shm_broadcast, reader
    del writer
    context.destroy(linger=0)


def test_a_vllm_queue_reader_sleeps_instead_of_spinning(vllm_queue_reader, monkeypatch):
    shm_broadcast, reader = vllm_queue_reader
    spins = []
    monkeypatch.setattr(shm_broadcast, "sched_yield", lambda: spins.append(1))
    reader.record_read()  # just read a message: vLLM's own wait spins for the next second
    inspect.unwrap(shm_broadcast.SpinCondition.wait)(reader)
    assert spins == [1]
    spins.clear()
    started = time.perf_counter()
    for _ in range(20):
        reader.wait()  # no timeout asked, nothing written: each wait still ends after a short poll
    assert spins == []
    assert time.perf_counter() - started < 2.0


def test_vllm_patches_are_idempotent():
    shm_broadcast = pytest.importorskip("vllm.distributed.device_communicators.shm_broadcast")
    patches.apply_all()
    wrapped = shm_broadcast.SpinCondition.wait
    patches.apply_all()
    assert shm_broadcast.SpinCondition.wait is wrapped


def test_vllm_processes_get_the_patches_through_vllms_plugin_hook():
    """vLLM's engine core and worker never import veRL; they run `vllm.general_plugins` entry points."""
    pytest.importorskip("vllm")
    from vllm.plugins import load_plugins_by_group

    from verl_prime_lora.cpu import vllm_plugin

    assert load_plugins_by_group("vllm.general_plugins").get("verl_prime_lora_cpu") is vllm_plugin.apply


def test_the_cpu_patch_table_declares_what_each_patch_replaces():
    """`cpu/patches.py`'s `MODULE_PATCHES`, in the scoped table form of the plugin's: each module's listed names hold
    the platform's (marked) replacement once the module is imported, and nothing else of the module is marked but
    what the plugin's own table lists (a PRIME run's patches, applied in this process by other tests)."""
    import importlib

    from verl_prime_lora.patching import is_patched
    from verl_prime_lora.plugin.patches import MODULE_PATCHES as PRIME_PATCHES

    for name, patch in patches.MODULE_PATCHES.items():
        module = importlib.import_module(name)
        marked = set()
        for attribute in dir(module):
            value = getattr(module, attribute)
            if is_patched(value):
                marked.add(attribute)
            if isinstance(value, type) and value.__module__ == name:
                marked |= {f"{attribute}.{a}" for a, v in vars(value).items() if is_patched(v)}
        prime = set(PRIME_PATCHES[name].replaces) if name in PRIME_PATCHES else set()
        assert set(patch.replaces) <= marked <= set(patch.replaces) | prime, (name, marked)
