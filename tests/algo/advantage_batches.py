"""What the tests of `verl_prime_lora.algo` share: batches of rows in several uid groups (`make_batch`, and
`batches`, its Hypothesis strategy), the rows of each group of a uid column (`groups_of`), and an algorithm
config for the estimators (`algo_config`)."""

import numpy as np
import torch
from hypothesis import strategies as st
from omegaconf import OmegaConf


def groups_of(index):
    out = {}
    for i, key in enumerate(index):
        out.setdefault(key, []).append(i)
    return out


def make_batch(seed, groups=(3, 1, 4), T=7, shuffle=True, empty_rows=(), dtype=torch.float64):
    """Rows of several groups, right-padded masks of random lengths, outcome reward at the last token."""
    gen = torch.Generator().manual_seed(seed)
    index = np.array([f"uid-{g}" for g, size in enumerate(groups) for _ in range(size)], dtype=object)
    B = len(index)
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    for row in empty_rows:
        lengths[row] = 0
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(dtype)
    outcome = torch.randint(0, 2, (B,), generator=gen).to(dtype)
    rewards = torch.zeros(B, T, dtype=dtype)
    rows = torch.nonzero(lengths > 0).flatten()
    rewards[rows, lengths[rows] - 1] = outcome[rows]
    process = torch.randn(B, T, generator=gen, dtype=dtype) * 0.3 * mask
    if shuffle:
        perm = torch.randperm(B, generator=gen)
        index, mask, rewards, process = index[perm.numpy()], mask[perm], rewards[perm], process[perm]
    return rewards, mask, index, process


def algo_config(**prime):
    return OmegaConf.create(
        {"gamma": prime.pop("gamma", 1.0), "norm_adv_by_std_in_grpo": prime.pop("norm", True), "prime": prime}
    )


batches = st.builds(
    make_batch,
    seed=st.integers(0, 10_000),
    groups=st.lists(st.integers(1, 5), min_size=1, max_size=5).map(tuple),
    T=st.integers(1, 9),
    shuffle=st.booleans(),
)
