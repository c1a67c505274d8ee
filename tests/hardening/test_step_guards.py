"""Non-finite values never reach an optimizer (verl_prime_lora.hardening.step_guards, and
verl_prime_lora.rewards.reward_values for a reward's result): what counts as a finite
number, the stop after a NaN/inf PRM update, the stop on NaN/inf process rewards and advantages before they are
written back, and the veRL behaviour the PRM update's message relies on."""

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import verl
from hydra import compose, initialize_config_dir
from verl import DataProto

from verl_prime_lora.algo.prm_metrics import HeldOutRanking
from verl_prime_lora.config import run_config
from verl_prime_lora.config.run import PRIME_RUN_ENV, REF_FROZEN
from verl_prime_lora.hardening.step_guards import NonFiniteError, check_actor_update, check_finite, check_prm_update
from verl_prime_lora.prime import advantage_writeback
from verl_prime_lora.prime import trainer as trainer_module
from verl_prime_lora.prime.prime_step import PrimeStep, StepContext
from verl_prime_lora.rewards.reward_values import is_value_problem, result_problem, value_problem

VERL_CONFIG_DIR = str(Path(verl.__file__).parent / "trainer" / "config")


# --------------------------------------------------------------------------------------------------
# numbers
# --------------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _in_a_prime_runs_task_runner(monkeypatch):
    """The trainers here are built where a PRIME trainer runs: in a Ray job that the PRIME recipe marked."""
    monkeypatch.setenv(PRIME_RUN_ENV, "1")


@pytest.mark.parametrize("number", [0, 1.5, -2, True, np.float32(0.5), np.int64(3), torch.tensor(0.25)])
def test_finite_numbers_pass(number):
    assert value_problem("score", number) is None


@pytest.mark.parametrize(
    "value, problem",
    [
        (float("nan"), "non-finite score nan"),
        (float("inf"), "non-finite score inf"),
        (-math.inf, "non-finite score -inf"),
        (np.float64("nan"), "non-finite score nan"),
        (torch.tensor(float("inf")), "non-finite score inf"),
        ("0.5", "non-number score '0.5' (str)"),
        (None, "non-number score None (NoneType)"),
        ([1.0], "non-number score [1.0] (list)"),
        ({"score": 1.0}, "non-number score {'score': 1.0} (dict)"),
    ],
)
def test_values_that_cannot_be_trained_on(value, problem):
    assert value_problem("score", value) == problem
    assert is_value_problem(problem)


def test_a_long_value_is_cut_in_the_message():
    problem = value_problem("score", "x" * 1000)
    assert problem.startswith("non-number score 'xxx") and problem.endswith("... (str)") and len(problem) < 120


def test_an_exception_is_not_a_value_problem():
    assert not is_value_problem("ValueError: no ground truth") and not is_value_problem("")


def test_a_result_is_checked_on_its_score_then_its_label():
    assert result_problem({"reward_score": 1.0, "reward_extra_info": {"acc": 1.0}}, "acc") is None
    assert result_problem({"reward_score": 1.0, "reward_extra_info": {}}, "acc") is None  # no label: veRL's to refuse
    both = {"reward_score": math.nan, "reward_extra_info": {"acc": math.inf}}
    assert result_problem(both, "acc") == "non-finite score nan"
    label = {"reward_score": 1.0, "reward_extra_info": {"acc": None}}
    assert result_problem(label, "acc") == "non-number PRM label 'acc' None (NoneType)"


# --------------------------------------------------------------------------------------------------
# the PRM update
# --------------------------------------------------------------------------------------------------


def test_a_finite_prm_update_goes_on():
    check_prm_update({"loss": 0.69, "grad_norm": 0.1, "lr": 1e-6}, step=1)
    check_prm_update({}, step=1)  # prime.prm.update=none: no update metrics


def test_a_non_finite_grad_norm_stops_the_run_saying_the_weights_are_unchanged():
    """The message only; that veRL's engine leaves the weights unchanged is run below."""
    with pytest.raises(NonFiniteError) as err:
        check_prm_update({"loss": math.nan, "grad_norm": math.nan, "lr": 1e-6}, step=3)
    message = str(err.value)
    assert message.startswith("prime.prm: step 3: the PRM update gave prm/update_loss = nan, prm/grad_norm = nan;")
    assert "weights unchanged" in message and "FSDPEngine.optimizer_step" in message


def test_a_non_finite_loss_with_a_finite_grad_norm_says_the_step_was_taken():
    with pytest.raises(NonFiniteError, match=r"prm/update_loss = inf; its grad norm was finite") as err:
        check_prm_update({"loss": math.inf, "grad_norm": 0.5}, step=2)
    assert "weights unchanged" not in str(err.value)


