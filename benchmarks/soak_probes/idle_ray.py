"""Does Ray grow with time alone? A local Ray instance started as the CPU preset starts it (no dashboard UI), with
nothing submitted to it, and the RSS of each of its processes sampled for a while.

    python -m benchmarks.results.soak.idle_ray.idle_ray SECONDS OUT.json [--every 10]   # from the checkout's root
    python -m benchmarks.results.soak.idle_ray.idle_ray --analyse OUT.json   # the slopes again, from its samples

The soak's Ray daemons (raylet, dashboard.py, monitor.py, log_monitor.py, the DashboardAgent) grew by 0.4-2.3 MB per
100 steps (about 1 000 s) in every launch; if an idle instance grows at that rate per second, the growth is Ray's own
clock-driven work, not the run's calls. Records each process kind's slope in MB per 1 000 s with the soak's own
estimate (`benchmarks.soak.ewc_slope`: OLS, its 95 % interval robust to the samples' autocorrelation). Starts its
own Ray (own temp dir) and kills every process it started, by pid.
"""

import argparse
import json
import os
import signal
import time

import psutil
import ray

from benchmarks.soak import ewc_slope
from verl_prime_lora.run_processes import signal_and_wait

# first match wins: `log_monitor.py` before `monitor.py`, which its name contains
KINDS = ("raylet", "gcs_server", "dashboard.py", "log_monitor.py", "monitor.py", "DashboardAgent", "runtime_env")


def kind_of(process: psutil.Process) -> str | None:
    try:
        cmdline = " ".join(process.cmdline())
    except psutil.Error:
        return None
    return next((kind for kind in KINDS if kind in cmdline), None)


def rss_by_kind(processes: list[psutil.Process]) -> dict[str, float]:
    out: dict[str, float] = {}
    for process in processes:
        kind = kind_of(process)
        if kind is None:
            continue
        try:
            out[kind] = out.get(kind, 0.0) + process.memory_info().rss / 2**20
        except psutil.Error:
            pass
    return out


def growth(records: list[dict]) -> dict:
    """Each process kind's first and last RSS and its slope in MB per 1 000 s with the 95 % EWC interval."""
    kinds = sorted({kind for record in records for kind in record["rss_mb"]})
    out = {}
    for kind in kinds:
        rows = [(r["t"], r["rss_mb"][kind]) for r in records if kind in r["rss_mb"]]
        fit = ewc_slope([t for t, _ in rows], [mb for _, mb in rows])
        out[kind] = {
            "first_mb": rows[0][1],
            "last_mb": rows[-1][1],
            # ewc_slope needs 6 samples or more
            "per_1000_s": round(1000 * fit["slope"], 3) if fit else None,
            "ci95": [round(1000 * fit["low"], 3), round(1000 * fit["high"], 3)] if fit else None,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seconds", type=float, nargs="?")
    parser.add_argument("out", nargs="?")
    parser.add_argument("--every", type=float, default=10.0)
    parser.add_argument("--analyse", help="recompute the slopes of a recorded OUT.json from its samples")
    args = parser.parse_args()
    if args.analyse:
        with open(args.analyse) as f:
            summary = json.load(f)
        summary["growth"] = growth(summary["records"])
        with open(args.analyse, "w") as f:
            json.dump(summary, f, indent=1)
        print(json.dumps(summary["growth"], indent=1))
        return
    if args.seconds is None or args.out is None:
        parser.error("SECONDS and OUT are required without --analyse")
    me = psutil.Process()
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=f"/tmp/idle_ray_{os.getpid()}", log_to_driver=False)
    records = []
    try:
        time.sleep(30)  # start-up settles
        t0 = time.time()
        while time.time() - t0 < args.seconds:
            records.append({"t": round(time.time() - t0, 1), "rss_mb": rss_by_kind(me.children(recursive=True))})
            time.sleep(args.every)
    finally:
        descendants = [process.pid for process in me.children(recursive=True)]
        ray.shutdown()
        time.sleep(2)
        signal_and_wait(descendants, signal.SIGKILL, wait_s=5)
    summary = {
        "command": f"python -m {__spec__.name} {args.seconds:g} {args.out} --every {args.every:g}",
        "ray_version": ray.__version__,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - records[-1]["t"])),
        "seconds": records[-1]["t"],
        "growth": growth(records),
        "records": records,
    }
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary["growth"], indent=1))


if __name__ == "__main__":
    main()
