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
  a rule that always blamed the first (last) step would score the share of responses whose first wrong step
  is their first (last) one, and the best rule that knows only `m` the share of the most common first wrong
  position per `m`: all three are reported beside it;
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


def step_means(token_starts: list[int], token_values: list[float], spans: tuple[tuple[int, int], ...]) -> list[float]:
    """The mean over the tokens whose first character lies in step `i`'s span (0 for a step no token starts in):
    a per-token score, which does not grow with a step's length as `step_rewards` does."""
    totals = step_rewards(token_starts, token_values, spans)
    counts = step_rewards(token_starts, [1.0] * len(token_values), spans)
    return [total / count if count else 0.0 for total, count in zip(totals, counts, strict=True)]


def hit(rewards: list[float], first_wrong: int) -> float:
    """`[argmin R = k]`, a tie at the minimum counting 1/(number tied) when `k` is among them."""
    low = min(rewards)
    tied = [i for i, value in enumerate(rewards) if value == low]
    return 1.0 / len(tied) if first_wrong in tied else 0.0


def pair_wins(rewards: list[float], first_wrong: int) -> list[float]:
    """One value per right step `j < k`: 1 if `R_k < R_j`, ½ if equal, 0 if above."""
    wrong = rewards[first_wrong]
    return [1.0 if wrong < right else 0.5 if wrong == right else 0.0 for right in rewards[:first_wrong]]


def best_position_share(rows: list[tuple[list[float], int]]) -> float | None:
    """The best any rule that knows only the number of steps m could score: for each m, blame the position
    that is most often the first wrong step among the responses with m steps (chosen on these very responses,
    so an upper bound for a position rule)."""
    by_steps: dict[int, list[int]] = {}
    for rewards, first_wrong in rows:
        by_steps.setdefault(len(rewards), []).append(first_wrong)
    if not rows:
        return None
    best = sum(max(ks.count(k) for k in set(ks)) for ks in by_steps.values())
    return best / len(rows)


def localisation(rewards: list[list[float]], first_wrong: list[int], groups: list | None = None) -> dict:
    """The localisation rate, its chance level and the within-response AUC over responses (each with >= 2
    steps), with 95 % bootstrap intervals (`bootstrap_ci`) that resample `groups` (say, the problem each
    response answers: its samples are not independent) with all their responses; None: each response alone.

    Position-matched baselines beside chance: the share of first wrong steps that are the first step, the last
    step, and the best position rule given the number of steps (`best_position_share`)."""
    groups = list(range(len(rewards))) if groups is None else groups
    rows = [(r, k, g) for r, k, g in zip(rewards, first_wrong, groups, strict=True) if len(r) >= 2]
    hits = [hit(r, k) for r, k, _ in rows]
    chance = [1.0 / len(r) for r, _, _ in rows]
    wins = [pair_wins(r, k) for r, k, _ in rows]
    members: dict = {}
    for i, (_, _, group) in enumerate(rows):
        members.setdefault(group, []).append(i)
    clusters = list(members.values())

    def auc(sample: list[list[int]]) -> float | None:
        pooled = [w for cluster in sample for i in cluster for w in wins[i]]
        return sum(pooled) / len(pooled) if pooled else None

    def rate(sample: list[list[int]]) -> float | None:
        chosen = [i for cluster in sample for i in cluster]
        return sum(hits[i] for i in chosen) / len(chosen) if chosen else None

    pairs = [(r, k) for r, k, _ in rows]
    return {
        "responses": len(rows),
        "groups": len(clusters),
        "pairs": sum(len(w) for w in wins),
        "localisation": rate(clusters),
        "localisation_ci": bootstrap_ci(clusters, rate),
        "chance": sum(chance) / len(chance) if chance else None,
        # what a rule that blames a position, whatever the rewards, would score
        "first_step_share": sum(k == 0 for _, k in pairs) / len(pairs) if pairs else None,
        "last_step_share": sum(k == len(r) - 1 for r, k in pairs) / len(pairs) if pairs else None,
        "best_position_share": best_position_share(pairs),
        "auc": auc(clusters),
        "auc_ci": bootstrap_ci(clusters, auc),
    }


def bootstrap_ci(items: list, statistic, draws: int = 2000, seed: int = 0) -> list[float] | None:
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
