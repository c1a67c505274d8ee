"""verl_prime_lora.demo's chain_task, sft and warm_start: the chain-arithmetic task (grading with the project's
reward, running totals, disjoint splits, seeding, veRL's row format) and the SFT warm start end to end (accuracy
window, cache)."""

import json
import random

import pandas as pd
import pytest

from verl_prime_lora.demo import chain_task as ct
from verl_prime_lora.demo import sft, warm_start
from verl_prime_lora.rewards.math_format import compute_score

SIZES = {"sft_eval": 200, "test": 200, "train": 2000}


@pytest.fixture(scope="module")
def splits():
    return ct.make_splits(0, SIZES)


def score(solution: str, answer: str) -> dict:
    return compute_score(ct.DATA_SOURCE, solution, answer)


def with_wrong_step(chain: ct.Chain, step: int) -> str:
    """The worked solution with step `step`'s result off by one, and every later step built on it."""
    total, parts = chain.operands[0], []
    for i, (op, operand) in enumerate(zip(chain.operators, chain.operands[1:])):
        result = ct.OPERATORS[op](total, operand) + (1 if i == step else 0)
        parts.append(f"{total}{op}{operand}={result}")
        total = result
    return f"<think>{', '.join(parts)}</think> \\boxed{{{total}}}"


def test_worked_example():
    chain = ct.Chain.from_question("7+5-3+8")
    assert chain == ct.Chain((7, 5, 3, 8), ("+", "-", "+"))
    assert chain.totals == [12, 9, 17]
    assert chain.solution == "<think>7+5=12, 12-3=9, 9+8=17</think> \\boxed{17}"
    assert chain.shortcut == "<think>7+5-3+8=17</think> \\boxed{17}"
    assert ct.writes_steps(chain.solution) and not ct.writes_steps(chain.shortcut)
    assert not ct.writes_steps("<think>7+5=12</think> \\boxed{12=12=12}")  # only what is inside <think> counts
    assert ct.messages(chain)[0]["content"] == (
        "Compute 7+5-3+8. Think step by step inside <think> </think>, then give the final answer as \\boxed{answer}."
    )


def test_worked_solutions_grade_correct_and_wrong_steps_wrong(splits):
    rng = random.Random(0)
    for chain in rng.sample(splits["train"], 20):
        assert ct.Chain.from_question(chain.question) == chain
        right = score(chain.solution, chain.answer)
        assert (right["acc"], right["format"], right["reason"]) == (1.0, 1.0, "correct")
        assert score(chain.shortcut, chain.answer) == right
        wrong = score(with_wrong_step(chain, rng.randrange(len(chain.operators))), chain.answer)
        assert (wrong["acc"], wrong["format"], wrong["reason"]) == (0.0, 1.0, "wrong")


def test_running_totals_stay_in_range_and_operands_are_digits(splits):
    low, high = ct.TOTAL_RANGE
    rng = random.Random(1)
    chains = [ct.sample_chain(rng, n) for n in range(2, 40) for _ in range(50)] + splits["train"]
    for chain in chains:
        assert all(0 <= operand <= 9 for operand in chain.operands)
        assert set(chain.operators) <= {"+", "-"}
        assert all(low <= total <= high for total in [chain.operands[0], *chain.totals])
    assert {len(chain.operands) for chain in splits["train"]} == {3, 4, 5}


def test_splits_are_disjoint_and_sft_data_avoid_held_out_questions(splits):
    questions = {name: [chain.question for chain in chains] for name, chains in splits.items()}
    for name, size in SIZES.items():
        assert len(set(questions[name])) == size
    assert not set(questions["test"]) & set(questions["train"])
    assert not set(questions["test"]) & set(questions["sft_eval"])
    assert not set(questions["sft_eval"]) & set(questions["train"])
    held_out = set(questions["test"]) | set(questions["sft_eval"])
    stream = ct.sft_texts(0, 3, 5, held_out, shortcut_share=0.8)
    drawn = [next(stream) for _ in range(20_000)]
    assert not held_out & {chain.question for chain, _ in drawn}
    assert {chain.question for chain, _ in drawn} & set(questions["train"])  # SFT may see RL train prompts
    shortcuts = sum(text == chain.shortcut for chain, text in drawn)
    assert shortcuts + sum(text == chain.solution for chain, text in drawn) == len(drawn)
    assert 0.78 < shortcuts / len(drawn) < 0.82
    assert all(
        text == chain.solution for chain, text in (next(ct.sft_texts(0, 3, 5, held_out, 0.0)) for _ in range(100))
    )


def test_same_seed_same_rows_other_seed_other_rows():
    def rows(seed):
        chains = ct.make_splits(seed, SIZES)
        return [ct.make_row(chain, i, name) for name in ("train", "test") for i, chain in enumerate(chains[name])]

    assert rows(0) == rows(0)
    assert rows(0) != rows(1)


