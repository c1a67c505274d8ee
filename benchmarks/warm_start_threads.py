"""The demo's warm start built with 1 and with 2 torch threads beside a busy neighbour, in one run.

`python -m benchmarks.warm_start_threads --out DIR [--busy 1] [--threads 2 1 2 1] [--max-steps 100]`

The e2e tier builds the warm start (`verl_prime_lora.demo.warm_start`) on one xdist worker while the other
launches `main_ppo`: two cores, each wanted by both. `--busy N` stands in for that neighbour with N processes
that spin for the whole benchmark. Each build runs from scratch in a folder of its own (`DIR/build_<i>_threads_<n>/`,
the demo's data and seed 0), cut to `--max-steps` SFT steps of the skill phase (the accuracy target set out of
reach) and one habit step, with the held-out checks and the sampled measurement as in a full build; thread
counts alternate so that a drift of the machine's load falls on both. The script prints and writes
`DIR/warm_start_threads.json`: each build's seconds, its ratio to the mean of the first thread count's builds,
and whether its weights are the same bytes as the first build's (the thread count must not change the warm model
the demo's bounds were recorded on).
"""

import argparse
import hashlib
import json
import multiprocessing
import shutil
import time
from pathlib import Path

from verl_prime_lora.demo import warm_start


def _spin() -> None:
    while True:
        pass


def _build(out: Path, threads: int, max_steps: int) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    warm_start.NUM_THREADS = threads
    start = time.perf_counter()
    stats = warm_start.write_warm_assets(out, seed=0, skill_acc=1.01, mix_steps=1, max_steps=max_steps)["stats"]
    seconds = time.perf_counter() - start
    weights = hashlib.sha256((out / "model" / "model.safetensors").read_bytes()).hexdigest()
    return {"threads": threads, "seconds": round(seconds, 1), "sft_seconds": stats["sft_seconds"],
            "sft_steps": stats["sft_steps"], "greedy_acc": stats["greedy_acc"], "weights_sha256": weights}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--busy", type=int, default=1, help="spinning neighbour processes during the builds")
    parser.add_argument("--threads", type=int, nargs="+", default=[2, 1, 2, 1], help="torch threads, build by build")
    parser.add_argument("--max-steps", type=int, default=100, help="SFT steps of each build's skill phase")
    args = parser.parse_args()
    neighbours = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for process in neighbours:
        process.start()
    try:
        builds = [_build(args.out / f"build_{i}_threads_{n}", n, args.max_steps) for i, n in enumerate(args.threads)]
    finally:
        for process in neighbours:
            process.terminate()
            process.join()
    first = [build for build in builds if build["threads"] == builds[0]["threads"]]
    baseline = sum(build["seconds"] for build in first) / len(first)
    for build in builds:
        build["seconds_ratio"] = round(build["seconds"] / baseline, 3)
        build["same_weights"] = build["weights_sha256"] == builds[0]["weights_sha256"]
    result = {"busy": args.busy, "cpus": multiprocessing.cpu_count(), "max_steps": args.max_steps, "builds": builds}
    (args.out / "warm_start_threads.json").write_text(json.dumps(result, indent=2) + "\n")
    for build in builds:
        print(
            f"{build['threads']} thread(s): build {build['seconds']:.1f} s (SFT {build['sft_seconds']:.1f} s, "
            f"{build['sft_steps']} steps), x{build['seconds_ratio']:.2f} of the first count's mean; "
            f"same weights: {build['same_weights']}"
        )


if __name__ == "__main__":
    main()
