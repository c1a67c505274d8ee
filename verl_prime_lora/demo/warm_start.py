"""A tiny Qwen2 warm-started by SFT on chain arithmetic (`chain_task`), so that RL has room to improve.

`python -m verl_prime_lora.demo.warm_start --out DIR` writes (all offline, on CPU, in a few minutes at most)

- `DIR/model/`: the shape of `tiny.build_model` (Qwen2ForCausalLM, hidden 64, 2 layers) with a byte-level BPE
  tokenizer (`tiny.build_tokenizer`) trained on this task's chat text, fine-tuned with transformers' `Trainer`
  in two phases (`train_warm_start`):
  1. *skill*: worked solutions only, at lr 2e-3, until greedy accuracy on a held-out set reaches `skill_acc`
     (default 75 %, measured every `check_every` steps): the model can do the steps;
  2. *habit*: `mix_steps` (default 150) more steps at `habit_lr` (default 5e-4) on a corpus where a share
     `shortcut_share` (default 70 %) of the solutions skip the steps (`Chain.shortcut`:
     `<think>7+5-3+8=17</think> \\boxed{17}`), as if part of the SFT data came from a hasty solver. A 2-layer
     model cannot add a whole chain at once, so the warm model answers right mostly when it writes the steps,
     and writes them only part of the time. (The habit also costs some of the skill: sampled accuracy with
     steps falls from about 50 % to about 30 %.)
  The result (measured, in `warm_start.json`; seed 0): about a fifth of held-out problems solved greedily, an
  eighth under sampling, a quarter of samples writing the steps, and about 40 % of problems whose samples hold
  both a right and a wrong answer. RL has an outcome to learn from (write the steps, and get them right) and
  a process to credit (the tokens where a response starts to skip, or a step goes wrong);
- `DIR/data/train.parquet`, `DIR/data/test.parquet`: RL prompts in veRL's RL format (as `tiny.make_problem`
  builds them), `data_source` = `DATA_SOURCE`;
- `DIR/warm_start.json`: what the warm start measured (greedy and T=1 sampled accuracy, the mixed share, the
  share of samples that write the steps and the accuracy with and without them, every accuracy check of both
  phases, SFT steps and seconds, the seed, response lengths in tokens);
- `DIR/.chain_task.stamp`: the cache key; a rerun with the same arguments finds it and reuses DIR.
"""

import argparse
import functools
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

# Nothing here is downloaded; set before transformers / huggingface_hub read it at import.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pandas as pd  # noqa: E402
import torch  # noqa: E402

from verl_prime_lora import __version__  # noqa: E402
from verl_prime_lora.demo import chain_task  # noqa: E402
from verl_prime_lora.demo.chain_task import (  # noqa: E402
    TASK_VERSION,
    make_row,
    prompt_text,
    response_ids,
    tokenizer_corpus,
)
from verl_prime_lora.demo.sft import (  # noqa: E402
    SAMPLES_PER_PROBLEM,
    AccuracyStop,
    HeldOut,
    SFTStream,
    measure_sampled,
    train_warm_start,
)
from verl_prime_lora.tools.tiny import build_model, build_tokenizer  # noqa: E402

STAMP = ".chain_task.stamp"
# One torch thread: the SFT runs beside other work (the e2e tier launches main_ppo on the other core), where two
# threads wait on each other; the weights are the same bytes on one machine
# (benchmarks/perf/results/warm_start_threads/, docs/benchmarks.md).
NUM_THREADS = 1


# ---------------------------------------------------------------------------------------------
# assets
# ---------------------------------------------------------------------------------------------


def _paths(out: Path) -> dict[str, Path]:
    return {
        "model": out / "model",
        "train": out / "data" / "train.parquet",
        "test": out / "data" / "test.parquet",
        "warm_start": out / "warm_start.json",
    }


