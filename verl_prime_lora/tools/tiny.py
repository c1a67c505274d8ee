"""A tiny, random Qwen2-style model with a real tokenizer, and an arithmetic RL dataset — all offline.

`python -m verl_prime_lora.tools.tiny --out DIR` writes

- `DIR/model/`: a 2-layer, hidden-64 Qwen2ForCausalLM with random weights and a byte-level BPE
  tokenizer trained here on synthetic chat text (Qwen special tokens and chat template), so veRL,
  vLLM and PEFT treat it like any Qwen2 checkpoint. Its lm_head is the input embedding (tied) unless
  `--untied-lm-head` gives it weights of its own, as DeepSeek-R1-Distill-Qwen-1.5B has;
- `DIR/data/train.parquet`, `DIR/data/test.parquet`: small arithmetic problems in veRL's RL format
  (`data_source`, `prompt` as a chat list, `ability`, `reward_model={style: rule, ground_truth}`,
  `extra_info`). The prompt asks for `<think>...</think>` and then a `\\boxed{}` answer, as the seed
  task does; `data_source` is `lighteval/MATH`, which veRL's default scorer grades by that box.

Everything is seeded: the same arguments give the same files. Nothing is downloaded.
"""

import argparse
import random
from pathlib import Path

import pandas as pd

DATA_SOURCE = "lighteval/MATH"
ABILITY = "math"
INSTRUCTION = "Think inside <think> </think>, then give the final answer as \\boxed{answer}."
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2's chat template, reduced to what a text-only chat needs.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
OPERATORS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def make_problem(rng: random.Random, index: int, split: str) -> dict:
    """One row in veRL's RL format: `a op b` with single- or two-digit operands."""
    a, b = rng.randint(0, 20), rng.randint(0, 20)
    op = rng.choice(sorted(OPERATORS))
    question = f"What is {a} {op} {b}?"
    answer = str(OPERATORS[op](a, b))
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": index, "question": question, "answer": answer},
    }


def make_dataset(seed: int, size: int, split: str) -> list[dict]:
    rng = random.Random(f"{seed}-{split}")
    return [make_problem(rng, index, split) for index in range(size)]


def _tokenizer_corpus(rows: list[dict]) -> list[str]:
    """Chat-formatted prompts plus plausible answers, so BPE merges cover what the model will see."""
    texts = []
    for row in rows:
        user = row["prompt"][0]["content"]
        answer = row["reward_model"]["ground_truth"]
        texts.append(
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
            f"<think>{row['extra_info']['question']} is {answer}</think> \\boxed{{{answer}}}<|im_end|>\n"
        )
    return texts


def build_tokenizer(corpus: list[str], vocab_size: int):
    """A byte-level BPE tokenizer (every string encodes), wrapped as a transformers fast tokenizer.

    The saved folder loads (transformers ≥ 5, `model_type: qwen2`) as `Qwen2Tokenizer`, which keeps the
    vocabulary and merges but rebuilds its own normalizer (NFC) and pre-tokenizer (Qwen2's split regex,
    one digit per piece, then byte-level). The BPE is trained and returned with exactly those, so this
    tokenizer, the saved one, veRL and vLLM all split a text into the same ids.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
        chat_template=CHAT_TEMPLATE,
        model_max_length=512,
    )


def build_model(tokenizer, seed: int, initializer_range: float, tie_word_embeddings: bool = True):
    """Random Qwen2ForCausalLM: hidden 64, 2 layers, one 64-wide head (a head size vLLM-CPU supports);
    `tie_word_embeddings=False`: an lm_head of its own, drawn as the other weights."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=512,
        tie_word_embeddings=tie_word_embeddings,
        initializer_range=initializer_range,
        bos_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return model


def write_assets(
    out: Path,
    seed: int = 0,
    train_size: int = 64,
    test_size: int = 8,
    vocab_size: int = 512,
    initializer_range: float = 0.02,
    tie_word_embeddings: bool = True,
) -> dict[str, Path]:
    """Write model + tokenizer and the two parquet files under `out`; returns their paths."""
    train = make_dataset(seed, train_size, "train")
    test = make_dataset(seed, test_size, "test")
    paths = {
        "model": out / "model",
        "train": out / "data" / "train.parquet",
        "test": out / "data" / "test.parquet",
    }
    tokenizer = build_tokenizer(_tokenizer_corpus(train + test), vocab_size)
    model = build_model(tokenizer, seed, initializer_range, tie_word_embeddings)
    model.save_pretrained(paths["model"])
    tokenizer.save_pretrained(paths["model"])
    paths["train"].parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(train).to_parquet(paths["train"])
    pd.DataFrame(test).to_parquet(paths["test"])
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for model/ and data/")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-size", type=int, default=64)
    parser.add_argument("--test-size", type=int, default=8)
    parser.add_argument("--vocab-size", type=int, default=512)
    parser.add_argument(
        "--initializer-range",
        type=float,
        default=0.02,
        help="std of the random weights; larger (e.g. 0.3) gives a peaky policy whose change is visible",
    )
    parser.add_argument(
        "--untied-lm-head",
        action="store_true",
        help="give the lm_head weights of its own instead of tying it to the input embedding",
    )
    args = parser.parse_args()
    paths = write_assets(
        args.out,
        args.seed,
        args.train_size,
        args.test_size,
        args.vocab_size,
        args.initializer_range,
        tie_word_embeddings=not args.untied_lm_head,
    )
    for name, path in paths.items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
