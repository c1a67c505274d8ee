"""benchmarks/soak.py: the process readings, the per-step records, the slopes and their intervals, the resume checks."""

import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import soak


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
        fit = soak.ewc_slope(x, y)
        covered += fit["low"] <= slope <= fit["high"]
        covered_ols += abs(fit["slope"] - slope) <= 1.96 * fit["se_ols"]
    assert 0.90 <= covered / trials <= 0.99
    assert covered_ols / trials < 0.85  # why the HAC interval: plain OLS is too sure of itself here


def test_the_slope_is_exact_without_noise_and_its_estimate_unbiased_with_it():
    x = list(range(10, 60))
    fit = soak.ewc_slope(x, [3.0 + 0.25 * step for step in x])
    assert fit["slope"] == pytest.approx(0.25)
    assert fit["low"] == pytest.approx(0.25) and fit["high"] == pytest.approx(0.25)
    rng = random.Random(1)
    estimates = [soak.ewc_slope(x, [0.25 * step + rng.gauss(0, 1) for step in x])["slope"] for _ in range(200)]
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
    within = soak.ewc_slope(x, y, groups)
    assert within["low"] <= 0.5 <= within["high"] and within["low"] > 0.4
    pooled = soak.ewc_slope(x, y)
    assert pooled["slope"] < 0.3


def test_too_few_points_or_a_constant_step_give_no_slope():
    assert soak.ewc_slope([1, 2, 3, 4, 5], [1, 2, 3, 4, 5]) is None
    assert soak.ewc_slope([7] * 10, list(range(10))) is None
    assert soak.ewc_slope([1, 2, 3, 4, 5, 6, 7, 8], [5.0] * 8)["high"] == 0  # constant: flat, interval of width 0


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
    kept = soak.points(records, "q", warmup=20, resume_skip=10)
    assert [(seg, step) for seg, step, _ in kept] == [(0, s) for s in range(21, 40)] + [(1, s) for s in range(36, 60)]
    records.append(record(1, 60, 35, {"q": float("nan")}))
    assert len(soak.points(records, "q", 20, 10)) == len(kept)
    records[30]["values"]["timing_s/testing"] = 7.0  # step 31 validated: out, but for the validation's own time
    assert (0, 31) not in [(seg, step) for seg, step, _ in soak.points(records, "q", 20, 10)]
    assert soak.points(records, "timing_s/testing", 20, 10) == [(0, 31, 7.0)]
    assert [step for _, step, _ in soak.points(records, "q", 20, 10, settle=50)] == list(range(50, 60))


