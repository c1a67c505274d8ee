"""How safely the demo test's learning assertions pass: their statistics on recorded runs, and the chance of a
false failure that a normal fit over those runs gives.

The assertions (tests/e2e/test_demo.py, statistics in benchmarks/evidence.py), each a one-sided
test against chance:
* `validation`: the lower 99.9 % bound of the rise of greedy validation accuracy from step 0 to step 5
  (n problems) must be > 0;
* `prm_used`: Stouffer's Z of `prm/ranking_z` over steps 1..5 must exceed z_0.999 = 3.09;
* reported, not asserted: `prm_held_out`, Stouffer's Z of `prm/ranking_z_before` over steps 2..5 (the PRM's
  ranking of responses it has not trained on), shown against z_0.999 to say how far it is from an assertion.

    python -m benchmarks.studies.demo_assertions.learning_assertions RUN [RUN ...]

A RUN is a demo's `metrics.jsonl` (`OUT/run/metrics.jsonl` of `python -m verl_prime_lora.demo`) or a
`learning.json` of the learning study (its PRIME runs). Runs that lack a series are skipped for that
assertion (runs recorded before `prm/ranking_z` existed have none). For each assertion it prints every run's
statistic, their mean and standard deviation, and Φ((threshold − mean)/sd): the false-failure rate if the
statistic is normal across runs of the same settings (a rough figure with few runs; it says how many
standard deviations of run-to-run spread lie between the typical run and the bar).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from statistics import NormalDist

from benchmarks.lib.evidence import pooled_z, pooled_z_threshold, validation_rise_bound
from verl_prime_lora.demo.learning_run import is_val_accuracy_key

STEPS = 5  # the demo test's run (tests/e2e/test_demo.py); a longer run's first STEPS steps are the same
VALIDATED = (5,)  # its validations after step 0
VALIDATION_PROBLEMS = 200  # the chain task's test split (warm_start.write_warm_assets' test_size)


def load_runs(path: Path) -> list[tuple[str, dict[int, dict]]]:
    """(name, {step: metrics}) of every run a file holds."""
    if path.suffix == ".jsonl":
        steps = {}
        for line in path.read_text().splitlines():
            row = json.loads(line)
            steps[int(row["step"])] = row["data"]
        return [(str(path), steps)]
    data = json.loads(path.read_text())
    return [
        (f"{path.name}:{run['name']}", {int(step): metrics for step, metrics in run["steps"].items()})
        for run in data["runs"]
        if any("prm/dpo_acc" in metrics for metrics in run["steps"].values())
    ]


def statistics_of(steps: dict[int, dict]) -> dict[str, float | None]:
    val = {s: v for s, m in steps.items() for k, v in m.items() if is_val_accuracy_key(k)}
    out: dict[str, float | None] = {"validation": None, "prm_used": None, "prm_held_out": None}
    if {0, *VALIDATED} <= set(val):
        out["validation"] = validation_rise_bound(val[0], [val[s] for s in VALIDATED], VALIDATION_PROBLEMS)
    for name, key, first in (("prm_used", "prm/ranking_z", 1), ("prm_held_out", "prm/ranking_z_before", 2)):
        series = [steps[s][key] for s in range(first, STEPS + 1) if s in steps and key in steps[s]]
        if len(series) == STEPS - first + 1:
            out[name] = pooled_z(series)
    return out


THRESHOLDS = {"validation": 0.0, "prm_used": pooled_z_threshold(1e-3), "prm_held_out": pooled_z_threshold(1e-3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+")
    args = parser.parse_args()
    table = [(name, statistics_of(steps)) for path in args.runs for name, steps in load_runs(path)]
    for assertion, threshold in THRESHOLDS.items():
        values = [stats[assertion] for _, stats in table if stats[assertion] is not None]
        print(f"\n{assertion} (fails at <= {threshold:.3f}):")
        for name, stats in table:
            if stats[assertion] is not None:
                print(f"  {stats[assertion]:8.3f}  {name}")
        if len(values) >= 2:
            mean, sd = statistics.mean(values), statistics.stdev(values)
            rate = NormalDist(mean, sd).cdf(threshold) if sd > 0 else float(mean <= threshold)
            print(
                f"  runs {len(values)}, mean {mean:.3f}, sd {sd:.3f}, margin {(mean - threshold) / sd:.1f} sd, "
                f"false-failure rate (normal fit) {rate:.2g}"
            )


if __name__ == "__main__":
    main()
