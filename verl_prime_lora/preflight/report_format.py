"""The report as text (a table per GPU, the verdict, the knobs) and as JSON."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from verl_prime_lora.preflight.memory_formulas import GIB
from verl_prime_lora.preflight.model_shape import param_count
from verl_prime_lora.preflight.report import Report

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
