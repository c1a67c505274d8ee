"""Is the planted error the warm start's mode? The check before any study on the planted-error task.

On the RL validation problems of `planted_error_task` (100 with one `+9` step, 100 without), with the warm-started
model (transformers, fp32, CPU):

* **greedy** (one response per problem, as veRL validates): the planted-error rate on the `+9` problems (the
  response writes `x+9=x+8`), the share that write a `+9` step at all and, of those, the share that plant it;
  accuracy on each half; the share of responses that write the steps;
* **sampled** (`SAMPLES` responses per problem at temperature 1, as the RL rollouts): the same rates, and the share
  of problems whose samples hold between 2 and 6 right answers of 8, which the prompt filter's band (mean accuracy
  in [0.2, 0.8]) trains on;
* **where the oracle blames** (greedy and sampled): of the wrong answers that write the planted step, the share whose
  first wrong step (`step_credit.label_steps`, the span `credit_controls.oracle_rewards` blames) is a `+9` step;
* **likelihood of the planted step**: after the right worked solution up to `x+9=`, log p(planted total) −
  log p(right total), each total followed by what comes next in the solution (`, ` or `</think>`) and scored as the
  whole response text so far (tokenization boundaries included): `planted_step_margin`. The same margin of "one too
  low" at the first `+` step of the problems without `+9` is the control: how confident the model is elsewhere.

    python -m benchmarks.studies.planted_error.check --assets benchmarks/out/planted_error/assets --out FILE.json

A study's runs on this task, step by step and per arm: `python -m benchmarks.lib.study table PLAN --out FILE.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import pandas as pd
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from benchmarks.lib.runs import measured
from benchmarks.lib.step_credit import label_steps
from benchmarks.studies.planted_error.task import PLANTED_WRONG, PLUS9_WRITTEN, planted_indicators, plus9_steps
from verl_prime_lora.demo.chain_task import Chain, accuracy, prompt_text, writes_steps
from verl_prime_lora.demo.sft import generate

SAMPLES = 8  # as `actor_rollout_ref.rollout.n` in the demo's settings
BAND = (2, 6)  # right answers of 8 that the prompt filter's [0.2, 0.8] band keeps
MAX_NEW_TOKENS = 96  # the study's data.max_response_length


def step_prefix(chain: Chain, step: int) -> tuple[str, int, str]:
    """The right worked solution up to step `step`'s `=`, that step's right total, and what follows the total."""
    think = chain.solution[len("<think>") : chain.solution.index("</think>")].split(", ")
    left, total = think[step].split("=")
    head = "<think>" + "".join(piece + ", " for piece in think[:step]) + left + "="
    return head, int(total), ", " if step < len(think) - 1 else "</think>"


@torch.no_grad()
def response_logprob(model, tokenizer, chain: Chain, text: str) -> float:
    """log p(`text` | `chain`'s prompt) under `model`, `text` tokenized apart from the prompt as in RL (no EOS)."""
    prompt = tokenizer(prompt_text(tokenizer, chain), add_special_tokens=False)["input_ids"]
    response = tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt + response])
    logprobs = torch.log_softmax(model(ids).logits[0, :-1].float(), dim=-1)
    targets = ids[0, 1:]
    picked = logprobs[torch.arange(len(targets)), targets]
    return float(picked[len(prompt) - 1 :].sum())


def planted_step_margin(model, tokenizer, chain: Chain, step: int) -> float:
    """log p(step `step` one too low) − log p(step `step` right), after the right solution up to its `=`."""
    head, total, tail = step_prefix(chain, step)
    low = response_logprob(model, tokenizer, chain, f"{head}{total - 1}{tail}")
    right = response_logprob(model, tokenizer, chain, f"{head}{total}{tail}")
    return low - right


def first_plus_step(chain: Chain) -> int | None:
    """The index of `chain`'s first `+` operation (None when it has none)."""
    return next((i for i, op in enumerate(chain.operators) if op == "+"), None)


def first_wrong_is_plus9(chain: Chain, response: str) -> bool:
    """Whether `response`'s first wrong step against `chain` (`label_steps`) is a written `x+9=` step."""
    labels = label_steps(chain, response)
    if labels.first_wrong is None:
        return False
    start, end = labels.spans[labels.first_wrong]
    return "+9=" in response[start:end]


