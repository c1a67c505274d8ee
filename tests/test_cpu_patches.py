"""The CPU patch that shortens veRL's V1 replay-buffer poll (verl_prime_lora/cpu/patches.py)."""

import pytest
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

from verl_prime_lora.cpu import patches
from verl_prime_lora.cpu.detect import cpu_platform_wanted
from verl_prime_lora.integration.prompt_filter import AccuracyBandReplayBuffer

pytestmark = pytest.mark.skipif(not cpu_platform_wanted(), reason="the CPU patches apply on the CPU platform only")

ARGS = {
    "trainer_mode": "sync",
    "trainer_config": {},
    "max_off_policy_threshold": None,
    "max_off_policy_strategy": "drop",
    "sampler_kwargs": {},
}


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
    wrapped = ReplayBuffer.__init__
    patches.poll_replay_buffer_often()
    assert ReplayBuffer.__init__ is wrapped
