"""What does PRIME's PRM pay at the planted step, and does the policy still prefer it? From a planted-error run's
checkpoints, step by step.

On each of the 100 validation problems with a `+9` step (`planted_error_task`), after the right worked solution up to
that step's `=` (`planted_error_check.step_prefix`), two continuations: the planted total (one too low) and the right
total, each followed by what comes next in the solution. For the checkpoint of each saved step s (and s = 0, the warm
start, where the PRM equals its reference), in fp32 at temperature 1:

* the policy's margin  m = log π_θ(planted) − log π_θ(right), summed over the continuation's tokens: above 0 while the
  policy still prefers the planted total;
* the PRM's reward of each continuation, r = β · Σ_t (log π_φ − log π_ref) over its tokens, with the run's β and
  reference (`prime.prm.reference`: `policy` = the policy of the same checkpoint, its LoRA merged into the fp32 base;
  `init` = the warm start), as PRIME's token rewards are formed;
* the PRM's margin  r(planted) − r(right): above 0 when the PRM pays more for the planted total than for the right one
  — the process term then pushes the policy towards the error it is unlearning.

Each is averaged over the problems (95 % t interval over problems), per run and pooled over runs by step (the mean of
the runs' means, t interval over runs). The PRM and the policy are those of the same checkpoint: the rewards the next
step's rollouts would get before its PRM update.

    python -m benchmarks.studies.planted_gamma0.planted_token_credit RUN [RUN ...] --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from benchmarks.lib.checkpointed_run import CheckpointedRun, token_log_probs
from benchmarks.lib.evidence import mean_ci95
from benchmarks.studies.planted_error.check import step_prefix
from benchmarks.studies.planted_error.task import plus9_steps
from verl_prime_lora.demo.chain_task import Chain, prompt_text

QUANTITIES = ("policy_margin", "prm_reward_planted", "prm_reward_right", "prm_margin")


def continuations(tokenizer, chain: Chain) -> tuple[list[int], list[tuple[list[int], int]]]:
    """The prompt's ids, and for the planted and the right continuation of `chain`'s `+9` step: the response ids
    (the right solution up to the step's `=`, then the total and what follows, tokenized as one text, as a sampled
    response is) and the index of the first token that covers the total."""
    head, total, tail = step_prefix(chain, plus9_steps(chain)[0])
    prompt = tokenizer(prompt_text(tokenizer, chain), add_special_tokens=False)["input_ids"]
    out = []
    for value in (total - 1, total):
        encoded = tokenizer(f"{head}{value}{tail}", add_special_tokens=False, return_offsets_mapping=True)
        first = next(k for k, (_, end) in enumerate(encoded["offset_mapping"]) if end > len(head))
        out.append((encoded["input_ids"], first))
    return prompt, out


def continuation_log_probs(model, rows: list[tuple[list[int], list[int], int]]) -> list[float]:
    """Σ log π(y_t | prompt, y_<t) over each row's response tokens from its `first` on: (prompt, response, first)."""
    per_token = token_log_probs(model, [(None, prompt, response) for prompt, response, _ in rows])
    return [sum(log_probs[first:]) for log_probs, (_, _, first) in zip(per_token, rows, strict=True)]


def step_quantities(policy, prm, reference, rows: list, beta: float) -> list[dict]:
    """Per problem, the module's four quantities; `rows` holds two consecutive rows (planted, right) per problem."""
    policy_lp = continuation_log_probs(policy, rows)
    reference_lp = policy_lp if reference is policy else continuation_log_probs(reference, rows)
    prm_lp = reference_lp if prm is reference else continuation_log_probs(prm, rows)
    reward = [beta * (p - q) for p, q in zip(prm_lp, reference_lp, strict=True)]
    return [
        {
            "policy_margin": policy_lp[k] - policy_lp[k + 1],
            "prm_reward_planted": reward[k],
            "prm_reward_right": reward[k + 1],
            "prm_margin": reward[k] - reward[k + 1],
        }
        for k in range(0, len(rows), 2)
    ]


def summarise(per_problem: list[dict]) -> dict:
    """Each quantity's mean over problems with its 95 % interval, and the share of problems above 0."""
    out = {}
    for name in QUANTITIES:
        values = [row[name] for row in per_problem]
        out[name] = {"mean_ci95": mean_ci95(values), "share_above_0": statistics.mean(v > 0 for v in values)}
    return out


def measure_run(run: Path, scratch: Path) -> dict:
    """The four quantities at step 0 and at every saved checkpoint of one run."""
    loaded = CheckpointedRun.load(run)
    chains = [chain for chain in loaded.chains if plus9_steps(chain)]
    rows = []
    for chain in chains:
        prompt, pair = continuations(loaded.tokenizer, chain)
        rows += [(prompt, response, first) for response, first in pair]
    by_step = {}
    for step in loaded.steps():
        policy, prm, reference = loaded.models(step, scratch / run.name)
        by_step[step] = summarise(step_quantities(policy, prm, reference, rows, loaded.settings["beta"]))
    return {"run": run.name, "settings": loaded.settings, "problems": len(chains), "by_step": by_step}


def pooled(runs: list[dict]) -> dict:
    """Per step present in every run: each quantity's mean over the runs' means, with its 95 % interval over runs."""
    steps = set.intersection(*(set(run["by_step"]) for run in runs))
    return {
        step: {name: mean_ci95([run["by_step"][step][name]["mean_ci95"][0] for run in runs]) for name in QUANTITIES}
        for step in sorted(steps)
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="run folders of a study.py plan (OUT/<arm>_seed<N>)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as scratch:
        runs = [measure_run(run.resolve(), Path(scratch)) for run in args.runs]
    result = {
        "command": "python -m benchmarks.studies.planted_gamma0.planted_token_credit "
        + " ".join(str(r) for r in args.runs),
        "runs": runs,
        "pooled": pooled(runs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for step, values in result["pooled"].items():
        cells = "  ".join(f"{name} {mean:+.3f} [{low:+.3f}, {high:+.3f}]" for name, (mean, low, high) in values.items())
        print(f"step {step}: {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
