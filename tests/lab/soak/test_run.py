"""benchmarks/soak/run.py: the kill plan, the command line, and the soak's loop on a fake launch."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks.soak import run


def test_kill_plans_must_resume_from_a_checkpoint_and_not_right_after_a_save():
    assert run.check_kills([110, 220], 300, 25) is None
    assert run.check_kills([], 300, 25) is None
    assert "right after a save" in run.check_kills([101], 300, 25)
    assert "first checkpoint" in run.check_kills([20], 300, 25)
    assert "at most --steps" in run.check_kills([310], 300, 25)
    assert "increase" in run.check_kills([220, 110], 300, 25)
    assert "positive" in run.check_kills([110], 300, -1)


def test_the_command_line_refuses_a_bad_kill_plan(tmp_path):
    with pytest.raises(SystemExit):
        run.main(["--steps", "30", "--save-freq", "5", "--kill-during", "16", "--out", str(tmp_path)])


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
    monkeypatch.setattr(run, "FOLLOW_POLL_S", 0.02)
    out, results = tmp_path / "out", tmp_path / "results"
    argv = ["--steps", "12", "--save-freq", "3", "--kill-during", "8", "--test-freq", "6", "--poll", "0.05"]
    argv += ["--warmup", "1", "--resume-skip", "1", "--window", "2", "--out", str(out), "--results", str(results)]
    assert run.main(argv) == 0
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
