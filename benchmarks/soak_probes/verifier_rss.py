"""RSS of a math-verify verifier process against the number of verifications, on the demo's answers.

`python benchmarks/results/soak/reward_growth/verifier_rss.py --calls 140000 --every 5000 [--garbage 0.2] --out DIR`

The soak's reward-worker kind (`math_format`) is the verifier process that `rewards.math_format` starts and sends
each response's final answer to (`_judge(gold, answer)`, math-verify's parse and verify). This calls `_judge` in
one process as that process does, on what the demo's responses end with: the chain task's ground truths and an
answer that is right, off by a small amount, from another problem, or (a share `--garbage`) a random fragment of
digits and `+-=`, drawn with the demo's seed 0 data. It writes
`verifier_rss_garbage<share>.json`: RSS (from /proc/self/status) and the sizes of sympy's and math-verify's caches every
`--every` calls. About 34 000 responses are graded per 100 soak steps.
"""

import argparse
import functools
import gc
import json
import random
import time
from pathlib import Path

from verl_prime_lora.demo import chain_task
from verl_prime_lora.rewards import math_format


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def cache_sizes() -> dict:
    """Entries in every functools.lru_cache reachable from the loaded modules (sympy's `cacheit` among them)."""
    sizes = {}
    for obj in gc.get_objects():
        if isinstance(obj, functools._lru_cache_wrapper):
            info = obj.cache_info()
            if info.currsize:
                sizes[f"{obj.__module__}.{obj.__qualname__}"] = info.currsize
    return {
        "entries": sum(sizes.values()),
        "caches": len(sizes),
        "largest": sorted(sizes.items(), key=lambda kv: -kv[1])[:5],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=120_000)
    parser.add_argument("--every", type=int, default=4_000)
    parser.add_argument("--garbage", type=float, default=0.0, help="share of answers that are random fragments")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    chains = chain_task.make_splits(0, {"sft_eval": 200, "test": 200, "train": 2000})["train"]
    rng = random.Random(0)
    samples, start = [], time.perf_counter()
    for call in range(1, args.calls + 1):
        chain = rng.choice(chains)
        kind = rng.random()
        if kind < 0.3:
            answer = chain.answer
        elif kind < 0.7:
            answer = str(int(chain.answer) + rng.randint(-9, 9))
        elif kind < 1 - args.garbage:
            answer = rng.choice(chains).answer
        else:  # what a sampled response can end with: a fragment of the chain, seldom the same twice
            answer = "".join(rng.choice("0123456789+-=") for _ in range(rng.randint(1, 12)))
        math_format._judge(f"\\boxed{{{chain.answer}}}", f"\\boxed{{{answer}}}")
        if call % args.every == 0 or call == 1:
            samples.append(
                {
                    "calls": call,
                    "rss_mb": round(rss_mb(), 2),
                    "seconds": round(time.perf_counter() - start, 1),
                    **cache_sizes(),
                }
            )
            print(samples[-1]["calls"], samples[-1]["rss_mb"], samples[-1]["entries"], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"verifier_rss_garbage{args.garbage}.json").write_text(json.dumps(samples, indent=1) + "\n")


if __name__ == "__main__":
    main()
