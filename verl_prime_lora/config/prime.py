"""The typed PRIME config: `prime.*` and `algorithm.prime.*` as frozen dataclasses.

Every PRIME setting has its one default and its validation here; the driver-side checks
(`config_checks.validate_prime_config`), the trainer, the PRM worker, the reward-failure guard and
the advantage estimators all read these objects instead of the raw config.

* `PrimeConfig` — `prime`: `max_failed_rollout_ratio` and `prm` (`PrmConfig`, the implicit PRM's
  knobs). `prime.prm.{model,engine,optim,checkpoint}` are veRL's own schemas (the recipe composes them
  from veRL's `hf_model`, `fsdp` engine and `fsdp` optimizer groups): the view reads them (`verl_view.PrmView`),
  and `prm_worker.build_prm_worker_config` types them with veRL's dataclasses.
* `AdvantageConfig` — `algorithm.prime`: the estimators' knobs (`core_algos`). veRL's V1 trainer
  hands the estimators `config.algorithm` as a DictConfig, so `algorithm.prime` reaches them as is;
  given veRL's `AlgoConfig` (which has no `prime` field) they get the defaults.

The defaults are `recipe/prime_lora.yaml`'s values (tests/config/test_prime_config.py compares them).
`config.prime_config` builds `PrimeConfig` from a composed config's view (`config.run_config`: once per process, for
the whole run).

They are `STRICT` sections of `config.section`, the mechanism the veRL view shares: dataclasses whose fields
hold the defaults, read-only once built, converted from the node as veRL's `omega_conf_to_dataclass` converts (a
key the class lacks is refused) and checked in `__post_init__`. They do not subclass veRL's `BaseConfig`: importing
it runs `verl/__init__` (Ray, torch, veRL's plugin loading), and `core_algos` and `prm_worker` import this module
yet must import without veRL, as veRL's plugin loader imports them while `verl` itself is half-initialised.
Every error is a `PrimeConfigError` whose message starts with the full key (`prime.prm.update: …`).
Nothing here imports veRL, torch or Ray.
"""

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from verl_prime_lora.config.section import Section, config_value, read_section

UPDATE_MODES = ("before", "after", "none")  # prime.prm.update
REFERENCE_TYPES = ("init", "policy")  # prime.prm.reference
PROCESS_NORMS = ("sequence", "token")  # algorithm.prime.process_norm (core_algos.PROCESS_ADVANTAGES implements them)
# Reward-info keys that are not an outcome accuracy and must never become the PRM label.
FORBIDDEN_LABEL_KEYS = ("format", "score", "reward")
# prime.prm sections typed by veRL's own dataclasses (prm_worker.build_prm_worker_config), not here.
PRM_VERL_SECTIONS = ("model", "engine", "optim", "checkpoint")


