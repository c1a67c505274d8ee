"""examples/data_preprocess: row conversion, the two scripts run on small local files (no hub), and the
output loaded by veRL's own RLHFDataset and graded by our reward."""

import importlib
import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "examples" / "data_preprocess"
COLUMNS = ["data_source", "prompt", "ability", "reward_model", "extra_info"]

OPEN_RS_ROWS = [
    {"problem": "What is $1+1$?", "solution": r"Add: $\boxed{2}$.", "answer": "2", "level": "Easy"},
    {"problem": "Half of one?", "solution": r"It is $\boxed{\frac{1}{2}}$.", "answer": "", "level": "Hard"},
    {"problem": "No answer here.", "solution": "We cannot say.", "answer": None, "level": "Hard"},
    {"problem": "", "solution": "", "answer": "3", "level": "Easy"},
]


@pytest.fixture(scope="module")
def pp():
    """The preprocessing modules, imported the way the scripts import each other (script folder on path)."""
    names = ("common", "open_rs", "eval_sets")
    sys.path.insert(0, str(SCRIPTS))
    try:
        yield {name: importlib.import_module(name) for name in names}
    finally:
        sys.path.remove(str(SCRIPTS))
        for name in names:
            sys.modules.pop(name, None)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


# ---------------------------------------------------------------------------------------------
# conversion
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value,text",
    [
        (27.0, "27"),
        (2.5, "2.5"),
        (7, "7"),
        (None, ""),
        (math.nan, ""),
        (" 5 ", "5"),
        (["$x$"], "$x$"),
        ([1, 2], "1, 2"),
    ],
)
def test_as_text(pp, value, text):
    assert pp["common"].as_text(value) == text


def test_ground_truth_prefers_the_answer_then_the_last_box_of_the_solution(pp):
    gt = pp["common"].ground_truth
    assert gt({"answer": "5", "solution": r"\boxed{6}"}) == "5"
    assert gt({"answer": "", "solution": r"First \boxed{1}, finally \boxed{ \frac{1}{2} }."}) == r"\frac{1}{2}"
    assert gt({"solution": "So it is $4.5$."}) == ""  # prose is never taken for an answer
    assert gt({"answer": None, "solution": None}) == ""
    assert gt({"question": "q", "answer": 12.0}, "answer", None) == "12"


def test_prompts(pp):
    common = pp["common"]
    system, user = common.chat_prompt("Find x.", "train")
    assert system["role"] == "system" and user == {"role": "user", "content": "Find x."}
    assert "<think> </think>" in system["content"] and r"\boxed{{}}" in system["content"]  # seed text, verbatim
    (only,) = common.chat_prompt("Find x.", "eval")
    assert only["role"] == "user"
    assert only["content"].endswith("Think step by step before answering.\n\nFind x.")
    assert r"$\boxed{ANSWER}$" in only["content"]
    with pytest.raises(ValueError):
        common.chat_prompt("Find x.", "chat")


def test_open_rs_convert_drops_rows_without_problem_or_answer(pp):
    rows, dropped = pp["open_rs"].convert(OPEN_RS_ROWS)
    assert dropped == 2
    assert [r["reward_model"] for r in rows] == [
        {"style": "rule", "ground_truth": "2"},
        {"style": "rule", "ground_truth": r"\frac{1}{2}"},
    ]
    assert [r["extra_info"] for r in rows] == [
        {"split": "train", "index": 0, "level": "Easy"},
        {"split": "train", "index": 1, "level": "Hard"},
    ]
    assert {r["data_source"] for r in rows} == {"open_rs"} and {r["ability"] for r in rows} == {"math"}


def test_eval_sets_cover_the_seed_benchmarks(pp):
    es = pp["eval_sets"]
    # the card's four (open-rs2-PRIME scripts/eval/eval_prime.py:16-21), then Tina's lighteval extras
    assert es.CARD_BENCHMARKS == ("aime24", "aime25", "amc23", "math_500")
    assert es.EXTRA_BENCHMARKS == ("minerva", "olympiadbench")
    assert list(es.BENCHMARKS) == list(es.CARD_BENCHMARKS + es.EXTRA_BENCHMARKS)
    assert es.BENCHMARKS["aime25"] == ("yentinglin/aime_2025", "train", "problem", "answer", None)
    assert es.BENCHMARKS["aime24"] == ("HuggingFaceH4/aime_2024", "train", "problem", "answer", None)
    assert es.BENCHMARKS["amc23"] == ("knoveleng/AMC-23", "train", "problem", "answer", None)
    assert es.BENCHMARKS["math_500"][:3] == ("HuggingFaceH4/MATH-500", "test", "problem")