def rates(chains: list[Chain], responses: list[list[str]]) -> dict:
    """Over problems `chains` with their responses (one list per problem): accuracy, the share writing the steps,
    the `+9` indicators' shares (`planted_indicators`), and the band share (problems whose right answers fall in
    `BAND`, for `SAMPLES` responses each)."""
    rows, right_counts = [], []
    for chain, answers in zip(chains, responses, strict=True):
        scores = accuracy(answers, [chain.answer] * len(answers))
        right_counts.append(sum(scores))
        for answer, score in zip(answers, scores):
            row = {"acc": score, "steps": writes_steps(answer), **planted_indicators(chain, answer, score == 1.0)}
            row["planted_and_wrong"] = row[PLANTED_WRONG] == 1.0 and score == 0.0
            row["blame_at_plus9"] = first_wrong_is_plus9(chain, answer)
            rows.append(row)

    def mean(key: str, where: str | None = None) -> float | None:
        values = [row[key] for row in rows if where is None or row[where]]
        return round(statistics.mean(values), 4) if values else None

    result = {
        "problems": len(chains),
        "responses": len(rows),
        "accuracy": mean("acc"),
        "writes_steps": mean("steps"),
        "plus9_written_rate": mean(PLUS9_WRITTEN),
        "planted_error_rate": mean(PLANTED_WRONG),
        "planted_given_written": mean(PLANTED_WRONG, where=PLUS9_WRITTEN),
        "planted_and_wrong": mean("planted_and_wrong"),
        "oracle_blames_plus9_given_planted_and_wrong": mean("blame_at_plus9", where="planted_and_wrong"),
    }
    if len(responses[0]) == SAMPLES:
        result["in_filter_band"] = round(statistics.mean(BAND[0] <= n <= BAND[1] for n in right_counts), 4)
    return result


def summary(values: list[float]) -> dict:
    """Mean, median and the share above 0 of log-probability margins, and the mean planted probability of the pair."""
    pair = [1 / (1 + torch.exp(torch.tensor(-v)).item()) for v in values]
    return {
        "n": len(values),
        "mean": round(statistics.mean(values), 3),
        "median": round(statistics.median(values), 3),
        "share_above_0": round(statistics.mean(v > 0 for v in values), 4),
        "mean_p_low_of_pair": round(statistics.mean(pair), 4),
    }


def warm_start_and_problems(assets: Path) -> tuple:
    """(the warm-started model in fp32, eval mode; its tokenizer; the RL validation problems) of `assets`."""
    model = AutoModelForCausalLM.from_pretrained(assets / "model", dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(assets / "model")
    test = pd.read_parquet(assets / "data" / "test.parquet")
    return model, tokenizer, [Chain.from_question(row["question"]) for row in test["extra_info"]]


def check(assets: Path, seed: int = 0) -> dict:
    """The three measurements of the module's docstring on `assets` (from `planted_error_task.write_planted_assets`)."""
    torch.manual_seed(seed)
    model, tokenizer, chains = warm_start_and_problems(assets)
    halves = {"plus9": [c for c in chains if plus9_steps(c)], "other": [c for c in chains if not plus9_steps(c)]}
    result: dict = {"greedy": {}, "sampled": {}}
    for name, part in halves.items():
        prompts = [prompt_text(tokenizer, chain) for chain in part]
        greedy = generate(model, tokenizer, prompts, MAX_NEW_TOKENS)
        result["greedy"][name] = rates(part, [[text] for text in greedy])
        sampled = generate(model, tokenizer, prompts, MAX_NEW_TOKENS, SAMPLES)
        result["sampled"][name] = rates(part, [sampled[i : i + SAMPLES] for i in range(0, len(sampled), SAMPLES)])
    planted = [planted_step_margin(model, tokenizer, c, plus9_steps(c)[0]) for c in halves["plus9"]]
    control = [
        planted_step_margin(model, tokenizer, c, step)
        for c in halves["other"]
        if (step := first_plus_step(c)) is not None
    ]
    result["likelihood"] = {
        "plus9_step_one_low_minus_right": summary(planted),
        "control_first_plus_step_one_low_minus_right": summary(control),
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assets", type=Path, required=True, help="the warm start to check")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(2)
    command = f"python -m benchmarks.studies.planted_error.check --assets {args.assets} --out {args.out}"
    record = {
        **measured(command, lambda: check(args.assets)),
        "assets": json.loads((args.assets / "planted_error.json").read_text()),
        "warm_start": {
            k: v for k, v in json.loads((args.assets / "warm_start.json").read_text()).items() if k != "checks"
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: record[k] for k in ("greedy", "sampled", "likelihood")}, indent=1))


if __name__ == "__main__":
    main()