@dataclass(frozen=True)
class PrmConfig(Section):
    """`prime.prm`: the implicit PRM, r_t = β·(log π_φ − log π_ref)(y_t), trained with BCE on the outcome label.

    Args:
        beta: β of the implicit reward; > 0 (the paper and the seed: 0.05).
        update: `before` (update, then recompute the rewards: the seed), `after` (rewards from the
            pre-update PRM, then update: one PRM forward less) or `none` (a frozen PRM).
        reference: `init` (the PRM's initial weights: the seed) or `policy` (the rollout policy's old
            log-probs: when the policy moves fast, as in the CPU demo).
        label_key: the `reward_extra_info` key holding the 0/1 outcome accuracy (never the format
            reward or the combined score); set it for a custom reward function.
        balance_labels: weigh right and wrong responses equally in the PRM loss (a skewed base rate,
            as in the CPU demo).
        mini_batch_size: prompts per PRM optimizer step (x rollout.n; memory); null: the actor's
            `ppo_mini_batch_size`.
        micro_batch_size_per_gpu: responses per PRM forward/backward (memory; the seed: 2).
        infer_micro_batch_size_per_gpu: responses per PRM log-prob forward; null: as `micro_batch_size_per_gpu`.
            The recipe ties it to the actor's `rollout.log_prob_micro_batch_size_per_gpu`: outside fp32 it must
            equal the micro-batches of the actor forward that gives the PRM's reference (checked before Ray).
        use_dynamic_bsz: token-budget micro-batches instead (memory; then `max_token_len_per_gpu` is required).
        max_token_len_per_gpu: token budget per micro-batch with `use_dynamic_bsz`.
        infer_max_token_len_per_gpu: the same for log-prob forwards; null: as `max_token_len_per_gpu`.
        epochs: passes over the batch per RL step (the PRM's fit: the CPU demo makes 3).
        shuffle: shuffle responses across PRM mini-batches (with several mini-batches a step).
        seed: the mini-batch shuffling seed (reproducibility).
    """

    KEY: ClassVar[str] = "prime.prm"
    STRICT: ClassVar[bool] = True
    FOREIGN: ClassVar[tuple[str, ...]] = PRM_VERL_SECTIONS

    beta: float = 0.05
    update: str = "before"
    reference: str = "init"
    label_key: str = "acc"
    balance_labels: bool = False
    mini_batch_size: Optional[int] = None
    micro_batch_size_per_gpu: int = 2
    infer_micro_batch_size_per_gpu: Optional[int] = 4
    use_dynamic_bsz: bool = False
    max_token_len_per_gpu: Optional[int] = None
    infer_max_token_len_per_gpu: Optional[int] = None
    epochs: int = 1
    shuffle: bool = False
    seed: int = 42

    def __post_init__(self) -> None:
        if not self.beta > 0:
            self._fail("beta", "the implicit-reward scale β must be > 0.")
        if self.update not in UPDATE_MODES:
            self._fail("update", f"choose one of {list(UPDATE_MODES)}.")
        if self.reference not in REFERENCE_TYPES:
            self._fail("reference", f"choose one of {list(REFERENCE_TYPES)}.")
        if not self.label_key or self.label_key in FORBIDDEN_LABEL_KEYS:
            self._fail(
                "label_key",
                "the PRM label must be the 0/1 outcome accuracy (`acc`), never the format reward or the "
                "combined score.",
            )
        if self.mini_batch_size is not None and self.mini_batch_size <= 0:
            self._fail("mini_batch_size", "prompts per PRM optimizer step: > 0, or null for the actor's.")
        for name in ("micro_batch_size_per_gpu", "epochs"):
            if getattr(self, name) <= 0:
                self._fail(name, "it must be > 0.")
        if self.infer_micro_batch_size_per_gpu is None:
            self._set("infer_micro_batch_size_per_gpu", self.micro_batch_size_per_gpu)
        elif self.infer_micro_batch_size_per_gpu <= 0:
            self._fail("infer_micro_batch_size_per_gpu", "it must be > 0, or null for micro_batch_size_per_gpu.")
        if self.use_dynamic_bsz and not self.max_token_len_per_gpu:
            self._fail("max_token_len_per_gpu", "a token budget > 0 is required with prime.prm.use_dynamic_bsz=true.")
        if self.infer_max_token_len_per_gpu is None:
            self._set("infer_max_token_len_per_gpu", self.max_token_len_per_gpu)


@dataclass(frozen=True)
class ProcessRewardsFn(Section):
    """`prime.process_rewards_fn`: a function that replaces the PRM's token rewards before the advantage.

    For studies of credit (an oracle that knows the wrong step, a shuffled control, an explicit PRM): the
    PRM still trains and is measured as usual (`prm/*`), and the estimator gets the function's rewards in place
    of r = β·(log π_φ − log π_ref)·m. The trainer calls it once a step with the keywords `process_rewards` (the
    PRM's rewards, (B, T), a copy the function may change), `response_mask` ((B, T), read only), `responses` (the
    response token ids, (B, T)), `reward_infos` (each row's `reward_extra_info` dict) and `tokenizer` (the
    actor's); it returns rewards (B, T), finite on response tokens. The process gate still reads the PRM's
    pairwise accuracy: set `algorithm.prime.process_gate=null` for the function's rewards at full weight.

    Args:
        path: the file defining the function (or `pkg://module`), as veRL's `reward.custom_reward_function.path`;
            null: the PRM's own rewards (PRIME).
        name: the function's name in that file.
    """

    KEY: ClassVar[str] = "prime.process_rewards_fn"
    STRICT: ClassVar[bool] = True

    path: Optional[str] = None
    name: str = "process_rewards"