def test_eval_sets_aime25_from_a_local_file(pp, tmp_path):
    """aime25 reads `problem` and `answer` (text or integer); other columns are ignored."""
    source = write_jsonl(
        tmp_path / "aime25.jsonl",
        [
            {"id": "I-1", "problem": "Find the sum of all integer bases $b>9$ ...", "answer": "70"},
            {"id": "I-2", "problem": "On $\\triangle ABC$ points ...", "answer": 588},
        ],
    )
    (path,) = pp["eval_sets"].main(
        ["--local_dir", str(tmp_path / "out"), "--benchmarks", "aime25", "--input_file", str(source)]
    )
    assert path.endswith("aime25.parquet")
    frame = pd.read_parquet(path)
    assert list(frame.columns) == COLUMNS and len(frame) == 2
    assert list(frame["data_source"]) == ["aime25", "aime25"]
    assert [rm["ground_truth"] for rm in frame["reward_model"]] == ["70", "588"]
    (message,) = frame.loc[1, "prompt"]
    assert message["role"] == "user" and message["content"].endswith("\n\nOn $\\triangle ABC$ points ...")
    assert message["content"].startswith("Solve the following math problem efficiently and clearly. The last line")
    assert [dict(info) for info in frame["extra_info"]] == [
        {"split": "train", "index": 0},
        {"split": "train", "index": 1},
    ]


# ---------------------------------------------------------------------------------------------
# the scripts, end to end on local files
# ---------------------------------------------------------------------------------------------


def test_open_rs_script(tmp_path):
    source = write_jsonl(tmp_path / "open_rs.jsonl", OPEN_RS_ROWS)
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, str(SCRIPTS / "open_rs.py"), "--local_dir", str(out), "--input_file", str(source)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "dropped 2 rows" in run.stdout
    frame = pd.read_parquet(out / "train.parquet")
    assert list(frame.columns) == COLUMNS and len(frame) == 2
    assert frame.loc[0, "prompt"][1]["content"] == "What is $1+1$?"


def test_eval_sets_script_parquet_and_json_inputs(pp, tmp_path):
    olympiad = tmp_path / "olympiad.parquet"
    pd.DataFrame({"question": ["Solve $x^2=4$, $x>0$.", "Empty"], "answer": [["$2$"], []]}).to_parquet(olympiad)
    minerva = tmp_path / "minerva.json"
    minerva.write_text(json.dumps([{"problem": "Speed of light?", "solution": r"About $\boxed{3 \times 10^8}$ m/s."}]))

    main = pp["eval_sets"].main
    (path,) = main(["--local_dir", str(tmp_path), "--benchmarks", "olympiadbench", "--input_file", str(olympiad)])
    frame = pd.read_parquet(path)
    assert list(frame.columns) == COLUMNS and len(frame) == 2  # kept: benchmark sizes are fixed
    assert list(frame["data_source"]) == ["olympiadbench"] * 2
    assert [rm["ground_truth"] for rm in frame["reward_model"]] == ["$2$", ""]
    assert "Solve $x^2=4$" in frame.loc[0, "prompt"][0]["content"] and len(frame.loc[0, "prompt"]) == 1

    args = ["--local_dir", str(tmp_path), "--benchmarks", "minerva", "--input_file", str(minerva)]
    (path,) = main(args + ["--prompt_style", "train"])
    row = pd.read_parquet(path).iloc[0]
    assert row["reward_model"]["ground_truth"] == r"3 \times 10^8"
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert dict(row["extra_info"]) == {"split": "train", "index": 0}


def test_eval_sets_input_file_needs_one_benchmark(pp, tmp_path):
    with pytest.raises(SystemExit):
        pp["eval_sets"].main(["--local_dir", str(tmp_path), "--input_file", str(tmp_path / "x.jsonl")])


# ---------------------------------------------------------------------------------------------
# veRL reads it, our reward grades it
# ---------------------------------------------------------------------------------------------


def test_output_loads_in_verl_rlhf_dataset_and_is_gradable(pp, tmp_path):
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from verl_prime_lora.rewards.math_format import compute_score
    from verl_prime_lora.tools.tiny import build_tokenizer

    rows, _ = pp["open_rs"].convert(OPEN_RS_ROWS)
    path = pp["common"].write_parquet(rows, str(tmp_path / "train.parquet"))
    tokenizer = build_tokenizer([pp["common"].TRAIN_SYSTEM_PROMPT] + [r["problem"] for r in OPEN_RS_ROWS], 300)

    def load(max_prompt_length):
        config = {"max_prompt_length": max_prompt_length, "filter_overlong_prompts": True, "cache_dir": str(tmp_path)}
        return RLHFDataset(path, tokenizer, OmegaConf.create(config))

    dataset = load(4096)
    assert len(dataset) == 2
    item = dataset[1]
    assert [m["content"] for m in item["raw_prompt"]] == [pp["common"].TRAIN_SYSTEM_PROMPT, "Half of one?"]
    assert item["index"] == 1 and item["data_source"] == "open_rs"
    response = "Half of one is a half.\n</think>\nThe answer is $\\boxed{0.5}$."
    result = compute_score(item["data_source"], response, item["reward_model"]["ground_truth"], item["extra_info"])
    assert (result["reason"], result["score"]) == ("correct", 2.0)

    assert len(load(8)) == 0  # veRL's overlong-prompt filter sees the chat-templated prompt
