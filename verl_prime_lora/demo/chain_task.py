"""Step-by-step chain arithmetic, and a tiny Qwen2 warm-started on it by SFT, so that RL has room to improve.

`python -m verl_prime_lora.demo.chain_task --out DIR` writes (all offline, on CPU, in a few minutes at most)

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

The task: a chain of `min_ops`-`max_ops` (default 3-5) single-digit operands (0-9) joined by + and -, such
as `7+5-3+8`, generated so that every running total stays in `TOTAL_RANGE` = [0, 99]: no negative number
appears anywhere (with single digits and at most 5 operands totals stay <= 45, so in practice only the
lower bound binds). The worked solution writes every running total, `<think>7+5=12, 12-3=9, 9+8=17</think>
\\boxed{17}`, so one wrong step makes a wrong answer; the shortcut writes only `7+5-3+8=17`.
`verl_prime_lora.rewards.math_format.compute_score` grades it.

Splits are disjoint by question string: `sft_eval` (the held-out set the SFT stop rule measures), the RL
`test` set, the RL `train` set. The SFT data are freshly generated and never hold an `sft_eval` or `test`
question (they may repeat RL `train` questions). Everything is seeded: the same arguments give the same
data and, on one machine, the same model.
"""

import argparse
import functools
import hashlib
import json
import os
import random
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

# Nothing here is downloaded; set before transformers / huggingface_hub read it at import.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pandas as pd  # noqa: E402
import torch  # noqa: E402
from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from verl_prime_lora import __version__  # noqa: E402
from verl_prime_lora.rewards.math_format import compute_score  # noqa: E402
from verl_prime_lora.tools.tiny import ABILITY, build_model, build_tokenizer  # noqa: E402

DATA_SOURCE = "prime_lora/chain_arithmetic"
INSTRUCTION = "Think step by step inside <think> </think>, then give the final answer as \\boxed{answer}."
TOTAL_RANGE = (0, 99)  # every running total, the first operand and the answer included
OPERATORS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b}
DIGITS = range(10)
SPLITS = ("sft_eval", "test", "train")  # generated in this order, each avoiding the questions before it
TASK_VERSION = 3  # part of the cache key: bump when the data, the model or the training change
STAMP = ".chain_task.stamp"
SAMPLES_PER_PROBLEM = 4
PRINT_EVERY = 100  # SFT steps between printed accuracy checks (every check is kept in warm_start.json)
NUM_THREADS = 2


# ---------------------------------------------------------------------------------------------
# the task
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chain:
    """One problem: `operands[0] operators[0] operands[1] operators[1] ...`."""

    operands: tuple[int, ...]
    operators: tuple[str, ...]

    @classmethod
    def from_question(cls, question: str) -> "Chain":
        """The chain written as `question` (e.g. `7+5-3+8`)."""
        tokens = re.findall(r"\d+|[+-]", question)
        return cls(tuple(int(token) for token in tokens[0::2]), tuple(tokens[1::2]))

    @property
    def question(self) -> str:
        steps = (op + str(operand) for op, operand in zip(self.operators, self.operands[1:]))
        return str(self.operands[0]) + "".join(steps)

    @property
    def totals(self) -> list[int]:
        """The running total after each operation; the last one is the answer."""
        totals = []
        for op, operand in zip(self.operators, self.operands[1:]):
            totals.append(OPERATORS[op](totals[-1] if totals else self.operands[0], operand))
        return totals

    @property
    def answer(self) -> str:
        return str(self.totals[-1])

    @property
    def solution(self) -> str:
        """The worked solution (the SFT target, without EOS): one `a op b = total` step per operation."""
        totals = self.totals
        lefts = [self.operands[0], *totals[:-1]]
        steps = zip(lefts, self.operators, self.operands[1:], totals)
        think = ", ".join(f"{left}{op}{operand}={total}" for left, op, operand, total in steps)
        return f"<think>{think}</think> \\boxed{{{self.answer}}}"

    @property
    def shortcut(self) -> str:
        """The solution with the steps skipped (a hasty solver's): the whole chain and its total at once."""
        return f"<think>{self.question}={self.answer}</think> \\boxed{{{self.answer}}}"


