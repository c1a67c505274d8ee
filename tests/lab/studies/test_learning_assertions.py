"""benchmarks/learning_assertions.py: the statistics it reads from a run's metrics file."""

import json

import pytest

from benchmarks.lib import evidence

pooled_z, validation_rise_bound = evidence.pooled_z, evidence.validation_rise_bound

VAL = "val-core/chain_arithmetic/acc/mean@1"


@pytest.fixture(scope="module")
def bench():
    from benchmarks.studies.demo_assertions import learning_assertions

    return learning_assertions


def test_a_demo_metrics_file_gives_the_three_statistics(bench, tmp_path):
    """From a 10-step run, the statistics of its first 5 steps: what the demo test asserts on."""
    rows = [{"step": 0, "data": {VAL: 0.2}}]
    for step in range(1, 11):
        data = {"prm/ranking_z": 2.0, "prm/ranking_z_before": 1.0 if step > 1 else 0.0}
        if step in (5, 10):
            data[VAL] = 0.4 + 0.01 * step
        rows.append({"step": step, "data": data})
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    ((name, steps),) = bench.load_runs(path)
    stats = bench.statistics_of(steps)
    assert stats["validation"] == pytest.approx(validation_rise_bound(0.2, [0.45], 200))
    assert stats["prm_used"] == pytest.approx(pooled_z([2.0] * 5))  # 2·√5
    assert stats["prm_held_out"] == pytest.approx(pooled_z([1.0] * 4))  # steps 2..5 only: 2


def test_a_run_without_the_series_is_skipped(bench):
    assert bench.statistics_of({1: {"prm/dpo_acc": 0.7}}) == {
        "validation": None,
        "prm_used": None,
        "prm_held_out": None,
    }
