"""The seed's evaluation benchmarks -> one veRL RL parquet each, ``<local_dir>/<name>.parquet``.

Datasets, splits and columns are the ones the seed's evaluation reads. The card's own script,
open-rs2-PRIME ``scripts/eval/eval_prime.py`` (LYF22034/open-rs2-grpo-lora, lines 16-21), evaluates
``CARD_BENCHMARKS``: aime24 (HuggingFaceH4/aime_2024, train), aime25 (yentinglin/aime_2025, train),
amc23 (knoveleng/AMC-23, train), math_500 (HuggingFaceH4/MATH-500, test); question column ``problem``.
Tina's lighteval tasks (shangshang-wang/Tina ``scripts/eval/run_eval_custom_tasks.py``) add
``EXTRA_BENCHMARKS``: minerva (knoveleng/Minerva-Math) and olympiadbench (knoveleng/OlympiadBench,
question column ``question``); Tina's gpqa:diamond is multiple choice and is not converted here.

aime25: the card's script reads columns ``problem`` and ``answer`` of split ``train``
(eval_prime.py:18), as does Tina's aime25 task (same dataset, ``hf_avail_splits=["train"]``,
``aime_prompt_fn``); whether ``answer`` is stored as text or as an integer was not determined, and
either converts to the same text.

Ground truth: the ``answer`` column where the benchmark has one, else the last ``\\boxed{}`` of
``solution``. For math_500 the card's script scores against the full ``solution`` text instead
(eval_prime.py:20), this script takes the ``answer`` column (docs/evaluation.md).
Prompts: ``--prompt_style eval`` (default) is the seed's evaluation template as a single user message;
``train`` is the training prompt (for in-training validation).

    python examples/data_preprocess/eval_sets.py --local_dir ~/data/open_rs
    python examples/data_preprocess/eval_sets.py --local_dir out --benchmarks aime25 --input_file aime25.jsonl

Every row is kept, so that benchmark sizes stay the published ones; rows without an answer are counted
(the reward scores them 0 as ``bad_ground_truth``).
"""

import os
from typing import NamedTuple

from common import PROMPT_STYLES, as_text, base_parser, ground_truth, load_rows, to_verl_row, write_parquet


class Benchmark(NamedTuple):
    hf_id: str
    split: str
    problem_key: str
    answer_key: str | None  # preferred ground truth
    solution_key: str | None  # else the last \boxed{} of this column


# name (also the parquet's data_source, hence veRL's val metric prefix) -> where the seed reads it
BENCHMARKS = {
    "aime24": Benchmark("HuggingFaceH4/aime_2024", "train", "problem", "answer", None),
    "aime25": Benchmark("yentinglin/aime_2025", "train", "problem", "answer", None),
    "amc23": Benchmark("knoveleng/AMC-23", "train", "problem", "answer", None),
    "math_500": Benchmark("HuggingFaceH4/MATH-500", "test", "problem", "answer", "solution"),
    "minerva": Benchmark("knoveleng/Minerva-Math", "train", "problem", None, "solution"),
    "olympiadbench": Benchmark("knoveleng/OlympiadBench", "train", "question", "answer", None),
}
CARD_BENCHMARKS = ("aime24", "aime25", "amc23", "math_500")  # eval_prime.py:16-21
EXTRA_BENCHMARKS = ("minerva", "olympiadbench")  # Tina's lighteval tasks beyond the card's four


def convert(name: str, rows, prompt_style: str = "eval") -> tuple[list[dict], int]:
    """(veRL rows, number of rows without an answer) for the rows of benchmark ``name``."""
    bench = BENCHMARKS[name]
    out = [
        to_verl_row(
            data_source=name,
            problem=as_text(row.get(bench.problem_key)),
            answer=ground_truth(row, bench.answer_key, bench.solution_key),
            prompt_style=prompt_style,
            split=bench.split,
            index=index,
        )
        for index, row in enumerate(rows)
    ]
    return out, sum(not row["reward_model"]["ground_truth"] for row in out)


def main(argv=None) -> list[str]:
    parser = base_parser(__doc__)
    parser.add_argument("--benchmarks", nargs="+", choices=sorted(BENCHMARKS), default=list(BENCHMARKS))
    parser.add_argument("--prompt_style", choices=PROMPT_STYLES, default="eval")
    args = parser.parse_args(argv)
    if args.input_file and len(args.benchmarks) != 1:
        parser.error("--input_file holds one benchmark: name it with --benchmarks")
    paths = []
    for name in args.benchmarks:
        bench = BENCHMARKS[name]
        rows, missing = convert(name, load_rows(bench.hf_id, bench.split, args.input_file), args.prompt_style)
        if missing:
            print(f"{name}: {missing} rows have no answer")
        paths.append(write_parquet(rows, os.path.join(args.local_dir, f"{name}.parquet")))
    return paths


if __name__ == "__main__":
    main()
