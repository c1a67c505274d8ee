"""The soak's report, written beside its records by `write_report`: `soak.json` (the run's config, segments, kills
and per-step records), `analysis.json`, `table.md` (growth, kills and resume as Markdown tables) and `soak.png` (six
panels against the step, one line per launch).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from benchmarks.soak.sample import ALL


def _fmt(value: float | None) -> str:
    if value is None:
        return "–"
    size = abs(value)
    if size < 1e-9:  # 0, or a constant series' rounding
        return "0"
    if size >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}" if size >= 0.01 else f"{value:.2e}"


def unit(name: str) -> str:
    for prefix, label in (
        ("rss_mb/", "MB"),
        ("peak/rss_mb/", "MB"),
        ("rss_anon_mb/", "MB"),
        ("cpu_s/", "CPU s/step"),
        ("timing_s/", "s"),
        ("disk/checkpoints_mb", "MB"),
        ("disk/log_kb_per_step", "KB/step"),
        ("disk/metrics_kb_per_step", "KB/step"),
        ("disk/ray_logs_mb_per_step", "MB/step"),
    ):
        if name.startswith(prefix):
            return label
    return "count"


def growth_table(analysis: dict, steps: int = 1500) -> str:
    """Markdown: per quantity its mean, growth per 100 steps [95 % interval], relative to the mean, over `steps`
    steps (the seed run's 1500, were the growth to continue), and the verdict."""
    rows = [
        f"| quantity | unit | n | mean | growth / 100 steps [95 % CI] | % of mean / 100 steps | over {steps} steps "
        "| verdict | later half: growth / 100 steps [95 % CI] |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, g in analysis["growth"].items():
        relative = "–" if g["relative"] is None else f"{100 * g['relative']:+.2f} %"
        model = "" if g["model"] == "within segments" else " (pooled)"
        late = g.get("late")
        later = "–" if late is None else f"{_fmt(late['slope'])} [{_fmt(late['low'])}, {_fmt(late['high'])}]"
        rows.append(
            f"| `{name}`{model} | {unit(name)} | {g['n']} | {_fmt(g['mean'])} | {_fmt(g['slope'])} "
            f"[{_fmt(g['low'])}, {_fmt(g['high'])}] | {relative} | {_fmt(g['slope'] * steps / 100)} | {g['verdict']} "
            f"| {later} |"
        )
    return "\n".join(rows)


def resume_table(analysis: dict) -> str:
    """Markdown: per training metric, the replayed pairs against step-to-step variation, and each boundary's shift."""
    rows = [
        "| metric | replayed pairs (identical) | RMS replay − original | RMS step-to-step | ratio "
        "| boundary shifts: z (p) |",
        "|---|---|---|---|---|---|",
    ]
    for key, entry in analysis["resume"].items():
        replay = entry["replay"] or {}
        shifts = ", ".join(
            f"{b['boundary']}: {_fmt(b['z'])} ({_fmt(b['p'])})" for b in entry["boundaries"] if b["shift"] is not None
        )
        rows.append(
            f"| `{key}` | {replay.get('pairs', 0)} ({replay.get('identical', 0)}) | {_fmt(replay.get('rms_diff'))} | "
            f"{_fmt(replay.get('rms_consecutive'))} | {_fmt(replay.get('ratio'))} | {shifts or '–'} |"
        )
    return "\n".join(rows)


def kills_table(analysis: dict) -> str:
    rows = [
        "| killed during step | s into the step | resumed from | steps trained again | kill → first step line, s | "
        "that step's own s | first step = checkpoint + 1 |",
        "|---|---|---|---|---|---|---|",
    ]
    for kill in analysis["kills"]:
        rows.append(
            f"| {kill['killed_during_step']} | {_fmt(kill['seconds_into_step'])} | {kill['resumed_from']} | "
            f"{kill['steps_trained_again']} | {_fmt(kill['kill_to_first_step_s'])} | {_fmt(kill['first_step_s'])} | "
            f"{kill['resumed_at_the_right_step']} |"
        )
    return "\n".join(rows)


def plot(soak: dict, analysis: dict, path: Path) -> Path:
    """Six panels against the step, one line per launch (segment), the kills marked: total RSS (at the step line and
    its peak), RSS by process kind, open fds by kind, step time and phases, disk, and two training metrics with the
    replayed steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = soak["records"]
    segments = sorted({r["segment"] for r in records})
    fig, axes = plt.subplots(3, 2, figsize=(14, 12))
    kills = [s["kill"]["during_step"] for s in soak["segments"] if s.get("kill")]

    def series(name, segment, source="values"):
        found = [(r["step"], r[source].get(name)) for r in records if r["segment"] == segment]
        return [(s, v) for s, v in found if v is not None]

    def top(prefix, count):
        means = Counter()
        for r in records:
            for name, value in r["values"].items():
                if name.startswith(prefix) and not name.endswith(f"/{ALL}"):
                    means[name] += value
        return [name for name, _ in means.most_common(count)]

    styles = ["-", "--", ":", "-."]
    ax = axes[0, 0]
    for segment in segments:
        for name, label in (("rss_mb/all", "at the step line"), ("peak/rss_mb/all", "peak in the step")):
            data = series(name, segment)
            if data:
                ax.plot(*zip(*data), styles[segment % 4], label=f"{label}, launch {segment}")
    ax.set_ylabel("RSS of the run's processes, MB")
    ax = axes[0, 1]  # the kinds whose RSS grew most, as the change since each launch's first step
    growing = sorted(
        (name for name in analysis["growth"] if name.startswith("rss_mb/") and not name.endswith(f"/{ALL}")),
        key=lambda name: -abs(analysis["growth"][name]["slope"]),
    )
    for i, name in enumerate(growing[:8]):
        for segment in segments:
            data = series(name, segment)
            if data:
                base = data[0][1]
                label = f"{name.split('/', 1)[1]} ({_fmt(analysis['growth'][name]['slope'])} MB/100 steps)"
                ax.plot(
                    *zip(*[(s, v - base) for s, v in data]),
                    styles[segment % 4],
                    color=f"C{i}",
                    label=label if segment == segments[0] else None,
                )
    ax.set_ylabel("RSS change since the launch's first step, MB")
    ax = axes[1, 0]
    for i, name in enumerate(top("fds/", 8)):
        for segment in segments:
            data = series(name, segment)
            if data:
                ax.plot(
                    *zip(*data),
                    styles[segment % 4],
                    color=f"C{i}",
                    label=name.split("/", 1)[1] if segment == 0 else None,
                )
    ax.set_ylabel("open file descriptors by kind")
    ax = axes[1, 1]
    for i, name in enumerate(("timing_s/step", "timing_s/gen", "timing_s/adv", "timing_s/update_actor")):
        for segment in segments:
            data = series(name, segment)
            if data:
                ax.plot(*zip(*data), ".", ms=3, color=f"C{i}", label=name if segment == 0 else None)
    ax.set_ylabel("seconds")
    ax = axes[2, 0]
    for segment in segments:
        data = series("disk/checkpoints_mb", segment)
        if data:
            ax.plot(*zip(*data), styles[segment % 4], color="C0", label="checkpoints, MB" if segment == 0 else None)
        data = series("disk/log_kb_per_step", segment)
        if data:
            ax.plot(*zip(*data), ".", ms=3, color="C1", label="main_ppo.log, KB/step" if segment == 0 else None)
        data = series("disk/ray_logs_mb_per_step", segment)
        if data:
            ax.plot(
                *zip(*[(s, 1000 * v) for s, v in data]),
                ".",
                ms=3,
                color="C2",
                label="Ray session logs, KB/step" if segment == 0 else None,
            )
    ax.set_ylabel("disk")
    ax = axes[2, 1]
    for i, key in enumerate(("critic/score/mean", "prm/dpo_acc")):
        for segment in segments:
            data = series(key, segment, "metrics")
            if data:
                ax.plot(
                    *zip(*data), styles[segment % 4], marker=".", ms=3, color=f"C{i}", label=f"{key}, launch {segment}"
                )
    ax.set_ylabel("training metrics (replayed steps overlap)")
    for ax in axes.flat:
        for step in kills:
            ax.axvline(step, color="red", alpha=0.4, lw=1)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[1]:
            ax.legend(fontsize=6)
    config = soak["config"]
    fig.suptitle(
        f"soak: {config['steps']} steps, saves every {config['save_freq']}, kill -9 during {kills} (red), "
        f"launches {len(segments)}"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_report(soak: dict, analysis: dict, results: Path) -> None:
    results.mkdir(parents=True, exist_ok=True)
    kept_keys = {key: value for key, value in soak.items() if key != "lines"}  # the raw lines: --out/lines.jsonl
    (results / "soak.json").write_text(json.dumps(kept_keys, separators=(",", ":")) + "\n")
    (results / "analysis.json").write_text(json.dumps(analysis, indent=1) + "\n")
    text = (
        f"# soak: {soak['config']['steps']} steps\n\n`{soak['command']}`\n\n"
        f"Slopes exclude the first {analysis['warmup']} steps, each resumed launch's first "
        f"{analysis['resume_skip']} steps and the steps that validated; the checkpoint folder counts from step "
        f"{analysis['settle']} (all `--keep` checkpoints saved); boundary windows of {analysis['window']} steps.\n\n"
        f"## growth\n\n{growth_table(analysis)}\n\n## kills\n\n{kills_table(analysis)}\n\n"
        f"## resume\n\n{resume_table(analysis)}\n"
    )
    (results / "table.md").write_text(text)
    plot(soak, analysis, results / "soak.png")
