"""Input check 5 of `checks.inputs`, before Ray starts: agent loops.

`check_agent_loops`, PRIME trainers only: every loop the run can use (`actor_rollout_ref.
rollout.agent.default_agent_loop`, the `agent_name` column of parquet data files, the entries of
`.agent_loop_config_path`) returns one output per session. veRL's V1 trainers accept loops whose `run`
returns a list (one output per turn, keys `{uid}_{session}_{index}`) and score GRPO by each session's
last output; the PRIME trainers do not support that (`trainer.refuse_multi_output_sessions`). veRL's
own loops return one (a canary test pins it); a configured loop is imported and refused when its
`run` is annotated to return a list. An unannotated one is left to the step-time refusal, and a name
neither here nor in the config file (registered by an import) to veRL.
"""

from __future__ import annotations

import collections.abc
import re
import types
import typing
from typing import Any

from omegaconf import OmegaConf

from verl_prime_lora.checks.inputs.data_files import data_entries
from verl_prime_lora.checks.inputs.errors import fail
from verl_prime_lora.checks.inputs.model_folders import local_path
from verl_prime_lora.config.section import key_of
from verl_prime_lora.config.verl_view import VerlView


def _admits_list(hint: Any) -> bool:
    """Whether a return annotation allows a list of outputs (list[...], Sequence[...], a union with one)."""
    if isinstance(hint, str):  # an annotation get_type_hints could not resolve
        return re.search(r"\b(list|List|Sequence)\b", hint) is not None
    origin = typing.get_origin(hint) or hint
    if origin in (typing.Union, types.UnionType):
        return any(_admits_list(arg) for arg in typing.get_args(hint))
    return origin in (list, collections.abc.Sequence, collections.abc.Iterable)


def _run_returns_list(cls: type) -> bool:
    run = getattr(cls, "run", None)
    if run is None:
        return False
    try:
        hint = typing.get_type_hints(run).get("return")
    except Exception:  # noqa: BLE001 - a forward reference that does not resolve here
        hint = getattr(run, "__annotations__", {}).get("return")
    return hint is not None and _admits_list(hint)


def _agent_names_in_data(view: VerlView) -> list[tuple[str, str]]:
    """(name, where) for each distinct `agent_name` in the parquet data files (that one column is read)."""
    import pyarrow.parquet as pq

    found = []
    for name in ("train_files", "val_files"):
        for entry_key, value in data_entries(view.data, name):
            path = local_path(value)
            if path is None or path.suffix != ".parquet" or not path.is_file():
                continue
            if "agent_name" not in pq.ParquetFile(path).schema_arrow.names:
                continue
            names = pq.read_table(path, columns=["agent_name"]).column("agent_name").unique().to_pylist()
            found += [(str(name), f"the agent_name column of {path} ({entry_key})") for name in names if name]
    return found


def check_agent_loops(view: VerlView) -> None:
    """Refuse, for a PRIME trainer, an agent loop that returns several outputs per session (see module doc)."""
    config_key = key_of(view.rollout, "agent_loop_config_path")
    config_path = view.rollout.agent_loop_config_path
    if not config_path:
        return  # only veRL's own loops (one output each) or ones registered by an import elsewhere
    from hydra.utils import get_class
    from verl.utils.import_utils import resolve_config_path

    try:
        entries = OmegaConf.load(resolve_config_path(str(config_path)))
        targets = {str(entry["name"]): str(entry["_target_"]) for entry in entries}
    except Exception as exc:  # noqa: BLE001 - missing file, not a list of {name, _target_}
        fail(
            config_key,
            f"{config_path} is not a readable list of agent loops ({{name, _target_}}): {type(exc).__name__}: {exc}",
        )
    used = [(view.rollout.default_agent_loop, key_of(view.rollout, "default_agent_loop"))]
    used += _agent_names_in_data(view)
    used += [(name, f"{config_key} ({config_path})") for name in targets]
    first_use: dict[str, str] = {}
    for name, where in used:
        first_use.setdefault(name, where)
    for name, where in first_use.items():
        if name not in targets:
            continue  # veRL's own (one output each) or registered by an import elsewhere
        try:
            cls = get_class(targets[name])
        except Exception as exc:  # noqa: BLE001 - the import error, named
            fail(
                config_key,
                f"agent loop {name!r}: cannot import {targets[name]}: {type(exc).__name__}: {exc}",
            )
        if _run_returns_list(cls):
            fail(
                config_key,
                f"agent loop {name!r} ({targets[name]}, used by {where}) returns a list of outputs per session "
                f"(its run() is annotated so), and trainer.v1.trainer_mode={view.trainer.mode} "
                "takes one output per session: PRIME's PRM and estimators would score each turn as a response of "
                "its own in the prompt's group, where veRL's GRPO scores each session by its last output. Return "
                "the whole session as one output (multi-turn with a response mask is fine), or use veRL's own "
                "trainer (trainer.v1.trainer_mode=sync) with algorithm.adv_estimator=grpo.",
            )
