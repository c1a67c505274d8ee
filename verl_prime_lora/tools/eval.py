r"""pass@1 of a base model and its LoRA checkpoints on math benchmarks, with vLLM and math-verify.

    python -m verl_prime_lora.tools.eval --base MODEL_DIR \
        --adapters ckpt/global_step_50/adapter ckpt/global_step_100/adapter \
        --benchmarks aime24=data/aime24.parquet aime25=data/aime25.parquet amc23=data/amc23.parquet \
                     math_500=data/math_500.parquet \
        --out results.json --plot accuracy.png

The defaults are the sampling of the seed card's own evaluation (LYF22034/open-rs2-grpo-lora
``scripts/eval/eval_prime.py``, lines 61-62): one sample per problem (``--n 1``), temperature 0.6, top_p 0.95,
at most 32768 new tokens, and a vLLM engine with ``max_model_len`` 32768. vLLM stops a sequence when prompt
+ completion reach ``max_model_len``, so by default a completion has at most 32768 minus the prompt's length
tokens (as in the card, if its vLLM 0.7.2 does the same); ``--max_model_len`` (default: the larger of 32768 and
``--max_tokens``) lifts that.
Every default is an option; docs/evaluation.md lists what still differs from the card (the verifier, LoRA
served unmerged, the seeds).

pass@1 of one model on one benchmark = (1/P) Σ_p (1/n) Σ_k acc_{p,k}: P problems, n samples per problem
(with the default n = 1, the fraction of problems whose one sample is correct), each sample judged by the
training reward's verifier (`verl_prime_lora.rewards.math_format.compute_score`, field ``acc``), so
evaluation and training agree on what "correct" means; a problem whose ground truth does not parse counts
as 0 (it stays in P). Benchmarks are veRL RL parquet files (as written by
examples/data_preprocess/eval_sets.py): ``prompt`` (chat messages, rendered with the base model's chat
template by vLLM) and ``reward_model.ground_truth``. Adapters are PEFT folders (``adapter_config.json``; see
`verl_prime_lora.tools.export_adapter` for veRL checkpoints). One vLLM engine serves the base model and
every adapter (LoRA requests), so the base weights load once. Problem p of every benchmark is sampled with
seed ``--seed`` + p, the same for every model: the random draws are fixed per problem, whatever the batching
(which can still change the logits' rounding), and models are compared on the same draws.

Prints a table (one row per model, one column per benchmark and their average), writes JSON with the
table, per model and benchmark the wall time, completion tokens and how many completions hit the length
limit (``stats``), and every generation; optionally plots accuracy against the checkpoint's training step
(parsed from ``global_step_N`` in the adapter path; the base model is step 0).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

import pandas as pd

from verl_prime_lora.rewards.math_format import compute_score

BASE_LABEL = "base"
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)  # max_lora_rank values vLLM accepts
CARD_MAX_MODEL_LEN = 32768  # eval_prime.py:61 `LLM(..., max_model_len=32768)`


def load_benchmark(path: str | Path, max_samples: int | None = None) -> list[dict]:
    """Rows of a veRL RL parquet as {messages, ground_truth, data_source}; errors name the bad row."""
    frame = pd.read_parquet(path)
    for column in ("prompt", "reward_model"):
        if column not in frame.columns:
            raise ValueError(f"{path}: missing column '{column}' (veRL RL format expected)")
    rows = []
    for i, record in enumerate(frame.head(max_samples).to_dict("records") if max_samples else frame.to_dict("records")):
        reward_model = record["reward_model"] or {}
        if "ground_truth" not in reward_model:
            raise ValueError(f"{path}: row {i} has no reward_model.ground_truth")
        messages = [{"role": m["role"], "content": m["content"]} for m in record["prompt"]]
        rows.append(
            {
                "messages": messages,
                "ground_truth": reward_model["ground_truth"],
                "data_source": record.get("data_source", ""),
            }
        )
    return rows


def pass_at_1(accuracies: list[list[float]]) -> float:
    """(1/P) Σ_p mean_k acc[p][k]; 0 for an empty benchmark."""
    return sum(sum(row) / len(row) for row in accuracies) / len(accuracies) if accuracies else 0.0


def checkpoint_step(label: str) -> int:
    """Training step of a checkpoint path (veRL's `…global_step_N…`, or a TRL `…checkpoint-N…` such as the card's
    published adapters); 0 for the base model."""
    match = re.search(r"(?:global_step_|checkpoint-)(\d+)", label)
    return int(match.group(1)) if match else 0


def lora_rank_for_vllm(adapters: list[str]) -> int:
    """Smallest rank vLLM accepts that covers every adapter's `r`."""
    ranks = [json.loads((Path(a) / "adapter_config.json").read_text())["r"] for a in adapters]
    need = max(ranks, default=8)
    return next((r for r in VLLM_LORA_RANKS if r >= need), need)


def score_generations(rows: list[dict], outputs: list[list[str]], reward_kwargs: dict) -> list[list[float]]:
    return [
        [compute_score(row["data_source"], text, row["ground_truth"], **reward_kwargs)["acc"] for text in texts]
        for row, texts in zip(rows, outputs, strict=True)
    ]


