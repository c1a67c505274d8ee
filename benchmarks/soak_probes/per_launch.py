"""A soak quantity launch by launch: each launch's OLS slope per 100 steps and the steps where its value changes.

`python -m benchmarks.soak_probes.per_launch soak.json QUANTITY [--skip 10] [--changes]`

Reads `soak.json`'s per-step records (`segment` is the launch; replayed steps are left out) and prints, per launch,
the slope of QUANTITY (a key of a record's `values`, such as `rss_mb/ray::WorkerDict`) over the steps at least
`--skip` steps after the launch started, and with `--changes` every step where the value differs from the step
before (for counts such as `fds/raylet`).
"""

import argparse
import json


def slope_per_100(points: list[tuple[float, float]]) -> float:
    n = len(points)
    mean_x, mean_y = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    return 100 * sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("soak_json")
    parser.add_argument("quantity")
    parser.add_argument("--skip", type=int, default=10, help="leave out each launch's first steps")
    parser.add_argument("--changes", action="store_true", help="print the steps where the value changes")
    args = parser.parse_args()
    with open(args.soak_json) as f:
        records = json.load(f)["records"]
    for launch in sorted({record["segment"] for record in records}):
        rows = [r for r in records if r["segment"] == launch and not r["replayed"] and args.quantity in r["values"]]
        points = [(r["step"], r["values"][args.quantity]) for r in rows if r["since_resume"] >= args.skip]
        print(
            f"launch {launch}: steps {points[0][0]}-{points[-1][0]}, {args.quantity} {points[0][1]:.1f} -> "
            f"{points[-1][1]:.1f}, slope {slope_per_100(points):+.1f} per 100 steps"
        )
        if args.changes:
            previous = None
            for r in rows:
                value = r["values"][args.quantity]
                if value != previous:
                    print(f"  step {r['step']}: {value}")
                previous = value


if __name__ == "__main__":
    main()
