"""PRIME's config checks (`checks.config_checks.validate_prime_config`), run in the driver before Ray: both recipes
pass, plain veRL configs are left alone, each error names its key, micro-batches must divide each rank's share,
a PRIME estimator needs a PRIME trainer, and the PRM's tokenizer must match the actor's."""

import re

import pytest
from main_ppo_driver import compose_ppo

from verl_prime_lora.checks.config_checks import PrimeConfigError, validate_prime_config


def colocated(*overrides):
    return compose_ppo("+recipe=prime_lora_colocated", "actor_rollout_ref.model.path=/m", *overrides)


# --------------------------------------------------------------------------------------------------
# config checks
# --------------------------------------------------------------------------------------------------


def test_both_recipes_are_valid():
    validate_prime_config(colocated())
    validate_prime_config(compose_ppo("+recipe=prime_lora", "actor_rollout_ref.model.path=/m"))
    validate_prime_config(colocated("algorithm.adv_estimator=prime_rloo"))


def test_plain_verl_configs_are_left_alone():
    """No PRIME trainer, no PRIME estimator: no view is built, so not even a value the plugin would refuse is read."""
    assert validate_prime_config(compose_ppo()) is None
    cfg = compose_ppo()
    cfg.trainer.n_gpus_per_node = "all"  # the view would refuse it (an int field); veRL's own checks are veRL's
    assert validate_prime_config(cfg) is None
    cfg.algorithm.adv_estimator = "prime_grpo"
    with pytest.raises(PrimeConfigError, match=r"^trainer\.n_gpus_per_node:"):
        validate_prime_config(cfg)


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["actor_rollout_ref.model.lora.merge=false"], "actor_rollout_ref.model.lora.merge"),
        (["actor_rollout_ref.rollout.n=1"], "actor_rollout_ref.rollout.n"),
        (["trainer.v1.trainer_mode=separate_async"], "trainer.v1.trainer_mode"),
        (["algorithm.adv_estimator=grpo"], "algorithm.adv_estimator"),
        (["prime.prm.update=reverse"], "prime.prm.update"),
        (["prime.prm.reference=sft"], "prime.prm.reference"),
        (["prime.prm.label_key=format"], "prime.prm.label_key"),
        (["prime.prm.balance_labels=sometimes"], "prime.prm.balance_labels"),
        (["prime.prm.mini_batch_size=3"], "prime.prm.mini_batch_size"),
        (["prime.prm.micro_batch_size_per_gpu=5"], "prime.prm.micro_batch_size_per_gpu"),
        (
            ["prime.prm.mini_batch_size=1", "actor_rollout_ref.rollout.n=6", "prime.prm.micro_batch_size_per_gpu=4"],
            "prime.prm.micro_batch_size_per_gpu",
        ),
        (["prime.prm.beta=0"], "prime.prm.beta"),
        (["algorithm.prime.process_gate=0.5"], "algorithm.prime.process_gate"),
        (["algorithm.prime.process_gate=1.5"], "algorithm.prime.process_gate"),
        (["algorithm.prime.process_gate=high"], "algorithm.prime.process_gate"),
        (["prime.process_rewards_fn.path=/no/such/file.py"], "prime.process_rewards_fn.path"),
        (["+prime.process_rewards_fn.color=red"], "prime.process_rewards_fn.color"),
    ],
)
def test_each_error_names_its_key(overrides, key):
    cfg = compose_ppo("+recipe=prime_lora", "actor_rollout_ref.model.path=/m", *overrides)
    with pytest.raises(PrimeConfigError) as err:
        validate_prime_config(cfg)
    assert str(err.value).startswith(key + ":"), str(err.value)


CPU_TWO_RANKS = ("+recipe=[prime_lora_colocated,cpu]", "trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.n=2")


@pytest.mark.parametrize(
    "overrides, key, share",
    [
        # cpu.yaml's micro-batches of 8 fit one rank's 8 responses (4 prompts x 2), not two ranks' 4 each
        ([], "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", "gives each rank 4 rows"),
        (
            ["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4"],
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
            "an actor mini-batch of 8 responses",
        ),
        (
            [
                "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
                "prime.prm.infer_micro_batch_size_per_gpu=3",
            ],
            "prime.prm.infer_micro_batch_size_per_gpu",
            "Pick one of \\[1, 2, 4\\]",
        ),
        (
            # 3 prompts x 2 = 6 responses, padded to a multiple of lcm(2 ranks, 4 x 2) = 8: 4 rows per rank
            ["data.train_batch_size=3", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=3"],
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
            "a step's batch of 8 responses .*padded by veRL to a multiple of 8",
        ),
    ],
)
def test_micro_batches_must_divide_each_ranks_share(overrides, key, share):
    cfg = compose_ppo(*CPU_TWO_RANKS, "actor_rollout_ref.model.path=/m", *overrides)
    with pytest.raises(PrimeConfigError) as err:
        validate_prime_config(cfg)
    assert str(err.value).startswith(key + ":") and re.search(share, str(err.value)), str(err.value)


def test_micro_batches_that_fit_two_ranks_pass():
    micro = (
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    )
    validate_prime_config(compose_ppo(*CPU_TWO_RANKS, "actor_rollout_ref.model.path=/m", *micro))
    # dynamic micro-batches (token budgets) are not checked
    dynamic = (
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
        "prime.prm.use_dynamic_bsz=true",
        "prime.prm.max_token_len_per_gpu=4096",
    )
    validate_prime_config(compose_ppo(*CPU_TWO_RANKS, "actor_rollout_ref.model.path=/m", *dynamic))


@pytest.mark.parametrize("estimator", ["prime_grpo", "prime_rloo"])
def test_prime_estimator_without_prime_trainer(estimator):
    cfg = compose_ppo(f"algorithm.adv_estimator={estimator}")
    with pytest.raises(PrimeConfigError, match=r"^trainer\.v1\.trainer_mode:"):
        validate_prime_config(cfg)


class _Tok:
    def __init__(self, vocab, eos=0):
        self._vocab, self.eos_token_id, self.bos_token_id, self.pad_token_id = vocab, eos, None, eos

    def get_vocab(self):
        return dict(self._vocab)


def test_prm_tokenizer_must_match(monkeypatch):
    import transformers

    toks = {"/actor": _Tok({"a": 0, "b": 1}), "/prm_same": _Tok({"a": 0, "b": 1}), "/prm_other": _Tok({"a": 0, "c": 1})}
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda p, **kw: toks[p])
    base = ("+recipe=prime_lora_colocated", "actor_rollout_ref.model.path=/actor")
    validate_prime_config(compose_ppo(*base, "prime.prm.model.path=/prm_same"))
    with pytest.raises(PrimeConfigError, match=r"^prime\.prm\.model\.path:.*vocabularies differ"):
        validate_prime_config(compose_ppo(*base, "prime.prm.model.path=/prm_other"))
    with pytest.raises(PrimeConfigError, match=r"^prime\.prm\.model\.tokenizer_path:"):
        validate_prime_config(compose_ppo(*base, "prime.prm.model.tokenizer_path=/prm_other"))
