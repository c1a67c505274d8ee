"""`prime.process_rewards_fn`, a user's function that replaces the PRM's token process rewards: masked to the
response, refused when it returns the wrong thing, never reaching the advantage on padding, and loaded before Ray."""

import math
from types import SimpleNamespace

import pytest
import torch
from main_ppo_driver import compose_ppo
from verl.protocol import DataProto

from verl_prime_lora.checks.config_checks import PrimeConfigError, validate_prime_config
from verl_prime_lora.hardening.step_guards import NonFiniteError
from verl_prime_lora.prime.prime_step import PrimeStep, StepContext


def colocated(*overrides):
    return compose_ppo("+recipe=prime_lora_colocated", "actor_rollout_ref.model.path=/m", *overrides)


STEP_3 = StepContext(global_step=3)


def _step_with_process_rewards_fn(fn) -> PrimeStep:
    step = object.__new__(PrimeStep)
    step.run = SimpleNamespace(
        process_rewards_fn=fn,
        prime=SimpleNamespace(process_rewards_fn=SimpleNamespace(name=getattr(fn, "__name__", "fn"))),
    )
    return step


def test_a_process_rewards_fn_replaces_the_prm_rewards_masked():
    rewards = torch.randn(3, 4, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float64)
    data = DataProto.from_dict({"responses": torch.arange(12).reshape(3, 4)})
    step = SimpleNamespace(reward_infos=[{"k": 0}, {"k": 1}, {"k": 2}])
    seen = {}

    def flip(process_rewards, response_mask, responses, reward_infos, tokenizer):
        seen.update(responses=responses, infos=reward_infos)
        process_rewards.fill_(0)  # the function gets a copy: the PRM's rewards stay as they were
        return -torch.ones(3, 4)

    replaced = _step_with_process_rewards_fn(flip)._replaced_process_rewards(data, step, rewards, mask, STEP_3)
    assert torch.equal(replaced, -mask) and replaced.dtype == torch.float64
    assert torch.equal(seen["responses"], data.batch["responses"]) and seen["infos"] == step.reward_infos
    assert rewards.abs().sum() > 0


@pytest.mark.parametrize(
    "result, message",
    [
        (torch.zeros(3, 5), r"returned \(3, 5\); expected a tensor of shape \(3, 4\)"),
        ([0.0] * 12, "returned list"),
        (torch.full((3, 4), math.nan), "replaced token process rewards are NaN"),
    ],
)
def test_a_process_rewards_fn_that_returns_the_wrong_thing_stops_the_step(result, message):
    rewards, mask = torch.zeros(3, 4), torch.ones(3, 4)
    data = DataProto.from_dict({"responses": torch.zeros(3, 4, dtype=torch.long)})
    step = _step_with_process_rewards_fn(lambda **kwargs: result)
    with pytest.raises((PrimeConfigError, NonFiniteError), match=message) as err:
        step._replaced_process_rewards(data, SimpleNamespace(reward_infos=[{}] * 3), rewards, mask, STEP_3)
    assert str(err.value).startswith("prime.process_rewards_fn")


def test_what_a_process_rewards_fn_puts_on_padding_never_reaches_the_advantage():
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    step = _step_with_process_rewards_fn(lambda **kwargs: torch.tensor([[1.0, 2.0, math.nan]]))
    data = DataProto.from_dict({"responses": torch.zeros(1, 3, dtype=torch.long)})
    replaced = step._replaced_process_rewards(data, SimpleNamespace(reward_infos=[{}]), torch.zeros(1, 3), mask, STEP_3)
    assert torch.equal(replaced, torch.tensor([[1.0, 2.0, 0.0]]))


def test_the_process_rewards_fn_is_loaded_before_ray(tmp_path):
    source = tmp_path / "credit.py"
    source.write_text("def zero(process_rewards, **kwargs):\n    return process_rewards * 0\n")
    cfg = colocated(f"prime.process_rewards_fn.path={source}", "prime.process_rewards_fn.name=zero")
    validate_prime_config(cfg)
    with pytest.raises(PrimeConfigError, match=r"^prime.process_rewards_fn.path: cannot load 'one'"):
        validate_prime_config(colocated(f"prime.process_rewards_fn.path={source}", "prime.process_rewards_fn.name=one"))
