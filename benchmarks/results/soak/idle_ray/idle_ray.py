"""Does Ray grow with time alone? A local Ray instance started as the CPU preset starts it (no dashboard UI), with
nothing submitted to it, and the RSS of each of its processes sampled for a while.

    nice -n 10 python idle_ray.py SECONDS OUT.json [--every 10]

The soak's Ray daemons (raylet, dashboard.py, monitor.py, log_monitor.py, the DashboardAgent) grew by 0.4-2.3 MB per
100 steps (about 1 000 s) in every launch; if an idle instance grows at that rate per second, the growth is Ray's own
clock-driven work, not the run's calls. Prints and records each process kind's OLS slope in MB per 1 000 s with its
95 % OLS interval (the samples are autocorrelated, so the interval is narrower than the truth: read it as a lower bound
on the uncertainty). Starts its own Ray (own temp dir) and kills every process it started, by pid.
"""

import argparse
import json
import math
import os
import signal
import time

import psutil
import ray

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


def ols(points: list[tuple[float, float]]) -> dict:
    """Slope per 1 000 s with its 95 % OLS interval (normal quantile: hundreds of points)."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    residual = sum((y - my - slope * (x - mx)) ** 2 for x, y in points) / (n - 2)
    half = 1.96 * math.sqrt(residual / sxx)
    low, high = 1000 * (slope - half), 1000 * (slope + half)
    return {"per_1000_s": round(1000 * slope, 3), "ci95": [round(low, 3), round(high, 3)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seconds", type=float)
    parser.add_argument("out")
    parser.add_argument("--every", type=float, default=10.0)
    args = parser.parse_args()
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
        descendants = me.children(recursive=True)
        ray.shutdown()
        time.sleep(2)
        for process in descendants:
            try:
                process.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
    kinds = sorted({kind for record in records for kind in record["rss_mb"]})
    summary = {
        "command": f"python idle_ray.py {args.seconds:g} {args.out} --every {args.every:g}",
        "ray_version": ray.__version__,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - records[-1]["t"])),
        "seconds": records[-1]["t"],
        "growth": {
            kind: {
                "first_mb": records[0]["rss_mb"].get(kind),
                "last_mb": records[-1]["rss_mb"].get(kind),
                **ols([(r["t"], r["rss_mb"][kind]) for r in records if kind in r["rss_mb"]]),
            }
            for kind in kinds
        },
        "records": records,
    }
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary["growth"], indent=1))


if __name__ == "__main__":
    main()