def _cache_key(settings: dict) -> str:
    blob = json.dumps({**settings, "package": __version__, "task": TASK_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _is_complete(out: Path, key: str) -> bool:
    stamp = out / STAMP
    paths = _paths(out)
    return (
        stamp.is_file()
        and stamp.read_text().strip() == key
        and (paths["model"] / "config.json").is_file()
        and (paths["model"] / "model.safetensors").is_file()
        and all(paths[name].is_file() for name in ("train", "test", "warm_start"))
    )


def write_warm_assets(
    out: Path,
    seed: int = 0,
    skill_acc: float = 0.75,
    shortcut_share: float = 0.7,
    mix_steps: int = 150,
    habit_lr: float = 5e-4,
    train_size: int = 2000,
    test_size: int = 200,
    min_ops: int = 3,
    max_ops: int = 5,
    eval_size: int = 200,
    check_every: int = 25,
    max_steps: int = 2000,
    vocab_size: int = 512,
    splits: Callable[..., dict] = chain_task.make_splits,
    texts: Callable[..., Iterator] = chain_task.sft_texts,
) -> dict:
    """Build (or reuse) the warm-started model and the RL data under `out`; see the module docstring.

    Returns the paths (`model`, `train`, `test`, `warm_start`) and `stats` (the contents of warm_start.json,
    plus `reused`: whether a complete `out` built with the same arguments was found and kept).
    `splits` and `texts` build the problems of each split and the SFT stream (chain_task's by default; a lab task
    passes its own, with their signatures). The cache key holds the arguments above them only: a caller that
    passes other builders keys them itself. Sets torch to `NUM_THREADS` threads while building.
    """
    out = Path(out)
    settings = {
        "seed": seed, "skill_acc": skill_acc, "shortcut_share": shortcut_share, "mix_steps": mix_steps,
        "habit_lr": habit_lr, "train_size": train_size, "test_size": test_size,
        "min_ops": min_ops, "max_ops": max_ops, "eval_size": eval_size, "check_every": check_every,
        "max_steps": max_steps, "vocab_size": vocab_size,
    }  # fmt: skip
    key, paths = _cache_key(settings), _paths(out)
    if _is_complete(out, key):
        print(f"chain_task: reusing {out} (same arguments, complete)", flush=True)
        return {**paths, "stats": {**json.loads(paths["warm_start"].read_text()), "reused": True}}
    threads = torch.get_num_threads()
    torch.set_num_threads(NUM_THREADS)
    try:
        stats = _build(out, key, settings, splits, texts)
    finally:
        torch.set_num_threads(threads)
    return {**paths, "stats": {**stats, "reused": False}}


def _build(out: Path, key: str, settings: dict, make_splits: Callable, sft_texts: Callable) -> dict:
    """Data, tokenizer, SFT, measurement and files; the stamp is written last, so a partial `out` never
    passes for a complete one."""
    start = time.perf_counter()
    seed, paths = settings["seed"], _paths(out)
    (out / STAMP).unlink(missing_ok=True)
    shutil.rmtree(paths["model"], ignore_errors=True)
    sizes = {"sft_eval": settings["eval_size"], "test": settings["test_size"], "train": settings["train_size"]}
    splits = make_splits(seed, sizes, settings["min_ops"], settings["max_ops"])
    tokenizer = build_tokenizer(tokenizer_corpus(splits["train"] + splits["sft_eval"]), settings["vocab_size"])
    model = build_model(tokenizer, seed, initializer_range=0.02)

    lengths = [len(response_ids(tokenizer, chain.solution)) for split in splits.values() for chain in split]
    held_out = HeldOut(
        prompts=[prompt_text(tokenizer, chain) for chain in splits["sft_eval"]],
        answers=[chain.answer for chain in splits["sft_eval"]],
        max_new_tokens=max(lengths) + 8,
    )
    held_out_questions = {chain.question for name in ("sft_eval", "test") for chain in splits[name]}
    texts = functools.partial(sft_texts, seed, settings["min_ops"], settings["max_ops"], held_out_questions)
    skill = AccuracyStop(tokenizer, held_out, settings["skill_acc"], settings["check_every"], "skill")
    worked = SFTStream(tokenizer, functools.partial(texts, 0.0))
    train_warm_start(model, tokenizer, worked, skill, seed, settings["max_steps"])
    habit = AccuracyStop(tokenizer, held_out, None, settings["check_every"], "habit")
    mixed = SFTStream(tokenizer, functools.partial(texts, settings["shortcut_share"]))
    train_warm_start(model, tokenizer, mixed, habit, seed, settings["mix_steps"], settings["habit_lr"])
    sampled = measure_sampled(model, tokenizer, held_out, seed)

    model.save_pretrained(paths["model"])
    tokenizer.save_pretrained(paths["model"])
    paths["train"].parent.mkdir(parents=True, exist_ok=True)
    for name in ("train", "test"):
        pd.DataFrame([make_row(chain, i, name) for i, chain in enumerate(splits[name])]).to_parquet(paths[name])
    stats = {
        **settings,
        "reached_skill": skill.checks[-1]["greedy_acc"] >= settings["skill_acc"],
        "skill_steps": skill.checks[-1]["step"],
        "skill_greedy_acc": skill.checks[-1]["greedy_acc"],
        "sft_steps": skill.checks[-1]["step"] + habit.checks[-1]["step"],
        "sft_seconds": round(skill.checks[-1]["seconds"] + habit.checks[-1]["seconds"], 2),
        "greedy_acc": habit.checks[-1]["greedy_acc"],
        **sampled,
        "samples_per_problem": SAMPLES_PER_PROBLEM,
        "response_tokens_max": max(lengths),
        "response_tokens_mean": round(sum(lengths) / len(lengths), 2),
        "checks": skill.checks + habit.checks,
        "build_seconds": round(time.perf_counter() - start, 2),
    }
    paths["warm_start"].write_text(json.dumps(stats, indent=2) + "\n")
    (out / STAMP).write_text(key + "\n")
    _print_summary(stats)
    return stats


def _print_summary(stats: dict) -> None:
    if not stats["reached_skill"]:
        print(f"chain_task: WARNING: greedy accuracy never reached {stats['skill_acc']} in {stats['max_steps']} steps")
    print(
        f"chain_task: skill at step {stats['skill_steps']} (greedy acc {stats['skill_greedy_acc']:.3f}), then "
        f"{stats['mix_steps']} steps with {stats['shortcut_share']:.0%} shortcuts, "
        f"{stats['sft_seconds']:.1f} s of SFT; "
        f"greedy acc {stats['greedy_acc']:.3f}, sampled acc (T=1, {stats['samples_per_problem']}/problem) "
        f"{stats['sampled_acc']:.3f} ({stats['sampled_steps_share']:.0%} write the steps: acc "
        f"{stats['sampled_acc_with_steps']}, without: {stats['sampled_acc_without_steps']}), "
        f"mixed {stats['mixed_share']:.3f}; build {stats['build_seconds']:.1f} s",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for model/, data/, warm_start.json")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skill-acc", type=float, default=0.75, help="end the skill phase at this greedy accuracy")
    parser.add_argument("--shortcut-share", type=float, default=0.7, help="shortcut share in the habit phase")
    parser.add_argument("--mix-steps", type=int, default=150, help="SFT steps of the habit phase")
    parser.add_argument("--habit-lr", type=float, default=5e-4, help="lr of the habit phase")
    parser.add_argument("--train-size", type=int, default=2000, help="RL training prompts")
    parser.add_argument("--test-size", type=int, default=200, help="RL validation prompts")
    parser.add_argument("--min-ops", type=int, default=3, help="fewest operands in a problem")
    parser.add_argument("--max-ops", type=int, default=5, help="most operands in a problem")
    args = parser.parse_args()
    result = write_warm_assets(
        args.out,
        args.seed,
        args.skill_acc,
        args.shortcut_share,
        args.mix_steps,
        args.habit_lr,
        args.train_size,
        args.test_size,
        args.min_ops,
        args.max_ops,
    )
    for name in ("model", "train", "test", "warm_start"):
        print(f"{name}: {result[name]}")


if __name__ == "__main__":
    main()
