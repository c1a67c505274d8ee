"""knoveleng/open-rs (the seed's training set: 7,000 math problems with columns problem, solution,
answer, level) -> veRL RL parquet ``<local_dir>/train.parquet`` in the seed's prompt format: the open-rs
system prompt (reasoning in <think> </think>, final answer in \\boxed{}) and the problem as the user turn.

    python examples/data_preprocess/open_rs.py --local_dir ~/data/open_rs
    python examples/data_preprocess/open_rs.py --local_dir out --input_file subset.jsonl   # no hub access

Ground truth: the ``answer`` column (the seed graded against ``solution``, whose final answer it is),
else the last \\boxed{} of ``solution``. Rows without a problem or an answer are dropped and counted.
"""

import os

from common import as_text, base_parser, ground_truth, load_rows, to_verl_row, write_parquet

HF_ID = "knoveleng/open-rs"
SPLIT = "train"
DATA_SOURCE = "open_rs"


def convert(rows, split: str = SPLIT) -> tuple[list[dict], int]:
    """(veRL rows, number of dropped rows) for open-rs rows; ``extra_info.index`` is the source position."""
    out = []
    for index, row in enumerate(rows):
        problem, answer = as_text(row.get("problem")), ground_truth(row)
        if problem and answer:
            out.append(
                to_verl_row(
                    data_source=DATA_SOURCE,
                    problem=problem,
                    answer=answer,
                    prompt_style="train",
                    split=split,
                    index=index,
                    level=row.get("level"),
                )
            )
    return out, len(rows) - len(out)


def main(argv=None) -> str:
    args = base_parser(__doc__).parse_args(argv)
    rows, dropped = convert(load_rows(HF_ID, SPLIT, args.input_file))
    if dropped:
        print(f"dropped {dropped} rows without a problem or an answer")
    return write_parquet(rows, os.path.join(args.local_dir, "train.parquet"))


if __name__ == "__main__":
    main()
