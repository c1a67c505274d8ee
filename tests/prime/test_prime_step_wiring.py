"""The PRIME step as the trainer wires it, without Ray: `prime_step.PrimeStep.compute_advantage` (the batch's
accounting, the PRM's forward and update, the rewards, the advantage), the step built directly from the run's typed
config over an in-memory TransferQueue and a stand-in for the PRM worker group (`prm_worker.ImplicitPRM`).

What these pin is the wiring between parts that have tests of their own: the process gate's weight and the process
term's sign reach the advantages written back to TransferQueue (checked against a float64 computation written out
here, not against the estimator), the PRM-update and token-reward finiteness checks run, `prime.prm.balance_labels`
changes the weights the PRM trains on, and the rankings (the gate's and the alarm's) read the outcome. The trainer
around the step, its checkpoint hooks included: tests/prime/test_trainer.py."""

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
import verl
from hydra import compose, initialize_config_dir
from tensordict import NonTensorData, NonTensorStack, TensorDict

from verl_prime_lora.config import run_config
from verl_prime_lora.config.run import REF_FROZEN
from verl_prime_lora.hardening.reward_failures import ERROR_KEY, FAILED_KEY
from verl_prime_lora.hardening.step_guards import NonFiniteError
from verl_prime_lora.prime import prime_step as prime_step_module
from verl_prime_lora.prime.prm_loss import PRM_LABEL_FIELD, PRM_REF_FIELD, PRM_WEIGHT_FIELD

VERL_CONFIG_DIR = str(Path(verl.__file__).parent / "trainer" / "config")
BETA = 0.05  # prime.prm.beta
EPSILON = 1e-6  # algorithm.prime.epsilon
STD_THRESHOLD = 0.01  # algorithm.prime.process_std_threshold
STEP = 5
# the options `reference_advantages` is written for (the recipe's today), set explicitly
REFERENCE_OPTIONS = (
    "algorithm.adv_estimator=prime_grpo",
    "algorithm.gamma=1.0",
    "algorithm.norm_adv_by_std_in_grpo=true",
    "algorithm.prime.outcome_coef=1.0",
    "algorithm.prime.process_coef=1.0",
    "algorithm.prime.process_norm=sequence",
    f"algorithm.prime.process_std_threshold={STD_THRESHOLD}",
    "algorithm.prime.process_std_threshold_per_token=0",
    f"algorithm.prime.epsilon={EPSILON}",
    "algorithm.prime.whiten_advantages=false",
    "algorithm.prime.process_gate=null",
    f"prime.prm.beta={BETA}",
)


def _nested(rows):
    return torch.nested.as_nested_tensor(
        [torch.as_tensor(row, dtype=torch.float32) for row in rows], layout=torch.jagged
    )


# --------------------------------------------------------------------------------------------------
# the stand-ins: TransferQueue, the PRM worker group, the step's batch
# --------------------------------------------------------------------------------------------------


@dataclass
class Row:
    """One response of the step: its group, its outcome accuracy (the PRM label and, ×2, its score), its PRM and
    reference log-probs per response token (`after`: the PRM's after its update; None: as before it)."""

    uid: str
    acc: float
    ref: list[float]
    before: list[float]
    after: list[float] | None = None
    failed: bool = False

    @property
    def length(self) -> int:
        return len(self.ref)

    @property
    def score(self) -> float:
        return 2.0 * self.acc


