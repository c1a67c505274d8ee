"""Advantage estimators: PRIME's vs veRL's `grpo_vectorized`, same inputs, same run, as ratios.

Batch 1024 × 4096 (64 groups of 16, shuffled uids, random response lengths), float32 on CPU.
Each estimator is timed `--repeats` times, interleaved round-robin so that machine noise hits all
of them alike; the median is reported, and every ratio is against `grpo_vectorized` of the same run.

    python -m benchmarks.perf.advantage [--repeats 15] [--threads N]
"""

import argparse
import statistics
import time

import numpy as np
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

import verl_prime_lora.algo.core_algos  # noqa: F401  (registers the PRIME estimators)


def make_inputs(batch=1024, length=4096, groups=64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(length // 8, length + 1, (batch,), generator=gen)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(batch, length)
    rewards[torch.arange(batch), lengths - 1] = torch.randint(0, 2, (batch,), generator=gen).float()
    process = 0.05 * torch.randn(batch, length, generator=gen) * mask
    index = np.array([f"uid-{i % groups}" for i in range(batch)], dtype=object)[torch.randperm(batch, generator=gen)]
    return rewards, mask, index, process


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    rewards, mask, index, process = make_inputs()
    config = OmegaConf.create({"gamma": 1.0, "norm_adv_by_std_in_grpo": True, "prime": {}})
    discounted = OmegaConf.create({"gamma": 0.99, "norm_adv_by_std_in_grpo": True, "prime": {}})
    cases = {
        "grpo_vectorized (veRL)": lambda: get_adv_estimator_fn("grpo_vectorized")(rewards, mask, index),
        "prime_grpo, outcome only": lambda: get_adv_estimator_fn("prime_grpo")(rewards, mask, index, config=config),
        "prime_grpo": lambda: get_adv_estimator_fn("prime_grpo")(
            rewards, mask, index, config=config, process_rewards=process
        ),
        "prime_rloo": lambda: get_adv_estimator_fn("prime_rloo")(
            rewards, mask, index, config=config, process_rewards=process
        ),
        "prime_grpo, gamma=0.99": lambda: get_adv_estimator_fn("prime_grpo")(
            rewards, mask, index, config=discounted, process_rewards=process
        ),
    }
    times = {name: [] for name in cases}
    for fn in cases.values():  # warm-up
        fn()
    for _ in range(args.repeats):
        for name, fn in cases.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)

    base = statistics.median(times["grpo_vectorized (veRL)"])
    print(
        f"batch {tuple(rewards.shape)}, 64 groups of 16, torch threads {torch.get_num_threads()}, "
        f"median of {args.repeats}"
    )
    print(f"{'estimator':<28} {'median ms':>10} {'ratio vs grpo_vectorized':>26}")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"{name:<28} {1e3 * median:>10.2f} {median / base:>26.2f}")


if __name__ == "__main__":
    main()
