"""How large is the oracle's credit at the error, per token, at γ = 0? The pilot that sets the planted-error γ = 0
study's `algorithm.prime.process_coef` (docs/preregistration_planted_gamma0.md).

At γ = 0 the process advantage of a token is its own normalised reward, A^p[i,t] = (r[i,t] − μ_g/L_i)/σ_g
(`core_algos.sequence_norm_process_advantage`), with μ_g, σ_g the group's mean and spread of the sequence sums z.
The oracle (`credit_controls.oracle_rewards`) puts −1/n_i on the n_i tokens of a wrong answer's first error, so
z_i = −1 for every wrong answer and 0 for a right one, and σ_g is the group's spread of right/wrong: a token of the
error gets −1/(n_i σ_g) + (1 − p_g)/(L_i σ_g), whatever the scale of the oracle's −1. The outcome advantage of that
wrong answer is A^o_i = (R_i − mean_g R)/std_g R ≈ −p_g/σ_g (p_g the group's accuracy). Their ratio at coefficient 1,

    ρ_i = −mean_{t ∈ error_i} A^p[i,t] / |A^o_i|  ≈  1 / (n_i p_g),

is what `process_coef` multiplies: the issue's positive control (A_t = A^o − c·1[t ∈ error], c ≈ |A^o|) is the
oracle at γ = 0 with `process_coef` = 1 / median ρ.

This measures ρ on the warm start's own samples (`SAMPLES` per validation problem at temperature 1, as the RL
rollouts), scored by the study's reward (`planted_error_task.compute_score`), in the groups the prompt filter keeps
(2–6 of 8 right), with the project's own advantage functions. The responses are re-tokenized from their text.

    python -m benchmarks.studies.planted_gamma0.oracle_credit_scale --assets DIR --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from benchmarks.lib import credit_controls
from benchmarks.lib.runs import measured
from benchmarks.studies.planted_error import task as planted_error_task
from benchmarks.studies.planted_error.check import BAND, MAX_NEW_TOKENS, SAMPLES, warm_start_and_problems
from verl_prime_lora.algo.core_algos import grpo_outcome_advantage, sequence_norm_process_advantage
from verl_prime_lora.algo.groups import group_ids
from verl_prime_lora.demo.chain_task import DATA_SOURCE, prompt_text
from verl_prime_lora.demo.sft import generate


def group_credit(tokenizer, answers: list[str], scores: list[dict]) -> list[dict]:
    """For one problem's sampled `answers` and their `scores` (`planted_error_task.compute_score`): each wrong
    answer's error-token count n, the group's accuracy p, the outcome advantage A^o and the oracle's mean process
    advantage on its error tokens at γ = 0 (coefficient 1)."""
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] or [tokenizer.eos_token_id] for text in answers]
    width = max(map(len, ids))
    responses = torch.zeros(len(ids), width, dtype=torch.long)
    mask = torch.zeros(len(ids), width)
    for row, tokens in enumerate(ids):
        responses[row, : len(tokens)] = torch.tensor(tokens)
        mask[row, : len(tokens)] = 1.0
    oracle = credit_controls.oracle_rewards(torch.zeros_like(mask), mask, responses, scores, tokenizer)
    gid = group_ids([0] * len(ids), mask.device)
    outcome = grpo_outcome_advantage(torch.tensor([s["score"] for s in scores], dtype=torch.float32), gid)
    process = sequence_norm_process_advantage(oracle, mask, gid, gamma=0.0)
    accuracy = statistics.mean(s["acc"] for s in scores)
    rows = []
    for row, score in enumerate(scores):
        error = oracle[row] < 0
        if score["acc"] == 1.0 or not error.any() or float(outcome[row]) == 0.0:
            continue  # right, unblamed, or with the group's mean score (format paid, no answer: no ratio)
        credit = -float(process[row][error].mean())
        rows.append(
            {
                "n_error_tokens": int(error.sum()),
                "group_accuracy": accuracy,
                "outcome_advantage": float(outcome[row]),
                "error_token_credit": credit,
                "ratio": credit / abs(float(outcome[row])),
                "planted": score[planted_error_task.PLANTED_WRONG] == 1.0,
            }
        )
    return rows


def describe(rows: list[dict]) -> dict:
    """Median and quartiles of ρ, the median n and p, and the coefficient 1 / median ρ."""
    ratios = sorted(r["ratio"] for r in rows)
    quartiles = statistics.quantiles(ratios, n=4)
    return {
        "wrong_answers": len(rows),
        "ratio_median": round(statistics.median(ratios), 4),
        "ratio_quartiles": [round(quartiles[0], 4), round(quartiles[2], 4)],
        "n_error_tokens_median": statistics.median(r["n_error_tokens"] for r in rows),
        "group_accuracy_median": round(statistics.median(r["group_accuracy"] for r in rows), 4),
        "coef_for_median_ratio_1": round(1 / statistics.median(ratios), 3),
    }


def measure(assets: Path, seed: int = 0) -> dict:
    """ρ per wrong answer (`group_credit`) over the groups in the filter's band, and `describe` of all, of those on
    `+9` problems and of those with the planted error."""
    torch.manual_seed(seed)
    model, tokenizer, chains = warm_start_and_problems(assets)
    rows, groups = [], {"sampled": 0, "in_band": 0}
    prompts = [prompt_text(tokenizer, chain) for chain in chains]
    sampled = generate(model, tokenizer, prompts, MAX_NEW_TOKENS, SAMPLES)
    for index, chain in enumerate(chains):
        answers = sampled[index * SAMPLES : (index + 1) * SAMPLES]
        scores = [
            planted_error_task.compute_score(DATA_SOURCE, text, str(chain.answer), {"question": chain.question})
            for text in answers
        ]
        groups["sampled"] += 1
        if not BAND[0] <= sum(score["acc"] for score in scores) <= BAND[1]:
            continue
        groups["in_band"] += 1
        plus9 = bool(planted_error_task.plus9_steps(chain))
        rows += [{**row, "plus9_problem": plus9} for row in group_credit(tokenizer, answers, scores)]
    return {
        "groups": groups,
        "all": describe(rows),
        "plus9_problems": describe([r for r in rows if r["plus9_problem"]]),
        "planted_wrong_answers": describe([r for r in rows if r["planted"]]),
        "per_answer": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assets", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(2)
    command = f"python -m benchmarks.studies.planted_gamma0.oracle_credit_scale --assets {args.assets} --out {args.out}"
    record = measured(command, lambda: measure(args.assets))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k != "per_answer"}, indent=1))


if __name__ == "__main__":
    main()