def test_growth_reports_per_100_steps_with_a_verdict():
    rng = random.Random(3)
    records = [
        record(0, step, step, {"rss_mb/all": 5000 + 0.03 * step + rng.gauss(0, 1), "fds/all": 400 + rng.gauss(0, 1)})
        for step in range(1, 301)
    ]
    grows, flat = soak.growth(records, "rss_mb/all", 20, 10), soak.growth(records, "fds/all", 20, 10)
    assert grows["verdict"] == "grows" and grows["low"] <= 3.0 <= grows["high"] and grows["n"] == 280
    assert grows["relative"] == pytest.approx(grows["slope"] / grows["mean"])
    assert flat["verdict"] == "flat" and flat["model"] == "within segments"
    assert grows["late"]["n"] == 140 and grows["late"]["low"] <= 3.0 <= grows["late"]["high"]
    # the checkpoint folder outlives a launch (pooled), and counts once the run keeps its full number of checkpoints
    checkpoints = [record(s // 100, s, s % 100, {"disk/checkpoints_mb": min(s // 25, 2) * 2.0}) for s in range(1, 301)]
    pooled = soak.growth(checkpoints, "disk/checkpoints_mb", 20, 10, settle=50)
    assert (
        pooled["model"] == "pooled" and pooled["slope"] == 0 and pooled["n"] == 251 - 11 - 11 - 1
    )  # steps 50-300 but a resumed launch's first 11 and step 300 (a launch of its own)


def test_a_growth_that_levels_off_shows_in_the_later_half():
    records = [record(0, s, s, {"rss_mb/gcs_server": 60 + 3.5 * min(s, 120)}) for s in range(1, 301)]
    result = soak.growth(records, "rss_mb/gcs_server", 20, 10)
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
    names = soak.quantities(records)
    assert names[0] == "rss_mb/all" and "rss_mb/ray::WorkerDict" in names and "peak/rss_mb/all" in names
    assert "rss_anon_mb/ray::WorkerDict" not in names and "peak/rss_mb/ray::WorkerDict" not in names
    assert "threads/raylet" not in names and "fds/raylet" in names
    assert "disk/log_kb" not in names and "disk/log_kb_per_step" in names
    assert names.index("timing_s/step") < names.index("timing_s/gen") and "timing_s/save_checkpoint" not in names


# ---------------------------------------------------------------------------------------------------------------
# reading processes
# ---------------------------------------------------------------------------------------------------------------

STATUS = """Name:\tpython
State:\tS (sleeping)
VmPeak:\t 9000000 kB
VmRSS:\t  812345 kB
RssAnon:\t  700000 kB
RssFile:\t  100000 kB
RssShmem:\t   12345 kB
Threads:\t42
"""


def test_status_is_parsed_to_bytes_and_threads():
    assert soak.parse_status(STATUS) == {
        "VmRSS": 812345 * 1024,
        "RssAnon": 700000 * 1024,
        "RssFile": 100000 * 1024,
        "RssShmem": 12345 * 1024,
        "Threads": 42,
    }
    assert soak.parse_status("Name:\tkthreadd\nThreads:\t1\n") == {"Threads": 1}  # a kernel thread has no VmRSS


def fake_process(proc, pid, status, fds):
    folder = proc / str(pid)
    (folder / "fd").mkdir(parents=True)
    (folder / "status").write_text(status)
    for number, target in enumerate(fds):
        os.symlink(target, folder / "fd" / str(number))  # dangling, as /proc's socket and pipe links are


def test_a_process_is_read_from_a_proc_tree_and_summed_by_kind(tmp_path):
    fds = ["/dev/null", "socket:[123]", "socket:[124]", "pipe:[9]", "anon_inode:[eventfd]"]
    fake_process(tmp_path, 10, STATUS, fds)
    fake_process(tmp_path, 11, "VmRSS:\t1024 kB\nRssAnon:\t512 kB\nThreads:\t3\n", ["/tmp/x.log"])
    first, second = soak.read_process(10, tmp_path), soak.read_process(11, tmp_path)
    assert first["rss"] == 812345 * 1024 and first["threads"] == 42 and first["fds"] == 5
    assert first["fd_types"] == {"device": 1, "socket": 2, "pipe": 1, "anon_inode": 1}
    assert soak.read_process(12, tmp_path) is None  # gone
    totals = soak.kind_totals([("ray::WorkerDict", first), ("ray::WorkerDict", second), ("raylet", second)])
    assert totals["procs"] == {"ray::WorkerDict": 2, "raylet": 1, "all": 3}
    assert totals["rss_mb"]["ray::WorkerDict"] == pytest.approx((812345 + 1024) / 1024)
    assert totals["rss_mb"]["all"] == pytest.approx((812345 + 2048) / 1024)
    assert totals["fds"] == {"ray::WorkerDict": 6, "raylet": 1, "all": 7}
    assert totals["fd_types"]["file"] == 2 and totals["threads"]["all"] == 48
    flat = soak.flatten(totals)
    assert flat["rss_anon_mb/all"] == pytest.approx((700000 + 1024) / 1024) and flat["fd_types/socket"] == 2


def test_this_process_reads_from_the_real_proc():
    reading = soak.read_process(os.getpid())
    assert reading["rss"] > 10 * 1024 * 1024 and reading["fds"] >= 3 and reading["threads"] >= 1


def test_fd_types_and_the_ray_session_folder():
    assert [soak.fd_type(t) for t in ("socket:[1]", "pipe:[2]", "anon_inode:[eventpoll]", "/dev/shm/x", "/a", "x")] == [
        "socket",
        "pipe",
        "anon_inode",
        "device",
        "file",
        "other",
    ]
    raylet = ["/x/raylet", "--raylet_socket_name=/tmp/ray/s/sockets/raylet", "--session_dir=/tmp/ray/session_1_2"]
    assert soak.session_dir([["python", "-m", "x"], raylet]) == "/tmp/ray/session_1_2"
    assert soak.session_dir([["python"]]) is None


def test_cpu_per_step_by_kind_counts_new_processes_whole_and_a_reused_pid_as_new():
    before = {1: ("ray::WorkerDict", 10.0), 2: ("VLLM::EngineCore", 5.0), 3: ("python -c", 1.0)}
    after = {1: ("ray::WorkerDict", 12.5), 2: ("VLLM::EngineCore", 6.0), 4: ("python -c", 0.5), 3: ("raylet", 0.25)}
    assert soak.cpu_deltas(before, after) == pytest.approx(
        {"ray::WorkerDict": 2.5, "VLLM::EngineCore": 1.0, "python -c": 0.5, "raylet": 0.25, "all": 4.25}
    )


def test_the_whole_run_is_killed_with_sigkill_children_included():
    run_id = uuid.uuid4().hex
    env = {**os.environ, soak.RUN_MARKER: run_id}
    # a parent that ignores SIGTERM, and its child: only SIGKILL ends both
    script = "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    script += "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    parent = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        for _ in range(100):
            if len(soak.pids_with_marker(run_id)) == 2:
                break
            time.sleep(0.05)
        assert len(soak.pids_with_marker(run_id)) == 2
        assert soak.kill_whole_run(run_id) == 2
        assert parent.wait(timeout=10) == -9
        assert soak.pids_with_marker(run_id) == []
    finally:
        parent.kill()


# ---------------------------------------------------------------------------------------------------------------
# per-step records, resume handling
# ---------------------------------------------------------------------------------------------------------------


def totals(rss_all, fds_all=100):
    return {"rss_mb": {"ray::WorkerDict": rss_all / 2, "all": rss_all}, "fds": {"all": fds_all}}


def line(segment, step, resumed_from, rss, log_kb, metrics=None):
    return {
        "segment": segment,
        "step": step,
        "t": 10.0 * step + 100 * segment,
        "resumed_from": resumed_from,
        "timing": {"timing_s/step": 10.0},
        "metrics": metrics or {},
        "totals": totals(rss),
        "cpu_s": None if step == resumed_from + 1 else {"all": 4.0},
        "disk": {"checkpoints_mb": 20.0, "checkpoint_folders": 2, "log_kb": log_kb},
    }


def test_step_records_key_peaks_to_the_step_in_progress_and_mark_replayed_steps():
    lines = [line(0, s, 0, 1000 + s, 10.0 * s) for s in (1, 2, 3, 4)]  # killed during 5, last save at 2
    lines += [line(1, s, 2, 900 + s, 50.0 + 12.0 * s) for s in (3, 4, 5)]
    samples = [
        {"segment": 0, "step": None, "t": 0.5, "totals": totals(5000)},  # start-up: no step
        {"segment": 0, "step": 2, "t": 15.0, "totals": totals(3000)},  # during step 2
        {"segment": 0, "step": 2, "t": 20.0, "totals": totals(1002)},  # at step 2's line
        {"segment": 1, "step": 4, "t": 140.0, "totals": totals(2500)},
    ]
    records = soak.step_records(lines, samples)
    assert [(r["segment"], r["step"], r["replayed"], r["since_resume"]) for r in records] == [
        (0, 1, False, 1),
        (0, 2, False, 2),
        (0, 3, False, 3),
        (0, 4, False, 4),
        (1, 3, True, 1),
        (1, 4, True, 2),
        (1, 5, False, 3),
    ]
    by_key = {(r["segment"], r["step"]): r["values"] for r in records}
    assert by_key[(0, 2)]["peak/rss_mb/all"] == 3000 and by_key[(0, 2)]["rss_mb/all"] == 1002
    assert by_key[(1, 4)]["peak/rss_mb/ray::WorkerDict"] == 1250 and "peak/rss_mb/all" not in by_key[(0, 1)]
    assert by_key[(0, 2)]["disk/log_kb_per_step"] == 10.0 and "disk/log_kb_per_step" not in by_key[(1, 3)]
    assert by_key[(1, 4)]["disk/log_kb_per_step"] == 12.0 and by_key[(0, 2)]["cpu_s/all"] == 4.0
    assert "cpu_s/all" not in by_key[(1, 3)] and by_key[(0, 1)]["timing_s/step"] == 10.0


def test_a_replay_is_compared_pair_by_pair_with_the_step_to_step_variation():
    metrics = {s: 0.5 + 0.1 * (-1) ** s for s in range(1, 13)}  # alternating: consecutive steps differ by 0.2
    records = [record(0, s, s, metrics={"m": metrics[s]}) for s in range(1, 11)]
    records += [record(1, s, s - 6, metrics={"m": metrics[s]}) for s in range(7, 13)]  # exact replay of 7..10
    exact = soak.replay_comparison(records, "m")
    assert exact["pairs"] == 4 and exact["identical"] == 4 and exact["steps"] == [7, 8, 9, 10]
    assert exact["rms_diff"] == 0 and exact["ratio"] == 0 and exact["rms_consecutive"] == pytest.approx(0.2)
    for r in records[10:]:
        r["metrics"]["m"] += 0.1  # the replay 0.1 off: half the step-to-step variation
    off = soak.replay_comparison(records, "m")
    assert off["identical"] == 0 and off["mean_diff"] == pytest.approx(0.1) and off["ratio"] == pytest.approx(0.5)
    assert soak.replay_comparison([record(0, 1, 1, metrics={"m": 1.0})], "m") is None


def test_the_run_as_trained_takes_the_replayed_value_of_a_step():
    records = [record(0, s, s, metrics={"m": 1.0}) for s in range(1, 6)]
    records += [record(1, s, s - 3, metrics={"m": 2.0}) for s in range(4, 8)]
    series = soak.effective(records, "m")
    assert series[3] == (0, 1.0) and series[4] == (1, 2.0) and sorted(series) == list(range(1, 8))


def test_a_level_shift_at_a_resume_stands_out_from_the_placebos_and_noise_does_not():
    rng = random.Random(4)
    noise = {s: rng.gauss(0, 1) for s in range(1, 201)}
    shifted = {s: v + (4.0 if s >= 101 else 0.0) for s, v in noise.items()}
    (jump,) = soak.boundary_shifts(shifted, [101], window=10, warmup=5)
    assert jump["z"] > 5 and jump["p"] == 0 and jump["shift"] == pytest.approx(4.0, abs=1.0)
    (calm,) = soak.boundary_shifts(noise, [101], window=10, warmup=5)
    assert abs(calm["z"]) < 3 and calm["p"] > 0.01
    # placebos: windows past the warm-up that straddle no boundary; the boundaries' own windows are not placebos
    assert calm["placebos"] == len([a for a in range(16, 192) if not 91 < a < 111])
    (edge,) = soak.boundary_shifts(noise, [195], window=10)
    assert edge["shift"] is None and edge["z"] is None  # its after-window runs past the series


def test_kill_plans_must_resume_from_a_checkpoint_and_not_right_after_a_save():
    assert soak.check_kills([110, 220], 300, 25) is None
    assert soak.check_kills([], 300, 25) is None
    assert "right after a save" in soak.check_kills([101], 300, 25)
    assert "first checkpoint" in soak.check_kills([20], 300, 25)
    assert "at most --steps" in soak.check_kills([310], 300, 25)
    assert "increase" in soak.check_kills([220, 110], 300, 25)
    assert "positive" in soak.check_kills([110], 300, -1)


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
    records = soak.step_records(lines, [])
    config = {"steps": steps, "save_freq": save_freq}
    return {"command": "test", "config": config, "segments": segments, "records": records}


def test_the_analysis_of_a_soak_and_its_report(tmp_path):
    data = synthetic_soak()
    analysis = soak.analyse(data, warmup=5, resume_skip=3, window=3)
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
    soak.write_report(data, analysis, tmp_path)
    table = (tmp_path / "table.md").read_text()
    assert "`rss_mb/all`" in table and "| 18 | 4 | 15 | 2 | 60 | 9 | True |" in table
    assert (tmp_path / "soak.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "analysis.json").read_text())["window"] == 3
    assert soak.main(["--analyse", str(tmp_path / "soak.json"), "--warmup", "5", "--resume-skip", "3"]) == 0


def test_the_command_line_refuses_a_bad_kill_plan(tmp_path):
    with pytest.raises(SystemExit):
        soak.main(["--steps", "30", "--save-freq", "5", "--kill-during", "16", "--out", str(tmp_path)])


# ---------------------------------------------------------------------------------------------------------------
# the soak's loop, on a fake launch (no main_ppo): kill, resume from the tracker, records and report
# ---------------------------------------------------------------------------------------------------------------


STEP_S = 0.3  # a fake step: the kill comes 0.4 of it in


def fake_run_learning(name, assets, workdir, steps, test_freq, overrides, seed, timeout_s, env, echo):
    """What `run_learning` does, as far as the soak sees it: a process carrying the run marker, veRL's metrics file
    one line a step, a checkpoint every `save_freq` steps (tracker last, old folders beyond `keep` removed), a resume
    from the tracker; it ends -9 when its process is killed."""
    from verl_prime_lora.checkpoints import step_folders, tracker_text

    values = dict(override.split("=", 1) for override in overrides)
    root, save_freq = Path(values["trainer.default_local_dir"]), int(values["trainer.save_freq"])
    keep = int(values["trainer.max_actor_ckpt_to_keep"])
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "main_ppo.log").write_text("start\n")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ, **env})
    try:
        step = int(tracker_text(root) or 0) + 1
        with open(workdir / "metrics.jsonl", "w") as metrics:
            while step <= steps:
                time.sleep(STEP_S)
                if child.poll() is not None:
                    return SimpleNamespace(returncode=-9)
                if step % save_freq == 0:
                    (root / f"global_step_{step}").mkdir(parents=True)
                    (root / f"global_step_{step}" / "model.pt").write_bytes(b"x" * 1000)
                    (root / "latest_checkpointed_iteration.txt").write_text(str(step))
                    for _, old in step_folders(root)[:-keep]:
                        shutil.rmtree(old)
                data = {"timing_s/step": STEP_S, "timing_s/gen": 0.1, "critic/score/mean": 0.5 + 0.01 * step}
                if step % test_freq == 0:
                    data["timing_s/testing"] = 0.01
                with open(workdir / "main_ppo.log", "a") as log:
                    log.write(f"step {step}\n" * 10)
                metrics.write(json.dumps({"step": step, "data": data}) + "\n")
                metrics.flush()
                step += 1
        return SimpleNamespace(returncode=0)
    finally:
        child.kill()
        child.wait()