def writes_steps(response: str) -> bool:
    """Whether a response works in steps (two or more `=` before `</think>`), as `Chain.solution` does,
    rather than jumping to the total (one `=`, as `Chain.shortcut` does)."""
    return response.split("</think>")[0].count("=") >= 2


def sample_chain(rng: random.Random, n_operands: int) -> Chain:
    """A random chain of `n_operands` digits; each step is drawn uniformly from the (operator, digit)
    pairs that keep the running total inside `TOTAL_RANGE`."""
    low, high = TOTAL_RANGE
    operands, operators = [rng.choice(DIGITS)], []
    total = operands[0]
    for _ in range(n_operands - 1):
        moves = [(op, d) for op in OPERATORS for d in DIGITS if low <= OPERATORS[op](total, d) <= high]
        op, digit = rng.choice(moves)
        operators.append(op)
        operands.append(digit)
        total = OPERATORS[op](total, digit)
    return Chain(tuple(operands), tuple(operators))


def messages(chain: Chain) -> list[dict]:
    """The RL prompt as a chat (one user turn)."""
    return [{"role": "user", "content": f"Compute {chain.question}. {INSTRUCTION}"}]


def make_row(chain: Chain, index: int, split: str) -> dict:
    """One row in veRL's RL format, as `tiny.make_problem` builds it."""
    question, answer = chain.question, chain.answer
    return {
        "data_source": DATA_SOURCE,
        "prompt": messages(chain),
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": index, "question": question, "answer": answer},
    }


def _unique_chains(rng: random.Random, count: int, min_ops: int, max_ops: int, taken: set[str]) -> list[Chain]:
    """`count` chains with distinct questions not in `taken`; the number of operands is uniform in
    [min_ops, max_ops] (drawn first, so rejecting repeats does not skew it)."""
    chains, seen = [], set(taken)
    for _ in range(count):
        n_operands = rng.randint(min_ops, max_ops)
        for _attempt in range(10_000):
            chain = sample_chain(rng, n_operands)
            if chain.question not in seen:
                break
        else:
            raise ValueError(f"too few distinct {n_operands}-operand problems for {count} rows")
        seen.add(chain.question)
        chains.append(chain)
    return chains


def make_splits(seed: int, sizes: dict[str, int], min_ops: int = 3, max_ops: int = 5) -> dict[str, list[Chain]]:
    """The chains of each split in `SPLITS` (sizes by split name), disjoint by question string."""
    if not 2 <= min_ops <= max_ops:
        raise ValueError(f"need 2 <= min_ops <= max_ops, got {min_ops}, {max_ops}")
    splits, taken = {}, set()
    for split in SPLITS:
        rng = random.Random(f"chain-{seed}-{split}")
        splits[split] = _unique_chains(rng, sizes[split], min_ops, max_ops, taken)
        taken |= {chain.question for chain in splits[split]}
    return splits


def sft_texts(
    seed: int, min_ops: int, max_ops: int, held_out: set[str], shortcut_share: float
) -> Iterator[tuple[Chain, str]]:
    """An endless, seeded stream of fresh training problems, none with a question in `held_out`, each with
    its SFT target: `Chain.shortcut` with probability `shortcut_share`, else the worked `Chain.solution`."""
    rng = random.Random(f"chain-{seed}-sft-{shortcut_share}")
    while True:
        chain = sample_chain(rng, rng.randint(min_ops, max_ops))
        if chain.question not in held_out:
            yield chain, chain.shortcut if rng.random() < shortcut_share else chain.solution


def accuracy(responses: list[str], answers: list[str]) -> list[float]:
    """The project's grader, as RL rewards: math-verify accuracy (0/1) from `reward.compute_score`."""
    return [compute_score(DATA_SOURCE, response, answer)["acc"] for response, answer in zip(responses, answers)]


# ---------------------------------------------------------------------------------------------
# tokenization and generation
# ---------------------------------------------------------------------------------------------