def test_rows_in_verl_format(splits):
    row = ct.make_row(splits["test"][3], 3, "test")
    chain = splits["test"][3]
    assert row == {
        "data_source": "prime_lora/chain_arithmetic",
        "prompt": [{"role": "user", "content": f"Compute {chain.question}. {ct.INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": chain.answer},
        "extra_info": {"split": "test", "index": 3, "question": chain.question, "answer": chain.answer},
    }


def test_sft_example_masks_the_prompt(splits):
    from verl_prime_lora.tools.tiny import build_tokenizer

    tokenizer = build_tokenizer(ct.tokenizer_corpus(splits["train"]), 512)
    chain = splits["train"][0]
    example = sft.encode_example(tokenizer, chain, chain.solution)
    n_prompt = example["labels"].count(-100)
    prompt_ids = tokenizer(ct.prompt_text(tokenizer, chain), add_special_tokens=False)["input_ids"]
    assert example["input_ids"][:n_prompt] == prompt_ids
    assert tokenizer.decode(example["labels"][n_prompt:]) == chain.solution + "<|im_end|>"
    assert example["labels"][n_prompt:] == example["input_ids"][n_prompt:]


def test_saved_tokenizer_splits_like_the_built_one(splits, tmp_path):
    """transformers loads the saved folder as Qwen2Tokenizer (its own pre-tokenizer): the ids must not change."""
    from transformers import AutoTokenizer

    from verl_prime_lora.tools.tiny import build_tokenizer

    built = build_tokenizer(ct.tokenizer_corpus(splits["train"]), 512)
    built.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    for chain in splits["test"][:50]:
        text = ct.prompt_text(built, chain) + chain.solution
        assert loaded(text)["input_ids"] == built(text)["input_ids"], text


@pytest.mark.e2e  # the SFT of the warm start: about a minute on 2 cores, shared with the demo test:
@pytest.mark.xdist_group("demo")  # on the demo's xdist worker, whose session builds it once (conftest.warm_assets)
def test_warm_start_end_to_end_and_cache(warm_assets, capsys, monkeypatch):
    """The warm model as the demo builds it (conftest.warm_assets: about a minute on 2 cores), then a second
    call reuses it without training."""
    result, out = warm_assets, warm_assets["out"]
    stats = json.loads(result["warm_start"].read_text())
    assert stats["reached_skill"]
    skill = [check for check in stats["checks"] if check["phase"] == "skill"]
    habit = [check for check in stats["checks"] if check["phase"] == "habit"]
    assert skill[-1]["greedy_acc"] >= stats["skill_acc"] > max(check["greedy_acc"] for check in skill[:-1])
    assert habit[-1]["step"] == stats["mix_steps"] and stats["greedy_acc"] == habit[-1]["greedy_acc"]
    # the window the RL task is built for: room to improve, and groups that hold right and wrong answers
    assert 0.12 <= stats["greedy_acc"] <= 0.5 and 0.08 <= stats["sampled_acc"] <= 0.4
    assert stats["mixed_share"] >= 0.25
    # the habit is what RL can fix: writing the steps pays, and the warm model writes them only sometimes
    assert 0.15 <= stats["sampled_steps_share"] <= 0.7
    assert stats["sampled_acc_with_steps"] > 2 * stats["sampled_acc_without_steps"]
    assert not result["stats"]["reused"]

    train, test = pd.read_parquet(result["train"]), pd.read_parquet(result["test"])
    assert (len(train), len(test)) == (stats["train_size"], stats["test_size"]) == (2000, 200)
    assert set(train["data_source"]) == {ct.DATA_SOURCE}
    assert not set(train["extra_info"].map(lambda info: info["question"])) & set(
        test["extra_info"].map(lambda info: info["question"])
    )

    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(result["model"])
    tokenizer = AutoTokenizer.from_pretrained(result["model"])
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert (model.config.hidden_size, model.config.num_hidden_layers) == (64, 2)
    assert model.generation_config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id
    # what veRL and vLLM load from disk scores what the stop rule measured in memory
    sizes = {"sft_eval": stats["eval_size"], "test": stats["test_size"], "train": stats["train_size"]}
    held_out_chains = ct.make_splits(0, sizes)["sft_eval"]
    held_out = sft.HeldOut(
        [ct.prompt_text(tokenizer, c) for c in held_out_chains],
        [c.answer for c in held_out_chains],
        stats["response_tokens_max"] + 8,
    )
    assert held_out.greedy_accuracy(model, tokenizer) == stats["greedy_acc"]

    printed = [line for line in result["printed"].splitlines() if line.startswith("sft ")]
    assert len(printed) <= stats["sft_steps"] // sft.PRINT_EVERY + 2  # compact: not one line per check
    assert f"sft skill step {skill[-1]['step']:5d}" in "\n".join(printed)  # the stop is always shown
    assert f"sft habit step {habit[-1]['step']:5d}" in "\n".join(printed)
    monkeypatch.setattr(warm_start, "train_warm_start", lambda *args: pytest.fail("trained again"))
    again = warm_start.write_warm_assets(out, seed=0)
    assert again["stats"]["reused"]
    assert "reusing" in capsys.readouterr().out
    assert {k: v for k, v in again["stats"].items() if k != "reused"} == stats