def test_the_soak_kills_mid_step_resumes_from_the_checkpoint_and_reports(tmp_path, monkeypatch):
    from verl_prime_lora.demo import learning_run, warm_start

    monkeypatch.setattr(learning_run, "run_learning", fake_run_learning)
    monkeypatch.setattr(warm_start, "write_warm_assets", lambda out, seed: {"model": out})
    monkeypatch.setattr(soak, "FOLLOW_POLL_S", 0.02)
    out, results = tmp_path / "out", tmp_path / "results"
    argv = ["--steps", "12", "--save-freq", "3", "--kill-during", "8", "--test-freq", "6", "--poll", "0.05"]
    argv += ["--warmup", "1", "--resume-skip", "1", "--window", "2", "--out", str(out), "--results", str(results)]
    assert soak.main(argv) == 0
    data = json.loads((results / "soak.json").read_text())
    first, second = data["segments"]
    assert first["kill"]["during_step"] == 8 and first["last_step"] == 7 and first["returncode"] == -9
    assert 0 < first["kill"]["seconds_into_step"] < STEP_S and first["kill"]["processes"] == 1
    assert second["resumed_from"] == 6 and second["first_step"] == 7 and second["last_step"] == 12
    assert second["returncode"] == 0 and "kill" not in second
    steps = [(r["segment"], r["step"], r["replayed"]) for r in data["records"]]
    assert steps == [(0, s, False) for s in range(1, 8)] + [(1, 7, True)] + [(1, s, False) for s in range(8, 13)]
    values = {(r["segment"], r["step"]): r["values"] for r in data["records"]}
    assert values[(0, 5)]["procs/python -c"] == 1 and values[(0, 5)]["rss_mb/all"] > 1
    assert values[(0, 5)]["disk/log_kb_per_step"] == pytest.approx(len("step 5\n") * 10 / 1024, rel=1e-4)
    assert max(v["disk/checkpoint_folders"] for v in values.values()) == 2
    assert data["checkpoint_folders_at_end"] == ["global_step_9", "global_step_12"]
    analysis = json.loads((results / "analysis.json").read_text())
    assert analysis["kills"][0]["steps_trained_again"] == 1 and analysis["kills"][0]["resumed_at_the_right_step"]
    assert analysis["resume"]["critic/score/mean"]["replay"]["identical"] == 1
    assert (results / "soak.png").exists() and (results / "metrics_segment1.jsonl").exists()
    assert len((out / "lines.jsonl").read_text().splitlines()) == 13