def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    benchmarks = dict(spec.split("=", 1) for spec in args.benchmarks)
    data = {name: load_benchmark(path, args.max_samples) for name, path in benchmarks.items()}
    llm = LLM(
        model=args.base,
        enable_lora=bool(args.adapters),
        max_lora_rank=lora_rank_for_vllm(args.adapters) if args.adapters else None,
        max_loras=1,
        seed=args.seed,
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        enforce_eager=args.enforce_eager,
        gpu_memory_utilization=args.gpu_memory_utilization,
        tensor_parallel_size=args.tensor_parallel_size,
    )
    sampling = {
        name: [
            SamplingParams(
                n=args.n, temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens, seed=args.seed + p
            )
            for p in range(len(rows))
        ]
        for name, rows in data.items()
    }
    models = [(BASE_LABEL, None)] + [
        (adapter, LoRARequest(f"adapter{i}", i + 1, str(Path(adapter).resolve())))
        for i, adapter in enumerate(args.adapters)
    ]
    table, stats, generations = {}, {}, {}
    for label, lora in models:
        table[label], stats[label], generations[label] = {}, {}, {}
        for name, rows in data.items():
            start = time.perf_counter()
            results = llm.chat([row["messages"] for row in rows], sampling[name], lora_request=lora, use_tqdm=False)
            seconds = time.perf_counter() - start
            completions = [result.outputs for result in results]
            outputs = [[completion.text for completion in result] for result in completions]
            accs = score_generations(rows, outputs, {"timeout_s": args.verify_timeout})
            table[label][name] = pass_at_1(accs)
            stats[label][name] = {
                "seconds": round(seconds, 3),
                "completions": sum(len(result) for result in completions),
                "completion_tokens": sum(len(c.token_ids) for result in completions for c in result),
                "truncated": sum(c.finish_reason == "length" for result in completions for c in result),
            }
            generations[label][name] = [
                {"ground_truth": str(row["ground_truth"]), "responses": texts, "acc": acc}
                for row, texts, acc in zip(rows, outputs, accs, strict=True)
            ]
        table[label]["average"] = sum(table[label][name] for name in data) / len(data)
    return {
        "config": {k: v for k, v in vars(args).items() if k not in ("out", "plot")},
        "pass@1": table,
        "stats": stats,
        "generations": generations,
    }


def format_table(table: dict[str, dict[str, float]]) -> str:
    """Markdown table, percentages with one decimal, one row per model."""
    columns = list(next(iter(table.values())))
    lines = ["| model | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for label, scores in table.items():
        lines.append(f"| {label} | " + " | ".join(f"{100 * scores[c]:.1f}" for c in columns) + " |")
    return "\n".join(lines)


def plot_accuracy(table: dict[str, dict[str, float]], path: str | Path) -> None:
    """Accuracy (%) against training step, one line per benchmark and one for the average."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = sorted(table.items(), key=lambda item: checkpoint_step(item[0]))
    steps = [checkpoint_step(label) for label, _ in points]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for column in next(iter(table.values())):
        ax.plot(
            steps,
            [100 * scores[column] for _, scores in points],
            marker="o",
            label=column,
            linewidth=2.5 if column == "average" else 1.2,
        )
    ax.set_xlabel("training step")
    ax.set_ylabel("pass@1 (%)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="base model (HF folder or name)")
    parser.add_argument("--adapters", nargs="*", default=[], help="PEFT adapter folders, in training order")
    parser.add_argument("--benchmarks", nargs="+", required=True, metavar="NAME=PARQUET")
    # Sampling defaults: the seed card's evaluation, eval_prime.py:61-62 (n = 1: SamplingParams' default).
    parser.add_argument("--n", type=int, default=1, help="samples per problem (card: 1)")
    parser.add_argument("--temperature", type=float, default=0.6, help="(card: 0.6)")
    parser.add_argument("--top_p", type=float, default=0.95, help="(card: 0.95)")
    parser.add_argument("--max_tokens", type=int, default=32768, help="max new tokens per sample (card: 32768)")
    parser.add_argument(
        "--max_model_len",
        type=int,
        default=None,
        help=f"vLLM's limit on prompt + completion tokens (card: {CARD_MAX_MODEL_LEN}); "
        f"default max({CARD_MAX_MODEL_LEN}, --max_tokens)",
    )
    parser.add_argument("--max_samples", type=int, default=None, help="first N problems of each benchmark")
    parser.add_argument(
        "--seed", type=int, default=0, help="problem p is sampled with seed SEED + p (engine seed: SEED)"
    )
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--gpu_memory_utilization", type=float, default=0.8)
    parser.add_argument("--tensor_parallel_size", type=int, default=1)
    parser.add_argument("--enforce_eager", action="store_true")
    parser.add_argument("--verify_timeout", type=float, default=10.0, help="seconds per math-verify check")
    parser.add_argument("--out", default="eval_results.json")
    parser.add_argument("--plot", default=None, help="PNG of accuracy over checkpoints")
    args = parser.parse_args(argv)
    if args.max_model_len is None:
        args.max_model_len = max(CARD_MAX_MODEL_LEN, args.max_tokens)
    for spec in args.benchmarks:
        if "=" not in spec:
            parser.error(f"--benchmarks takes NAME=PARQUET, got {spec!r}")
    for adapter in args.adapters:
        if not (Path(adapter) / "adapter_config.json").is_file():
            parser.error(
                f"--adapters: {adapter} has no adapter_config.json (export veRL checkpoints with "
                "python -m verl_prime_lora.tools.export_adapter)"
            )
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    report = evaluate(args)
    print(format_table(report["pass@1"]))
    Path(args.out).write_text(json.dumps(report, indent=2))
    if args.plot:
        plot_accuracy(report["pass@1"], args.plot)
    return report


if __name__ == "__main__":
    main()