class FakeTransferQueue:
    """`kv_batch_get` / `kv_batch_put` over a dict of rows: a get returns nested per-token fields (what veRL's
    TransferQueue holds), `uid` as a non-tensor stack, `extra_fields` as a list; a put stores each row's values,
    so the PRM stand-in reads what the trainer wrote for it. `puts` keeps every put's fields in order."""

    def __init__(self, rows: list[Row]):
        self.keys = [f"{row.uid}_{i}_0" for i, row in enumerate(rows)]
        self.rows = {}
        for key, row in zip(self.keys, rows, strict=True):
            scores = [0.0] * row.length
            scores[-1] = row.score
            info = {"score": row.score, "acc": 0.0 if row.failed else row.acc, FAILED_KEY: float(row.failed)}
            info[ERROR_KEY] = "KeyError: 'answer'" if row.failed else ""
            self.rows[key] = {
                "uid": row.uid,
                "response_mask": torch.ones(row.length),
                "rm_scores": torch.tensor(scores),
                "extra_fields": NonTensorData({"reward_extra_info": info}),
            }
        self.puts: list[dict[str, torch.Tensor]] = []

    def kv_batch_get(self, keys, partition_id, select_fields):
        present = [name for name in select_fields if name in self.rows[keys[0]]]
        values = {name: [self.rows[key][name] for key in keys] for name in present}
        if "extra_fields" in values:  # the accounting's read: lists and nested tensors, no padding
            return {name: v if name == "extra_fields" else _nested(v) for name, v in values.items()}
        out = {name: NonTensorStack.from_list(v) if name == "uid" else _nested(v) for name, v in values.items()}
        return TensorDict(out, batch_size=[len(keys)])

    def kv_batch_put(self, keys, partition_id, fields):
        put = {name: fields[name] for name in fields.keys()}
        self.puts.append(put)
        for name, value in put.items():
            for key, row in zip(keys, value.unbind(), strict=True):
                self.rows[key][name] = row
        return "written"

    def written(self, name: str) -> list[list[float]]:
        """Each row's values of the last put that held `name`, as float64 lists."""
        put = next(put for put in reversed(self.puts) if name in put)
        return [row.double().tolist() for row in put[name].unbind()]


class FakePRM:
    """The PRM worker group as the trainer calls it (`ImplicitPRM`): log-probs before the update (first call) and
    after it, the frozen reference's, and an update that reads its labels and weights from TransferQueue, as the
    worker's `prm_loss` does, and returns `update_metrics`."""

    is_lora = False

    def __init__(self, fake_tq: FakeTransferQueue, rows: list[Row], update_metrics=None):
        self.tq, self.rows = fake_tq, rows
        self.update_metrics = {"loss": 0.69, "grad_norm": 0.1, "lr": 1e-6} if update_metrics is None else update_metrics
        self.calls: list[str] = []
        self.trained_on: dict[str, list[list[float]]] = {}

    def log_probs(self, batch):
        updated = "update" in self.calls
        self.calls.append("log_probs")
        return _nested([row.after if updated and row.after is not None else row.before for row in self.rows])

    def reference_log_probs(self, batch):
        self.calls.append("reference")
        return _nested([row.ref for row in self.rows])

    def update(self, batch, capture=False):
        self.calls.append("update")
        for name in (PRM_LABEL_FIELD, PRM_WEIGHT_FIELD, PRM_REF_FIELD):
            self.trained_on[name] = [self.tq.rows[key][name].double().tolist() for key in batch.keys]
        return dict(self.update_metrics), None


@dataclass
class Batch:
    """veRL's KVBatchMeta, as far as the PRIME step reads it."""

    keys: list[str]
    partition_id: str = "train"
    tags: list[dict] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.keys)


def colocated(*overrides):
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        overrides = ["+recipe=prime_lora_colocated", "actor_rollout_ref.model.path=/m", *overrides]
        return compose("ppo_trainer", overrides=overrides)


@dataclass
class OneStep:
    """A PRIME step set up over `rows`, with its stand-ins; `run()` makes it."""

    tq: FakeTransferQueue
    prm: FakePRM
    step: prime_step_module.PrimeStep
    metrics: dict = field(default_factory=dict)

    def run(self) -> "OneStep":
        batch = Batch(self.tq.keys, tags=[{}] * len(self.tq.keys))
        self.step.compute_advantage(batch, self.metrics, prime_step_module.StepContext(global_step=STEP))
        return self

    def advantages_written(self) -> bool:
        return any("advantages" in put for put in self.tq.puts)


