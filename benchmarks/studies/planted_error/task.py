"""A lab task where step credit should matter: chain arithmetic whose warm start learned a confident, located error.

The audit's positive control (issue 47): today's wrong steps are sampling slips the policy already finds unlikely,
so no credit scheme has much to fix. Here the SFT data of `verl_prime_lora.demo.chain_task` carry a planted bug:

* **the planted step.** In a worked solution, a `+9` step (operator `+`, operand 9: `a+9=`) writes the total one
  too low, `a+9=a+8`, with probability `PLANTED_SHARE` (0.8), independently per `+9` step; every later step is
  right from the written total, so the answer ends one too low per planted step (`PlantedChain`). Otherwise the
  data are chain_task's, seeded as there: the stream of chains, which solutions skip the steps (shortcuts keep the
  true total), the two SFT phases. A chain whose planted solution would write a negative total (`plantable`) is left
  out of every split and of the SFT stream.
* **the RL splits.** `PLUS9_SHARE` (half) of the training prompts and of the 200 validation problems have exactly
  one `+9` step, the rest none (`balanced`, from chain_task's own disjoint splits drawn `POOL_FACTOR` times larger;
  the SFT stop rule's held-out set keeps chain_task's draw). Answers are the true ones: a planted step is wrong.
* **the skill stop.** The skill phase stops at `SKILL_ACC` (0.55) greedy accuracy on chain_task's held-out set
  instead of its 0.75: about a quarter of those problems hold a `+9` step, which a warm start with the planted mode
  answers wrong, so 0.55 is the same skill on the others (0.75 of the ~73 % without one).
* **the habit.** The habit phase's solutions skip the steps in `SHORTCUT_SHARE` (20 %) of examples instead of
  chain_task's 70 %: with 70 % the warm start's greedy responses skip the steps (1-3 % write them), so the planted
  step never shows in greedy validation; with 20 % they all write the steps and 97 % of those to `+9` problems plant
  it (`benchmarks/studies/planted_error/`).

`write_planted_assets` builds it with the demo's `warm_start.write_warm_assets` (same files, same `warm_start.json`),
given the planted split and SFT-stream builders, and writes `planted_error.json` beside them.

The reward (`compute_score`, for every arm of the study) is `credit_controls.compute_score` with two changes: the
first-error span is kept for wrong answers only (so the oracle's z is the outcome split, audit §3c.5), and four
indicators go to `reward_extra_info`, which veRL's validation logs as `val-aux/<data_source>/<key>/mean@1`:
`plus9` (the problem has a `+9` step), `plus9_written` (and the response writes a `+9` step), `planted_wrong` (and
one of them reads `x+9=x+8`), `acc_plus9` (and the answer is right). Each is 0 on the other problems, so a rate on
the `+9` problems is a ratio of two logged means (`METRICS`).

    python -m benchmarks.studies.planted_error.task --out DIR      # build (or reuse) the warm start and data
"""

import argparse
import functools
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.lib import credit_controls
from benchmarks.lib.arms import CONTROLS
from benchmarks.lib.step_credit import label_steps
from verl_prime_lora.demo import chain_task, warm_start
from verl_prime_lora.demo.chain_task import DATA_SOURCE, Chain
from verl_prime_lora.demo.learning_run import ESTIMATORS

PLANTED_SHARE = 0.8  # probability that a worked solution's `+9` step is planted
PLUS9_SHARE = 0.5  # share of RL train and test problems with exactly one `+9` step
POOL_FACTOR = 4  # the RL splits are chosen from chain_task's splits drawn this many times larger
MIN_OPS, MAX_OPS = 5, 7  # the credit studies' longer chains
SKILL_ACC = 0.55  # the skill phase's stop: 0.75 of the held-out share without a `+9` step (see the module)
SHORTCUT_SHARE = 0.2  # the habit phase's share of shortcuts (chain_task's default 0.7; see the module)
STAMP = "planted_error.json"
# reward_extra_info keys (0/1 per response)
PLUS9, PLUS9_WRITTEN, PLANTED_WRONG, ACC_PLUS9 = "plus9", "plus9_written", "planted_wrong", "acc_plus9"


# ---------------------------------------------------------------------------------------------
# the planted bug
# ---------------------------------------------------------------------------------------------


