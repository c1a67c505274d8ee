"""The run's alarm on a PRM gone bad (`integration.prm_alarm`) and the outcome its rankings are measured against."""

import json
import math
from pathlib import Path

import pytest
import torch

from verl_prime_lora.algo.core_algos import GATE_EMA_DECAY
from verl_prime_lora.algo.prm_metrics import prm_rewards_and_metrics
from verl_prime_lora.integration.prm_alarm import RANKING_METRIC, SILENT_METRIC, WARMUP_STEPS, PrmAlarm
from verl_prime_lora.integration.step_rows import outcome_labels


def step_metrics(ema: float, groups_on: float = 1.0, gate: float = 1.0) -> dict[str, float]:
    return {"prm/dpo_acc_before_mixed_ema": ema, "prm/process_groups_on": groups_on, "prm/process_gate": gate}


def test_the_warm_up_is_the_running_means_horizon():
    assert WARMUP_STEPS == 10 and math.isclose(1 / (1 - GATE_EMA_DECAY), WARMUP_STEPS)


def test_a_ranking_at_or_below_chance_warns_once_per_episode_after_the_warm_up():
    alarm = PrmAlarm("prime_grpo", process_gate=None, threshold=0.01)
    seen = [alarm.check(step_metrics(0.45)) for _ in range(WARMUP_STEPS - 1)]
    assert all(alerts[RANKING_METRIC] == 0.0 and not warnings for alerts, warnings in seen)
    alerts, warnings = alarm.check(step_metrics(0.5))  # step 10: ā = ½ is not better than chance
    assert alerts[RANKING_METRIC] == 1.0 and len(warnings) == 1
    text = warnings[0]
    for part in ("prm/dpo_acc_before_mixed", "0.500", "prime.prm.reference=policy", "process_gate=0.75", "gate is off"):
        assert part in text
    assert alarm.check(step_metrics(0.4)) == ({RANKING_METRIC: 1.0, SILENT_METRIC: 0.0}, [])  # still holding
    assert alarm.check(step_metrics(0.52))[0][RANKING_METRIC] == 0.0  # cleared
    alerts, warnings = alarm.check(step_metrics(0.49))  # a new episode warns again
    assert alerts[RANKING_METRIC] == 1.0 and len(warnings) == 1


def test_with_the_gate_on_the_warning_says_it_has_closed():
    alarm = PrmAlarm("prime_grpo", process_gate=0.75, threshold=0.01)
    for _ in range(WARMUP_STEPS - 1):
        alarm.check(step_metrics(0.6))
    _, warnings = alarm.check(step_metrics(0.48, gate=0.0))
    assert len(warnings) == 1 and "process_gate=0.75) has closed: weight 0.00" in warnings[0]


def test_a_process_term_silent_for_the_horizon_warns_for_prime_grpo_only():
    grpo = PrmAlarm("prime_grpo", process_gate=None, threshold=0.02)
    rloo = PrmAlarm("prime_rloo", process_gate=None, threshold=0.02)
    grpo.check(step_metrics(0.7, groups_on=0.25))  # one group on: the count starts after it
    for _ in range(WARMUP_STEPS - 1):
        alerts, warnings = grpo.check(step_metrics(0.7, groups_on=0.0))
        assert alerts[SILENT_METRIC] == 0.0 and not warnings
        assert rloo.check({"prm/dpo_acc_before_mixed_ema": 0.7}) == ({RANKING_METRIC: 0.0, SILENT_METRIC: 0.0}, [])
    alerts, warnings = grpo.check(step_metrics(0.7, groups_on=0.0))
    assert alerts == {RANKING_METRIC: 0.0, SILENT_METRIC: 1.0}
    assert len(warnings) == 1 and "process_std_threshold=0.02" in warnings[0] and "last 10 steps" in warnings[0]


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
    _, metrics = prm_rewards_and_metrics(prm, prm, ref, mask, labels, uid, 0.05, outcomes=outcomes)
    ranking = 1.0 if outcomes is None else 0.0
    assert metrics["prm/dpo_acc_before_mixed"] == ranking and metrics["prm/dpo_acc_mixed"] == ranking
    assert metrics["prm/classification_acc"] == 1.0  # the fit to its own labels is measured against them


RECORDED_DEMO_RUNS = [
    "benchmarks/results/demo_10steps/seed0.jsonl",
    "benchmarks/results/demo_10steps/seed0_data_seed1.jsonl",
    "benchmarks/results/demo_10steps/test_demo_seed0.jsonl",
    "benchmarks/results/prm_credit/demo_run_metrics.jsonl",  # 15 steps, as `make demo`
]


@pytest.mark.parametrize("path", RECORDED_DEMO_RUNS)
def test_the_alarm_stays_silent_on_the_recorded_demo_runs(path):
    """The demo's PRM ranks near chance over steps 2-5 and above it later (docs/findings.md): replayed step by step,
    its logged metrics raise no alert."""
    root = Path(__file__).resolve().parents[1]
    alarm = PrmAlarm("prime_grpo", process_gate=None, threshold=0.01)
    rows = [json.loads(line) for line in (root / path).read_text().splitlines() if line.strip()]
    trained = [row["data"] for row in rows if "prm/dpo_acc_before_mixed_ema" in row["data"]]
    assert len(trained) >= WARMUP_STEPS
    for metrics in trained:
        alerts, warnings = alarm.check(metrics)
        assert alerts == {RANKING_METRIC: 0.0, SILENT_METRIC: 0.0} and not warnings, metrics
