"""The command line: `python -m verl_prime_lora.preflight +recipe=… <overrides>`; exit 0 fits, 1 not, 2 config error."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

from verl_prime_lora.preflight.knobs import find_knobs
from verl_prime_lora.preflight.layout import check_config, compose_config, hint_for, layout_from_config
from verl_prime_lora.preflight.memory import GIB
from verl_prime_lora.preflight.report import estimate, format_report, report_json

DEFAULT_GPU_GIB = 80.0


def main(argv: list[str] | None = None) -> int:
    """Composes, checks and estimates the config of `argv`; prints the report. Returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m verl_prime_lora.preflight",
        description="Estimate per-GPU memory of a PRIME run from its Hydra overrides (as for main_ppo) and "
        "the model's config.json. Exit 0: fits, 1: does not fit, 2: config error.",
    )
    parser.add_argument(
        "overrides", nargs="*", help="Hydra overrides, e.g. +recipe=prime_lora actor_rollout_ref.model.path=DIR"
    )
    parser.add_argument("--gpu-memory-gib", type=float, default=DEFAULT_GPU_GIB, help="memory of each GPU (default 80)")
    parser.add_argument("--json", type=Path, default=None, help="also write the estimate as JSON to this file")
    args = parser.parse_intermixed_args(argv)
    gpu_bytes = int(args.gpu_memory_gib * GIB)

    try:
        cfg = compose_config(args.overrides)
    except Exception as err:  # noqa: BLE001 - Hydra/OmegaConf raise many types; all are config errors here
        print(f"config error (composing the config): {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    chatter = io.StringIO()  # veRL's "[validate_config] ... passed" and vLLM's import logs
    try:
        with contextlib.redirect_stdout(chatter):
            run = check_config(cfg)
        layout = layout_from_config(cfg, run)
    except Exception as err:  # noqa: BLE001 - veRL's checks raise AssertionError/ValueError/InstantiationException
        print(chatter.getvalue(), end="", file=sys.stderr)
        print(f"config error: {type(err).__name__}: {err}{hint_for(str(err))}", file=sys.stderr)
        return 2
    if layout.problems:
        for problem in layout.problems:
            print(f"config error: {problem}", file=sys.stderr)
        return 2

    report = estimate(layout, gpu_bytes)
    knobs = None if report.fits else find_knobs(cfg, report, gpu_bytes)
    print(format_report(report, knobs))
    if args.json:
        args.json.write_text(json.dumps(report_json(report), indent=2))
    return 0 if report.fits else 1
