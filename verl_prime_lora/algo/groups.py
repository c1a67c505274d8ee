"""Groups of responses and their statistics, as PRIME's estimators and metrics use them.

Groups are responses to the same prompt, found by equal ``index`` values (veRL's ``uid``), in any order — never by
position. Every function is vectorised (one ``index_add_`` per statistic) and keeps its input's dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def compute_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """float64 if any input is float64, else float32 (half-precision inputs are upcast)."""
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32


def group_ids(index: Any, device: torch.device | str) -> torch.Tensor:
    """Dense group ids 0..G-1 (long, on ``device``), numbered in order of first appearance.

    ``index`` holds one hashable label per row — uid strings, ints of any size or sign, anything in a
    numpy (object) array, a list or a tensor; equal labels share an id. A dict lookup per row, so
    neither the labels' values nor their types bound the ids.
    """
    labels = index.reshape(-1).tolist() if isinstance(index, (np.ndarray, torch.Tensor)) else list(index)
    ids: dict[Any, int] = {}
    return torch.tensor([ids.setdefault(label, len(ids)) for label in labels], dtype=torch.long, device=device)


def group_sum(values: torch.Tensor, gid: torch.Tensor, num_groups: int) -> torch.Tensor:
    """S_g = Σ_{i ∈ g} values_i for each group g (shape (G,))."""
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, gid, values)


def group_mean_std(values: torch.Tensor, gid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row group statistics of ``values`` (B,): (count_g, mean_g, unbiased std_g), each (B,).

    Singleton groups get mean 0 and std 1 — veRL's ``grpo`` convention, so that a lone response keeps
    its raw value instead of a 0/0.
    """
    num_groups = int(gid.max().item()) + 1 if gid.numel() else 0
    count = group_sum(torch.ones_like(values), gid, num_groups)
    mean = group_sum(values, gid, num_groups) / count.clamp_min(1)
    centered = values - mean[gid]
    var = group_sum(centered * centered, gid, num_groups) / (count - 1).clamp_min(1)
    single = count <= 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(var), var.sqrt())
    return count[gid], mean[gid], std[gid]


def leave_one_out_mean(values: torch.Tensor, gid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(count_g, mean_{j ≠ i, j ∈ g(i)} values_j) per row; the baseline is 0 for singleton groups."""
    num_groups = int(gid.max().item()) + 1 if gid.numel() else 0
    count = group_sum(torch.ones_like(values), gid, num_groups)[gid]
    total = group_sum(values, gid, num_groups)[gid]
    baseline = torch.where(count > 1, (total - values) / (count - 1).clamp_min(1), torch.zeros_like(values))
    return count, baseline