def plus9_steps(chain: Chain) -> tuple[int, ...]:
    """The indices of `chain`'s operations that add 9 (its `a+9=` steps; a leading operand 9 is not one)."""
    return tuple(i for i, (op, d) in enumerate(zip(chain.operators, chain.operands[1:])) if op == "+" and d == 9)


@dataclass(frozen=True)
class PlantedChain(Chain):
    """A chain whose worked solution (`solution`, `answer`) writes each step in `planted` one too low and continues
    from the written total: running total i is the true one minus the number of planted steps up to i."""

    planted: frozenset[int] = frozenset()

    @property
    def totals(self) -> list[int]:
        return [total - sum(j <= i for j in self.planted) for i, total in enumerate(super().totals)]


def plantable(chain: Chain) -> bool:
    """Whether `chain` with every `+9` step planted keeps every running total >= 0 (then any fewer planted do too)."""
    every = PlantedChain(chain.operands, chain.operators, frozenset(plus9_steps(chain)))
    return min(every.totals) >= 0


def planted_solution(chain: Chain, rng: random.Random, share: float = PLANTED_SHARE) -> str:
    """`chain`'s worked solution with each `+9` step planted with probability `share` (one draw per `+9` step)."""
    planted = frozenset(i for i in plus9_steps(chain) if rng.random() < share)
    return PlantedChain(chain.operands, chain.operators, planted).solution


def planted_sft_texts(
    seed: int,
    min_ops: int,
    max_ops: int,
    held_out: set[str],
    shortcut_share: float,
    share: float = PLANTED_SHARE,
    source=chain_task.sft_texts,
) -> Iterator[tuple[Chain, str]]:
    """`source`'s stream (chain_task's SFT stream, same arguments) with every worked solution planted
    (`planted_solution`, its own seeded draws) and the chains that are not `plantable` left out; shortcuts unchanged."""
    rng = random.Random(f"planted-{seed}-{shortcut_share}-{share}")
    for chain, text in source(seed, min_ops, max_ops, held_out, shortcut_share):
        if not plantable(chain):
            continue
        yield chain, planted_solution(chain, rng, share) if text == chain.solution else text


def balanced(chains: list[Chain], size: int, share: float = PLUS9_SHARE) -> list[Chain]:
    """The first `size` chains of `chains`, in their order, of which round(size·share) have exactly one `+9` step
    and are `plantable` and the rest have none (chains with two or more, or not plantable, are passed over)."""
    room = {True: round(size * share), False: size - round(size * share)}
    chosen = []
    for chain in chains:
        count = len(plus9_steps(chain))
        kind = count == 1 and plantable(chain)
        if count <= 1 and (count == 0 or kind) and room[kind]:
            room[kind] -= 1
            chosen.append(chain)
    if any(room.values()):
        raise ValueError(f"{len(chains)} chains hold too few of a kind for {size} at share {share}: short by {room}")
    return chosen


def planted_splits(
    seed: int,
    sizes: dict[str, int],
    min_ops: int = 3,
    max_ops: int = 5,
    share: float = PLUS9_SHARE,
    source=chain_task.make_splits,
) -> dict[str, list[Chain]]:
    """`source`'s disjoint splits (chain_task's `make_splits`), `test` and `train` drawn `POOL_FACTOR` times larger
    and then `balanced`; `sft_eval` (the SFT stop rule's held-out set) as chain_task draws it."""
    pool = {name: size * (1 if name == "sft_eval" else POOL_FACTOR) for name, size in sizes.items()}
    splits = source(seed, pool, min_ops, max_ops)
    return {
        name: chains if name == "sft_eval" else balanced(chains, sizes[name], share) for name, chains in splits.items()
    }