def prime_step(monkeypatch, rows: list[Row], *overrides, ema=0.5, update_metrics=None) -> OneStep:
    """A PRIME step on `rows` (groups of 2, one prompt per uid) with the colocated recipe and `overrides`, built from
    the run's typed config, its TransferQueue and PRM replaced by the stand-ins above, the gate's running mean at
    `ema` (through its state, as a checkpoint would load it)."""
    fake_tq = FakeTransferQueue(rows)
    monkeypatch.setattr(prime_step_module.tq, "kv_batch_get", fake_tq.kv_batch_get)
    monkeypatch.setattr(prime_step_module.tq, "kv_batch_put", fake_tq.kv_batch_put)
    prompts = len({row.uid for row in rows})
    config = colocated(
        f"data.train_batch_size={prompts}", "actor_rollout_ref.rollout.n=2", *REFERENCE_OPTIONS, *overrides
    )
    prm = FakePRM(fake_tq, rows, update_metrics)
    # the frozen copy's log-probs (`FakePRM.reference_log_probs`); dropout in the PRM: no capture from the update
    step = prime_step_module.PrimeStep(run_config(config), prm, REF_FROZEN, prm_dropout=1.0, prm_fp32=True)
    assert step.state_dict() == {"prm_pairwise_ema": 0.5}  # as a run starts
    step.load_state_dict({"prm_pairwise_ema": ema})
    return OneStep(fake_tq, prm, step)


# --------------------------------------------------------------------------------------------------
# the float64 reference: prime_grpo with the recipe's options, written out from its definition
# --------------------------------------------------------------------------------------------------


def reference_advantages(rows: list[Row], gate: float, mode: str = "before") -> list[list[float]]:
    """A[i,t] = c_o·A^o_i + w·c_p·A^p[i,t] with c_o = c_p = 1, γ = 1 and the process norm `sequence`, in Python
    floats: A^o_i = (R_i − mean_g R)/(std_g R + ε); r[i,t] = β·(log π_φ − log π_ref) of the PRM used for the
    advantage (after its update in `before` mode); z_i = Σ_t r[i,t]; r̃[i,t] = (r[i,t] − mean_g z / L_i)/(std_g z + ε),
    0 in a group with std_g z < the threshold; A^p[i,t] = Σ_{s ≥ t} r̃[i,s]. Unbiased stds; groups of ≥ 2 rows."""
    used = [row.after if mode == "before" and row.after is not None else row.before for row in rows]
    rewards = [[BETA * (p - q) for p, q in zip(lp, row.ref, strict=True)] for lp, row in zip(used, rows, strict=True)]
    z = [sum(r) for r in rewards]
    out = []
    for i, row in enumerate(rows):
        group = [j for j, other in enumerate(rows) if other.uid == row.uid]
        outcome = [rows[j].score for j in group]
        a_outcome = (row.score - statistics.mean(outcome)) / (statistics.stdev(outcome) + EPSILON)
        z_mean, z_std = statistics.mean(z[j] for j in group), statistics.stdev(z[j] for j in group)
        if z_std >= STD_THRESHOLD:
            normalised = [(r - z_mean / row.length) / (z_std + EPSILON) for r in rewards[i]]
        else:
            normalised = [0.0] * row.length
        a_process = [sum(normalised[t:]) for t in range(row.length)]
        out.append([a_outcome + gate * a for a in a_process])
    return out


# Two mixed groups. Before its update the PRM ranks each right answer above its wrong one (β·Σ(before − ref) is
# +0.06, −0.04, +0.04, −0.06): `prm/dpo_acc_before_mixed` = 1. After it the process rewards differ per token, and in
# group b the wrong answer ranks first (β·Σ(after − ref) = 0.03 < 0.1): the gate must read the ranking before it.
MIXED = [
    Row("a", 1.0, ref=[-1.0, -2.0, -0.5], before=[-0.6, -1.6, -0.1], after=[-0.2, -2.5, 0.3]),
    Row("a", 0.0, ref=[-1.5, -0.7], before=[-1.9, -1.1], after=[-1.0, -1.9]),
    Row("b", 1.0, ref=[-0.3, -0.9], before=[0.1, -0.5], after=[0.6, -1.2]),
    Row("b", 0.0, ref=[-2.0, -1.0, -0.4, -0.8], before=[-2.3, -1.3, -0.7, -1.1], after=[-1.1, -0.6, -0.2, -0.3]),
]