def prompt_text(tokenizer, chain: Chain) -> str:
    """The chat-formatted prompt, ending with the assistant turn's opening."""
    return tokenizer.apply_chat_template(messages(chain), add_generation_prompt=True, tokenize=False)


def tokenizer_corpus(chains: list[Chain]) -> list[str]:
    """Chat-formatted prompts plus worked and shortcut solutions, for BPE merges that fit numbers, `=` and `,`."""
    return [
        f"<|im_start|>user\n{messages(chain)[0]['content']}<|im_end|>\n<|im_start|>assistant\n{solution}<|im_end|>\n"
        for chain in chains
        for solution in (chain.solution, chain.shortcut)
    ]


def response_ids(tokenizer, solution: str) -> list[int]:
    """A solution's token ids, EOS included: what a policy must generate."""
    return tokenizer(solution + tokenizer.eos_token, add_special_tokens=False)["input_ids"]


def encode_example(tokenizer, chain: Chain, solution: str) -> dict[str, list[int]]:
    """Prompt + `solution`, tokenized apart as in RL (prompt ids, then generated ids); the labels
    mask the prompt with -100 so that the loss is on the response only."""
    prompt = tokenizer(prompt_text(tokenizer, chain), add_special_tokens=False)["input_ids"]
    response = response_ids(tokenizer, solution)
    return {"input_ids": prompt + response, "labels": [-100] * len(prompt) + response}


