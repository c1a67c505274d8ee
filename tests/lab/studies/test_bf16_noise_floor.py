"""benchmarks/bf16_log_ratio_noise.py --trained: the PRM after k AdamW steps from one backward, and the fit."""

import json
import math
from pathlib import Path

import pytest
import torch

from benchmarks.studies.bf16_log_ratio_noise import measure as noise

TINY = {
    "vocab_size": 96,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


def bce_of_log_ratio(prm, reference_sums, rows, lengths, labels):
    """mean_i BCEWithLogits(β·Σ_t (log π_φ − log π_ref), y_i), written out independently of the benchmark."""
    z = []
    for row, n, ref in zip(rows, lengths, reference_sums, strict=True):
        logits = prm(input_ids=row[None]).logits[0, len(row) - 1 - n : len(row) - 1].double()
        log_p = torch.log_softmax(logits, -1).gather(-1, row[len(row) - n :, None]).sum()
        z.append(noise.BETA * (log_p - ref))
    return torch.nn.functional.binary_cross_entropy_with_logits(torch.stack(z), torch.tensor(labels).double())


@pytest.mark.parametrize("steps", [1, 5])
def test_k_adamw_steps_at_the_seeds_lr_move_each_weight_by_k_lr_times_the_clipped_gradients_sign(steps):
    reference = noise.seed_shaped_model(2, 24, seed=0, **TINY)
    gen = torch.Generator().manual_seed(1)
    lengths = [12, 20, 16, 9]
    rows = [torch.randint(1, TINY["vocab_size"], (noise.PROMPT + n,), generator=gen) for n in lengths]
    labels = [1.0, 0.0, 1.0, 0.0]
    with torch.no_grad():
        ref_sums = [
            torch.log_softmax(reference(input_ids=r[None]).logits[0, len(r) - 1 - n : len(r) - 1].double(), -1)
            .gather(-1, r[len(r) - n :, None])
            .sum()
            for r, n in zip(rows, lengths, strict=True)
        ]
    direction = noise.adam_direction(reference, rows, lengths, labels)

    prm = noise.seed_shaped_model(2, 24, seed=0, **TINY)
    optimizer = torch.optim.AdamW(prm.parameters(), lr=noise.SEED_LR, eps=noise.ADAM_EPS, weight_decay=0.0)
    for _ in range(steps):
        optimizer.zero_grad()
        bce_of_log_ratio(prm, ref_sums, rows, lengths, labels).backward()
        torch.nn.utils.clip_grad_norm_(prm.parameters(), noise.SEED_CLIP)
        optimizer.step()
    # fp32 master weights: each AdamW step rounds to the weight's fp32 spacing (about 1e-7 for weights near 1, a
    # tenth of a step), the closed form once. Beyond that nearly every weight agrees to 0.2 % of the move; the few
    # whose gradient is near 0 or turns during the steps move less under AdamW
    agree, total = 0, 0
    for p_adam, w0, u in zip(prm.parameters(), reference.parameters(), direction, strict=True):
        closed_form = (w0 - steps * noise.SEED_LR * u).detach()
        spacing = torch.finfo(torch.float32).eps * w0.detach().abs()
        gap = (p_adam.detach() - closed_form).abs()
        agree += int((gap <= (steps + 1) * spacing + 2e-3 * steps * noise.SEED_LR).sum())
        total += gap.numel()
        assert (gap <= 2 * steps * noise.SEED_LR).all()
    assert agree / total > 0.99
    # what the benchmark reports, the PRM's log-ratio z on the batch, agrees to 1 %
    closed = noise.seed_shaped_model(2, 24, seed=0, **TINY)
    with torch.no_grad():
        for p, w0, u in zip(closed.parameters(), reference.parameters(), direction, strict=True):
            p.copy_(w0 - steps * noise.SEED_LR * u)
        z_adam, z_closed = (
            [noise.BETA * (s - r) for s, r in zip(noise.summed_log_probs(m, rows, lengths, 2, torch.float32), ref_sums)]
            for m in (prm, closed)
        )
    for a, c in zip(z_adam, z_closed, strict=True):
        assert abs(float(a - c)) <= 0.01 * abs(float(a)) + 1e-9


def test_the_fit_recovers_a_power_law_and_extrapolates_to_the_seeds_shape():
    def sigma(depth, length):
        return 1e-3 * depth**0.5 * length**0.25

    points = [
        {"depth": d, "length": n, "by_steps": [{"steps": 1, "rounding_sigma_z": sigma(d, n)}]}
        for d, n in [(1, 256), (2, 256), (4, 256), (1, 1024), (2, 1024)]
    ]
    fit = noise.fit_floor(points, "rounding_sigma_z", 1)
    assert fit["depth_exponent"] == pytest.approx(0.5) and fit["length_exponent"] == pytest.approx(0.25)
    assert fit["at_seed_shape"] == pytest.approx(sigma(28, 3584))
    # one length only: its exponent is not fitted (0), the depth's still is
    flat = noise.fit_floor([p for p in points if p["length"] == 256], "rounding_sigma_z", 1)
    assert flat["length_exponent"] == 0.0 and flat["depth_exponent"] == pytest.approx(0.5)
    assert math.isclose(flat["at_seed_shape"], sigma(28, 256), rel_tol=1e-9)


def test_the_pooled_fit_recovers_a_power_law_over_every_step_count_with_a_collapsing_interval():
    def sigma(depth, length):
        return 2e-5 * depth**0.4 * length

    points = [
        {"depth": d, "length": n, "by_steps": [{"steps": k, "rounding_sigma_z": sigma(d, n)} for k in (1, 5, 20)]}
        for d, n in [(1, 256), (2, 256), (4, 256), (1, 1024)]
    ]
    fit = noise.pooled_floor_fit(points, lengths=(3584,))
    assert (
        fit["values"] == 12
        and fit["depth_exponent"] == pytest.approx(0.4)
        and fit["length_exponent"] == (pytest.approx(1.0))
    )
    floor, low, high = fit["at_length"]["3584"]["floor_ci95"]
    assert floor == pytest.approx(sigma(28, 3584)) and high / low == pytest.approx(1.0, abs=1e-6)
    assert fit["at_length"]["3584"]["per_token_ci95"][0] == pytest.approx(sigma(28, 3584) / 3584)


def test_the_recorded_floor_pools_to_the_figures_the_recipe_cites():
    """`python -m benchmarks.studies.bf16_log_ratio_noise.measure --refit` on the recorded floor.json: 0.545
    [0.254, 1.170] at 28 layers and 3584 tokens, 1.52e-4 per token (recipe/prime_lora.yaml's
    process_std_threshold_per_token is 2.6× it)."""
    recorded = Path(__file__).resolve().parents[3] / "benchmarks/studies/bf16_log_ratio_noise/floor.json"
    fit = noise.pooled_floor_fit(json.loads(recorded.read_text())["points"])
    floor = fit["at_length"]["3584"]
    assert floor["floor_ci95"] == pytest.approx([0.545, 0.254, 1.170], abs=1e-3)
    assert floor["per_token_ci95"][0] == pytest.approx(1.52e-4, rel=1e-2)
    assert 4e-4 / floor["per_token_ci95"][0] == pytest.approx(2.6, abs=0.05)
