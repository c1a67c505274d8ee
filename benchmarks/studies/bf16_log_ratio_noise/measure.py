"""How far from 0 an untrained PRM's log-ratio is in bf16, at the seed's response lengths.

An untrained PRM equals its reference (step 1; `prime.prm.update=none`), so z_i = β·Σ_t (log π_φ − log π_ref) is 0
in exact arithmetic and `prime_grpo` adds no process term (its group spread σ_g(z) is below the std threshold,
1e-2). In bf16 the two forwards can round apart, and that rounding is what the threshold would then see. Here the
same bf16 weights score the same responses twice, as the PRM and as its reference would:

* log-prob path `default`: veRL's `logprobs_from_logits` where flash-attn is absent (a bf16 log-softmax, row by
  row), or `fused`: veRL's `FusedLinearForPPO` (torch backend: an fp32 log-softmax of the bf16 logits; the recipes'
  `model.use_fused_kernels`);
* micro-batches: the reference in micro-batches of 8 (the CPU preset's actor), the PRM in micro-batches of
  `--prm-micro` (4, as the PRM's log-prob forward was before the recipe tied it to the actor's) or of 8 as well.

The model: a random Qwen2 with a small body and a 32768-token vocabulary, so that log-probs sit where a real
model's do (about ln V ≈ 10 nats, where bf16's step is 0.06); each micro-batch's valid tokens go through the head in
one matmul, as in veRL's engine. G groups of K responses of L_i tokens, L_i uniform in [L/2, L], random ids.

    python -m benchmarks.studies.bf16_log_ratio_noise.measure [--lengths 256 1024 3584] \
        [--out benchmarks/studies/bf16_log_ratio_noise]

Prints one row per (L, path, micro-batches) and writes `noise.json`: the largest |Δ log p| of a token, the share of
tokens that differ, σ_g(z) (mean and max over groups) and the share of groups at or above the threshold.

`--trained`: the floor after the PRM has trained, at the seed's width. Once the PRM's fp32 master weights have
moved, its bf16 copy no longer equals its reference's, and the two bf16 forwards round apart. A Qwen2 of the seed's
shape (DeepSeek-R1-Distill-Qwen-1.5B's config.json: hidden 1536, MLP 8960, 12 heads, 2 KV heads, vocabulary
151936, untied head; random weights, nothing downloaded) at `--depths` layers scores G groups of K random responses
of L_i ∈ [L/2, L] tokens. The PRM is the reference after k ∈ `--steps` AdamW steps at the seed's lr 1e-6 (β 0.05,
clip 1.0, weight decay 0) on the BCE of these very responses (`update: before` scores the batch it trained on):

    with lr·k·|u| far below any weight's size the gradient g barely moves, and AdamW's bias-corrected step for a
    constant g is lr·ĝ/(|ĝ| + ε) each time (ĝ: g after clipping), so w_k = w_0 − k·lr·ĝ/(|ĝ| + ε)

from one backward (`adam_direction`; tests/lab/studies/test_bf16_noise_floor.py checks it against torch's AdamW).
For each k:

* learned σ_g(z): the spread of z = β·Σ_t (log π_φ − log π_ref) computed in fp32, taken as exact (`--fp64-check`
  measures fp32's own error in z against an fp64 forward at the first point);
* rounding σ_g(z): the spread of z_bf16 − z_fp32, the error bf16 compute adds (both models bf16, log-probs by
  veRL's fused fp32 log-softmax of bf16 logits, equal micro-batches: the recipe's kernels, attention sdpa);
* what the run sees: σ_g(z_bf16).

A 28-layer model at 3584 tokens does not fit 2 cores' time and 24 GiB with its gradient: each σ is fitted as
log σ = a + b·log(depth) + c·log(L) over the measured points and extrapolated to the seed's 28 layers and 3584
tokens (`fit_floor`). Writes `floor.json`.

    python -m benchmarks.studies.bf16_log_ratio_noise.measure --refit   # no measuring: floor.json's values, one fit

`--refit`: rounding does not depend on the step count, so every value of `floor.json` enters one fit; prints and writes
`pooled_fit.json`, the floor at the seed's depth with its 95 % interval, and per token (`pooled_floor_fit`).

    python -m benchmarks.studies.bf16_log_ratio_noise.measure --trained [--depths 1 2 4] [--lengths 256 1024] \
        [--steps 1 5 20]
"""