def test_the_reference_is_the_paper_formula_on_a_hand_computed_case():
    """The float64 reference itself, on one group by hand: scores 2 and 0 (A^o = ±1/(√2 + ε)), z = 0.1 and 0
    over one token each (σ = 0.1/√2, A^p = ±(0.05/σ) = ±1/√2 up to ε)."""
    rows = [Row("g", 1.0, ref=[0.0], before=[2.0]), Row("g", 0.0, ref=[0.0], before=[0.0])]
    a_o, a_p = 1 / (math.sqrt(2) + EPSILON), 0.05 / (0.1 / math.sqrt(2) + EPSILON)
    [[right], [wrong]] = reference_advantages(rows, gate=0.5, mode="after")
    assert (right, wrong) == pytest.approx((a_o + 0.5 * a_p, -a_o - 0.5 * a_p), rel=1e-12)


# --------------------------------------------------------------------------------------------------
# the gate's weight and the process term's sign reach the written advantages
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["before", "after"])
def test_the_gate_weight_scales_the_process_part_of_the_written_advantages(monkeypatch, mode):
    """With `algorithm.prime.process_gate=0.75` and a running mean of 0.6, a PRM that ranks this step's mixed
    groups right (pairwise accuracy 1 before its update) moves the mean to 0.9·0.6 + 0.1·1 = 0.64 and the weight to
    w = (0.64 − ½)/(0.75 − ½) = 0.56: the advantages written back are c_o·A^o + w·c_p·A^p (float64 reference),
    from the PRM after its update in `before` mode and before it in `after` mode."""
    step = prime_step(
        monkeypatch, MIXED, "algorithm.prime.process_gate=0.75", f"prime.prm.update={mode}", ema=0.6
    ).run()
    fake_tq, metrics = step.tq, step.metrics
    ema = 0.9 * 0.6 + 0.1 * 1.0
    gate = (ema - 0.5) / (0.75 - 0.5)
    assert 0.5 < gate < 0.6
    assert metrics["prm/dpo_acc_before_mixed"] == 1.0
    assert step.step.gate.pairwise_ema == pytest.approx(ema, abs=1e-12)
    assert metrics["prm/process_gate"] == pytest.approx(gate, abs=1e-12)
    expected = reference_advantages(MIXED, gate, mode)
    written = fake_tq.written("advantages")
    assert [len(row) for row in written] == [row.length for row in MIXED]
    for got, want in zip(written, expected, strict=True):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-5)
    # the process part is there and not at full weight: neither w = 1 nor w = 0 matches
    for other in (0.0, 1.0):
        far = reference_advantages(MIXED, other, mode)
        assert max(abs(g - f) for got, want in zip(written, far) for g, f in zip(got, want)) > 0.1
    assert fake_tq.written("returns") == written  # no whitening: the returns are the advantages
    assert metrics["prm/advantage/process_abs_mean"] > 0.05
    assert step.prm.calls == (
        ["log_probs", "reference", "update", "log_probs"] if mode == "before" else ["log_probs", "reference", "update"]
    )


def test_a_gate_at_chance_writes_the_outcome_only_advantages(monkeypatch):
    """A PRM that ranks no better than chance before its update (the mean stays ½) gets weight 0: the written
    advantages are c_o·A^o alone, however its rewards spread, and `prm/advantage/process_abs_mean` is 0."""
    rows = [Row(r.uid, r.acc, r.ref, before=list(r.ref), after=r.after) for r in MIXED]  # z = 0 before the update
    step = prime_step(monkeypatch, rows, "algorithm.prime.process_gate=0.75", ema=0.5).run()
    fake_tq, metrics = step.tq, step.metrics
    assert metrics["prm/dpo_acc_before_mixed"] == 0.5 and metrics["prm/process_gate"] == 0.0
    for got, want in zip(fake_tq.written("advantages"), reference_advantages(rows, 0.0), strict=True):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-5)
    assert metrics["prm/advantage/process_abs_mean"] == 0.0


def _equal_outcomes(later_reward: float) -> list[Row]:
    """Group `a`: two right answers of 3 tokens, the PRM raising the log-prob of tokens 1 and 2 of the first by
    `later_reward` (token 0 unchanged); group `b`: mixed, the PRM equal to its reference."""
    ref = [-1.0, -1.2, -0.8]
    raised = [ref[0], ref[1] + later_reward, ref[2] + later_reward]
    return [
        Row("a", 1.0, ref=ref, before=raised, after=raised),
        Row("a", 1.0, ref=ref, before=list(ref), after=list(ref)),
        Row("b", 1.0, ref=[-0.5, -0.5], before=[-0.5, -0.5]),
        Row("b", 0.0, ref=[-0.7], before=[-0.7]),
    ]


