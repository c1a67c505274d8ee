"""benchmarks/soak/analyse.py: the slopes and their intervals, the quantities fitted, the resume checks."""

import math
import random

import pytest

from benchmarks.soak import analyse


def ar1(n: int, phi: float, rng: random.Random, sd: float = 1.0) -> list[float]:
    """An AR(1) series of stationary variance sd²."""
    value, out = rng.gauss(0, sd), []
    for _ in range(n):
        value = phi * value + rng.gauss(0, sd * math.sqrt(1 - phi * phi))
        out.append(value)
    return out


# ---------------------------------------------------------------------------------------------------------------
# slopes and intervals
# ---------------------------------------------------------------------------------------------------------------


def test_the_interval_covers_a_known_slope_under_autocorrelation_where_plain_ols_does_not():
    rng, slope, n, trials = random.Random(0), 0.02, 250, 300
    covered = covered_ols = 0
    for _ in range(trials):
        x = list(range(21, 21 + n))
        y = [100 + slope * step + noise for step, noise in zip(x, ar1(n, 0.7, rng))]
        fit = analyse.ewc_slope(x, y)
        covered += fit["low"] <= slope <= fit["high"]
        covered_ols += abs(fit["slope"] - slope) <= 1.96 * fit["se_ols"]
    assert 0.90 <= covered / trials <= 0.99
    assert covered_ols / trials < 0.85  # why the HAC interval: plain OLS is too sure of itself here


def test_the_slope_is_exact_without_noise_and_its_estimate_unbiased_with_it():
    x = list(range(10, 60))
    fit = analyse.ewc_slope(x, [3.0 + 0.25 * step for step in x])
    assert fit["slope"] == pytest.approx(0.25)
    assert fit["low"] == pytest.approx(0.25) and fit["high"] == pytest.approx(0.25)
    rng = random.Random(1)
    estimates = [analyse.ewc_slope(x, [0.25 * step + rng.gauss(0, 1) for step in x])["slope"] for _ in range(200)]
    assert sum(estimates) / len(estimates) == pytest.approx(0.25, abs=0.005)


def test_the_within_launch_slope_ignores_the_reset_of_each_launch():
    """Memory that grows 0.5 MB a step and falls back when the run restarts: pooled, the resets hide the growth."""
    rng = random.Random(2)
    x, y, groups = [], [], []
    for segment, (first, last) in enumerate([(1, 110), (101, 220), (201, 300)]):
        for step in range(first, last + 1):
            x.append(step)
            y.append(1000 + 0.5 * (step - first) + rng.gauss(0, 2))
            groups.append(segment)
    within = analyse.ewc_slope(x, y, groups)
    assert within["low"] <= 0.5 <= within["high"] and within["low"] > 0.4
    pooled = analyse.ewc_slope(x, y)
    assert pooled["slope"] < 0.3


def test_too_few_points_or_a_constant_step_give_no_slope():
    assert analyse.ewc_slope([1, 2, 3, 4, 5], [1, 2, 3, 4, 5]) is None
    assert analyse.ewc_slope([7] * 10, list(range(10))) is None
    assert analyse.ewc_slope([1, 2, 3, 4, 5, 6, 7, 8], [5.0] * 8)["high"] == 0  # constant: flat, interval of width 0


def record(segment, step, since_resume, values=None, metrics=None):
    return {
        "segment": segment,
        "step": step,
        "since_resume": since_resume,
        "replayed": False,
        "t": float(step),
        "values": values or {},
        "metrics": metrics or {},
    }


def test_warmup_and_the_steps_right_after_each_resume_are_left_out():
    records = [record(0, step, step, {"q": step}) for step in range(1, 40)]
    records += [record(1, step, step - 25, {"q": step}) for step in range(26, 60)]  # resumed from 25
    kept = analyse.points(records, "q", warmup=20, resume_skip=10)
    assert [(seg, step) for seg, step, _ in kept] == [(0, s) for s in range(21, 40)] + [(1, s) for s in range(36, 60)]
    records.append(record(1, 60, 35, {"q": float("nan")}))
    assert len(analyse.points(records, "q", 20, 10)) == len(kept)
    records[30]["values"]["timing_s/testing"] = 7.0  # step 31 validated: out, but for the validation's own time
    assert (0, 31) not in [(seg, step) for seg, step, _ in analyse.points(records, "q", 20, 10)]
    assert analyse.points(records, "timing_s/testing", 20, 10) == [(0, 31, 7.0)]
    assert [step for _, step, _ in analyse.points(records, "q", 20, 10, settle=50)] == list(range(50, 60))