import argparse
import copy
import json
import math
import time
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from verl.utils.experimental.torch_functional import FusedLinearForPPO
from verl.utils.torch_functional import logprobs_from_logits

from benchmarks.lib.evidence import t_quantile
from verl_prime_lora.algo.core_algos import process_group_spread

BETA, THRESHOLD = 0.05, 1e-2
PROMPT = 32
REFERENCE_MICRO = 8


def tiny_model(vocab: int, seed: int) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=PROMPT + 4096,
        attn_implementation="sdpa",
    )
    return Qwen2ForCausalLM(config).to(torch.bfloat16).eval()


@torch.no_grad()
def response_log_probs(
    model, rows: list[torch.Tensor], lengths: list[int], micro: int, path: str
) -> list[torch.Tensor]:
    """log p of each row's response tokens, the rows scored `micro` at a time (each micro-batch right-padded to its
    longest row, its valid tokens through the head in one matmul)."""
    out = []
    for start in range(0, len(rows), micro):
        batch = rows[start : start + micro]
        width = max(len(r) for r in batch)
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros(len(batch), width, dtype=torch.long)
        for i, row in enumerate(batch):
            ids[i, : len(row)], mask[i, : len(row)] = row, 1
        hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
        valid = mask.bool()
        labels = torch.roll(ids, -1, dims=1)[valid]
        flat = hidden[valid]  # (tokens, h): the micro-batch's valid tokens, as veRL's engine packs them
        if path == "fused":
            log_probs, _ = FusedLinearForPPO(impl_backend="torch").forward(
                flat[None], model.lm_head.weight, labels[None], temperature=1.0
            )
            log_probs = log_probs[0]
        else:
            log_probs = logprobs_from_logits(model.lm_head(flat), labels)
        offsets = [0, *torch.cumsum(mask.sum(1), 0).tolist()]
        for i, row in enumerate(batch):
            n_response = lengths[start + i]
            row_lp = log_probs[offsets[i] : offsets[i + 1]].double()
            out.append(row_lp[len(row) - 1 - n_response : len(row) - 1])  # predictions of the response tokens
    return out


