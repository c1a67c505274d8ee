"""The soak's analysis: what grows per 100 steps, with intervals robust to autocorrelation, and the resume
against the run's own variation. Pure functions of the records `sample.step_records` makes
(`tests/lab/soak/test_analyse.py`).

Per quantity the growth per 100 steps, an OLS slope with segment intercepts (a process's memory restarts with each
launch; the checkpoint folder, which outlives them, is fitted pooled), and its 95 % interval from an
equal-weighted-cosine HAC variance with Student-t critical values (Lazarus, Lewis, Stock & Watson 2018:
ν = ⌊0.4 T^{2/3}⌋ cosine terms; step times and memory are autocorrelated, and plain OLS intervals would be too
narrow), also over the later half of the steps (does a growth level off?). The run's first `--warmup` steps, each
resumed segment's first `--resume-skip` steps and the steps that validated are left out; the checkpoint folder
counts once all `--keep` checkpoints exist.

The resume against an uninterrupted run: vLLM-CPU's sampling is not reproducible run to run (docs/cpu.md), and the
prompt filter's in-flight groups are not checkpointed (veRL's sync trainer saves the dataloader's position only),
so no twin can match exactly. Instead the steps trained twice (after the last checkpoint before a kill, up to the
kill) are compared pair by pair against the run's own step-to-step variation (`replay_comparison`), and each
metric's level across a resume against the same shift at every other step (`boundary_shifts`).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter

from benchmarks.lib.evidence import t_quantile
from benchmarks.soak.sample import ALL, CUMULATIVE

# The training metrics compared across a resume (each where the run logs it).
TRAINING_METRICS = (
    "critic/score/mean",
    "prm/label_mean",
    "prm/dpo_acc",
    "prm/classification_acc",
    "prm/ce_loss",
    "prm/update_loss",
    "prm/grad_norm",
    "prm/process_gate",
    "prm/dpo_acc_before_mixed_ema",
    "actor/pg_loss",
    "actor/entropy",
    "actor/grad_norm",
    "response_length/mean",
    "training/prompt_filter/kept_ratio",
    "rollout_corr/kl",
    "training/rollout_probs_diff_mean",
)
# Quantities fitted pooled over the whole run, not per launch: they outlive a launch.
POOLED = ("disk/checkpoints_mb", "disk/checkpoint_folders")
VALIDATION = "timing_s/testing"  # logged by the steps that validated


def ewc_slope(x: list[float], y: list[float], groups: list | None = None, level: float = 0.95) -> dict | None:
    """OLS slope of y on x (with an intercept per group, when given: the slope within groups) and its `level`
    interval from the equal-weighted-cosine (EWC) estimate of the scores' long-run variance, with Student-t critical
    values of ν = ⌊0.4 T^{2/3}⌋ degrees of freedom (Lazarus, Lewis, Stock & Watson 2018): valid when the errors are
    autocorrelated, as step times and memory are. The observations are taken in the order given. Also the plain-OLS
    standard error (`se_ols`), which assumes independent errors. None with fewer than 6 points or x constant."""
    n = len(x)
    if n < 6 or len(y) != n:
        return None
    labels = groups if groups is not None else [0] * n
    xs, ys = _demeaned(x, labels), _demeaned(y, labels)
    sxx = sum(v * v for v in xs)
    if sxx <= 1e-12 * max(1.0, sum(v * v for v in x)):
        return None
    beta = sum(a * b for a, b in zip(xs, ys)) / sxx
    residuals = [b - beta * a for a, b in zip(xs, ys)]
    scores = [a * u for a, u in zip(xs, residuals)]
    nu = max(2, math.floor(0.4 * n ** (2 / 3)))
    omega = 0.0
    for j in range(1, nu + 1):
        projection = math.sqrt(2 / n) * sum(
            math.cos(math.pi * j * (t + 0.5) / n) * score for t, score in enumerate(scores)
        )
        omega += projection * projection / nu
    se = math.sqrt(n * omega) / sxx
    dof = n - len(set(labels)) - 1
    se_ols = math.sqrt(sum(u * u for u in residuals) / max(dof, 1) / sxx)
    half = t_quantile(0.5 + level / 2, nu) * se
    return {"slope": beta, "low": beta - half, "high": beta + half, "se": se, "se_ols": se_ols, "n": n, "nu": nu}


def _demeaned(values: list[float], labels: list) -> list[float]:
    sums: dict = {}
    for value, label in zip(values, labels):
        total, count = sums.get(label, (0.0, 0))
        sums[label] = (total + value, count + 1)
    return [value - sums[label][0] / sums[label][1] for value, label in zip(values, labels)]


def kept(record: dict, warmup: int, resume_skip: int) -> bool:
    """Whether a step record counts in the slopes: past the run's first `warmup` steps and, in a resumed segment,
    past its first `resume_skip` steps (a launch's warm-up: fresh processes, first generations)."""
    if record["step"] <= warmup:
        return False
    return record["segment"] == 0 or record["since_resume"] > resume_skip


def points(
    records: list[dict], name: str, warmup: int, resume_skip: int, settle: int = 0
) -> list[tuple[int, int, float]]:
    """(segment, step, value) of the `kept` records from step `settle` on that have a finite `name`, in run order
    (segment, then step). A step that validated is left out (but from `timing_s/testing`): the validation's own
    generations add to its CPU, its log and its connections."""
    found = []
    for record in records:
        value = record["values"].get(name)
        if value is None or not math.isfinite(value) or not kept(record, warmup, resume_skip):
            continue
        if record["step"] < settle or (VALIDATION in record["values"] and name != VALIDATION):
            continue
        found.append((record["segment"], record["step"], float(value)))
    return sorted(found)


def growth(records: list[dict], name: str, warmup: int, resume_skip: int, settle: int = 0) -> dict | None:
    """`name`'s growth per 100 steps (`ewc_slope` × 100, within segments, or pooled for `POOLED` quantities, which
    count from step `settle` on: once the run keeps its full number of checkpoints) with its 95 % interval, its
    mean, the growth relative to the mean, a verdict (`flat`: the interval holds 0; `grows`, `falls`), and the same
    fit over the later half of the steps (`late`: does a growth level off?)."""
    pooled = name in POOLED
    found = points(records, name, warmup, resume_skip, settle if pooled else 0)

    def fit(selected):
        result = ewc_slope(
            [p[1] for p in selected], [p[2] for p in selected], None if pooled else [p[0] for p in selected]
        )
        if result is None:
            return None
        per100 = {key: result[key] * 100 for key in ("slope", "low", "high", "se", "se_ols")}
        verdict = "flat" if per100["low"] <= 0 <= per100["high"] else ("grows" if per100["slope"] > 0 else "falls")
        return {**per100, "n": result["n"], "nu": result["nu"], "verdict": verdict}

    whole = fit(found)
    if whole is None:
        return None
    mean = statistics.fmean(p[2] for p in found)
    middle = statistics.median(p[1] for p in found)
    return {
        **whole,
        "mean": mean,
        "relative": whole["slope"] / mean if mean else None,
        "model": "pooled" if pooled else "within segments",
        "late": fit([p for p in found if p[1] >= middle]),
    }


def quantities(records: list[dict], share: float = 0.5) -> list[str]:
    """The flat quantities given a slope, in a stable order: RSS, fds and CPU per step by process kind and in total;
    anonymous RSS, peak RSS, threads and processes in total; fds by type; the `timing_s/*` phases; the disk. Each
    present in at least `share` of the records (a `timing_s/*` phase that runs on some steps only, as the save, in at
    least 6). `CUMULATIVE` quantities are fitted per step instead (`..._per_step`)."""
    per_kind = ("rss_mb/", "fds/", "cpu_s/", "fd_types/", "timing_s/", "disk/")
    counts = Counter(name for record in records for name in record["values"])
    names = []
    for name, count in counts.items():
        if name in CUMULATIVE or not (name.startswith(per_kind) or name.endswith(f"/{ALL}")):
            continue
        if count >= share * len(records) or (name.startswith("timing_s/") and count >= 6):
            names.append(name)
    order = (
        "rss_mb/",
        "peak/rss_mb/",
        "rss_anon_mb/",
        "fds/",
        "fd_types/",
        "threads/",
        "procs/",
        "cpu_s/",
        "timing_s/",
    )

    def key(name: str) -> tuple:
        group = next((i for i, prefix in enumerate(order) if name.startswith(prefix)), len(order))
        return (group, not name.endswith(f"/{ALL}") and name != "timing_s/step", name)

    return sorted(names, key=key)


def effective(records: list[dict], key: str) -> dict[int, tuple[int, float]]:
    """{step: (segment, value)} of a training metric over the run as trained: a step trained twice counts its
    later segment's value (the one the run continued from)."""
    found = {}
    for record in sorted(records, key=lambda item: (item["segment"], item["step"])):
        value = record["metrics"].get(key)
        if value is not None and math.isfinite(value):
            found[record["step"]] = (record["segment"], float(value))
    return found


def replay_comparison(records: list[dict], key: str, warmup: int = 0) -> dict | None:
    """The steps trained twice (logged by a segment, then again by the segment that resumed after it): the pairs'
    differences (the later minus the earlier), the share of identical pairs, and the ratio of their RMS to the RMS
    of consecutive-step differences within a segment past `warmup` (independent draws of one step's quantity differ
    by √2 σ, as consecutive steps do when the quantity changes slowly: a ratio near 1 is a replay no further from
    the original than the next step is; exactly 0 a bit-exact replay). None without a pair."""
    by_segment: dict[int, dict[int, float]] = {}
    for record in records:
        value = record["metrics"].get(key)
        if value is not None and math.isfinite(value):
            by_segment.setdefault(record["segment"], {})[record["step"]] = float(value)
    pairs = []
    segments = sorted(by_segment)
    for earlier, later in zip(segments, segments[1:]):
        for step in sorted(set(by_segment[earlier]) & set(by_segment[later])):
            pairs.append((step, by_segment[earlier][step], by_segment[later][step]))
    if not pairs:
        return None
    consecutive = [
        values[step] - values[step - 1]
        for values in by_segment.values()
        for step in values
        if step - 1 in values and step - 1 > warmup
    ]
    diffs = [b - a for _, a, b in pairs]
    rms = math.sqrt(statistics.fmean(d * d for d in diffs))
    rms_consecutive = math.sqrt(statistics.fmean(d * d for d in consecutive)) if consecutive else None
    return {
        "pairs": len(pairs),
        "steps": [step for step, _, _ in pairs],
        "identical": sum(a == b for _, a, b in pairs),
        "mean_diff": statistics.fmean(diffs),
        "rms_diff": rms,
        "rms_consecutive": rms_consecutive,
        "ratio": rms / rms_consecutive if rms_consecutive else None,
    }


def boundary_shifts(series: dict[int, float], boundaries: list[int], window: int, warmup: int = 0) -> list[dict]:
    """Each resume boundary's level shift: the mean of the `window` steps from the boundary (the first step the
    resumed launch trained) minus the mean of the `window` steps before it, against the same statistic at every
    other step whose windows lie past `warmup`, hold no missing step and straddle no boundary (the placebos): its
    z against their mean and spread, and the share of placebos at least as far from their mean (two-sided p)."""

    def shift(at: int) -> float | None:
        before = [series.get(step) for step in range(at - window, at)]
        after = [series.get(step) for step in range(at, at + window)]
        if None in before or None in after:
            return None
        return statistics.fmean(after) - statistics.fmean(before)

    placebos = []
    for at in sorted(series):
        if at - window <= warmup or at in boundaries:
            continue
        if any(at - window < b < at + window for b in boundaries):
            continue
        value = shift(at)
        if value is not None:
            placebos.append(value)
    found = []
    for boundary in boundaries:
        value = shift(boundary)
        entry = {"boundary": boundary, "shift": value, "placebos": len(placebos), "z": None, "p": None}
        if value is not None and len(placebos) >= 3:
            centre, spread = statistics.fmean(placebos), statistics.stdev(placebos)
            entry["z"] = (value - centre) / spread if spread > 0 else None
            entry["p"] = sum(abs(p - centre) >= abs(value - centre) for p in placebos) / len(placebos)
        found.append(entry)
    return found


def analyse(soak: dict, warmup: int, resume_skip: int, window: int) -> dict:
    """Growth of every recorded quantity, the replayed steps and the resume boundaries of every training metric, and
    what each kill cost (the start-up of the next launch and the steps trained again)."""
    records, config = soak["records"], soak["config"]
    boundaries = [segment["resumed_from"] + 1 for segment in soak["segments"][1:]]
    settle = max(config.get("keep") or 0, 1) * max(config.get("save_freq") or 0, 0)  # the checkpoints kept in full
    growths = {}
    for name in quantities(records):
        result = growth(records, name, warmup, resume_skip, settle)
        if result is not None:
            growths[name] = result
    resume = {}
    for key in TRAINING_METRICS:
        series = {step: value for step, (_, value) in effective(records, key).items()}
        if not series:
            continue
        resume[key] = {
            "replay": replay_comparison(records, key, warmup),
            "boundaries": boundary_shifts(series, boundaries, window, warmup),
        }
    return {
        "warmup": warmup,
        "resume_skip": resume_skip,
        "settle": settle,
        "window": window,
        "growth": growths,
        "resume": resume,
        "kills": kill_costs(soak),
    }


def kill_costs(soak: dict) -> list[dict]:
    """Per kill: the step it interrupted, the checkpoint the next launch resumed from, the steps trained again, and
    the seconds from the kill to the next launch's first step line (its start-up and that step)."""
    costs = []
    for segment, following in zip(soak["segments"], soak["segments"][1:]):
        kill = segment.get("kill")
        if kill is None:
            continue
        first_line = following.get("first_line_t")
        costs.append(
            {
                "killed_during_step": kill["during_step"],
                "seconds_into_step": kill["seconds_into_step"],
                "resumed_from": following["resumed_from"],
                "steps_trained_again": kill["during_step"] - 1 - following["resumed_from"],
                "kill_to_first_step_s": None if first_line is None else first_line - kill["t"],
                "first_step_s": following.get("first_step_s"),
                "resumed_at_the_right_step": following.get("first_step") == following["resumed_from"] + 1,
            }
        )
    return costs
