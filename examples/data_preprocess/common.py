"""Shared pieces of the data-preprocessing scripts: the seed's prompts, row conversion to veRL's RL
parquet format, loading (HF hub or a local file), and writing.

veRL RL format (one row per problem, read by ``verl.utils.dataset.RLHFDataset``):
``data_source`` (str), ``prompt`` (chat messages), ``ability`` ("math"),
``reward_model`` = ``{"style": "rule", "ground_truth": str}``, ``extra_info`` = ``{"split", "index", ...}``.
``verl_prime_lora.rewards.math_format.compute_score`` grades responses against ``ground_truth``.
"""

import argparse
import math
import numbers
import os

import datasets
import pandas as pd

from verl_prime_lora.rewards.math_format import last_boxed

# The seed's training system prompt, verbatim: Tina `tina/utils/prompt.py::OPEN_RS_SYSTEM_PROMPT`
# (shangshang-wang/Tina), itself taken from knoveleng/open-rs `recipes/grpo.yaml`; Tina and
# open-rs2-PRIME (LYF22034/open-rs2-grpo-lora, `tina/post_train_hf/grpo.py`) use it for every open-rs
# run, as the system message before the problem. `\\boxed{{}}` is literally in the seed's text
# (a str.format escape that is never formatted), so it is kept.
TRAIN_SYSTEM_PROMPT = """
A conversation between User and Assistant. The user asks a question, and the Assistant solves it.
The assistant first thinks about the reasoning process in the mind and then provides the user with the answer, and put your final answer within \\boxed{{}} .
The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, respectively, 
i.e., <think> reasoning process here </think> <answer> answer here </answer>.
Note that respond by English, NOT use other languages.
"""  # noqa: E501, W291 - verbatim

# The seed's evaluation prompt, a user message with no system prompt: `MATH_QUERY_TEMPLATE` of Tina's
# `scripts/eval/run_eval_custom_tasks.py` (lighteval) and of open-rs2-PRIME's `scripts/eval/eval_prime.py`.
EVAL_QUERY_TEMPLATE = (
    "Solve the following math problem efficiently and clearly. The last line of your response should be of "
    "the following format: 'Therefore, the final answer is: $\\boxed{{ANSWER}}$. I hope it is correct' "
    "(without quotes) where ANSWER is just the final number or expression that solves the problem. "
    "Think step by step before answering.\n\n{question}"
)

PROMPT_STYLES = ("train", "eval")


def chat_prompt(problem: str, style: str) -> list[dict]:
    """The chat messages for a problem: ``train`` = seed system prompt + problem; ``eval`` = the seed's
    evaluation template as the only (user) message."""
    if style == "train":
        return [{"role": "system", "content": TRAIN_SYSTEM_PROMPT}, {"role": "user", "content": problem}]
    if style == "eval":
        return [{"role": "user", "content": EVAL_QUERY_TEMPLATE.format(question=problem)}]
    raise ValueError(f"unknown prompt style {style!r}; expected one of {PROMPT_STYLES}")


def as_text(value) -> str:
    """A dataset answer as text: numbers without a spurious ``.0``, lists joined by ", ", "" when missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return str(int(value)) if float(value).is_integer() else str(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(filter(None, (as_text(v) for v in value)))
    return str(value).strip()


def ground_truth(row: dict, answer_key: str | None = "answer", solution_key: str | None = "solution") -> str:
    """The final answer of a dataset row: its ``answer_key`` column when non-empty, else the last
    ``\\boxed{}`` of its ``solution_key`` column; "" when the row has neither."""
    answer = as_text(row.get(answer_key)) if answer_key else ""
    if answer or not solution_key:
        return answer
    return (last_boxed(as_text(row.get(solution_key))) or "").strip()


def to_verl_row(
    *, data_source: str, problem: str, answer: str, prompt_style: str, split: str, index: int, **extra
) -> dict:
    """One row in veRL's RL format; ``extra`` goes into ``extra_info`` next to ``split`` and ``index``."""
    return {
        "data_source": data_source,
        "prompt": chat_prompt(problem, prompt_style),
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": index, **extra},
    }


def load_rows(hf_id: str, split: str, input_file: str | None = None) -> datasets.Dataset:
    """``split`` of the hub dataset ``hf_id``, or the local ``input_file`` (.json, .jsonl or .parquet)."""
    if input_file is None:
        return datasets.load_dataset(hf_id, split=split)
    suffix = os.path.splitext(input_file)[1].lower()
    builders = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
    if suffix not in builders:
        raise ValueError(f"{input_file}: expected a .json, .jsonl or .parquet file")
    return datasets.load_dataset(builders[suffix], data_files=input_file, split="train")


def write_parquet(rows: list[dict], path: str) -> str:
    """Write rows to ``path`` (parent folders created); returns the path."""
    path = os.path.expanduser(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)
    print(f"wrote {len(rows)} rows to {path}")
    return path


def base_parser(description: str) -> argparse.ArgumentParser:
    """The options every script takes: ``--local_dir`` (output folder) and ``--input_file``."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local_dir", required=True, help="folder for the output parquet file(s)")
    parser.add_argument(
        "--input_file",
        default=None,
        help="read this local .json/.jsonl/.parquet (same columns as the hub dataset) instead of the hub",
    )
    return parser
