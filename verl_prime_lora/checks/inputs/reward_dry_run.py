"""Input check 4 of `checks.inputs`, before Ray starts: reward dry run.

`dry_run_reward`: the configured reward function (`reward.custom_reward_function.path`
/ `.name` with its `reward_kwargs`, loaded as veRL loads it; else veRL's default scorer) scores the
first row of the first train file, with the row's ground truth as the response
(`<think>...</think> \boxed{GT}`). It must not raise; a dict result must hold `score` (veRL reads it)
and, for a PRIME trainer, `prime.prm.label_key`; with the prompt filter, its `accuracy_key`. (veRL
stores a plain number as `acc`.) The score and those keys' values must be finite numbers
(`rewards.reward_values.value_problem`: not NaN, ±inf, a string or None).
"""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

from verl_prime_lora.checks.inputs.data_files import rule_reward
from verl_prime_lora.checks.inputs.errors import fail
from verl_prime_lora.config import RunConfig
from verl_prime_lora.config.run import MAX_RATIO_KEY, is_prime_trainer, reward_function_name
from verl_prime_lora.config.section import key_of
from verl_prime_lora.config.verl_view import VerlView
from verl_prime_lora.rewards.reward_values import label_quantity, value_problem

# veRL's default scorer runs the response as code for these sources: no dry run of code here.
CODE_DATA_SOURCES = ("codecontests", "apps", "codeforces", "taco")
PROMPT_FILTER_SAMPLER = "verl_prime_lora.prime.prompt_filter"


def _reward_function(view: VerlView, data_source: Any) -> tuple[Any, str, str] | None:
    """(callable, its name, the config key that selects it) as veRL's reward loop would call it; None to skip."""
    path = view.reward.custom_fn_path
    key = key_of(view.reward, "custom_fn_path")
    if path:
        name = view.reward.custom_fn_name or "compute_score"
        from verl.trainer.ppo.reward import get_custom_reward_fn

        try:
            return get_custom_reward_fn(view.node), reward_function_name(view), key
        except Exception as exc:  # noqa: BLE001 - missing file, import error, missing function
            fail(key, f"cannot load {name!r} from {path}: {type(exc).__name__}: {exc}")
    if view.reward.sandbox_url or str(data_source) in CODE_DATA_SOURCES:
        return None
    from verl.utils.reward_score import default_compute_score

    return default_compute_score, reward_function_name(view), key


def _required_info_keys(run: RunConfig) -> list[tuple[str, str, str]]:
    """(config key, the reward_extra_info key it names, what the value is) for each key the run reads."""
    required = []
    trainer = run.verl.trainer
    if is_prime_trainer(run.verl):
        label_key = run.prime.prm.label_key
        required.append((key_of(run.prime.prm, "label_key"), label_key, label_quantity(label_key)))
    if PROMPT_FILTER_SAMPLER in trainer.sampler_path:
        accuracy_key = trainer.sampler_accuracy_key
        required.append(
            (key_of(trainer, "sampler_accuracy_key"), accuracy_key, f"prompt-filter accuracy {accuracy_key!r}")
        )
    return required


def dry_run_reward(run: RunConfig, entry_key: str, path: Path, row: dict) -> None:
    """Score `row` (row 0 of `path`) with the configured reward function, as veRL's reward manager would."""
    if not rule_reward(run.verl):
        return
    data_source = row.get("data_source")
    selected = _reward_function(run.verl, data_source)
    if selected is None:
        return
    fn, name, fn_key = selected
    ground_truth = (row.get("reward_model") or {}).get("ground_truth")
    response = f"<think>x</think> \\boxed{{{ground_truth}}}"
    extra_info = dict(row.get("extra_info") or {})
    extra_info.update(num_turns=2, rollout_reward_scores={})  # what veRL's reward managers add
    where = f"row 0 of {path} ({entry_key})"
    try:
        result = fn(data_source=data_source, solution_str=response, ground_truth=ground_truth, extra_info=extra_info)
        if inspect.isawaitable(result):
            result = asyncio.run(result)
    except Exception as exc:  # noqa: BLE001 - reported with the row
        fail(
            fn_key,
            f"the reward function {name} raised on {where} (data_source={data_source!r}, "
            f"ground_truth={ground_truth!r}): {type(exc).__name__}: {exc}",
        )
    if isinstance(result, dict):
        keys = sorted(result)
        if "score" not in result:
            fail(fn_key, f"the reward function {name} returned a dict without 'score' (keys: {keys}) on {where}.")
        returned = f"returned the keys {keys}"
        values = [("score", result["score"])]
    else:
        keys = ["acc"]
        returned = f"returned the number {result!r}, which veRL records as 'acc' only"
        values = [("score", result)]
    for key, needed, quantity in _required_info_keys(run):
        if needed not in keys:
            fail(key, f"is {needed!r}, but the reward function {name} {returned} on {where}.")
        if isinstance(result, dict):
            values.append((quantity, result[needed]))
    for quantity, value in values:
        problem = value_problem(quantity, value)
        if problem is not None:
            fail(
                fn_key,
                f"the reward function {name} returned a {problem} on {where}: the run would count every such "
                f"row as failed (reward 0, no PRM label; {MAX_RATIO_KEY}). Return a finite number.",
            )