def test_a_non_finite_actor_update_stops_the_run():
    check_actor_update({"actor/pg_loss": 0.1, "actor/grad_norm": 0.3, "actor/lr": 1e-3}, step=4)
    with pytest.raises(NonFiniteError) as err:
        check_actor_update({"actor/pg_loss": math.nan, "actor/grad_norm": math.inf}, step=4)
    message = str(err.value)
    assert message.startswith("actor_rollout_ref.actor: step 4: the actor update gave actor/pg_loss = nan,")
    assert "weights unchanged" in message


def test_the_trainer_checks_the_actor_update_after_verl_made_it(monkeypatch):
    """`_update_actor` is veRL's, then the check: a NaN policy loss stops the step before its checkpoint."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    def verl_update(self, batch, metrics):
        metrics.update({"actor/pg_loss": math.nan, "actor/grad_norm": 1.0})
        return batch

    monkeypatch.setattr(PPOTrainer, "_update_actor", verl_update)
    trainer = object.__new__(trainer_module.PrimeTrainerSync)
    trainer.global_steps, trainer.watchdog = 7, trainer_module.StepWatchdog()
    with pytest.raises(NonFiniteError, match=r"^actor_rollout_ref\.actor: step 7: .*its grad norm was finite"):
        trainer._update_actor("batch", {})


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_verl_fsdp_engine_skips_the_optimizer_step_on_a_non_finite_grad_norm(bad):
    """The PRM update's message says so: veRL's own `FSDPEngine.optimizer_step`, run on a small model and a real
    AdamW with one non-finite gradient, returns the non-finite grad norm, leaves every weight bit-equal and clears
    the gradients; with finite gradients the same call moves the weights (the skip, not a no-op, is what held)."""
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    engine = SimpleNamespace(
        module=model,
        optimizer=torch.optim.AdamW(model.parameters(), lr=0.1),
        optimizer_config=SimpleNamespace(clip_grad=1.0),
        _qat_enabled=False,
    )
    before = [p.detach().clone() for p in model.parameters()]
    model(torch.randn(4, 3)).sum().backward()
    model.weight.grad[0, 1] = bad
    grad_norm = FSDPEngine.optimizer_step(engine)
    assert not math.isfinite(grad_norm)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before, strict=True))
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())

    model(torch.randn(4, 3)).sum().backward()
    assert math.isfinite(FSDPEngine.optimizer_step(engine))
    assert not all(torch.equal(p, q) for p, q in zip(model.parameters(), before, strict=True))


# --------------------------------------------------------------------------------------------------
# token tensors: process rewards, advantages
# --------------------------------------------------------------------------------------------------


def test_non_finite_values_outside_the_response_mask_are_not_read():
    values = torch.tensor([[0.1, 0.2, math.nan], [math.inf, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])  # row 1: a padding row
    check_finite("prime.prm", "token process rewards", values, mask, step=1, hint="")


def test_a_non_finite_response_token_stops_naming_the_quantity_rows_and_step():
    values = torch.zeros(12, 3)
    values[2, 1], values[9, 0] = math.nan, -math.inf
    with pytest.raises(NonFiniteError) as err:
        check_finite("prime.prm", "token process rewards", values, torch.ones(12, 3), step=4, hint="Look here.")
    message = str(err.value)
    assert message.startswith(
        "prime.prm: step 4: the token process rewards are NaN or infinite on 2 response tokens of 2 rows "
        "(rows 2, 9; first value nan)"
    )
    assert message.endswith("Look here.")


def colocated(*overrides):
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        overrides = ["+recipe=prime_lora_colocated", "actor_rollout_ref.model.path=/m", *overrides]
        return compose("ppo_trainer", overrides=overrides)


def test_non_finite_advantages_are_not_written_back(monkeypatch):
    """A NaN reward that bypassed the reward guard (here: in rm_scores) stops in `_advantage_step`, before
    TransferQueue gets the advantages."""
    written = []
    monkeypatch.setattr(advantage_writeback.tq, "kv_batch_put", lambda **kw: written.append(kw))
    step = PrimeStep(run_config(colocated()), prm=None, reference=REF_FROZEN, prm_dropout=0.0, prm_fp32=True)
    mask = torch.ones(4, 3)
    scores = torch.zeros(4, 3)
    scores[1, -1] = math.nan
    data = DataProto.from_dict(
        tensors={"rm_scores": scores, "response_mask": mask},
        non_tensors={"uid": np.array(["a", "a", "b", "b"], dtype=object)},
    )
    batch = SimpleNamespace(keys=["a_0_0", "a_1_0", "b_0_0", "b_1_0"], partition_id="train")
    with pytest.raises(
        NonFiniteError, match=r"^algorithm\.adv_estimator: step 6: the advantages of prime_grpo are NaN"
    ):
        step._advantage_step(
            batch, data, None, torch.zeros(4, 3), HeldOutRanking(0.5, 0.0), {}, StepContext(global_step=6)
        )
    assert written == []