def test_positive_later_process_rewards_raise_a_tokens_written_advantage(monkeypatch):
    """Equal outcomes in group `a` (A^o = 0): with no process reward the first token's advantage is 0; with a
    positive PRM reward on the first response's later tokens it is larger (> 0), and its group mate's smaller."""
    zero = prime_step(monkeypatch, _equal_outcomes(0.0)).run().tq.written("advantages")
    positive = prime_step(monkeypatch, _equal_outcomes(0.5)).run().tq.written("advantages")
    assert zero[0] == [0.0, 0.0, 0.0] and zero[1] == [0.0, 0.0, 0.0]
    assert positive[0][0] > zero[0][0] + 0.5  # A^p[0,0] = (z_0 − mean z)/σ = 1/√2 (float64 reference below)
    assert positive[1][0] < zero[1][0] - 0.5
    assert positive[0][0] == pytest.approx(reference_advantages(_equal_outcomes(0.5), 1.0)[0][0], rel=1e-5)


# --------------------------------------------------------------------------------------------------
# the finiteness checks the PRM step runs
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "update_metrics, message",
    [
        ({"loss": math.nan, "grad_norm": 0.2, "lr": 1e-6}, "prm/update_loss = nan; its grad norm was finite"),
        ({"loss": 0.7, "grad_norm": math.inf, "lr": 1e-6}, r"prm/grad_norm = inf; veRL's FSDP engine skipped"),
    ],
)
def test_a_non_finite_prm_update_stops_the_step_before_any_advantage(monkeypatch, update_metrics, message):
    """The trainer checks the PRM update's loss and grad norm (`step_guards.check_prm_update`) as it returns:
    the run stops naming `prime.prm` and the step, and no advantage is written back."""
    step = prime_step(monkeypatch, MIXED, update_metrics=update_metrics)
    with pytest.raises(NonFiniteError, match=rf"^prime\.prm: step {STEP}: the PRM update gave {message}"):
        step.run()
    assert step.prm.calls[-1] == "update" and not step.advantages_written()


def test_non_finite_token_process_rewards_stop_the_step_before_any_advantage(monkeypatch):
    """A NaN in the PRM's log-probs on a response token (row 2, token 1) makes that token's process reward NaN:
    the trainer's check (`step_guards.check_finite` at the rewards) stops the run naming `prime.prm`, the row and
    the step, before the estimator runs and before any advantage is written back."""
    rows = [Row(r.uid, r.acc, r.ref, list(r.before), list(r.after)) for r in MIXED]
    rows[2].before[1] = rows[2].after[1] = math.nan
    step = prime_step(monkeypatch, rows)
    with pytest.raises(
        NonFiniteError,
        match=(
            rf"^prime\.prm: step {STEP}: the token process rewards β·\(log π_φ − log π_ref\) are NaN or infinite "
            r"on 1 response tokens of 1 rows \(rows 2; first value nan\)"
        ),
    ):
        step.run()
    assert not step.advantages_written()


# --------------------------------------------------------------------------------------------------
# what the PRM trains on: prime.prm.balance_labels
# --------------------------------------------------------------------------------------------------

# 3 prompts: 2 right and 3 wrong labelled answers, and one whose reward failed (no label: weight 0)
UNBALANCED = [
    Row("a", 1.0, ref=[-1.0, -1.0], before=[-1.0, -1.0]),
    Row("a", 0.0, ref=[-1.0], before=[-1.0]),
    Row("b", 0.0, ref=[-1.0, -1.0, -1.0], before=[-1.0, -1.0, -1.0]),
    Row("b", 0.0, ref=[-1.0, -1.0], before=[-1.0, -1.0]),
    Row("c", 1.0, ref=[-1.0], before=[-1.0]),
    Row("c", 1.0, ref=[-1.0, -1.0], before=[-1.0, -1.0], failed=True),
]


