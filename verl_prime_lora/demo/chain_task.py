"""Step-by-step chain arithmetic: problems, their worked and shortcut solutions, the RL rows and the grader.

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

`warm_start` builds the tiny model and the data files from it; `sft` holds the fine-tuning.
"""

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass

from verl_prime_lora.rewards.math_format import compute_score
from verl_prime_lora.tools.tiny import ABILITY

DATA_SOURCE = "prime_lora/chain_arithmetic"
INSTRUCTION = "Think step by step inside <think> </think>, then give the final answer as \\boxed{answer}."
TOTAL_RANGE = (0, 99)  # every running total, the first operand and the answer included
OPERATORS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b}
DIGITS = range(10)
SPLITS = ("sft_eval", "test", "train")  # generated in this order, each avoiding the questions before it
TASK_VERSION = 3  # part of the warm start's cache key: bump when the data, the model or the training change


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
# prompts and tokens
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
