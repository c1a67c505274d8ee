"""Step-level credit of a process reward on chain arithmetic: where does the PRM put its lowest reward?

The chain task is one where the truth is known step by step. A stepwise response writes
`<think>s_1, s_2, ..., s_m</think> \\boxed{a}` with steps `s_i = "l op d=t"`; the chain's worked solution
(`Chain.solution`) has steps `c_1 .. c_n`. The **first wrong step** is the first `i` with `s_i != c_i`
(a wrong total, a miscopied operand, or a step past the last one). A response whose written steps all
match but stop short has no wrong step to find and is left out, as is one whose think block does not parse.

Given token rewards `r_t` (PRIME's `β·(log π_φ(y_t|y<t) − log π_ref(y_t|y<t))`) and where each token starts in
the response text, a step's reward is the sum over the tokens that start inside it,

    R_i = Σ_{t : start_t ∈ s_i} r_t ,

and, over the responses with a first wrong step `k` among `m ≥ 2` written steps:

* **localisation** = mean of `[argmin_i R_i = k]`, a tie of `j` steps at the minimum counting `1/j` when `k` is
  among them (so a PRM equal to its reference, all `R_i = 0`, scores chance exactly); chance = mean `1/m`;
  a PRM that always blamed the first (last) step would score the share of responses whose first wrong step
  is their first (last) one, reported beside it;
* **AUC** = P(R_k < R_j) + ½ P(R_k = R_j) over the pairs of the first wrong step `k` and a right step `j < k`
  of the same response (pairs within a response: no response's overall reward level enters).

Pure functions; `benchmarks/prm_credit.py` computes the rewards from checkpoints and draws them.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from verl_prime_lora.demo.chain_task import Chain

STEP = re.compile(r"\d+[+-]\d+=\d+")
KINDS = ("right", "wrong", "short", "shortcut", "other")
SHORTCUT = re.compile(r"\d+(?:[+-]\d+){2,}=\d+")  # the whole chain and a total: `Chain.shortcut`'s think


@dataclass(frozen=True)
class StepLabels:
    """A response cut into its written steps, against the truth.

    kind: `right` (every step as the solution's, none missing), `wrong` (has a first wrong step), `short`
    (the steps written are right but some are missing), `shortcut` (the whole chain `=` a total: the steps
    skipped), `other` (no parseable think block)."""

    kind: str
    spans: tuple[tuple[int, int], ...] = ()  # (start, end) of each written step in the response text
    first_wrong: int | None = None


def label_steps(chain: Chain, response: str) -> StepLabels:
    """Cut `response` into its steps (`STEP` matches separated by `", "` inside `<think>...</think>`) and
    find its first wrong step against `chain`'s worked solution."""
    open_at = response.find("<think>")
    close_at = response.find("</think>", open_at + 1)
    if open_at < 0 or close_at < 0:
        return StepLabels("other")
    start = open_at + len("<think>")
    body = response[start:close_at]
    if SHORTCUT.fullmatch(body):
        return StepLabels("shortcut")
    spans, texts, cursor = [], [], 0
    for piece in body.split(", "):
        if not STEP.fullmatch(piece):
            return StepLabels("other")
        spans.append((start + cursor, start + cursor + len(piece)))
        texts.append(piece)
        cursor += len(piece) + 2
    truth = chain.solution[len("<think>") : chain.solution.index("</think>")].split(", ")
    for i, text in enumerate(texts):
        if i >= len(truth) or text != truth[i]:
            return StepLabels("wrong", tuple(spans), i)
    return StepLabels("right" if len(texts) == len(truth) else "short", tuple(spans))


def step_rewards(
    token_starts: list[int], token_rewards: list[float], spans: tuple[tuple[int, int], ...]
) -> list[float]:
    """`R_i`: the sum of the rewards of the tokens whose first character lies in step `i`'s span."""
    totals = [0.0] * len(spans)
    for start, reward in zip(token_starts, token_rewards, strict=True):
        for i, (low, high) in enumerate(spans):
            if low <= start < high:
                totals[i] += reward
                break
    return totals


def hit(rewards: list[float], first_wrong: int) -> float:
    """`[argmin R = k]`, a tie at the minimum counting 1/(number tied) when `k` is among them."""
    low = min(rewards)
    tied = [i for i, value in enumerate(rewards) if value == low]
    return 1.0 / len(tied) if first_wrong in tied else 0.0


def pair_wins(rewards: list[float], first_wrong: int) -> list[float]:
    """One value per right step `j < k`: 1 if `R_k < R_j`, ½ if equal, 0 if above."""
    wrong = rewards[first_wrong]
    return [1.0 if wrong < right else 0.5 if wrong == right else 0.0 for right in rewards[:first_wrong]]


def localisation(rewards: list[list[float]], first_wrong: list[int]) -> dict:
    """The localisation rate, its chance level and the within-response AUC over responses (each with >= 2
    steps), with 95 % bootstrap intervals over responses (`bootstrap_ci`)."""
    rows = [(r, k) for r, k in zip(rewards, first_wrong, strict=True) if len(r) >= 2]
    hits = [hit(r, k) for r, k in rows]
    chance = [1.0 / len(r) for r, _ in rows]
    wins = [pair_wins(r, k) for r, k in rows]

    def auc(sample: list[int]) -> float | None:
        pooled = [w for i in sample for w in wins[i]]
        return sum(pooled) / len(pooled) if pooled else None

    def rate(sample: list[int]) -> float | None:
        return sum(hits[i] for i in sample) / len(sample) if sample else None

    everyone = list(range(len(rows)))
    return {
        "responses": len(rows),
        "pairs": sum(len(w) for w in wins),
        "localisation": rate(everyone),
        "localisation_ci": bootstrap_ci(everyone, rate),
        "chance": sum(chance) / len(chance) if chance else None,
        # what a PRM that always blamed the same position would score: the first step, the last one
        "first_step_share": sum(k == 0 for _, k in rows) / len(rows) if rows else None,
        "last_step_share": sum(k == len(r) - 1 for r, k in rows) / len(rows) if rows else None,
        "auc": auc(everyone),
        "auc_ci": bootstrap_ci(everyone, auc),
    }


def bootstrap_ci(items: list[int], statistic, draws: int = 2000, seed: int = 0) -> list[float] | None:
    """The 2.5 % and 97.5 % quantiles of `statistic` over `draws` resamples (with replacement) of `items`."""
    if not items:
        return None
    rng = random.Random(seed)
    values = sorted(
        value for value in (statistic([rng.choice(items) for _ in items]) for _ in range(draws)) if value is not None
    )
    if not values:
        return None
    return [values[int(0.025 * (len(values) - 1))], values[int(0.975 * (len(values) - 1))]]


def sequence_auc(right: list[float], wrong: list[float]) -> float | None:
    """P(a right response's total reward > a wrong one's) + ½ P(equal): how the PRM ranks whole responses."""
    if not right or not wrong:
        return None
    wins = sum(1.0 if r > w else 0.5 if r == w else 0.0 for r in right for w in wrong)
    return wins / (len(right) * len(wrong))
