"""benchmarks/soak/report.py: the analysis of a synthetic soak written as its report, and read back by `--analyse`."""

import json
import random

from soak_lines import line

from benchmarks.soak import analyse, report, run, sample


def synthetic_soak(kill_steps=(18,), steps=30, save_freq=5):
    """A soak's records as `run_soak` leaves them: one launch per kill, each resumed from the last save."""
    rng = random.Random(5)
    segments, lines, first = [], [], 1
    for segment, during in enumerate([*kill_steps, None]):
        resumed_from = 0 if segment == 0 else ((kill_steps[segment - 1] - 1) // save_freq) * save_freq
        last = steps if during is None else during - 1
        info = {"segment": segment, "resumed_from": resumed_from, "first_step": resumed_from + 1}
        info["first_line_t"], info["first_step_s"] = 1000.0 * segment + 60, 9.0
        if during is not None:
            info["kill"] = {"during_step": during, "seconds_into_step": 4.0, "t": 1000.0 * (segment + 1)}
        segments.append(info)
        for step in range(resumed_from + 1, last + 1):
            metrics = {"critic/score/mean": 0.4 + 0.01 * step + rng.gauss(0, 0.05), "prm/dpo_acc": rng.random()}
            entry = line(segment, step, resumed_from, 4000 + rng.gauss(0, 5), 10.0 * (step - resumed_from), metrics)
            entry["timing"] = {"timing_s/step": 10 + rng.gauss(0, 1), "timing_s/gen": 6 + rng.gauss(0, 1)}
            lines.append(entry)
        first = last + 1
    assert first == steps + 1
    records = sample.step_records(lines, [])
    config = {"steps": steps, "save_freq": save_freq}
    return {"command": "test", "config": config, "segments": segments, "records": records}


def test_the_analysis_of_a_soak_and_its_report(tmp_path):
    data = synthetic_soak()
    analysis = analyse.analyse(data, warmup=5, resume_skip=3, window=3)
    (kill,) = analysis["kills"]
    assert kill == {
        "killed_during_step": 18,
        "seconds_into_step": 4.0,
        "resumed_from": 15,
        "steps_trained_again": 2,
        "kill_to_first_step_s": 60.0,
        "first_step_s": 9.0,
        "resumed_at_the_right_step": True,
    }
    assert {"rss_mb/all", "timing_s/step", "disk/log_kb_per_step", "cpu_s/all"} <= set(analysis["growth"])
    assert analysis["growth"]["rss_mb/all"]["n"] == (17 - 5) + (30 - 18)  # steps 6..17, then 19..30
    score = analysis["resume"]["critic/score/mean"]
    assert score["replay"]["steps"] == [16, 17] and [b["boundary"] for b in score["boundaries"]] == [16]
    report.write_report(data, analysis, tmp_path)
    table = (tmp_path / "table.md").read_text()
    assert "`rss_mb/all`" in table and "| 18 | 4 | 15 | 2 | 60 | 9 | True |" in table
    assert (tmp_path / "soak.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "analysis.json").read_text())["window"] == 3
    assert run.main(["--analyse", str(tmp_path / "soak.json"), "--warmup", "5", "--resume-skip", "3"]) == 0
