"""Knobs: the config changes that make a layout fit, alone or greedily combined."""

from __future__ import annotations

import copy
from typing import Any

from verl_prime_lora.config.section import key_of
from verl_prime_lora.preflight.layout import Layout, layout_from_config
from verl_prime_lora.preflight.model_shape import PreflightConfigError
from verl_prime_lora.preflight.report import Report, estimate


def candidate_knobs(layout: Layout, util_grid: bool = True) -> list[tuple[str, list[tuple[str, Any]]]]:
    """Single config changes that lower memory, as (note, [(key, value), ...]) applicable to the layout's config.

    `util_grid`: vLLM's `gpu_memory_utilization` lowered in steps of 0.05 down to 0.1 (else one step)."""
    out: list[tuple[str, list[tuple[str, Any]]]] = []
    prm = next(s for _, s in layout.workers if s.name.startswith("PRM ("))
    actor = layout.workers[0][1]
    view, prm_config = layout.view, layout.prm

    def halve(section: Any, name: str, note: str):
        """Field `name` of a view section or of the typed `prime.prm`, halved (down to 1)."""
        value = getattr(section, name)
        if value and int(value) > 1:
            out.append((note, [(key_of(section, name), max(1, int(value) // 2))]))

    def enable(section: Any, *names: str) -> list[tuple[str, Any]]:
        return [(key_of(section, name), True) for name in names]

    if prm.trainable and not (prm.param_offload and prm.optimizer_offload):
        out.append(
            (
                "offload the PRM's weights and Adam to CPU between its phases (slower steps)",
                enable(view.prm.engine, "param_offload", "optimizer_offload"),
            )
        )
    if prm.lora_rank == 0:
        out.append(
            (
                "a LoRA PRM (its reference is the adapter off: no copy); raise prime.prm.optim.lr, e.g. 1e-5",
                [(key_of(view.prm.model, "lora_rank"), actor.lora_rank or 32)],
            )
        )
    if prm.trainable:
        if prm_config.use_dynamic_bsz:
            halve(prm_config, "max_token_len_per_gpu", "a smaller PRM token budget")
        else:
            halve(prm_config, "micro_batch_size_per_gpu", "a smaller PRM micro-batch")
    halve(prm_config, "infer_micro_batch_size_per_gpu", "a smaller PRM log-prob micro-batch")
    if view.actor.use_dynamic_bsz:
        halve(view.actor, "ppo_max_token_len_per_gpu", "a smaller actor token budget")
    else:
        halve(view.actor, "ppo_micro_batch_size_per_gpu", "a smaller actor micro-batch")
        halve(view.rollout, "log_prob_micro_batch_size_per_gpu", "a smaller actor log-prob micro-batch")
    if not actor.checkpointing:
        out.append(("gradient checkpointing", enable(view.model, "enable_gradient_checkpointing")))
    if prm.trainable and not prm.checkpointing:
        out.append(("gradient checkpointing for the PRM", enable(view.prm.model, "enable_gradient_checkpointing")))
    if not (actor.param_offload and actor.optimizer_offload):
        out.append(
            (
                "offload the actor's weights and optimizer (the recipe's PRM follows these keys unless set itself)",
                enable(view.actor.engine, "param_offload", "optimizer_offload"),
            )
        )
    if actor.lora_rank > 0 and actor.param_bytes > actor.compute_bytes:
        out.append(
            (
                "the LoRA actor's frozen base in bf16 (veRL casts the adapter to it: it then trains in bf16 too)",
                [(key_of(view.actor.engine, "model_dtype"), "bf16")],
            )
        )
    per_node = layout.trainer_gpus_per_node
    if per_node < 8:
        out.append(
            ("more GPUs: FSDP shards the states over them", [(key_of(view.trainer, "n_gpus_per_node"), per_node * 2)])
        )
    else:
        out.append(
            (
                "more nodes: FSDP shards the states over them",
                [(key_of(view.trainer, "nnodes"), layout.trainer_nodes * 2)],
            )
        )
    util_key = key_of(view.rollout, "gpu_memory_utilization")
    util = layout.rollout.gpu_memory_utilization
    for step in range(1, 19 if util_grid else 2):
        lower = round(util - 0.05 * step, 2)
        if lower < 0.1:
            break
        out.append(
            (f"vLLM takes less of {'its' if layout.standalone_rollout else 'the shared'} GPU", [(util_key, lower)])
        )
    if layout.standalone_rollout:
        tp = layout.rollout.tensor_parallel
        gpus = max(layout.rollout_gpus_per_node, 2 * tp)
        out.append(
            (
                "vLLM over more GPUs (tensor parallel)",
                [
                    (key_of(view.rollout, "tensor_model_parallel_size"), 2 * tp),
                    (key_of(view.rollout, "n_gpus_per_node"), gpus),
                ],
            )
        )
    return out


def apply_knob(cfg: Any, changes: list[tuple[str, Any]]) -> Any:
    """A copy of the (unresolved) config with the changes; interpolations still follow them."""
    from omegaconf import OmegaConf, open_dict

    new = copy.deepcopy(cfg)
    with open_dict(new):
        for key, value in changes:
            OmegaConf.update(new, key, value, merge=True, force_add=True)
    return new


def knob_text(changes: list[tuple[str, Any]]) -> str:
    return " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in changes)


def find_knobs(cfg: Any, report: Report, gpu_bytes: int, max_rounds: int = 12) -> dict[str, Any]:
    """Each candidate alone (those that fit, in the order of `candidate_knobs`), or else a greedy combination."""

    def run(c: Any) -> Report | None:
        try:
            layout = layout_from_config(c)
        except PreflightConfigError:
            return None
        return None if layout.problems else estimate(layout, gpu_bytes)

    singles = []
    seen_util = False
    for note, changes in candidate_knobs(report.layout):
        result = run(apply_knob(cfg, changes))
        if result is None:
            continue
        is_util = changes[0][0].endswith("gpu_memory_utilization")
        if result.fits and is_util:
            if seen_util:
                continue  # the highest utilization that fits is enough
            seen_util = True
        singles.append((note, changes, result))
    fixes = [(n, c, r) for n, c, r in singles if r.fits]
    if fixes:
        return {"alone": [(n, knob_text(c), r) for n, c, r in fixes]}

    # greedy: add the change that lowers the worst GPU's overshoot most, re-derived from the changed config
    # each round (so a micro-batch can halve again, or the GPU count double again), until it fits
    chosen: list[tuple[str, list[tuple[str, Any]]]] = []
    current, current_report = cfg, report
    for _ in range(max_rounds):
        best = None
        for note, changes in candidate_knobs(current_report.layout, util_grid=False):
            result = run(apply_knob(current, changes))
            if result is not None and (best is None or result.worst_overshoot < best[2].worst_overshoot):
                best = (note, changes, result)
        if best is None or best[2].worst_overshoot >= current_report.worst_overshoot:
            break
        chosen.append((best[0], best[1]))
        current, current_report = apply_knob(current, best[1]), best[2]
        if current_report.fits:
            break
    final: dict[str, Any] = {}  # a key changed twice (a micro-batch halved twice) keeps its last value
    for _, changes in chosen:
        final.update(changes)
    combined: list[tuple[str, str]] = []
    for note, changes in chosen:
        keys = [(k, final.pop(k)) for k, _ in changes if k in final]
        if keys:
            combined.append((note, knob_text(keys)))
    return {"combined": combined, "result": current_report}