@dataclass(frozen=True)
class PrimeConfig(Section):
    """`prime`: the PRIME trainers' settings.

    Args:
        max_failed_rollout_ratio: the largest share of a step's rollouts that may fail in the reward
            function or be dropped before training, in [0, 1] (0: stop at the first); raise it for a flaky or
            sandboxed reward function.
        reward_timeout_s: the time limit of one rollout's reward call, in seconds: a call past it scores 0 as a
            failed reward ("timed out after N s"), counted against `max_failed_rollout_ratio`; null: no limit.
            The call's thread cannot be stopped and runs on. A math grader never nears it (the recipe's
            reward limits each verification to 10 s); raise it for a slow remote grader.
        diagnostics: for debugging: four more `prm/*` diagnostics each step, and the PRM's pre-update
            log-probs from a forward of their own as well as from its update, their largest difference logged
            (`prm/pre_update_log_prob_max_abs_diff`): one PRM forward more per step.
        prm: the implicit PRM (`PrmConfig`).
        process_rewards_fn: a function replacing the PRM's token rewards (`ProcessRewardsFn`); null: PRIME's.
    """

    KEY: ClassVar[str] = "prime"
    STRICT: ClassVar[bool] = True

    max_failed_rollout_ratio: float = 0.0
    reward_timeout_s: Optional[float] = 120.0
    diagnostics: bool = False
    prm: PrmConfig = field(default_factory=PrmConfig)
    process_rewards_fn: ProcessRewardsFn = field(default_factory=ProcessRewardsFn)

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_failed_rollout_ratio <= 1.0:
            self._fail(
                "max_failed_rollout_ratio",
                "the largest share of a step's rollouts that may fail in the reward function or be dropped "
                "before training: a number in [0, 1] (0: stop at the first; 1: only a step without a finite "
                "reward stops).",
            )
        if self.reward_timeout_s is not None and not self.reward_timeout_s > 0:
            self._fail("reward_timeout_s", "a time limit in seconds: > 0, or null for none.")


@dataclass(frozen=True)
class AdvantageConfig(Section):
    """`algorithm.prime`: the PRIME advantage A = c_o·A^o + w·c_p·A^p (`core_algos`).

    Args:
        outcome_coef: c_o, the weight of the outcome advantage (ablations).
        process_coef: c_p, the weight of the process advantage (0: outcome only; ablations).
        process_norm: the group normalisation of `prime_grpo`'s process part: `sequence` (stats of the
            PRM's sequence logits, length-free) or `token` (the seed's formula, to reproduce it).
        process_std_threshold: `prime_grpo`: τ_0 of the group threshold τ_g = τ_0 + τ_L·L̄_g; no process term in
            groups whose spread is below τ_g; >= 0 (the seed: 1e-2).
        process_std_threshold_per_token: τ_L, the threshold's part per token of the group's mean response length
            L̄_g (with `process_norm: token`, whose statistic z/L is per token already: τ_0 + τ_L); >= 0. bf16's
            rounding of z grows about linearly with L: `prime_lora` sets 4e-4, 2.6× the floor per token of a pooled
            fit at the seed's depth (docs/findings.md, "The rounding floor"); 0 in fp32 (the CPU preset).
        process_gate: the PRM's running pairwise accuracy at which the process term counts fully
            (the trainer's gate w), in (0.5, 1]; null: no gate (w = 1, the paper and the card). 0.75: the rule
            of pre-registered studies of the recipe's PRM settings in bf16, where the ungated term cost -0.19 against
            the term off (docs/findings.md, "What carries PRIME's gain").
        whiten_advantages: masked whitening of the final advantage over the batch (as PRIME's code).
        epsilon: the std epsilon (as veRL's grpo); >= 0.
    """

    KEY: ClassVar[str] = "algorithm.prime"
    STRICT: ClassVar[bool] = True

    outcome_coef: float = 1.0
    process_coef: float = 1.0
    process_norm: str = "sequence"
    process_std_threshold: float = 0.01
    process_std_threshold_per_token: float = 0.0
    process_gate: Optional[float] = 0.75
    whiten_advantages: bool = False
    epsilon: float = 1e-6

    def __post_init__(self) -> None:
        if self.process_norm not in PROCESS_NORMS:
            self._fail("process_norm", f"choose one of {list(PROCESS_NORMS)}.")
        if self.process_std_threshold < 0:
            self._fail("process_std_threshold", "a group std threshold: >= 0.")
        if self.process_std_threshold_per_token < 0:
            self._fail("process_std_threshold_per_token", "a threshold per token of the group's mean length: >= 0.")

        if self.process_gate is not None and not 0.5 < self.process_gate <= 1.0:
            self._fail(
                "process_gate",
                "it is the PRM's held-out pairwise accuracy at which the process term counts fully: "
                "a number in (0.5, 1], or null for no gate.",
            )
        if self.epsilon < 0:
            self._fail("epsilon", "the std epsilon: >= 0.")


def advantage_config(algorithm_config: Any) -> AdvantageConfig:
    """The typed `algorithm.prime` of an algorithm config (DictConfig, dict, veRL's `AlgoConfig` or None)."""
    return read_section(AdvantageConfig, config_value(algorithm_config, "prime"))
