"""The run's alarm on a PRM gone bad (`prime.prm_alarm`) and the outcome its rankings are measured against."""

import json
import math
from pathlib import Path
from statistics import NormalDist

import pytest
import torch

from verl_prime_lora.algo.implicit_prm import prm_ranking_z
from verl_prime_lora.algo.prm_metrics import prm_rewards_and_metrics
from verl_prime_lora.algo.process_gate import GATE_EMA_DECAY, process_gate_weight
from verl_prime_lora.prime.prm_alarm import (
    EFFECTIVE_WEIGHT_METRIC,
    RANKING_METRIC,
    RUNNING_Z_METRIC,
    UNUSED_METRIC,
    UNUSED_WEIGHT,
    UNUSED_WINDOW,
    PrmAlarm,
    ProcessSignals,
)
from verl_prime_lora.prime.step_rows import outcome_labels


def signals(z: float = 0.0, ema: float = 0.5, gate: float = 1.0, groups_on: float | None = 1.0) -> ProcessSignals:
    return ProcessSignals(ranking_z_before=z, pairwise_ema=ema, gate=gate, groups_on=groups_on, group_std_max=0.2)


def test_the_running_z_is_an_exponentially_weighted_stouffer_z():
    """Z_t = Σ_s d^(t−s) z_s / sqrt(Σ_s d^(2(t−s))), against a float64 sum over the whole history."""
    alarm = PrmAlarm(process_gate=None, threshold=0.01)
    history = [0.3, -1.2, 2.0, -0.4, -2.5, 0.0, 1.1]
    for t, z in enumerate(history):
        metrics, _ = alarm.check(signals(z))
        weights = [GATE_EMA_DECAY ** (t - s) for s in range(t + 1)]
        expected = sum(w * history[s] for s, w in enumerate(weights)) / math.sqrt(sum(w * w for w in weights))
        assert metrics[RUNNING_Z_METRIC] == pytest.approx(expected, rel=1e-12)


def test_a_ranking_below_chance_by_evidence_warns_once_per_episode():
    alarm = PrmAlarm(process_gate=None, threshold=0.01)
    metrics, warnings = alarm.check(signals(-3.9))  # one step at -3.9: Z = -3.9, not yet at -4
    assert metrics[RANKING_METRIC] == 0.0 and not warnings
    metrics, warnings = alarm.check(signals(-3.0))  # Z = (0.9·(-3.9) - 3) / sqrt(1.81) = -4.84
    assert metrics[RANKING_METRIC] == 1.0 and len(warnings) == 1
    for part in ("prm/ranking_z_before", "-4.8", "prime.prm.reference=policy", "process_gate=0.75", "gate is off"):
        assert part in warnings[0]
    metrics, warnings = alarm.check(signals(-1.0))  # still below: holding, no second warning
    assert metrics[RANKING_METRIC] == 1.0 and not warnings
    while alarm.check(signals(1.0))[0][RANKING_METRIC]:  # the evidence decays: cleared
        pass
    while True:
        metrics, warnings = alarm.check(signals(-3.0))
        if metrics[RANKING_METRIC]:
            break
    assert len(warnings) == 1  # a new episode warns again


def test_with_the_gate_on_the_ranking_warning_gives_its_weight():
    alarm = PrmAlarm(process_gate=0.75, threshold=0.01)
    _, warnings = alarm.check(signals(-5.0, ema=0.45, gate=0.0))
    assert len(warnings) == 1 and "The process gate holds it at weight 0.00" in warnings[0]


def test_an_unused_process_term_warns_after_its_window_and_clears_at_twice_the_bar():
    alarm = PrmAlarm(process_gate=0.75, threshold=0.02)
    for _ in range(UNUSED_WINDOW - 1):  # the window not yet full: no alert however low
        metrics, warnings = alarm.check(signals(gate=0.0))
        assert metrics[UNUSED_METRIC] == 0.0 and not warnings
    metrics, warnings = alarm.check(signals(ema=0.51, gate=0.04, groups_on=0.5))
    assert metrics[UNUSED_METRIC] == 1.0 and metrics[EFFECTIVE_WEIGHT_METRIC] == pytest.approx(0.02)
    assert len(warnings) == 1
    for part in ("averaged 0.00 over the last 5 steps", "process_gate=0.75) is at 0.04", "0.510", "50% of groups",
                 "process_std_threshold=0.02", "trainer.v1.trainer_mode=sync"):  # fmt: skip
        assert part in warnings[0]
    metrics, warnings = alarm.check(signals(gate=1.0))  # mean 0.204: above the bar, below twice it: holding
    assert metrics[UNUSED_METRIC] == 1.0 and not warnings
    assert alarm.check(signals(gate=1.0))[0][UNUSED_METRIC] == 0.0  # mean 0.404: cleared


