"""The report of a `Layout`: every GPU's table, peak and verdict, the placement lines, and the whole as text
(a table per GPU, the verdict, the knobs) and as JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from verl_prime_lora.preflight.layout import Layout
from verl_prime_lora.preflight.memory import (
    GIB,
    VLLM_SLEEP_RESIDUE_BYTES,
    RolloutSpec,
    Row,
    VllmEstimate,
    WorkerEstimate,
    dtype_name,
    vllm_estimate,
    worker_estimate,
)
from verl_prime_lora.preflight.model_shape import param_count


@dataclass
class GpuEstimate:
    title: str
    available: int
    rows: list[Row]  # the table (component, bytes)
    total: int
    explanation: str
    fits: bool
    problems: list[str] = field(default_factory=list)

    @property
    def free(self) -> int:
        return self.available - self.total


@dataclass
class Report:
    layout: Layout
    gpus: list[GpuEstimate]
    cpu_rows: list[Row]
    placement: list[str]

    @property
    def fits(self) -> bool:
        return all(g.fits for g in self.gpus)

    @property
    def worst_overshoot(self) -> int:
        return max(g.total - g.available for g in self.gpus)


def trainer_gpu_estimate(workers: list[WorkerEstimate], vllm: VllmEstimate | None, rollout: RolloutSpec):
    """max over workers w of (w's peak + Σ others' held) [+ vLLM's sleep residue]; colocated also at rollout:
    Σ held (the actor's cache emptied) + vLLM's share. Returns (total, which, rows)."""
    rows: list[Row] = []
    for w in workers:
        rows += [Row(f"{w.name}: {r.label}", r.bytes) for r in w.resident]
        if w.peak_phase:
            rows += [Row(f"{w.name}: {w.peak_phase} phase: {r.label}", r.bytes) for r in w.phases[w.peak_phase]]
    best, which = 0, ""
    for w in workers:
        others = sum(v.held_bytes for v in workers if v is not w)
        at = w.peak_bytes + others
        if at > best:
            best, which = at, f"{w.name} {w.peak_phase or 'idle'} phase"
    train_time = best
    if vllm is None:
        return (
            train_time,
            f"peak during the {which}; meanwhile the others hold their resident states and allocator caches "
            f"({', '.join(f'{w.name} {w.held_bytes / GIB:.1f} GiB' for w in workers if not which.startswith(w.name))})",
            rows,
        )
    residue = VLLM_SLEEP_RESIDUE_BYTES if rollout.free_cache_engine else vllm.share
    train_time += residue
    rollout_time = sum(w.held_at_rollout_bytes for w in workers) + vllm.share
    rows.append(Row(f"vLLM colocated: gpu_memory_utilization share ({rollout.gpu_memory_utilization:g})", vllm.share))
    if rollout_time >= train_time:
        return (
            rollout_time,
            f"peak at rollout: vLLM awake with its whole share while the trainers hold "
            f"{sum(w.held_at_rollout_bytes for w in workers) / GIB:.2f} GiB (training peak, vLLM asleep: "
            f"{train_time / GIB:.2f} GiB)",
            rows,
        )
    return (
        train_time,
        f"peak during the {which}, vLLM asleep ({residue / GIB:.1f} GiB left); at rollout {rollout_time / GIB:.2f} GiB",
        rows,
    )


def estimate(layout: Layout, gpu_bytes: int) -> Report:
    """Every GPU's table, total and verdict for `layout` on GPUs of `gpu_bytes`."""
    workers = [worker_estimate(shape, spec) for shape, spec in layout.workers]
    gpus: list[GpuEstimate] = []
    colocated_vllm = None if layout.standalone_rollout else vllm_estimate(layout.actor_shape, layout.rollout, gpu_bytes)
    total, why, rows = trainer_gpu_estimate(workers, colocated_vllm, layout.rollout)
    if sum(r.bytes for r in rows) != total:
        why += " (the rows list each worker at its own peak; not all of them coincide)"
    problems = []
    if colocated_vllm is not None and not colocated_vllm.holds_one_sequence:
        problems.append(_kv_problem(colocated_vllm))
    names = " + ".join(w.name for w in workers) + (" + vLLM" if colocated_vllm else "")
    count = layout.trainer_gpus
    title = f"GPU 0{f'..{count - 1}' if count > 1 else ''} ({_each('trainer pool', count)}): {names}"
    gpus.append(GpuEstimate(title, gpu_bytes, rows, total, why, total <= gpu_bytes and not problems, problems))

    if layout.standalone_rollout and layout.rollout_gpus > 0:
        v = vllm_estimate(layout.actor_shape, layout.rollout, gpu_bytes)
        rows = [
            Row(f"vLLM share (gpu_memory_utilization {layout.rollout.gpu_memory_utilization:g})", v.share),
            Row(f"  of which weights {dtype_name(layout.rollout.weight_bytes)} (÷TP·PP)", v.weights),
            Row("  of which activations / CUDA graphs (rough)", v.overhead),
            Row(f"  of which KV cache ({v.kv_per_token / 1024:.0f} KiB/token)", max(0, v.kv_room)),
        ]
        if layout.rollout.receive_buffer_bytes:
            rows.append(Row("nccl weight-sync receive buffers (2 x bucket)", layout.rollout.receive_buffer_bytes))
        total = v.share + layout.rollout.receive_buffer_bytes
        problems = [] if v.holds_one_sequence else [_kv_problem(v)]
        why = (
            f"KV cache holds {v.full_sequences} sequences of max_model_len {v.max_model_len} "
            f"(a step samples {v.sequences_per_step})"
        )
        first = layout.trainer_gpus
        last = first + layout.rollout_gpus - 1
        title = f"GPU {first}{f'..{last}' if last > first else ''} ({_each('rollout pool', layout.rollout_gpus)}): vLLM"
        gpus.append(GpuEstimate(title, gpu_bytes, rows, total, why, total <= gpu_bytes and not problems, problems))
    elif colocated_vllm is not None:
        held = colocated_vllm.full_sequences
        gpus[0].explanation += f"; vLLM's KV cache holds {held} sequences of {colocated_vllm.max_model_len} tokens"

    cpu_rows = [r for w in workers for r in w.cpu]
    return Report(layout, gpus, cpu_rows, placement_lines(layout))


def _each(pool: str, count: int) -> str:
    return f"{pool}, 1 GPU" if count == 1 else f"{pool}, each of its {count} GPUs"


def _kv_problem(v: VllmEstimate) -> str:
    return (
        f"vLLM's share leaves {max(0, v.kv_room) / GIB:.2f} GiB of KV cache, less than one sequence of "
        f"max_model_len {v.max_model_len} ({v.kv_per_token * v.max_model_len / GIB:.2f} GiB): vLLM refuses to start"
    )


def placement_lines(layout: Layout) -> list[str]:
    lines = [
        f"trainer pool: trainer.nnodes {layout.trainer_nodes} x trainer.n_gpus_per_node "
        f"{layout.trainer_gpus_per_node} = {layout.trainer_gpus} GPU(s), FSDP shards "
        f"{', '.join(sorted({str(s.shards) for _, s in layout.workers}))}"
    ]
    tp, pp = layout.rollout.tensor_parallel, layout.rollout.pipeline_parallel
    if layout.standalone_rollout:
        replicas = layout.rollout_gpus // max(1, tp * pp)
        lines.append(
            f"rollout pool ({layout.trainer_mode}, standalone): actor_rollout_ref.rollout.nnodes "
            f"{layout.rollout_nodes} x n_gpus_per_node {layout.rollout_gpus_per_node} = {layout.rollout_gpus} GPU(s), "
            f"TP {tp} x PP {pp} -> {replicas} vLLM replica(s)"
        )
        total = layout.trainer_gpus + layout.rollout_gpus
        lines.append(
            f"the run needs {total} GPUs: {layout.trainer_gpus} for training + {layout.rollout_gpus} for vLLM "
            f"(one machine with {total} GPUs, or the pools on different nodes)"
        )
    else:
        replicas = layout.trainer_gpus // max(1, tp * pp)
        lines.append(
            f"rollout ({layout.trainer_mode}): vLLM colocated on the trainer pool's GPUs, TP {tp} x PP {pp} -> "
            f"{replicas} replica(s); the run needs {layout.trainer_gpus} GPU(s)"
        )
    lines.append(f"PRM reference: {layout.prm_reference} (verl_prime_lora.config.run.reference_source)")
    return lines


TIGHT = 0.05  # a fit with less than this share of the GPU free is reported as tight


def _gib(n: int) -> str:
    return f"{n / GIB:8.2f}"


def format_report(report: Report, knobs: dict[str, Any] | None = None) -> str:
    layout = report.layout
    a, p = layout.actor_shape, layout.prm_shape
    lines = [
        "verl-prime-lora GPU preflight (estimate from config.json; formulas: verl_prime_lora/preflight/)",
        f"model: {a.model_type}, {param_count(a) / 1e9:.3f}B params (V {a.vocab_size}, h {a.hidden_size}, "
        f"I {a.intermediate_size}, L {a.num_layers}, heads {a.num_heads}/{a.num_kv_heads} kv, "
        f"{'tied' if a.tie_word_embeddings else 'untied'} embeddings)"
        + ("" if p == a else f"; PRM: {param_count(p) / 1e9:.3f}B params"),
    ]
    lines += [f"placement: {line}" for line in report.placement]
    lines += [f"note: {n}" for n in layout.notes]
    width = max([len(r.label) for g in report.gpus for r in g.rows] + [40]) + 2
    for gpu in report.gpus:
        lines += ["", gpu.title, f"  {'component':<{width}}{'GiB':>8}"]
        lines += [f"  {r.label:<{width}}{_gib(r.bytes)}" for r in gpu.rows]
        verdict = "fits" if gpu.fits else "DOES NOT FIT"
        if gpu.fits and gpu.free < TIGHT * gpu.available:
            verdict += f" (tight: less than {TIGHT:.0%} free, and the estimate is rough)"
        lines.append(
            f"  {'total (peak)':<{width}}{_gib(gpu.total)}  of {gpu.available / GIB:.1f} GiB -> {verdict} "
            f"({'free' if gpu.free >= 0 else 'short'} {abs(gpu.free) / GIB:.2f} GiB)"
        )
        lines.append(f"  {gpu.explanation}")
        lines += [f"  problem: {msg}" for msg in gpu.problems]
    if report.cpu_rows:
        lines += ["", "CPU RAM per trainer GPU (offloaded / frozen states)"]
        lines += [f"  {r.label:<{width}}{_gib(r.bytes)}" for r in report.cpu_rows]
    lines.append("")
    if report.fits:
        lines.append("verdict: fits on every GPU (by this estimate)")
    else:
        lines.append("verdict: does NOT fit")
        if knobs and knobs.get("alone"):
            lines.append("each of these changes alone makes it fit (estimated worst GPU after it):")
            for note, text, result in knobs["alone"]:
                worst = max(g.total for g in result.gpus)
                lines.append(f"  {text}    # {note}; {worst / GIB:.2f} GiB")
        elif knobs and knobs.get("combined"):
            result = knobs["result"]
            lines.append(
                "no single change is enough; together, these "
                + ("make it fit:" if result.fits else f"still leave it {result.worst_overshoot / GIB:.2f} GiB short:")
            )
            lines += [f"  {text}    # {note}" for note, text in knobs["combined"]]
            lines += [
                f"  -> {g.title.split(' (')[0]}: {g.total / GIB:.2f} GiB of {g.available / GIB:.1f}"
                for g in result.gpus
            ]
            if not result.fits:
                lines.append("  and then: bigger GPUs (--gpu-memory-gib) or a smaller model")
        else:
            lines.append("no knob found: bigger GPUs (--gpu-memory-gib), more GPUs, or a smaller model")
    return "\n".join(lines)


def report_json(report: Report) -> dict[str, Any]:
    return {
        "fits": report.fits,
        "placement": report.placement,
        "gpus": [
            {
                "title": g.title,
                "total_gib": g.total / GIB,
                "available_gib": g.available / GIB,
                "fits": g.fits,
                "rows": [{"component": r.label, "gib": r.bytes / GIB} for r in g.rows],
                "explanation": g.explanation,
                "problems": g.problems,
            }
            for g in report.gpus
        ],
        "cpu": [{"component": r.label, "gib": r.bytes / GIB} for r in report.cpu_rows],
        "workers": [asdict(spec) for _, spec in report.layout.workers],
        "params": param_count(report.layout.actor_shape),
    }
