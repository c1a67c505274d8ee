"""Where does the implicit PRM put credit? Step-level localisation on chain arithmetic, from a demo run's checkpoints.

    python -m verl_prime_lora.demo --out demo_out -- trainer.save_freq=5      # a demo run that keeps checkpoints
    python -m benchmarks.studies.prm_credit.measure demo_out [--out benchmarks/studies/prm_credit]

A run of the learning study, `benchmarks.studies.learning.run` (`OUT/<label>_seed<N>`, with
`-- trainer.save_freq=...`), reads the same way: its assets are `OUT/assets`.

For every saved step, and for step 0 (the PRM equal to its reference), responses to the RL test problems
(`--samples` each, temperature 1) are scored by that step's PRM: by default each checkpoint's own policy samples
them, as the PRM's training data are sampled (`--responses warm_start`: one fixed set from the warm start for
every checkpoint). Token rewards are PRIME's `r_t = β·(log π_φ − log π_ref)` with the run's β and reference
(`prime.prm.reference`: `policy` = the actor of the same checkpoint, LoRA merged into the fp32 base; `init` =
the warm start), both at temperature 1, in fp32.
For the responses that write their steps and have a wrong one (`benchmarks/step_credit.py`):

* localisation: how often the step with the lowest reward is the first wrong step, against chance (1/#steps)
  and against position rules: always the first step, always the last, and the best rule that knows only the
  number of steps;
* AUC: first wrong step vs the right steps before it, within a response;
* the same two for a control score, the reference policy's own log-likelihood of each step (`log π_ref`), summed
  over the step's tokens and averaged over them (a sum favours blaming long steps): does the PRM know more than
  "unlikely tokens are wrong"?
* sequence AUC: right vs wrong whole responses by total reward, for the stepwise responses and for those
  that skip the steps (where no step can be localised).

95 % intervals are bootstrap intervals over problems (a problem's samples are resampled together: they are not
independent). Writes `prm_credit.json`, with every scored response's step rewards (`per_response`), and
`prm_credit.png` (the metrics vs step, and a handful of responses with every token coloured by its reward).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.lib import step_credit
from benchmarks.lib.checkpointed_run import BATCH, CheckpointedRun, token_log_probs
from verl_prime_lora.demo.chain_task import Chain, accuracy, prompt_text


def sample_responses(model, tokenizer, chains: list[Chain], samples: int, max_new_tokens: int, seed: int) -> list:
    """`samples` responses per chain at temperature 1: (chain, prompt ids, response ids) each."""
    torch.manual_seed(seed)
    out = []
    for low in range(0, len(chains), BATCH // samples or 1):
        batch_chains = chains[low : low + (BATCH // samples or 1)]
        prompts = [prompt_text(tokenizer, chain) for chain in batch_chains]
        batch = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
        with torch.no_grad():
            generated = model.generate(
                **batch,
                max_new_tokens=max_new_tokens,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                num_return_sequences=samples,
                pad_token_id=tokenizer.pad_token_id,
            )
        width = batch["input_ids"].shape[1]
        for row, sequence in enumerate(generated):
            prompt = batch["input_ids"][row // samples][batch["attention_mask"][row // samples].bool()].tolist()
            response = sequence[width:].tolist()
            if tokenizer.eos_token_id in response:
                response = response[: response.index(tokenizer.eos_token_id) + 1]
            response = [t for t in response if t != tokenizer.pad_token_id or t == tokenizer.eos_token_id]
            out.append((batch_chains[row // samples], prompt, response))
    return out


def token_starts(tokenizer, response: list[int]) -> tuple[str, list[int]]:
    """The response text (special tokens dropped) and the character where each token starts."""
    starts = [len(tokenizer.decode(response[:i], skip_special_tokens=True)) for i in range(len(response))]
    return tokenizer.decode(response, skip_special_tokens=True), starts


def score(responses, rewards: list[list[float]], per_token: bool = False) -> dict:
    """Localisation, AUC (both resampled by problem) and the right-vs-wrong AUC of whole responses for one set of
    token scores, a step's score the sum over its tokens (`per_token`: their mean)."""
    wrong = [(i, lab) for i, lab in enumerate(responses.labels) if lab.kind == "wrong"]
    of_step = step_credit.step_means if per_token else step_credit.step_rewards
    per_step = [of_step(responses.starts[i], rewards[i], lab.spans) for i, lab in wrong]
    problems = [responses.problem(i) for i, _ in wrong]
    found = step_credit.localisation(per_step, [lab.first_wrong for _, lab in wrong], problems)
    totals = [sum(r) for r in rewards]
    for group, kinds in (("stepwise", ("right", "wrong")), ("shortcut", ("shortcut",))):
        members = [i for i, lab in enumerate(responses.labels) if lab.kind in kinds]
        right = [totals[i] for i in members if responses.correct[i]]
        bad = [totals[i] for i in members if not responses.correct[i]]
        found[f"sequence_auc_{group}"] = step_credit.sequence_auc(right, bad)
    return found