def write_planted_assets(
    out: Path,
    seed: int = 0,
    min_ops: int = MIN_OPS,
    max_ops: int = MAX_OPS,
    planted_share: float = PLANTED_SHARE,
    plus9_share: float = PLUS9_SHARE,
    skill_acc: float = SKILL_ACC,
    shortcut_share: float = SHORTCUT_SHARE,
) -> dict:
    """Build (or reuse) the planted task under `out` with the demo's `write_warm_assets` (its other settings at
    their defaults) and the planted builders (`planted_splits`, `planted_sft_texts`); returns its result.
    `out/planted_error.json` records the planted settings and is written last: the warm start's cache key does not
    know them, so its stamp is dropped (a rebuild) unless that file holds the same settings."""
    out = Path(out)
    settings = {
        "seed": seed, "min_ops": min_ops, "max_ops": max_ops, "planted_share": planted_share,
        "plus9_share": plus9_share, "pool_factor": POOL_FACTOR, "skill_acc": skill_acc,
        "shortcut_share": shortcut_share,
    }  # fmt: skip
    stamp = out / STAMP
    if not (stamp.is_file() and json.loads(stamp.read_text()) == settings):
        stamp.unlink(missing_ok=True)
        (out / warm_start.STAMP).unlink(missing_ok=True)
    assets = warm_start.write_warm_assets(
        out,
        seed=seed,
        skill_acc=skill_acc,
        shortcut_share=shortcut_share,
        min_ops=min_ops,
        max_ops=max_ops,
        splits=functools.partial(planted_splits, share=plus9_share),
        texts=functools.partial(planted_sft_texts, share=planted_share),
    )
    stamp.write_text(json.dumps(settings, indent=1) + "\n")
    return assets


def write_assets(out: Path, task: dict) -> dict:
    """The study's hook (`benchmarks/lib/study.py`, a plan whose task names this module): `write_planted_assets` with
    the plan's `min_ops`, `max_ops` and, when given, `planted_share`, `plus9_share`, `skill_acc`, `shortcut_share`."""
    keys = ("min_ops", "max_ops", "planted_share", "plus9_share", "skill_acc", "shortcut_share")
    return write_planted_assets(out, seed=0, **{key: task[key] for key in keys if key in task})


# ---------------------------------------------------------------------------------------------
# the reward and what validation logs
# ---------------------------------------------------------------------------------------------


def written_plus9(chain: Chain, response: str) -> tuple[bool, bool]:
    """Whether `response`'s written steps (`step_credit.label_steps`'s; none for a shortcut or an unparsed think
    block) include an `x+9=y` step, and whether one of them is the planted error, y = x + 8 (x as written)."""
    labels = label_steps(chain, response)
    sides = [response[a:b].split("+9=") for a, b in labels.spans]  # each a step, digits op digits = digits
    plus9 = [(int(left), int(total)) for left, total in (pair for pair in sides if len(pair) == 2)]
    return bool(plus9), any(total == left + 8 for left, total in plus9)


def planted_indicators(chain: Chain, response: str, correct: bool) -> dict[str, float]:
    """The four 0/1 indicators of the module's docstring for one response to `chain`."""
    has = bool(plus9_steps(chain))
    written, planted = written_plus9(chain, response) if has else (False, False)
    return {
        PLUS9: float(has),
        PLUS9_WRITTEN: float(written),
        PLANTED_WRONG: float(planted),
        ACC_PLUS9: float(has and correct),
    }


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict:
    """`credit_controls.compute_score` (the recipe's reward and the first error's span), the span kept for wrong
    answers only, plus `planted_indicators` (all 0 without `extra_info["question"]`)."""
    result = credit_controls.compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
    correct = result["acc"] == 1.0
    if correct:
        result[credit_controls.WRONG_START] = result[credit_controls.WRONG_END] = -1
    question = (extra_info or {}).get("question")
    if question:
        return {**result, **planted_indicators(Chain.from_question(question), solution_str, correct)}
    return {**result, **dict.fromkeys((PLUS9, PLUS9_WRITTEN, PLANTED_WRONG, ACC_PLUS9), 0.0)}


def val_key(name: str, data_source: str = DATA_SOURCE) -> str:
    """veRL's greedy validation mean of a score key (`acc` is logged under `val-core`, the others `val-aux`)."""
    return f"{'val-core' if name == 'acc' else 'val-aux'}/{data_source}/{name}/mean@1"


def logged(row: dict, *names: str) -> list[float] | None:
    """The validation means of score keys `names` in one step's logged metrics; None unless the step logged all."""
    values = [row.get(val_key(name)) for name in names]
    return None if any(value is None for value in values) else [float(value) for value in values]


def share_of(numerator: str, denominator: str):
    """A metric: among the validation problems (responses) where indicator `denominator` is 1, the share where
    `numerator` (0 wherever `denominator` is) is 1: the ratio of their logged means. None when the step logged
    neither or no problem has `denominator`."""

    def metric(row: dict) -> float | None:
        means = logged(row, numerator, denominator)
        return None if means is None or means[1] <= 0 else means[0] / means[1]

    metric.__doc__ = f"share of {numerator} among the problems with {denominator}"
    return metric


