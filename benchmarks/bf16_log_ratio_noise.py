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

    python benchmarks/bf16_log_ratio_noise.py [--lengths 256 1024 3584] [--out benchmarks/results/bf16_log_ratio_noise]

Prints one row per (L, path, micro-batches) and writes `noise.json`: the largest |Δ log p| of a token, the share of
tokens that differ, σ_g(z) (mean and max over groups) and the share of groups at or above the threshold.
"""

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from verl.utils.experimental.torch_functional import FusedLinearForPPO
from verl.utils.torch_functional import logprobs_from_logits

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
            row_lp = log_probs[offsets[i] : offsets[i + 1]].float()
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
    spread, _ = process_group_spread(BETA * q, mask, [i // k for i in range(len(rows))])
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 3584])
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--k", type=int, default=6, help="responses per group (the seed's rollout.n)")
    parser.add_argument("--prm-micro", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/bf16_log_ratio_noise"))
    args = parser.parse_args()
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
    command = "python benchmarks/bf16_log_ratio_noise.py " + " ".join(
        f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
        for k, v in vars(args).items()
        if k != "out"
    )
    (args.out / "noise.json").write_text(json.dumps({"command": command, "rows": results}, indent=1) + "\n")
    print(f"wrote {args.out / 'noise.json'}")


if __name__ == "__main__":
    main()
