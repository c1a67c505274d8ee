"""The warm start's supervised fine-tuning on CPU (transformers' `Trainer`), and what it measures: greedy accuracy on
held-out problems during training, sampled accuracy and the habits of the samples after it."""

import functools
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

# Nothing here is downloaded; set before transformers / huggingface_hub read it at import.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from verl_prime_lora.demo.chain_task import Chain, accuracy, prompt_text, response_ids, writes_steps  # noqa: E402

SAMPLES_PER_PROBLEM = 4
PRINT_EVERY = 100  # SFT steps between printed accuracy checks (every check is kept in warm_start.json)


# ---------------------------------------------------------------------------------------------
# tokenization and generation
# ---------------------------------------------------------------------------------------------


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
