"""Every recorded analysis of a registered study is reproduced by the lab's statistics as they are now
(benchmarks/lib/evidence.py, scipy.stats): `analysis.analyse` rerun on the study's plan and runs, copied into a
temporary folder, and each number of the record compared with the new one.

* Numbers that no random draw enters (endpoints, means, t and Welch intervals, Fisher's p, a permutation p over all
  relabellings) to 12 decimals: the records print float64 in full, and scipy's t quantiles differ from the
  hand-written ones they were made with by about 1e-15 (the analysis itself prints 3 decimals).
* A permutation p drawn from `DRAWS` random relabellings (more relabellings than that) within its simulation error:
  the record's and the new p are two independent estimates of the same p, each a binomial share of `DRAWS`, so
  their difference is within 4·√(2·p(1 − p)/DRAWS), plus 1/DRAWS for the observed relabelling both count.
* A Holm (or Bonferroni) adjusted p within k times the largest such error of its family of k tests (the
  adjustment moves by at most k times its p's).

A key the analysis gained after a record was made (`went_off` in the credit and shuffle studies) is not compared;
every key of the record must be there.
"""

import json
import math
import shutil
from pathlib import Path

import pytest

from benchmarks.lib import analysis
from benchmarks.lib.runs import run_file

STUDIES = Path(__file__).resolve().parents[3] / "benchmarks" / "studies"
DRAWS = 200_000  # evidence.permutation_p's default: every recorded Monte-Carlo p was drawn with it
DIGITS = 1e-12

# record -> (study folder, runs put in place of those of runs/). bf16_prm_study's "as first registered": its nine
# runs that Ray's memory monitor stopped (runs_killed/, failed runs kept out) instead of their reruns (runs/).
RECORDS = {
    "attribution_study/analysis.json": ("attribution_study", None),
    "bf16_prm_study/analysis.json": ("bf16_prm_study", None),
    "bf16_prm_study/analysis_as_registered.json": ("bf16_prm_study", "runs_killed"),
    "credit_study/analysis.json": ("credit_study", None),
    "planted_error/analysis.json": ("planted_error", None),
    "planted_gamma0/analysis.json": ("planted_gamma0", None),
    "shuffle_study/analysis.json": ("shuffle_study", None),
}


def copy_study(name: str, substitute: str | None, tmp: Path) -> Path:
    """The study's plan and every run it reads (also those it reuses from another study's folder), at the same
    places relative to the studies' folder under `tmp`; `substitute`'s runs over those of runs/."""
    plan = STUDIES / name / "plan.json"
    copy = tmp / name / "plan.json"
    copy.parent.mkdir(parents=True)
    shutil.copy(plan, copy)
    for entry in json.loads(plan.read_text())["runs"]:
        source = run_file(plan, entry).resolve()
        target = tmp / source.relative_to(STUDIES)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
    for source in sorted((STUDIES / name / substitute).glob("*.json")) if substitute else []:
        shutil.copy(source, tmp / name / "runs" / source.name)
    return copy


def exact(sizes: list[int]) -> bool:
    """Was the permutation p of arms of these sizes counted over all relabellings (`evidence.permutation_p`)?"""
    return math.comb(sum(sizes), sizes[0]) <= DRAWS


def simulation_error(p: float) -> float:
    return 4 * math.sqrt(2 * p * (1 - p) / DRAWS) + 1 / DRAWS


def p_tolerance(recorded: float, sizes: list[int]) -> float:
    return DIGITS if exact(sizes) else simulation_error(recorded)


def check(recorded, new, path: str, family: tuple[list, list] | None = None) -> None:
    """Every number of `recorded` at `path` reproduced by `new` (see the module); `family`: the recorded and new
    tests whose p's an adjusted p at `path` adjusts."""
    if isinstance(recorded, dict):
        assert isinstance(new, dict) and not set(recorded) - set(new), f"{path}: {sorted(set(recorded) - set(new))}"
        for key, value in recorded.items():
            where = f"{path}/{key}"
            if key == "permutation_p":
                tolerance = p_tolerance(value, new["sizes"])
                assert new[key] == pytest.approx(value, abs=tolerance), f"{where}: {value} -> {new[key]}"
            elif key in ("holm_p", "bonferroni_p"):
                tests, news = family
                index = next(i for i, test in enumerate(tests) if test is recorded)
                assert value == analysis.adjusted([t["permutation_p"] for t in tests], key[:-2])[index], where
                tolerance = len(tests) * max(p_tolerance(t["permutation_p"], n["sizes"]) for t, n in zip(tests, news))
                assert new[key] == pytest.approx(value, abs=tolerance), f"{where}: {value} -> {new[key]}"
            else:
                check(value, new[key], where, family)
    elif isinstance(recorded, list):
        assert isinstance(new, list) and len(new) == len(recorded), f"{path}: {recorded} -> {new}"
        if recorded and all(isinstance(t, dict) and "permutation_p" in t for t in recorded):
            family = (recorded, new)
        for i, (value, reproduced) in enumerate(zip(recorded, new)):
            check(value, reproduced, f"{path}[{i}]", family)
    elif isinstance(recorded, float):
        assert new == pytest.approx(recorded, abs=DIGITS), f"{path}: {recorded} -> {new}"
    else:
        assert new == recorded, f"{path}: {recorded} -> {new}"


@pytest.mark.parametrize("record", sorted(RECORDS))
def test_a_recorded_analysis_is_reproduced_by_the_statistics_of_today(record, tmp_path, monkeypatch):
    name, substitute = RECORDS[record]
    compare = analysis.compare

    def compare_with_sizes(by_arm, first, second, counts=None):
        return {**compare(by_arm, first, second, counts=counts), "sizes": [len(by_arm[first]), len(by_arm[second])]}

    monkeypatch.setattr(analysis, "compare", compare_with_sizes)
    plan = copy_study(name, substitute, tmp_path)
    analysis.analyse(plan)
    check(json.loads((STUDIES / record).read_text()), json.loads((plan.parent / "analysis.json").read_text()), record)