def test_growth_reports_per_100_steps_with_a_verdict():
    rng = random.Random(3)
    records = [
        record(0, step, step, {"rss_mb/all": 5000 + 0.03 * step + rng.gauss(0, 1), "fds/all": 400 + rng.gauss(0, 1)})
        for step in range(1, 301)
    ]
    grows, flat = analyse.growth(records, "rss_mb/all", 20, 10), analyse.growth(records, "fds/all", 20, 10)
    assert grows["verdict"] == "grows" and grows["low"] <= 3.0 <= grows["high"] and grows["n"] == 280
    assert grows["relative"] == pytest.approx(grows["slope"] / grows["mean"])
    assert flat["verdict"] == "flat" and flat["model"] == "within segments"
    assert grows["late"]["n"] == 140 and grows["late"]["low"] <= 3.0 <= grows["late"]["high"]
    # the checkpoint folder outlives a launch (pooled), and counts once the run keeps its full number of checkpoints
    checkpoints = [record(s // 100, s, s % 100, {"disk/checkpoints_mb": min(s // 25, 2) * 2.0}) for s in range(1, 301)]
    pooled = analyse.growth(checkpoints, "disk/checkpoints_mb", 20, 10, settle=50)
    assert (
        pooled["model"] == "pooled" and pooled["slope"] == 0 and pooled["n"] == 251 - 11 - 11 - 1
    )  # steps 50-300 but a resumed launch's first 11 and step 300 (a launch of its own)


def test_a_growth_that_levels_off_shows_in_the_later_half():
    records = [record(0, s, s, {"rss_mb/gcs_server": 60 + 3.5 * min(s, 120)}) for s in range(1, 301)]
    result = analyse.growth(records, "rss_mb/gcs_server", 20, 10)
    assert result["verdict"] == "grows" and result["late"]["slope"] == pytest.approx(0, abs=1e-9)


def test_the_quantities_fitted_are_totals_kinds_phases_and_disk_but_not_cumulative_counters():
    values = {
        "rss_mb/all": 1.0,
        "rss_mb/ray::WorkerDict": 1.0,
        "rss_anon_mb/all": 1.0,
        "rss_anon_mb/ray::WorkerDict": 1.0,
        "peak/rss_mb/all": 1.0,
        "peak/rss_mb/ray::WorkerDict": 1.0,
        "threads/all": 1.0,
        "threads/raylet": 1.0,
        "fds/raylet": 1.0,
        "timing_s/step": 1.0,
        "timing_s/gen": 1.0,
        "disk/log_kb": 1.0,
        "disk/log_kb_per_step": 1.0,
        "disk/checkpoints_mb": 1.0,
    }
    records = [record(0, step, step, dict(values)) for step in range(1, 21)]
    records[5]["values"]["timing_s/save_checkpoint"] = 1.0  # once: too few for a slope
    names = analyse.quantities(records)
    assert names[0] == "rss_mb/all" and "rss_mb/ray::WorkerDict" in names and "peak/rss_mb/all" in names
    assert "rss_anon_mb/ray::WorkerDict" not in names and "peak/rss_mb/ray::WorkerDict" not in names
    assert "threads/raylet" not in names and "fds/raylet" in names
    assert "disk/log_kb" not in names and "disk/log_kb_per_step" in names
    assert names.index("timing_s/step") < names.index("timing_s/gen") and "timing_s/save_checkpoint" not in names


# ---------------------------------------------------------------------------------------------------------------
# resume handling
# ---------------------------------------------------------------------------------------------------------------


def test_a_replay_is_compared_pair_by_pair_with_the_step_to_step_variation():
    metrics = {s: 0.5 + 0.1 * (-1) ** s for s in range(1, 13)}  # alternating: consecutive steps differ by 0.2
    records = [record(0, s, s, metrics={"m": metrics[s]}) for s in range(1, 11)]
    records += [record(1, s, s - 6, metrics={"m": metrics[s]}) for s in range(7, 13)]  # exact replay of 7..10
    exact = analyse.replay_comparison(records, "m")
    assert exact["pairs"] == 4 and exact["identical"] == 4 and exact["steps"] == [7, 8, 9, 10]
    assert exact["rms_diff"] == 0 and exact["ratio"] == 0 and exact["rms_consecutive"] == pytest.approx(0.2)
    for r in records[10:]:
        r["metrics"]["m"] += 0.1  # the replay 0.1 off: half the step-to-step variation
    off = analyse.replay_comparison(records, "m")
    assert off["identical"] == 0 and off["mean_diff"] == pytest.approx(0.1) and off["ratio"] == pytest.approx(0.5)
    assert analyse.replay_comparison([record(0, 1, 1, metrics={"m": 1.0})], "m") is None


def test_the_run_as_trained_takes_the_replayed_value_of_a_step():
    records = [record(0, s, s, metrics={"m": 1.0}) for s in range(1, 6)]
    records += [record(1, s, s - 3, metrics={"m": 2.0}) for s in range(4, 8)]
    series = analyse.effective(records, "m")
    assert series[3] == (0, 1.0) and series[4] == (1, 2.0) and sorted(series) == list(range(1, 8))


def test_a_level_shift_at_a_resume_stands_out_from_the_placebos_and_noise_does_not():
    rng = random.Random(4)
    noise = {s: rng.gauss(0, 1) for s in range(1, 201)}
    shifted = {s: v + (4.0 if s >= 101 else 0.0) for s, v in noise.items()}
    (jump,) = analyse.boundary_shifts(shifted, [101], window=10, warmup=5)
    assert jump["z"] > 5 and jump["p"] == 0 and jump["shift"] == pytest.approx(4.0, abs=1.0)
    (calm,) = analyse.boundary_shifts(noise, [101], window=10, warmup=5)
    assert abs(calm["z"]) < 3 and calm["p"] > 0.01
    # placebos: windows past the warm-up that straddle no boundary; the boundaries' own windows are not placebos
    assert calm["placebos"] == len([a for a in range(16, 192) if not 91 < a < 111])
    (edge,) = analyse.boundary_shifts(noise, [195], window=10)
    assert edge["shift"] is None and edge["z"] is None  # its after-window runs past the series