def test_no_unused_alert_with_the_process_term_switched_off_or_ungated_and_on():
    off = PrmAlarm(process_gate=0.75, threshold=0.01, process_coef=0.0)
    ungated = PrmAlarm(process_gate=None, threshold=0.01)
    rloo = PrmAlarm(process_gate=None, threshold=0.01)
    for _ in range(3 * UNUSED_WINDOW):
        assert off.check(signals(gate=0.0))[0][UNUSED_METRIC] == 0.0
        assert ungated.check(signals(groups_on=0.8))[0][UNUSED_METRIC] == 0.0
        assert rloo.check(signals(groups_on=None))[0][UNUSED_METRIC] == 0.0
    silent, _ = ungated.check(signals(groups_on=0.0))
    assert silent[EFFECTIVE_WEIGHT_METRIC] == 0.0


def test_a_prm_ranking_at_065_from_its_first_step_opens_the_gate_above_the_unused_bar():
    """The bar's calibration (module docstring): ā from ½ moved by 0.65 each step (d = 0.9), w of gate 0.75:
    the mean of w over steps 1-5 is 0.158, above 0.15; at 0.6 it is below."""

    def mean_gate(ranking: float) -> float:
        ema, weights = 0.5, []
        for _ in range(UNUSED_WINDOW):
            ema = GATE_EMA_DECAY * ema + (1 - GATE_EMA_DECAY) * ranking
            weights.append(process_gate_weight(ema, 0.75))
        return sum(weights) / len(weights)

    assert mean_gate(0.65) == pytest.approx(0.158, abs=1e-3) and mean_gate(0.65) > UNUSED_WEIGHT
    assert mean_gate(0.6) < UNUSED_WEIGHT


def bf16_runs(arm: str) -> list[dict]:
    root = Path(__file__).resolve().parents[2] / "benchmarks/studies/bf16_prm_study/runs"
    return [json.loads(path.read_text()) for path in sorted(root.glob(f"{arm}_seed*.json"))]


def replay(alarm: PrmAlarm, steps: dict) -> list[dict]:
    """A recorded run's logged metrics, step by step, through the alarm."""
    seen = []
    for step in sorted(steps, key=int):
        m = steps[step]
        if "prm/process_gate" not in m:  # step 0: validation only
            continue
        signals = ProcessSignals(
            m["prm/ranking_z_before"],
            m["prm/dpo_acc_before_mixed_ema"],
            m["prm/process_gate"],
            m.get("prm/process_groups_on"),
            m.get("prm/process_group_std/max"),
        )
        seen.append(alarm.check(signals)[0])
    return seen


def test_every_gated_run_of_the_bf16_study_trips_the_unused_alarm_and_no_ungated_one_does():
    """The bf16 study's gated arm trained as GRPO (gate weight 0.045 on average): replayed, each of its ten runs trips
    `prm/alert/unused` by step 5; the ungated arms' runs, whose term reached the actor, never do. None of the 30 runs
    trips the ranking alarm: their PRMs ranked fresh responses at chance, not below it."""
    gated = bf16_runs("prime_shipped_gated")
    assert len(gated) == 10
    for record in gated:
        seen = replay(PrmAlarm(process_gate=0.75, threshold=0.01), record["steps"])
        assert seen[UNUSED_WINDOW - 1][UNUSED_METRIC] == 1.0, record["seed"]
    for record in [*gated, *bf16_runs("prime_shipped"), *bf16_runs("prime_policy_ref")]:
        ungated = record["arm"] != "prime_shipped_gated"
        seen = replay(PrmAlarm(process_gate=None if ungated else 0.75, threshold=0.01), record["steps"])
        assert not any(step[RANKING_METRIC] for step in seen), record["seed"]
        if ungated:
            assert not any(step[UNUSED_METRIC] for step in seen), (record["arm"], record["seed"])


SEED_GROUPS = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0] * 4)  # the seed's step: 4 prompts × 6, 3 right in each
SEED_UID = [f"g{g}" for g in range(4) for _ in range(6)]
# z of a right answer ~ N(−δ, 1), of a wrong one N(+δ, 1): pairwise accuracy Φ(−√2·δ); 0.30 at δ = 0.3708
INVERTED_SEPARATION = 0.3708


def replayed_ranking_z(generator: torch.Generator, separation: float) -> float:
    """One step's `prm/ranking_z_before` at the seed's shape, from the real statistic (`prm_ranking_z`)."""
    logits = torch.randn(24, generator=generator, dtype=torch.float64) + separation * (1 - 2 * SEED_GROUPS)
    return prm_ranking_z(logits, SEED_GROUPS, SEED_UID, torch.ones(24, 1)).item()


def first_ranking_alert(seed: int, separation: float, steps: int) -> int | None:
    generator = torch.Generator().manual_seed(seed)
    alarm = PrmAlarm(process_gate=None, threshold=0.01)
    for step in range(1, steps + 1):
        if alarm.check(signals(replayed_ranking_z(generator, separation)))[0][RANKING_METRIC]:
            return step
    return None