def per_response(responses, rewards: list[list[float]], likelihood: list[list[float]]) -> list[dict]:
    """What each response was and got: its problem, kind, outcome, first wrong step, total reward, and per written
    step the PRM's reward sum and the reference's mean token log-likelihood (for analyses beyond this script's)."""
    rows = []
    for i, lab in enumerate(responses.labels):
        rows.append(
            {
                "problem": responses.problem(i),
                "kind": lab.kind,
                "correct": responses.correct[i],
                "first_wrong": lab.first_wrong,
                "total_reward": sum(rewards[i]),
                "step_rewards": step_credit.step_rewards(responses.starts[i], rewards[i], lab.spans),
                "step_likelihood_means": step_credit.step_means(responses.starts[i], likelihood[i], lab.spans),
            }
        )
    return rows


@dataclass
class Responses:
    """Sampled responses with what the credit measurement needs of them."""

    rows: list  # (chain, prompt ids, response ids)
    texts: list[str]
    starts: list[list[int]]
    labels: list[step_credit.StepLabels]
    correct: list[bool]

    @classmethod
    def sample(cls, model, tokenizer, chains, samples: int, max_new_tokens: int, seed: int) -> Responses:
        rows = sample_responses(model, tokenizer, chains, samples, max_new_tokens, seed)
        texts, starts = zip(*(token_starts(tokenizer, response) for _, _, response in rows))
        labels = [step_credit.label_steps(chain, text) for (chain, _, _), text in zip(rows, texts)]
        correct = [value == 1.0 for value in accuracy(list(texts), [chain.answer for chain, _, _ in rows])]
        return cls(rows, list(texts), list(starts), labels, correct)

    def problem(self, i: int) -> str:
        """The problem response `i` answers (its chain's question)."""
        return self.rows[i][0].question

    def kinds(self) -> dict[str, int]:
        return {kind: sum(lab.kind == kind for lab in self.labels) for kind in step_credit.KINDS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a demo's --out folder, or a run folder of the learning study")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/studies/prm_credit"))
    parser.add_argument(
        "--responses",
        choices=("policy", "warm_start"),
        default="policy",
        help="whose samples are scored: each checkpoint's own policy (what its PRM is trained on), or one fixed "
        "set from the warm start for every checkpoint",
    )
    parser.add_argument("--samples", type=int, default=8, help="responses per test problem")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    run, out = args.run.resolve(), args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    loaded = CheckpointedRun.load(run)
    settings = loaded.settings

    def sample(policy) -> Responses:
        return Responses.sample(
            policy, loaded.tokenizer, loaded.chains, args.samples, settings["max_response_length"], args.seed
        )

    fixed = sample(loaded.base) if args.responses == "warm_start" else None
    results, last = [], None
    scratch = tempfile.TemporaryDirectory()  # the merged actors
    for step in loaded.steps():
        policy, prm, reference = loaded.models(step, Path(scratch.name), policy=args.responses == "policy")
        responses = fixed or sample(policy)
        ref_log_probs = token_log_probs(reference, responses.rows)
        prm_log_probs = ref_log_probs if prm is reference else token_log_probs(prm, responses.rows)
        rewards = [
            [settings["beta"] * (p - q) for p, q in zip(prm_lp, ref_lp, strict=True)]
            for prm_lp, ref_lp in zip(prm_log_probs, ref_log_probs, strict=True)
        ]
        result = {
            "step": step,
            "responses": responses.kinds(),
            "prm": score(responses, rewards),
            "likelihood": score(responses, ref_log_probs),
            "likelihood_per_token": score(responses, ref_log_probs, per_token=True),
            "per_response": per_response(responses, rewards, ref_log_probs),
        }
        results.append(result)
        last = (step, responses, rewards)
        found, like, like_token = result["prm"], result["likelihood"], result["likelihood_per_token"]
        print(
            f"step {step:>3}: {result['responses']}\n  localisation {_number(found['localisation'])} "
            f"{_interval(found['localisation_ci'])} (chance {_number(found['chance'])}; always the first step "
            f"{_number(found['first_step_share'])}, the last {_number(found['last_step_share'])}, the best "
            f"position rule {_number(found['best_position_share'])}; likelihood {_number(like['localisation'])}, "
            f"per token {_number(like_token['localisation'])}), AUC {_number(found['auc'])} "
            f"{_interval(found['auc_ci'])} (likelihood {_number(like['auc'])}, per token "
            f"{_number(like_token['auc'])}); right-vs-wrong AUC of whole responses: stepwise "
            f"{_number(found['sequence_auc_stepwise'])}, shortcut {_number(found['sequence_auc_shortcut'])}",
            flush=True,
        )

    scratch.cleanup()
    summary = {
        "command": "python -m benchmarks.studies.prm_credit.measure "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "run": str(args.run),  # as given: no path of the machine it ran on
        "settings": {**settings, "responses": args.responses, "samples": args.samples, "seed": args.seed},
        "results": results,
    }
    (out / "prm_credit.json").write_text(json.dumps(summary, indent=1) + "\n")
    plot(results, *last, out / "prm_credit.png")
    print(f"json: {out / 'prm_credit.json'}\nplot: {out / 'prm_credit.png'}")
    return 0


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value


def _interval(bounds: list[float] | None) -> str:
    return "[-]" if bounds is None else f"[{bounds[0]:.3f}, {bounds[1]:.3f}]"


def plot(results: list[dict], step: int, responses: Responses, rewards: list[list[float]], path: Path) -> None:
    """Localisation and AUC vs step (95 % intervals; chance; the likelihood control), and a few of the last
    step's responses, right and wrong, each token on a colour scale of its reward."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import colors
    from matplotlib.patches import Rectangle

    labels, texts, starts = responses.labels, responses.texts, responses.starts
    rng = random.Random(0)
    wrong = [i for i, lab in enumerate(labels) if lab.kind == "wrong" and len(lab.spans) >= 2]
    right = [i for i, lab in enumerate(labels) if lab.kind == "right"]
    picked = rng.sample(wrong, min(4, len(wrong))) + rng.sample(right, min(3, len(right)))

    fig = plt.figure(figsize=(12, 3.2 + 0.55 * len(picked)))
    grid = fig.add_gridspec(2, 2, height_ratios=[3.2, 0.55 * max(len(picked), 1)])
    steps = [r["step"] for r in results]
    for col, (key, chance_key, title) in enumerate(
        (
            ("localisation", "chance", "lowest-reward step = first wrong step"),
            ("auc", None, "AUC: first wrong < right step"),
        )
    ):
        ax = fig.add_subplot(grid[0, col])
        for source, style in (("prm", "-o"), ("likelihood", "--s")):
            values = [_or_nan(r[source][key]) for r in results]
            ci = [r[source][f"{key}_ci"] or (math.nan, math.nan) for r in results]
            ax.plot(steps, values, style, label="PRM log-ratio" if source == "prm" else "log π_ref (control)")
            ax.fill_between(steps, [c[0] for c in ci], [c[1] for c in ci], alpha=0.2)
        chance = [_or_nan(r["prm"][chance_key]) for r in results] if chance_key else [0.5] * len(steps)
        ax.plot(steps, chance, ":", color="gray", label="chance")
        ax.set_xlabel("RL step of the PRM checkpoint")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)

    ax = fig.add_subplot(grid[1, :])
    ax.set_axis_off()
    ax.set_title(
        f"token rewards r_t at step {step} (red: negative, blue: positive; underlined: first wrong step)", fontsize=10
    )
    fig.tight_layout()
    # one monospace character's width in axes coordinates, measured on the laid-out figure
    probe = ax.text(0, 0, "x" * 400, fontsize=9, family="monospace", transform=ax.transAxes)
    renderer = fig.canvas.get_renderer()
    char_w = probe.get_window_extent(renderer).width / 400 / ax.get_window_extent(renderer).width
    probe.remove()
    limit = max((abs(v) for i in picked for v in rewards[i]), default=1.0) or 1.0
    norm, cmap = colors.TwoSlopeNorm(0.0, -limit, limit), plt.get_cmap("RdBu")
    line_h, x0 = 1.0 / max(len(picked), 1), 0.16
    for line, i in enumerate(picked):
        y = 1 - (line + 0.6) * line_h
        lab = labels[i]
        tag = f"wrong (step {lab.first_wrong + 1})" if lab.kind == "wrong" else "right"
        ax.text(0.0, y, tag, fontsize=8, family="monospace", transform=ax.transAxes, va="center")
        text, token_from = texts[i], starts[i]
        for t, start in enumerate(token_from):
            end = token_from[t + 1] if t + 1 < len(token_from) else len(text)
            if end > start:
                box = Rectangle(
                    (x0 + start * char_w, y - 0.3 * line_h),
                    (end - start) * char_w,
                    0.6 * line_h,
                    facecolor=cmap(norm(rewards[i][t])),
                    edgecolor="white",
                    linewidth=0.5,
                    transform=ax.transAxes,
                )
                ax.add_patch(box)
        ax.text(x0, y, text, fontsize=9, family="monospace", transform=ax.transAxes, va="center")
        if lab.kind == "wrong":
            low, high = lab.spans[lab.first_wrong]
            ax.plot(
                [x0 + low * char_w, x0 + high * char_w],
                [y - 0.36 * line_h] * 2,
                color="black",
                linewidth=1.5,
                transform=ax.transAxes,
            )
    fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, fraction=0.02, pad=0.01, label="r_t")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