def measure(model, length: int, groups: int, k: int, path: str, prm_micro: int, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(length // 2, length + 1, (groups * k,), generator=gen).tolist()
    rows = [torch.randint(1, model.config.vocab_size, (PROMPT + n,), generator=gen) for n in lengths]
    reference = response_log_probs(model, rows, lengths, REFERENCE_MICRO, path)
    prm = response_log_probs(model, rows, lengths, prm_micro, path)
    width = max(lengths)
    q = torch.zeros(len(rows), width, dtype=torch.float64)
    mask = torch.zeros(len(rows), width, dtype=torch.float64)
    for i, (a, b) in enumerate(zip(prm, reference, strict=True)):
        q[i, : len(a)], mask[i, : len(a)] = (a - b).double(), 1.0
    spread, _, _ = process_group_spread(BETA * q, mask, [i // k for i in range(len(rows))])
    diffs = q[mask.bool()].abs()
    return {
        "length": length,
        "path": path,
        "prm_micro": prm_micro,
        "reference_micro": REFERENCE_MICRO,
        "max_abs_token_diff": diffs.max().item(),
        "tokens_differing": (diffs > 0).double().mean().item(),
        "group_std_z_mean": spread.mean().item(),
        "group_std_z_max": spread.max().item(),
        "groups_at_threshold": (spread >= THRESHOLD).double().mean().item(),
    }


# DeepSeek-R1-Distill-Qwen-1.5B's config.json, less its depth (28) and its context length
SEED_SHAPE = {
    "vocab_size": 151936,
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}
SEED_DEPTH, SEED_LENGTH, SEED_LR, SEED_CLIP, ADAM_EPS = 28, 3584, 1e-6, 1.0, 1e-8


def seed_shaped_model(depth: int, max_length: int, seed: int, **shape) -> Qwen2ForCausalLM:
    """An fp32 Qwen2 of the seed's shape (or `shape`'s overrides) with `depth` layers and random weights."""
    torch.manual_seed(seed)
    config = Qwen2Config(
        **{**SEED_SHAPE, **shape},
        num_hidden_layers=depth,
        max_position_embeddings=PROMPT + max_length + 8,
        attn_implementation="sdpa",
    )
    return Qwen2ForCausalLM(config).float().eval()


def summed_log_probs(model, rows: list[torch.Tensor], lengths: list[int], micro: int, dtype) -> torch.Tensor:
    """Σ_t log p of each row's response tokens, scored `micro` rows at a time in `dtype` (bf16: veRL's fused fp32
    log-softmax of the bf16 logits), as float64."""
    path = "fused" if dtype == torch.bfloat16 else "default"
    with torch.no_grad():
        per_row = response_log_probs(model, rows, lengths, micro, path)
    return torch.stack([row.double().sum() for row in per_row])


def adam_direction(model, rows, lengths, labels, beta: float = BETA, clip: float = SEED_CLIP, eps: float = ADAM_EPS):
    """u with w_k = w_0 − k·lr·u after k AdamW steps of constant gradient: the gradient g of
    mean_i BCEWithLogits(z_i, y_i) at the reference (z = 0, so dL/dz_i = (½ − y_i)/N), clipped to norm `clip`,
    then u = ĝ/(|ĝ| + ε). One row at a time, fp32."""
    model.zero_grad(set_to_none=True)
    for row, n, label in zip(rows, lengths, labels, strict=True):
        logits = model(input_ids=row[None]).logits[0, len(row) - 1 - n : len(row) - 1].float()
        log_p = torch.log_softmax(logits, -1).gather(-1, row[len(row) - n :, None]).sum()
        (log_p * beta * (0.5 - float(label)) / len(rows)).backward()
    direction = [p.grad for p in model.parameters()]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in direction]))
    scale = min(1.0, clip / (float(norm) + 1e-6))
    for g in direction:  # in place: the gradients become the direction (no second copy of the model's size)
        g.mul_(scale)
        g.div_(g.abs().add_(eps))
    for p in model.parameters():
        p.grad = None
    return direction


def group_spread(z: torch.Tensor, k: int) -> torch.Tensor:
    """σ_g of z over consecutive groups of k rows (unbiased), one value per group."""
    return z.view(-1, k).std(dim=1, unbiased=True)


def measure_trained(
    depth: int, length: int, groups: int, k: int, steps: list[int], micro: int, seed: int, fp64: bool = False
) -> dict:
    """One (depth, L) point: σ_g of the learned z (fp32), of its bf16 rounding error and of the bf16 z, after each
    of `steps`; `fp64`: also the largest |z_fp32 − z_fp64| (fp32's own error in the learned z)."""
    started = time.perf_counter()
    reference = seed_shaped_model(depth, length, seed)
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(length // 2, length + 1, (groups * k,), generator=gen).tolist()
    rows = [torch.randint(1, reference.config.vocab_size, (PROMPT + n,), generator=gen) for n in lengths]
    labels = [1 if i % k < k // 2 else 0 for i in range(len(rows))]  # half right in every group
    direction = adam_direction(reference, rows, lengths, labels)
    ref32 = summed_log_probs(reference, rows, lengths, micro, torch.float32)
    prm = copy.deepcopy(reference).to(torch.bfloat16)  # one model that takes each state in turn: memory
    ref16 = summed_log_probs(prm, rows, lengths, micro, torch.bfloat16)
    out = {"depth": depth, "length": length, "groups": groups, "k": k, "tokens": sum(lengths), "by_steps": []}
    for n_steps in steps:
        prm.float()
        with torch.no_grad():
            for p, w0, u in zip(prm.parameters(), reference.parameters(), direction, strict=True):
                p.copy_(w0 - n_steps * SEED_LR * u)
        z32 = BETA * (summed_log_probs(prm, rows, lengths, micro, torch.float32) - ref32)
        z16 = BETA * (summed_log_probs(prm.to(torch.bfloat16), rows, lengths, micro, torch.bfloat16) - ref16)
        fp32_error = None
        if fp64:
            prm.double()
            with torch.no_grad():
                for p, w0, u in zip(prm.parameters(), reference.parameters(), direction, strict=True):
                    p.copy_(w0.double() - n_steps * SEED_LR * u.double())
            ref64 = summed_log_probs(reference.double(), rows, lengths, micro, torch.float64)
            z64 = BETA * (summed_log_probs(prm, rows, lengths, micro, torch.float64) - ref64)
            reference.float()
            fp32_error = (z32 - z64).abs().max().item()
        learned, rounding, seen = (group_spread(v, k) for v in (z32, z16 - z32, z16))
        out["by_steps"].append(
            {
                "steps": n_steps,
                "learned_sigma_z": learned.mean().item(),
                "rounding_sigma_z": rounding.mean().item(),
                "seen_sigma_z": seen.mean().item(),
                "fp32_error_max": fp32_error,
                "learned_ranks_right": float(
                    (z32.view(-1, k)[:, : k // 2].mean(1) > z32.view(-1, k)[:, k // 2 :].mean(1)).double().mean()
                ),
            }
        )
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


def fit_floor(points: list[dict], key: str, n_steps: int) -> dict:
    """Least squares of log σ = a + b·log(depth) + c·log(L) over the measured points (σ = `key` after `n_steps`),
    extrapolated to the seed's depth and length; b and c are dropped (set to 0) when the points do not vary that
    coordinate."""
    xs, ys = [], []
    for point in points:
        row = next(r for r in point["by_steps"] if r["steps"] == n_steps)
        if row[key] > 0:
            xs.append([1.0, math.log(point["depth"]), math.log(point["length"])])
            ys.append(math.log(row[key]))
    x, y = torch.tensor(xs, dtype=torch.float64), torch.tensor(ys, dtype=torch.float64)[:, None]
    varies = [True, len({r[1] for r in xs}) > 1, len({r[2] for r in xs}) > 1]
    cols = [i for i, v in enumerate(varies) if v]
    solution = torch.linalg.lstsq(x[:, cols], y).solution[:, 0].tolist()
    coef = [0.0, 0.0, 0.0]
    for i, c in zip(cols, solution, strict=True):
        coef[i] = c
    at_seed = math.exp(coef[0] + coef[1] * math.log(SEED_DEPTH) + coef[2] * math.log(SEED_LENGTH))
    return {"log_coef": coef, "depth_exponent": coef[1], "length_exponent": coef[2], "at_seed_shape": at_seed}


def fits_at_seed_shape(points: list[dict], steps: list[int]) -> dict:
    """`fit_floor` of the learned and the rounding σ_g(z) after each step count."""
    return {
        str(n): {
            "learned": fit_floor(points, "learned_sigma_z", n),
            "rounding": fit_floor(points, "rounding_sigma_z", n),
        }
        for n in steps
    }


def pooled_floor_fit(points: list[dict], lengths: tuple[int, ...] = (SEED_LENGTH,), depth: int = SEED_DEPTH) -> dict:
    """The rounding floor from every measured value at once: rounding does not depend on the PRM's step count (the
    values of one point show no trend with it), so one least-squares fit of log σ = a + b·log(depth) + c·log(L) over
    every (point, step count), and at `depth` and each L in `lengths` the fitted floor F with its 95 % interval
    exp(x₀ᵀβ̂ ± t_{0.975, n−3}·√(s²·x₀ᵀ(XᵀX)⁻¹x₀)) (optimistic: the step counts of one point share its weights and
    tokens), and F/L, the floor per token."""
    rows = [
        ([1.0, math.log(point["depth"]), math.log(point["length"])], math.log(row["rounding_sigma_z"]))
        for point in points
        for row in point["by_steps"]
    ]
    x = torch.tensor([r[0] for r in rows], dtype=torch.float64)
    y = torch.tensor([r[1] for r in rows], dtype=torch.float64)
    beta = torch.linalg.lstsq(x, y[:, None]).solution[:, 0]
    dof = len(rows) - 3
    s2 = float(((y - x @ beta) ** 2).sum()) / dof
    covariance = s2 * torch.linalg.inv(x.T @ x)
    t = t_quantile(0.975, dof)
    at = {}
    for length in lengths:
        x0 = torch.tensor([1.0, math.log(depth), math.log(length)], dtype=torch.float64)
        mean, se = float(x0 @ beta), math.sqrt(float(x0 @ covariance @ x0))
        floor = [math.exp(mean), math.exp(mean - t * se), math.exp(mean + t * se)]
        at[str(length)] = {"floor_ci95": floor, "per_token_ci95": [f / length for f in floor]}
    return {
        "values": len(rows),
        "log_coef": beta.tolist(),
        "depth_exponent": float(beta[1]),
        "length_exponent": float(beta[2]),
        "depth": depth,
        "at_length": at,
    }


def run_refit(out: Path) -> None:
    """`pooled_floor_fit` of `out/floor.json`'s points at the seed's depth, printed and written to
    `out/pooled_fit.json`."""
    points = json.loads((out / "floor.json").read_text())["points"]
    fit = pooled_floor_fit(points, lengths=(512, 1024, SEED_LENGTH))
    fit["command"] = f"python -m benchmarks.studies.bf16_log_ratio_noise.measure --refit --out {out}"
    (out / "pooled_fit.json").write_text(json.dumps(fit, indent=1) + "\n")
    print(
        f"{fit['values']} values: log σ = {fit['log_coef'][0]:.3f} + {fit['depth_exponent']:.3f}·log depth + "
        f"{fit['length_exponent']:.3f}·log L; at {SEED_DEPTH} layers:"
    )
    for length, row in fit["at_length"].items():
        (f, lo, hi), (ft, lo_t, hi_t) = row["floor_ci95"], row["per_token_ci95"]
        print(f"  L {length:>5}: floor {f:.3f} [{lo:.3f}, {hi:.3f}], per token {ft:.2e} [{lo_t:.2e}, {hi_t:.2e}]")


def run_trained(args) -> None:
    """Measures each (depth, L) point in turn; `floor.json` is rewritten after each, with the fit so far."""
    args.out.mkdir(parents=True, exist_ok=True)
    command = (
        "python -m benchmarks.studies.bf16_log_ratio_noise.measure --trained "
        + " ".join(
            f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in vars(args).items()
            if k in ("depths", "lengths", "steps", "groups", "k", "micro", "seed", "max_depth_x_length", "points")
            and v is not None
        )
        + (" --fp64-check" if args.fp64_check else "")
    )
    shapes = [(d, n) for d in args.depths for n in args.lengths if d * n <= args.max_depth_x_length]
    if args.points:
        shapes = [tuple(int(x) for x in point.split(":")) for point in args.points]
    points = []
    if args.resume and (args.out / "floor.json").exists():
        points = json.loads((args.out / "floor.json").read_text())["points"]
        shapes = [s for s in shapes if not any((p["depth"], p["length"]) == s for p in points)]
    print(
        f"{'depth':>5} {'L':>5} {'k':>3} {'learned σ_g z':>14} {'rounding σ_g z':>15} {'ratio':>7} {'seen σ_g z':>11}"
    )
    for depth, length in shapes:
        first = not points
        point = measure_trained(
            depth, length, args.groups, args.k, args.steps, args.micro, args.seed, fp64=first and args.fp64_check
        )
        points.append(point)
        for row in point["by_steps"]:
            print(
                f"{depth:>5} {length:>5} {row['steps']:>3} {row['learned_sigma_z']:>14.3e} "
                f"{row['rounding_sigma_z']:>15.3e} {row['learned_sigma_z'] / row['rounding_sigma_z']:>7.2f} "
                f"{row['seen_sigma_z']:>11.3e}   ({point['seconds']} s)",
                flush=True,
            )
        record = {
            "command": command,
            "threshold": THRESHOLD,
            "points": points,
            "fits": fits_at_seed_shape(points, args.steps),
        }
        (args.out / "floor.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"fitted to {SEED_DEPTH} layers, L {SEED_LENGTH} (wrote {args.out / 'floor.json'}):")
    for n_steps, fit in fits_at_seed_shape(points, args.steps).items():
        learned, rounding = fit["learned"], fit["rounding"]
        print(
            f"  k {n_steps:>2}: learned σ_g z {learned['at_seed_shape']:.3e} (depth^{learned['depth_exponent']:.2f} "
            f"L^{learned['length_exponent']:.2f}), rounding {rounding['at_seed_shape']:.3e} "
            f"(depth^{rounding['depth_exponent']:.2f} L^{rounding['length_exponent']:.2f}), "
            f"ratio {learned['at_seed_shape'] / rounding['at_seed_shape']:.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 3584])
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--k", type=int, default=6, help="responses per group (the seed's rollout.n)")
    parser.add_argument("--prm-micro", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/studies/bf16_log_ratio_noise"))
    parser.add_argument("--trained", action="store_true", help="the floor after PRM updates, at the seed's width")
    parser.add_argument("--depths", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--steps", type=int, nargs="+", default=[1, 5, 20], help="AdamW steps of the PRM")
    parser.add_argument("--micro", type=int, default=4, help="rows per log-prob forward, PRM and reference alike")
    parser.add_argument("--max-depth-x-length", type=int, default=2048, help="skip points with depth x L above this")
    parser.add_argument("--fp64-check", action="store_true", help="at the first point, fp32's error against fp64")
    parser.add_argument("--points", nargs="+", help="DEPTH:L pairs in this order, instead of --depths x --lengths")
    parser.add_argument("--resume", action="store_true", help="keep the points already in OUT/floor.json")
    parser.add_argument("--refit", action="store_true", help="pool OUT/floor.json's values in one fit (no measuring)")
    args = parser.parse_args()
    if args.refit:
        run_refit(args.out)
        return
    if args.trained:
        if args.lengths == [256, 1024, 3584]:
            args.lengths = [256, 1024]
        run_trained(args)
        return
    model = tiny_model(args.vocab, args.seed)
    results = []
    header = f"{'L':>5} {'path':>8} {'micro':>7} {'max|Δlog p|':>12} {'tokens≠':>8} "
    header += f"{'σ_g z mean':>11} {'σ_g z max':>10} {'≥1e-2':>6}"
    print(header)
    for length in args.lengths:
        for path in ("default", "fused"):
            for micro in (args.prm_micro, REFERENCE_MICRO):
                start = time.perf_counter()
                row = measure(model, length, args.groups, args.k, path, micro, args.seed)
                row["seconds"] = round(time.perf_counter() - start, 1)
                results.append(row)
                print(
                    f"{length:>5} {path:>8} {f'{micro} / {REFERENCE_MICRO}':>7} {row['max_abs_token_diff']:>12.4g} "
                    f"{row['tokens_differing']:>8.4f} {row['group_std_z_mean']:>11.4g} {row['group_std_z_max']:>10.4g} "
                    f"{row['groups_at_threshold']:>6.2f}",
                    flush=True,
                )
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python -m benchmarks.studies.bf16_log_ratio_noise.measure " + " ".join(
        f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
        for k, v in vars(args).items()
        if k != "out"
    )
    (args.out / "noise.json").write_text(json.dumps({"command": command, "rows": results}, indent=1) + "\n")
    print(f"wrote {args.out / 'noise.json'}")


if __name__ == "__main__":
    main()