def test_the_inverted_prm_margin_is_what_the_replays_say():
    """The margin the replays below rely on: at δ = 0.3708 the PRM's pairwise accuracy is 0.30 (0.20 below chance)
    and its per-step z averages about −1.57 (exact mean of the stratified statistic: 4 groups of 9 pairs)."""
    assert NormalDist().cdf(-math.sqrt(2) * INVERTED_SEPARATION) == pytest.approx(0.30, abs=1e-4)
    generator = torch.Generator().manual_seed(0)
    mean_z = sum(replayed_ranking_z(generator, INVERTED_SEPARATION) for _ in range(4000)) / 4000
    assert mean_z == pytest.approx(4 * 9 * (0.30 - 0.5) / math.sqrt(4 * 9 * 7 / 12), abs=0.05)


@pytest.mark.parametrize("seed", range(20))
def test_a_replayed_inverted_prm_is_named_within_30_steps(seed):
    """A PRM ranking fresh responses at 0.30 (per-step z about −1.57): named within 30 steps in each of 20 replays
    (simulated: by step 20 with probability 0.995, module docstring of `prm_alarm`)."""
    step = first_ranking_alert(seed, INVERTED_SEPARATION, steps=30)
    assert step is not None and step >= 2  # one step's z alone (N(−1.57, 1)) is never below −4 here


@pytest.mark.parametrize("seed", range(20))
def test_a_replayed_prm_at_chance_never_trips_the_ranking_alarm(seed):
    """A PRM at chance for 300 steps: no ranking alert in any of 20 replays (a flicker at chance was what the
    running mean's "≤ ½" did: about half the steps)."""
    assert first_ranking_alert(1000 + seed, 0.0, steps=300) is None


def extra(acc: float, flipped: float) -> dict:
    return {"reward_extra_info": {"acc": acc, "prm_label": flipped}}


def test_the_rankings_use_the_outcome_accuracy_when_the_prm_trains_on_another_label():
    rows = [extra(1.0, 0.0), extra(0.0, 1.0), extra(0.0, 1.0)]
    labels = torch.tensor([0.0, 1.0, 1.0])
    assert outcome_labels(rows, [False, False, False], labels).tolist() == [1.0, 0.0, 0.0]
    # a row without `acc` (a reward of its own): the PRM's labels are the outcome
    assert outcome_labels([*rows[:2], {"reward_extra_info": {}}], [False] * 3, labels) is labels
    # an unlabelled row is not read
    assert outcome_labels([*rows[:2], {}], [False, False, True], labels).tolist() == [1.0, 0.0, 0.0]


@pytest.mark.parametrize("outcomes", [None, torch.tensor([0.0, 1.0, 0.0, 1.0])])
def test_a_prm_that_orders_its_labels_but_not_the_outcome_ranks_below_chance(outcomes):
    """Group of four: the PRM scores rows 0 and 2 highest (its labels), the outcome says rows 1 and 3 are right."""
    labels = torch.tensor([1.0, 0.0, 1.0, 0.0])
    mask = torch.ones(4, 3)
    ref = torch.zeros(4, 3)
    prm = torch.tensor([[1.0] * 3, [-1.0] * 3, [0.5] * 3, [-0.5] * 3])
    uid = ["g"] * 4
    _, metrics, _ = prm_rewards_and_metrics(prm, prm, ref, mask, labels, uid, 0.05, outcomes=outcomes)
    ranking = 1.0 if outcomes is None else 0.0
    assert metrics["prm/dpo_acc_before_mixed"] == ranking and metrics["prm/dpo_acc_mixed"] == ranking
    assert metrics["prm/classification_acc"] == 1.0  # the fit to its own labels is measured against them


RECORDED_DEMO_RUNS = [
    "benchmarks/studies/demo_assertions/demo_10steps/seed0.jsonl",
    "benchmarks/studies/demo_assertions/demo_10steps/seed0_data_seed1.jsonl",
    "benchmarks/studies/demo_assertions/demo_10steps/test_demo_seed0.jsonl",
    "benchmarks/studies/prm_credit/demo_run_metrics.jsonl",  # 15 steps, as `make demo`
]


@pytest.mark.parametrize("path", RECORDED_DEMO_RUNS)
def test_the_recorded_demo_runs_rank_above_chance_and_were_gated_shut_at_first(path):
    """The demo's PRM ranks near chance over steps 2-5 and above it later (docs/findings.md): replayed step by step
    as they ran (gated at 0.75 then), no ranking alert; their gate was 0 over steps 1-5, so `prm/alert/unused` names
    the first five steps' GRPO-only training."""
    root = Path(__file__).resolve().parents[2]
    rows = [json.loads(line) for line in (root / path).read_text().splitlines() if line.strip()]
    trained = {str(row["step"]): row["data"] for row in rows if "prm/dpo_acc_before_mixed_ema" in row["data"]}
    assert len(trained) >= 10
    seen = replay(PrmAlarm(process_gate=0.75, threshold=0.01), trained)
    assert not any(alerts[RANKING_METRIC] for alerts in seen)
    assert seen[UNUSED_WINDOW - 1][UNUSED_METRIC] == 1.0