def collate(examples: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded batch tensors for causal-LM training."""
    width = max(len(example["input_ids"]) for example in examples)

    def padded(key: str, value: int) -> torch.Tensor:
        return torch.tensor([ex[key] + [value] * (width - len(ex[key])) for ex in examples])

    mask = [[1] * len(ex["input_ids"]) + [0] * (width - len(ex["input_ids"])) for ex in examples]
    return {
        "input_ids": padded("input_ids", pad_id),
        "labels": padded("labels", -100),
        "attention_mask": torch.tensor(mask),
    }


class SFTStream(torch.utils.data.IterableDataset):
    """Tokenized SFT examples from `texts()`, (chain, solution) pairs (a fresh, seeded stream on every pass)."""

    def __init__(self, tokenizer, texts: Callable[[], Iterator[tuple[Chain, str]]]):
        self.tokenizer, self.texts = tokenizer, texts

    def __iter__(self):
        for chain, solution in self.texts():
            yield encode_example(self.tokenizer, chain, solution)


@torch.no_grad()
def generate(model, tokenizer, prompts: list[str], max_new_tokens: int, samples: int = 0) -> list[str]:
    """Responses to `prompts` (left-padded batch, special tokens dropped): one greedy response each
    when `samples` is 0, else `samples` responses each at temperature 1 (no top-k / top-p), prompt-major."""
    was_training = model.training
    model.eval()
    batch = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    if samples:
        sampling = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "num_return_sequences": samples}
    else:
        sampling = {"do_sample": False}
    output = model.generate(**batch, max_new_tokens=max_new_tokens, **sampling)
    model.train(was_training)
    return tokenizer.batch_decode(output[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)


# ---------------------------------------------------------------------------------------------
# SFT warm start
# ---------------------------------------------------------------------------------------------


@dataclass
class HeldOut:
    """The SFT stop rule's held-out problems, ready to generate."""

    prompts: list[str]
    answers: list[str]
    max_new_tokens: int

    def greedy_accuracy(self, model, tokenizer) -> float:
        responses = generate(model, tokenizer, self.prompts, self.max_new_tokens)
        return sum(accuracy(responses, self.answers)) / len(self.answers)


class AccuracyStop(TrainerCallback):
    """Every `every` steps (and at the end), measures greedy accuracy on `held_out` with `compute_score`
    and stops training once it reaches `target` (never, if None). `checks` keeps them, in order; a line is
    printed every `PRINT_EVERY` steps and for the last check of the phase."""

    def __init__(self, tokenizer, held_out: HeldOut, target: float | None, every: int, phase: str):
        self.tokenizer, self.held_out, self.target, self.every = tokenizer, held_out, target, every
        self.phase = phase
        self.checks: list[dict] = []
        self.start = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0:
            self._check(state, control, model, last=state.global_step >= args.max_steps)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if not self.checks or self.checks[-1]["step"] != state.global_step:  # ran out of steps between checks
            self._check(state, control, model, last=True)

    def _check(self, state, control, model, last: bool) -> None:
        acc = self.held_out.greedy_accuracy(model, self.tokenizer)
        seconds = time.perf_counter() - self.start
        check = {"phase": self.phase, "step": state.global_step, "seconds": round(seconds, 2), "greedy_acc": acc}
        self.checks.append(check)
        stop = self.target is not None and acc >= self.target
        if stop or last or state.global_step % PRINT_EVERY == 0:
            print(f"sft {self.phase} step {state.global_step:5d}  {seconds:6.1f} s  greedy acc {acc:.3f}", flush=True)
        if stop:
            control.should_training_stop = True


def train_warm_start(
    model, tokenizer, stream: SFTStream, stopper: AccuracyStop, seed: int, max_steps: int, lr: float = 2e-3
) -> None:
    """SFT with transformers' Trainer on CPU: AdamW at `lr` (30 warm-up steps, then constant), clip 1.0,
    batch 64, until `stopper` sees its target accuracy or `max_steps` pass. Each call is one phase, with a
    fresh optimizer."""
    with tempfile.TemporaryDirectory() as scratch:  # Trainer wants an output_dir; nothing is saved there
        args = TrainingArguments(
            output_dir=scratch,
            per_device_train_batch_size=64,
            learning_rate=lr,
            lr_scheduler_type="constant_with_warmup",
            warmup_steps=30,
            weight_decay=0.0,
            max_grad_norm=1.0,
            max_steps=max_steps,
            optim="adamw_torch",
            seed=seed,
            use_cpu=True,
            report_to="none",
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            dataloader_pin_memory=False,
        )
        data_collator = functools.partial(collate, pad_id=tokenizer.pad_token_id)
        trainer = Trainer(
            model=model, args=args, train_dataset=stream, data_collator=data_collator, callbacks=[stopper]
        )
        trainer.remove_callback(PrinterCallback)  # its end-of-training metrics line; `stopper` prints the checks
        trainer.train()


def measure_sampled(model, tokenizer, held_out: HeldOut, seed: int) -> dict:
    """Over `SAMPLES_PER_PROBLEM` samples per problem at temperature 1 (graded by `compute_score`): the
    accuracy; the mixed share (problems whose samples hold at least one right and one wrong answer); the
    share of samples that write the steps (`writes_steps`), and the accuracy with and without them."""
    torch.manual_seed(seed)
    sampled = generate(model, tokenizer, held_out.prompts, held_out.max_new_tokens, SAMPLES_PER_PROBLEM)
    scores = accuracy(sampled, [answer for answer in held_out.answers for _ in range(SAMPLES_PER_PROBLEM)])
    per_problem = [sum(scores[i : i + SAMPLES_PER_PROBLEM]) for i in range(0, len(scores), SAMPLES_PER_PROBLEM)]
    steps = [writes_steps(response) for response in sampled]

    def mean(values: list[float]) -> float | None:
        return round(sum(values) / len(values), 4) if values else None

    return {
        "sampled_acc": mean(scores),
        "mixed_share": mean([0 < n < SAMPLES_PER_PROBLEM for n in per_problem]),
        "sampled_steps_share": mean(steps),
        "sampled_acc_with_steps": mean([score for score, step in zip(scores, steps) if step]),
        "sampled_acc_without_steps": mean([score for score, step in zip(scores, steps) if not step]),
    }


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
) -> dict:
    """Build (or reuse) the warm-started model and the RL data under `out`; see the module docstring.

    Returns the paths (`model`, `train`, `test`, `warm_start`) and `stats` (the contents of warm_start.json,
    plus `reused`: whether a complete `out` built with the same arguments was found and kept).
    Sets torch to `NUM_THREADS` threads while building.
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
        stats = _build(out, key, settings)
    finally:
        torch.set_num_threads(threads)
    return {**paths, "stats": {**stats, "reused": False}}


def _build(out: Path, key: str, settings: dict) -> dict:
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