@pytest.mark.parametrize(
    "balance, weights",
    [
        # n = 5 labelled rows, n₁ = 2, n₀ = 3: w = n/(2n₁) = 5/4 on right answers, n/(2n₀) = 5/6 on wrong ones
        (True, [5 / 4, 5 / 6, 5 / 6, 5 / 6, 5 / 4, 0.0]),
        (False, [1.0, 1.0, 1.0, 1.0, 1.0, 0.0]),
    ],
)
def test_balance_labels_sets_the_weights_the_prm_update_reads(monkeypatch, balance, weights):
    """The labels and loss weights in TransferQueue when the PRM update runs (what its `prm_loss` reads), per
    response token: with `prime.prm.balance_labels` right and wrong answers weigh n/(2n₁) and n/(2n₀) (each class
    half the total), without it 1; a row whose reward failed has weight 0 either way."""
    step = prime_step(
        monkeypatch, UNBALANCED, f"prime.prm.balance_labels={balance}", "prime.max_failed_rollout_ratio=0.5"
    ).run()
    trained_on = step.prm.trained_on
    assert trained_on[PRM_LABEL_FIELD] == [[row.acc * (not row.failed)] * row.length for row in UNBALANCED]
    expected = [[w] * row.length for w, row in zip(weights, UNBALANCED, strict=True)]
    for got, want in zip(trained_on[PRM_WEIGHT_FIELD], expected, strict=True):
        assert got == pytest.approx(want, rel=1e-6)
    assert trained_on[PRM_REF_FIELD] == [row.ref for row in UNBALANCED]


def test_the_rankings_read_the_outcome_while_the_prm_trains_on_its_own_label(monkeypatch):
    """With `prime.prm.label_key` naming a label that contradicts the outcome (here 1 − acc), the PRM trains on that
    label, while its rankings (and so the gate and the alarm) are measured against the outcome `acc`: the PRM of
    MIXED, which orders right answers first, ranks at 1, not 0."""
    fake = prime_step(monkeypatch, MIXED, "prime.prm.label_key=prm_label")
    for key, row in zip(fake.tq.keys, MIXED, strict=True):
        fake.tq.rows[key]["extra_fields"].data["reward_extra_info"]["prm_label"] = 1.0 - row.acc
    step = fake.run()
    assert step.prm.trained_on[PRM_LABEL_FIELD] == [[1.0 - row.acc] * row.length for row in MIXED]
    assert step.metrics["prm/dpo_acc_before_mixed"] == 1.0 and step.metrics["prm/dpo_acc_mixed"] < 1.0
    assert step.metrics["prm/classification_acc"] == 0.0  # against its own (flipped) labels


def test_a_step_that_extends_evidence_of_an_inverted_ranking_logs_the_alert_and_warns(monkeypatch, caplog):
    """The alarm reads the step's held-out ranking z (`prm/ranking_z_before`) and the gate's weight: after an
    earlier step at z = −10 (the alarm's running sums) and this step's PRM at chance before its update (ties: z = 0),
    the running z is 0.9·(−10)/√(0.81 + 1) = −6.69: the step logs `prm/alert/ranking` = 1, the running z, the
    effective weight (gate × share of groups on), and one warning."""
    rows = [Row(r.uid, r.acc, r.ref, before=list(r.ref), after=r.after) for r in MIXED]
    fake = prime_step(monkeypatch, rows)
    fake.step.alarm.ranking_sum, fake.step.alarm.ranking_norm = -10.0, 1.0
    with caplog.at_level("WARNING", logger=prime_step_module.logger.name):
        step = fake.run()
    assert step.metrics["prm/ranking_z_before"] == 0.0
    assert step.metrics["prm/ranking_z_before_running"] == pytest.approx(-9.0 / math.sqrt(1.81))
    assert step.metrics["prm/alert/ranking"] == 1.0 and step.metrics["prm/alert/unused"] == 0.0
    assert step.metrics["prm/process_weight_effective"] == pytest.approx(
        step.metrics["prm/process_gate"] * step.metrics["prm/process_groups_on"]
    )
    assert sum("PRIME: the PRM ranks fresh responses below chance" in r.message for r in caplog.records) == 1
