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

``--out``'s folder is made before the engine starts. The JSON is rewritten after each model (base first, then
``--adapters`` in order), atomically (a temporary file in the same folder, then ``os.replace``), so after a crash or
Ctrl-C it is a complete report of the models scored so far: ``config`` lists every model asked for, the other
sections hold the finished ones. ``--resume`` reads an existing ``--out``, keeps its models and scores only the rest;
the file's settings (every option but ``--adapters``, ``--out``, ``--plot``) must equal this run's, and its models
must be among this run's. The finished report, table and plot are then those of one uninterrupted run (apart from
the wall times).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pandas as pd

from verl_prime_lora.rewards.math_format import compute_score

BASE_LABEL = "base"
SECTIONS = ("pass@1", "stats", "generations")  # the report's per-model sections, beside its "config"
NOT_SETTINGS = ("out", "plot", "resume")  # options that do not change a score, left out of the report's config
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


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The report's ``config``: every option but those in `NOT_SETTINGS`."""
    return {key: value for key, value in vars(args).items() if key not in NOT_SETTINGS}


def assemble(config: dict[str, Any], labels: list[str], models: dict[str, dict]) -> dict[str, Any]:
    """The report: ``config``, then each section with the scored models among `labels`, in `labels`' order.
    `models` maps a label to its sections ({"pass@1": …, "stats": …, "generations": …})."""
    done = [label for label in labels if label in models]
    return {"config": config, **{section: {label: models[label][section] for label in done} for section in SECTIONS}}


def write_report(path: str | Path, report: dict[str, Any]) -> None:
    """`report` as JSON in `path`, atomically: written to a temporary file in the same folder, then moved over
    `path` (`os.replace`), so `path` holds the previous report or this one, never a part of one."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w") as file:
            json.dump(report, file, indent=2)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def prepare_outputs(args: argparse.Namespace) -> None:
    """Make the folders of ``--out`` and ``--plot`` (before any model is scored); errors name the option."""
    for option, path in (("--out", args.out), ("--plot", args.plot)):
        if path is None:
            continue
        if Path(path).is_dir():
            raise ValueError(f"{option}: {path} is a folder; give the path of a file in it")
        folder = Path(path).parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ValueError(f"{option}: cannot make the folder of {path}: {error}") from error
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ValueError(f"{option}: cannot write in {folder}, the folder of {path}")


def resumed_models(args: argparse.Namespace) -> dict[str, dict]:
    """The models already scored in ``--out`` ({label: sections}), checked against this run: the same settings
    (`settings`, but ``--adapters``) and no model this run does not ask for. No file: none."""
    path = Path(args.out)
    if not path.is_file():
        print(f"--resume: {path} does not exist yet; scoring every model")
        return {}
    try:
        report = json.loads(path.read_text())
        previous, scored = report["config"], report["pass@1"]
        models = {label: {section: report[section][label] for section in SECTIONS} for label in scored}
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"--resume: {path} is not a report of this tool ({type(error).__name__}: {error})") from error
    current = settings(args)
    differing = [
        f"--{key} {json.dumps(previous.get(key))} (this run: {json.dumps(current.get(key))})"
        for key in sorted(set(previous) | set(current))
        if key != "adapters" and previous.get(key) != current.get(key)
    ]
    if differing:
        raise ValueError(
            f"--resume: {path} was scored with other settings: {'; '.join(differing)}. Run with the file's "
            "settings to continue it, or write to another --out (or remove the file) to score every model again."
        )
    wanted = [BASE_LABEL, *args.adapters]
    extra = [label for label in models if label not in wanted]
    if extra:
        raise ValueError(
            f"--resume: {path} holds models this run does not ask for: {', '.join(extra)}. Give them in --adapters "
            "(the same paths, in training order), or write to another --out."
        )
    if models:
        print(f"--resume: {len(models)} of {len(wanted)} models already scored in {path}: {', '.join(models)}")
    return models


def score_model(llm: Any, lora: Any, data: dict[str, list[dict]], sampling: dict, args: argparse.Namespace) -> dict:
    """One model's sections of the report: pass@1 per benchmark and their average, stats, generations."""
    scores, stats, generations = {}, {}, {}
    for name, rows in data.items():
        start = time.perf_counter()
        results = llm.chat([row["messages"] for row in rows], sampling[name], lora_request=lora, use_tqdm=False)
        seconds = time.perf_counter() - start
        completions = [result.outputs for result in results]
        outputs = [[completion.text for completion in result] for result in completions]
        accs = score_generations(rows, outputs, {"timeout_s": args.verify_timeout})
        scores[name] = pass_at_1(accs)
        stats[name] = {
            "seconds": round(seconds, 3),
            "completions": sum(len(result) for result in completions),
            "completion_tokens": sum(len(c.token_ids) for result in completions for c in result),
            "truncated": sum(c.finish_reason == "length" for result in completions for c in result),
        }
        generations[name] = [
            {"ground_truth": str(row["ground_truth"]), "responses": texts, "acc": acc}
            for row, texts, acc in zip(rows, outputs, accs, strict=True)
        ]
    scores["average"] = sum(scores[name] for name in data) / len(data)
    return {"pass@1": scores, "stats": stats, "generations": generations}


def evaluate(
    args: argparse.Namespace, scored: dict[str, dict] | None = None, out: str | Path | None = None
) -> dict[str, Any]:
    """The report of the base model and every adapter. Models in `scored` ({label: sections}, from `--resume`)
    are kept, not scored again; with `out`, the report so far is written there after each model (once, when every
    model was scored already)."""
    config, labels = settings(args), [BASE_LABEL, *args.adapters]
    models = dict(scored or {})
    if all(label in models for label in labels):
        if out is not None:
            write_report(out, assemble(config, labels, models))
        return assemble(config, labels, models)
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
    loras = [None] + [
        LoRARequest(f"adapter{i}", i + 1, str(Path(adapter).resolve())) for i, adapter in enumerate(args.adapters)
    ]
    for label, lora in zip(labels, loras, strict=True):
        if label in models:
            continue
        models[label] = score_model(llm, lora, data, sampling, args)
        if out is not None:
            write_report(out, assemble(config, labels, models))
    return assemble(config, labels, models)


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
    parser.add_argument(
        "--out", default="eval_results.json", help="JSON report, rewritten after each model (its folder is made)"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the models already scored in --out (same settings required) and score only the rest",
    )
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
    prepare_outputs(args)
    report = evaluate(args, resumed_models(args) if args.resume else None, out=args.out)
    print(format_table(report["pass@1"]))
    if args.plot:
        plot_accuracy(report["pass@1"], args.plot)
    return report


if __name__ == "__main__":
    main()
