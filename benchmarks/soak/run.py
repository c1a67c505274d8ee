"""A soak: one long CPU PRIME run on the demo's task, killed twice and resumed, with what might grow recorded per step.

    flock /tmp/heavy.lock nice -n 10 python -m benchmarks.soak.run --steps 300 --save-freq 25 --kill-during 110 220 \
        --test-freq 100 --out benchmarks/out/soak --results benchmarks/soak/results/full_300steps
    # about an hour on 2 cores (8.3 s a step, ~2 min per launch's start-up); --assets DIR reuses a built warm start
    python -m benchmarks.soak.run --analyse benchmarks/soak/results/full_300steps/soak.json [--warmup 20 ...]

The run is the demo's (`verl_prime_lora.demo`): its warm-started tiny Qwen2 and data (`warm_start.write_warm_assets`,
seed 0), its recipes and overrides (`learning_run.run_learning`: `DEMO_RECIPES`, `DEMO_OVERRIDES`, `prime_grpo`),
with a checkpoint every `--save-freq` steps, `trainer.max_actor_ckpt_to_keep=--keep` (it bounds the PRM's
checkpoints too: the PRM lies inside each `global_step_N` folder, removed with it; the plugin has no knob of its
own), no validation before training and validation every `--test-freq` steps only. During each step in
`--kill-during` (once that step's predecessor is logged, `--kill-fraction` of a step's time later, so mid-step and
not right after a save) every process of the run is sent SIGKILL at once; the same command is then run again
(veRL's default `trainer.resume_mode=auto`), which resumes from the newest complete checkpoint and trains the
steps after it a second time. Each launch is a "segment" with its own folder (log, metrics), all sharing one
checkpoint folder.

Recorded (a sampler thread, `Sampler`, polls the run's processes, found by the launcher's run marker, every
`--poll` s with `sample.snapshot`; each step's line in veRL's file logger adds a reading, so each sample is keyed
to the step in progress):

* per process kind (`run_processes.process_name`: driver `verl.trainer.main_ppo`, `ray::TaskRunnerV1`, the actor
  `ray::WorkerDict`, the PRM's `ray::TrainingWorker`, vLLM's `ray::vLLMHttpServer` and `VLLM::EngineCore`, the
  reward worker, TransferQueue, Ray's daemons ...): RSS (`VmRSS`; anonymous RSS in total), open file descriptors
  (`/proc/<pid>/fd`, and by type over the run: socket, pipe, anon_inode, file), threads, process count, and CPU
  seconds per step (differences of `run_processes`' counts between step lines);
* veRL's `timing_s/*` phases and the training metrics of `TRAINING_METRICS`;
* bytes of the checkpoint folder (and its `global_step_N` count), of the segment's `main_ppo.log` (and per step),
  of veRL's metrics file and of the Ray session's log folder (per step).

Then analysed (`analyse.py`: growth per 100 steps with HAC intervals, the replayed steps and the resume
boundaries against the run's own variation) and reported (`report.py`).

Writes `soak.json` (config, segments, kills, per-step records), `analysis.json`, `table.md`, `soak.png` and each
launch's veRL metrics to `--results`; the raw samples and lines (`samples.jsonl`, `lines.jsonl`), checkpoints and
logs to `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

from benchmarks.soak.analyse import TRAINING_METRICS, analyse
from benchmarks.soak.report import write_report
from benchmarks.soak.sample import (
    ALL,
    MB,
    cpu_deltas,
    dir_bytes,
    kill_whole_run,
    session_dir,
    snapshot,
    step_records,
)
from verl_prime_lora.checkpoints import step_folders, tracker_text
from verl_prime_lora.run_processes import RUN_MARKER, pids_with_marker

FOLLOW_POLL_S = 0.5  # how often veRL's metrics file is read for new step lines


def check_kills(kills: list[int], steps: int, save_freq: int) -> str | None:
    """Why a kill plan is unusable (None if fine): each kill is during a step after the first checkpoint, before
    the last step, not the step right after a save (the kill must not land just after one), in increasing order."""
    if save_freq <= 0:
        return "--save-freq must be positive: the kills resume from checkpoints"
    if kills != sorted(set(kills)):
        return "--kill-during: steps must increase"
    for step in kills:
        if not save_freq < step <= steps:
            return f"--kill-during {step}: must lie after the first checkpoint ({save_freq}) and at most --steps"
        if (step - 1) % save_freq == 0:
            return f"--kill-during {step}: step {step - 1} saves; kill later, not right after a save"
    return None


class Sampler(threading.Thread):
    """Polls the current launch's processes every `poll_s` s; each sample keyed to the step in progress."""

    def __init__(self, poll_s: float, started: float, sink: Path):
        super().__init__(daemon=True)
        self.poll_s, self.started, self.sink = poll_s, started, sink
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.samples: list[dict] = []
        self.run_id: str | None = None
        self.segment, self.step = 0, None
        self.session: str | None = None
        self.poll_seconds: list[float] = []

    def begin(self, segment: int, run_id: str) -> None:
        with self.lock:
            self.segment, self.run_id, self.step, self.session = segment, run_id, None, None

    def logged(self, step: int) -> None:
        """Step `step`'s line is in: the next one is in progress."""
        with self.lock:
            self.step = step + 1

    def take(self, step: int | None = None) -> tuple[dict, dict, list]:
        """One sample now (keyed to `step`, default the step in progress); returns `snapshot`'s result."""
        with self.lock:
            run_id, segment, in_progress = self.run_id, self.segment, self.step
        begun = time.monotonic()
        totals, cpu, raylets = snapshot(run_id) if run_id else ({}, {}, [])
        spent = time.monotonic() - begun
        found = session_dir(raylets)
        sample = {
            "t": round(begun - self.started, 2),
            "segment": segment,
            "step": in_progress if step is None else step,
            "totals": totals,
        }
        with self.lock:
            if found and segment == self.segment:
                self.session = found
            self.samples.append(sample)
            self.poll_seconds.append(spent)
            with open(self.sink, "a") as out:
                out.write(json.dumps(sample) + "\n")
        return totals, cpu, raylets

    def run(self) -> None:
        while not self.stop.wait(self.poll_s):
            if self.run_id is not None:
                self.take()