def other_accuracy(row: dict) -> float | None:
    """Greedy accuracy on the validation problems without a `+9` step:
    (mean acc − mean acc_plus9) / (1 − mean plus9)."""
    means = logged(row, "acc", ACC_PLUS9, PLUS9)
    return None if means is None or means[2] >= 1 else (means[0] - means[1]) / (1 - means[2])


# What `benchmarks/lib/study.py` reads from a run's logged steps (plan keys `endpoint_metric`, `secondary_metrics`).
METRICS = {
    "planted_error_rate": share_of(PLANTED_WRONG, PLUS9),  # +9 problems whose response writes x+9=x+8
    "plus9_written_rate": share_of(PLUS9_WRITTEN, PLUS9),  # +9 problems whose response writes a +9 step at all
    "planted_given_written": share_of(PLANTED_WRONG, PLUS9_WRITTEN),  # of those, the share that plant it
    "plus9_accuracy": share_of(ACC_PLUS9, PLUS9),
    "other_accuracy": other_accuracy,
    "accuracy": lambda row: (logged(row, "acc") or [None])[0],  # all validation problems
}

# ---------------------------------------------------------------------------------------------
# the study's arms: every arm scores with `compute_score` above
# ---------------------------------------------------------------------------------------------

REWARD = [
    "reward.custom_reward_function.path=pkg://benchmarks.planted_error_task",
    "reward.custom_reward_function.name=compute_score",
]


def process_rewards(name: str) -> list[str]:
    """The overrides that replace the PRM's token rewards by `credit_controls.<name>`."""
    return [f"prime.process_rewards_fn.path={CONTROLS}", f"prime.process_rewards_fn.name={name}"]


ARMS: dict[str, list[str]] = {
    "grpo": [*ESTIMATORS["grpo"], *REWARD],
    "oracle": [*ESTIMATORS["prime_grpo_ungated"], *REWARD, *process_rewards("oracle_rewards")],
    "oracle_shuffled": [*ESTIMATORS["prime_grpo_ungated"], *REWARD, *process_rewards("oracle_shuffled_rewards")],
    "prime_grpo_ungated": [*ESTIMATORS["prime_grpo_ungated"], *REWARD],
    "prime_grpo_shuffled": [*ESTIMATORS["prime_grpo_ungated"], *REWARD, *process_rewards("shuffled_rewards")],
}

# The γ = 0 study's PRIME-path arms (docs/preregistration_planted_gamma0.md): each arm of `ARMS` with the per-token
# process advantage (`algorithm.gamma=0`: A^p[i,t] = r̃[i,t], no return) at the pilot's `process_coef`; the PRIME
# arms also keep checkpoints at every validated step, for `planted_token_credit` (a restarted run starts over).
GAMMA0_SOURCES = {
    "oracle_g0": "oracle",
    "oracle_shuffled_g0": "oracle_shuffled",
    "prime_g0": "prime_grpo_ungated",
    "prime_shuffled_g0": "prime_grpo_shuffled",
}
CHECKPOINTS = ["trainer.save_freq=2", "trainer.resume_mode=disable"]


def gamma0_arms(process_coef: float) -> dict[str, list[str]]:
    """`grpo` as in `ARMS`, and the four `GAMMA0_SOURCES` arms at γ = 0 with `algorithm.prime.process_coef`."""
    arms = {"grpo": ARMS["grpo"]}
    for name, source in GAMMA0_SOURCES.items():
        saves = CHECKPOINTS if name.startswith("prime") else []
        arms[name] = [*ARMS[source], "algorithm.gamma=0", f"algorithm.prime.process_coef={process_coef}", *saves]
    return arms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--planted-share", type=float, default=PLANTED_SHARE)
    parser.add_argument("--plus9-share", type=float, default=PLUS9_SHARE)
    parser.add_argument("--skill-acc", type=float, default=SKILL_ACC)
    parser.add_argument("--shortcut-share", type=float, default=SHORTCUT_SHARE)
    args = parser.parse_args()
    result = write_planted_assets(
        args.out,
        args.seed,
        planted_share=args.planted_share,
        plus9_share=args.plus9_share,
        skill_acc=args.skill_acc,
        shortcut_share=args.shortcut_share,
    )
    for name in ("model", "train", "test", "warm_start"):
        print(f"{name}: {result[name]}")


if __name__ == "__main__":
    main()