def disk_reading(checkpoints: Path, workdir: Path, session: str | None) -> dict:
    return {
        "checkpoints_mb": dir_bytes(checkpoints) / MB,
        "checkpoint_folders": len(step_folders(checkpoints)),
        "log_kb": _size(workdir / "main_ppo.log") / 1024,
        "metrics_kb": _size(workdir / "metrics.jsonl") / 1024,
        "ray_logs_mb": dir_bytes(Path(session) / "logs") / MB if session else 0.0,
    }


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def soak_overrides(args: argparse.Namespace, checkpoints: Path) -> list[str]:
    """The soak's overrides on top of the demo's setting (they come after it: they win)."""
    return [
        f"trainer.save_freq={args.save_freq}",
        f"trainer.max_actor_ckpt_to_keep={args.keep}",
        "trainer.val_before_train=false",
        "trainer.resume_mode=auto",
        f"trainer.default_local_dir={checkpoints}",
        f"trainer.experiment_name=soak_{args.estimator}_seed{args.seed}",
        *args.overrides,
    ]


def run_soak(args: argparse.Namespace, command: str) -> dict:
    from verl_prime_lora.demo import warm_start
    from verl_prime_lora.demo.learning_run import follow_metrics, run_learning

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    checkpoints = out / "checkpoints"
    for stale in [checkpoints, *out.glob("segment*"), out / "samples.jsonl", out / "lines.jsonl"]:
        if stale.is_dir():  # a soak starts from scratch
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
    assets = warm_start.write_warm_assets((args.assets or out / "assets").resolve(), seed=args.seed)
    started, cpu_at_start = time.monotonic(), sum(os.times()[:2])
    sampler = Sampler(args.poll, started, out / "samples.jsonl")
    sampler.start()
    kills = list(args.kill_during)
    soak = {
        "command": command,
        "config": {
            key: (str(value) if isinstance(value, Path) else value)
            for key, value in vars(args).items()
            if key not in ("analyse", "results")
        },
        "overrides": soak_overrides(args, checkpoints),
        "segments": [],
        "lines": [],
    }
    soak["config"]["recipes"] = "demo (learning_run.DEMO_RECIPES)"
    segment, run_id = 0, None
    # SIGTERM (a `timeout`, `kill`) unwinds through the `finally` below, which kills the live launch: it runs in a
    # session of its own, and nothing else would end it once this process is gone
    previous_handler = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        while True:
            published = tracker_text(checkpoints)
            resumed_from = int(published) if published and published.isdigit() else 0
            workdir = out / f"segment{segment}"
            run_id = uuid.uuid4().hex
            info = {"segment": segment, "run_id": run_id, "resumed_from": resumed_from, "workdir": str(workdir)}
            info["started_t"] = time.monotonic() - started
            soak["segments"].append(info)
            sampler.begin(segment, run_id)
            done = threading.Event()
            outcome = {}
            remaining = args.steps - resumed_from

            def launch(workdir=workdir, run_id=run_id, remaining=remaining, outcome=outcome, done=done):
                try:
                    run = run_learning(
                        args.estimator,
                        assets,
                        workdir,
                        args.steps,
                        args.test_freq,
                        soak_overrides(args, checkpoints),
                        seed=args.seed,
                        timeout_s=args.startup_timeout + remaining * args.timeout_per_step,
                        env={RUN_MARKER: run_id},
                        echo=None,
                    )
                    outcome["returncode"] = run.returncode
                finally:
                    done.set()

            runner = threading.Thread(target=launch, daemon=True)
            runner.start()
            previous_cpu = None
            step_times: list[float] = []
            for step, data in follow_metrics(workdir / "metrics.jsonl", done.is_set, poll_s=FOLLOW_POLL_S):
                now = time.monotonic() - started
                sampler.logged(step)
                totals, cpu, _ = sampler.take(step)
                line = {
                    "segment": segment,
                    "step": step,
                    "t": round(now, 2),
                    "resumed_from": resumed_from,
                    "timing": {k: v for k, v in data.items() if k.startswith("timing_s/")},
                    "metrics": {k: data[k] for k in TRAINING_METRICS if k in data},
                    "totals": totals,
                    "cpu_s": None if previous_cpu is None else cpu_deltas(previous_cpu, cpu),
                    "disk": disk_reading(checkpoints, workdir, sampler.session),
                }
                previous_cpu = cpu
                soak["lines"].append(line)
                with open(out / "lines.jsonl", "a") as raw:
                    raw.write(json.dumps(line) + "\n")
                if "first_line_t" not in info:
                    info.update(first_line_t=now, first_step=step, first_step_s=data.get("timing_s/step"))
                info["last_step"] = step
                if "timing_s/step" in data:
                    step_times.append(data["timing_s/step"])
                print(progress(line, args.steps), flush=True)
                if kills and step == kills[0] - 1 and not done.is_set():
                    recent = step_times[-5:] or [10.0]
                    delay = args.kill_fraction * statistics.median(recent)
                    time.sleep(delay)
                    killed_at = time.monotonic() - started
                    count = kill_whole_run(run_id)
                    info["kill"] = {
                        "during_step": kills.pop(0),
                        "seconds_into_step": killed_at - now,
                        "t": killed_at,
                        "processes": count,
                    }
                    print(
                        f"[soak] kill -9: {count} processes, {killed_at - now:.1f} s into step {step + 1}", flush=True
                    )
            runner.join()
            kill = info.get("kill")
            if kill is not None and info.get("last_step", 0) >= kill["during_step"]:
                kill["during_step"] = info["last_step"] + 1  # the step it aimed at ended during the delay
            info["ended_t"] = time.monotonic() - started
            info["returncode"] = outcome.get("returncode")
            info["ray_session"] = sampler.session
            info["ray_session_mb_at_end"] = dir_bytes(sampler.session) / MB if sampler.session else None
            if "kill" in info:
                segment += 1
                continue
            if info["returncode"] != 0:
                print(f"[soak] launch {segment} exited {info['returncode']} ({workdir / 'main_ppo.log'})", flush=True)
            break
    except (KeyboardInterrupt, SystemExit) as stop:  # stopped from outside: what was recorded is still analysed
        soak["interrupted"] = repr(stop)
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        if run_id is not None and pids_with_marker(run_id):
            print(f"[soak] stopped: killing launch {segment}", flush=True)
            kill_whole_run(run_id)
        sampler.stop.set()
        sampler.join(timeout=30)
        soak["sampler"] = {
            "samples": len(sampler.samples),
            "poll_s": args.poll,
            "mean_poll_cost_s": statistics.fmean(sampler.poll_seconds) if sampler.poll_seconds else None,
            "soak_process_cpu_s": sum(os.times()[:2]) - cpu_at_start,  # the sampler's and the follower's cost
        }
        soak["wall_s"] = time.monotonic() - started
        soak["records"] = step_records(soak["lines"], sampler.samples)
        soak["checkpoint_folders_at_end"] = [path.name for _, path in step_folders(checkpoints)]
    return soak


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def progress(line: dict, steps: int) -> str:
    totals, disk = line["totals"], line["disk"]
    return (
        f"launch {line['segment']} step {line['step']:>3}/{steps} | "
        f"{line['timing'].get('timing_s/step', float('nan')):5.1f} s | "
        f"RSS {totals.get('rss_mb', {}).get(ALL, 0) / 1024:5.2f} GB | fds {totals.get('fds', {}).get(ALL, 0):>5.0f} | "
        f"procs {totals.get('procs', {}).get(ALL, 0):>3.0f} | ckpt {disk['checkpoints_mb']:7.1f} MB "
        f"({disk['checkpoint_folders']}) | log {disk['log_kb']:8.0f} KB"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--analyse", type=Path, help="only analyse a soak.json again (written beside it)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--save-freq", type=int, default=25)
    parser.add_argument("--keep", type=int, default=2, help="trainer.max_actor_ckpt_to_keep")
    parser.add_argument("--kill-during", type=int, nargs="*", default=[110, 220], help="steps killed mid-step")
    parser.add_argument("--kill-fraction", type=float, default=0.4, help="of a step's time into it")
    parser.add_argument("--test-freq", type=int, default=100, help="validation every N steps (-1: never)")
    parser.add_argument("--estimator", default="prime_grpo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--poll", type=float, default=3.0, help="seconds between samples")
    parser.add_argument("--warmup", type=int, default=20, help="steps left out of the slopes at the start")
    parser.add_argument("--resume-skip", type=int, default=10, help="a resumed launch's steps left out")
    parser.add_argument("--window", type=int, default=10, help="steps each side of a resume boundary")
    parser.add_argument("--startup-timeout", type=float, default=900.0, help="seconds a launch may take to start")
    parser.add_argument("--timeout-per-step", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/soak"), help="checkpoints, logs, samples")
    parser.add_argument("--assets", type=Path, default=None, help="warm start and data (default --out/assets; reused)")
    parser.add_argument("--results", type=Path, default=None, help="soak.json, analysis, table, plot (default --out)")
    parser.add_argument("overrides", nargs="*", help="more Hydra overrides, after --")
    args = parser.parse_args(argv)
    command = "python -m benchmarks.soak.run " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.analyse is not None:
        soak = json.loads(args.analyse.read_text())
        analysis = analyse(soak, args.warmup, args.resume_skip, args.window)
        write_report(soak, analysis, args.analyse.parent)
        print((args.analyse.parent / "table.md").read_text())
        return 0
    problem = check_kills(args.kill_during, args.steps, args.save_freq)
    if problem:
        parser.error(problem)
    soak = run_soak(args, command)
    analysis = analyse(soak, args.warmup, args.resume_skip, args.window)
    results = (args.results or args.out).resolve()
    results.mkdir(parents=True, exist_ok=True)
    for segment in soak["segments"]:  # veRL's full metrics of each launch beside the records
        metrics = Path(segment["workdir"]) / "metrics.jsonl"
        if metrics.exists():
            shutil.copy(metrics, results / f"metrics_segment{segment['segment']}.jsonl")
    write_report(soak, analysis, results)
    print((results / "table.md").read_text())
    finished = soak["records"] and max(r["step"] for r in soak["records"]) == args.steps
    return 0 if finished and soak["segments"][-1].get("returncode") == 0 else 1


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    raise SystemExit(main())
