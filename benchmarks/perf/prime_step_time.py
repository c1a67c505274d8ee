"""Step time and actor-pool memory of PRIME vs the same run without the PRM, on this machine.

`python -m verl.trainer.main_ppo` runs, back to back, with identical overrides except:

* PRIME: `+recipe=<recipes>` as given (default `prime_lora_colocated`, plus `cpu` without CUDA);
* baseline: the same + `trainer.v1.trainer_mode=sync algorithm.adv_estimator=grpo` (veRL's own sync
            trainer and GRPO: no PRM worker group, no PRM forward/update).

Reported per PRIME run: the median `timing_s/step` over the steps after the first (warm-up) and its
ratio to the baseline's; the PRM phases (`timing_s/prm_*`) and their sum over the actor's phases
(`old_log_prob + update_actor`); the PRM's passes per step next to their minimum (`prm_passes.prm_passes`,
for the run's `prime.prm.update`, reference and PRM batching); and the peak memory of the actor pool:
GPU — veRL's `perf/max_memory_allocated_gb` of the actor and of the PRM workers (one GPU: their sum);
CPU — the peak summed RSS of the actor-pool processes (veRL's fused `WorkerDict` actor worker and the
PRM's `TrainingWorker`s), sampled every 0.5 s.

    python -m benchmarks.perf.prime_step_time --steps 4                       # CPU: tiny model, written here
    python -m benchmarks.perf.prime_step_time --steps 6 --model /path/Qwen2.5-0.5B-Instruct \
        --train /path/train.parquet --val /path/test.parquet -- <extra overrides>

On a shared machine run it under `flock` (it takes no lock itself). Runs are cleaned up by
`verl_prime_lora.cpu.launch.run_main_ppo` (every process of a run is killed by pid afterwards).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from verl_prime_lora.run_processes import RUN_MARKER, pids_with_marker


def has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


class PoolMemorySampler(threading.Thread):
    """Peak summed RSS (GiB) of this run's actor-pool processes (`WorkerDict`, `TrainingWorker`)."""

    def __init__(self, run_id: str):
        super().__init__(daemon=True)
        self.run_id = run_id
        self.peak_gb = 0.0
        self.stop = threading.Event()

    def _pool_rss(self) -> float:
        total = 0
        for pid in pids_with_marker(self.run_id):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"WorkerDict" not in cmd and b"TrainingWorker" not in cmd:
                    continue
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            except OSError:
                continue
        return total / 1024**3

    def run(self):
        while not self.stop.is_set():
            self.peak_gb = max(self.peak_gb, self._pool_rss())
            time.sleep(0.5)


def run(name: str, overrides: list[str], workdir: Path, timeout_s: float) -> dict:
    from verl_prime_lora.cpu.launch import run_main_ppo

    run_id = uuid.uuid4().hex
    metrics_path = workdir / f"{name}.jsonl"
    env = {RUN_MARKER: run_id, "VERL_FILE_LOGGER_PATH": str(metrics_path)}
    sampler = PoolMemorySampler(run_id)
    sampler.start()
    t0 = time.time()
    rc = run_main_ppo(overrides, workdir / f"{name}.log", timeout_s, env=env)
    wall = time.time() - t0
    sampler.stop.set()
    sampler.join()
    if rc != 0:
        raise RuntimeError(f"{name}: main_ppo exited {rc}; see {workdir / (name + '.log')}")
    steps = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    steps = [s["data"] if "data" in s else s for s in steps]
    steps = [s for s in steps if "timing_s/step" in s]
    return {"steps": steps, "pool_rss_peak_gb": sampler.peak_gb, "wall_s": wall}


def summarise(result: dict) -> dict:
    """Medians over the steps after the first (warm-up; all steps when there is one). A phase that a step
    did not run counts 0 s in it: a LoRA PRM's separate pre-update forward runs on a process's first step
    only, and its step-1 time must not stand for the steps without it."""
    steps = result["steps"]
    timed = steps[1:] or steps
    out = {
        "step_s_median": statistics.median(s["timing_s/step"] for s in timed),
        "n_steps": len(steps),
        "pool_rss_peak_gb": result["pool_rss_peak_gb"],
    }
    phases = ("timing_s/old_log_prob", "timing_s/update_actor")
    for key in sorted({k for s in steps for k in s if k.startswith("timing_s/prm") or k in ("timing_s/adv", *phases)}):
        out[key] = statistics.median(s.get(key, 0.0) for s in timed)
    for key in ("actor/perf/max_memory_allocated_gb", "prm/max_memory_allocated_gb"):
        values = [s[key] for s in steps if key in s]
        if values:
            out[key] = max(values)
    prm = sum(v for k, v in out.items() if k.startswith("timing_s/prm"))
    actor = sum(out.get(k, 0.0) for k in phases)
    out["prm_phases_over_actor_phases"] = prm / actor if actor else None
    return out


def pass_counts(overrides: list[str]) -> dict:
    """The PRM passes per step of the PRIME run's config, today and at the minimum (prime.prm_passes)."""
    from verl.trainer.ppo.utils import need_reference_policy

    from verl_prime_lora.checks.config_checks import compute_precision, step_batch_rows
    from verl_prime_lora.config import run_config
    from verl_prime_lora.config.run import reference_source
    from verl_prime_lora.preflight.layout import compose_config
    from verl_prime_lora.prime.prm_passes import model_dropout, prm_passes, update_forward_is_pre_update

    config = compose_config(overrides)
    run = run_config(config)
    view, prm = run.verl, run.prime.prm
    reference = reference_source(view, prm, use_reference_policy=need_reference_policy(config))
    from_update = update_forward_is_pre_update(
        prm,
        model_dropout(view.prm.model),
        step_batch_rows(view)[0],
        view.rollout.n,
        compute_precision(view.prm.engine) == "fp32",
    )
    today, minimum = prm_passes(prm.update, reference, prm.epochs, from_update)
    return {
        "update": prm.update,
        "reference": reference,
        "pre_update_from_update": from_update,
        "today": vars(today),
        "minimum": vars(minimum),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--model", help="HF model dir (default: the tiny model, written here)")
    parser.add_argument("--train", help="train parquet (default: the tiny arithmetic set)")
    parser.add_argument("--val", help="val parquet")
    parser.add_argument("--recipes", default=None, help="default: prime_lora_colocated (+cpu without CUDA)")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for both runs (after --)")
    args = parser.parse_args()

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="prime_bench_"))
    workdir.mkdir(parents=True, exist_ok=True)
    cuda = has_cuda()
    tiny = args.model is None
    if tiny:
        subprocess.run(
            [sys.executable, "-m", "verl_prime_lora.tools.tiny", "--out", str(workdir / "assets")], check=True
        )
        args.model = str(workdir / "assets" / "model")
        args.train = args.train or str(workdir / "assets" / "data" / "train.parquet")
        args.val = args.val or str(workdir / "assets" / "data" / "test.parquet")
    recipes = args.recipes or ("prime_lora_colocated" if cuda else "prime_lora_colocated,cpu")
    tiny_sizes = (
        []
        if not tiny
        else [
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.model.lora_rank=8",
            "actor_rollout_ref.model.lora_alpha=16",
            "actor_rollout_ref.model.target_modules=all-linear",
        ]
    )
    common = [
        f"+recipe=[{recipes}]",
        *tiny_sizes,
        f"actor_rollout_ref.model.path={args.model}",
        f"data.train_files={args.train}",
        f"data.val_files={args.val or args.train}",
        f"trainer.total_training_steps={args.steps}",
        "trainer.save_freq=-1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.logger=[console,file]",
        "trainer.project_name=prime_bench",
        *args.overrides,
    ]
    overrides = [*common, "trainer.experiment_name=prime"]
    p, passes = summarise(run("prime", overrides, workdir, args.timeout)), pass_counts(overrides)
    base = run(
        "baseline",
        [*common, "trainer.experiment_name=baseline", "trainer.v1.trainer_mode=sync", "algorithm.adv_estimator=grpo"],
        workdir,
        args.timeout,
    )
    b = summarise(base)
    report = {"device": "cuda" if cuda else "cpu", "recipes": recipes, "steps": args.steps, "baseline_grpo_no_prm": b}
    entry = {
        "run": p,
        "step_time_ratio": p["step_s_median"] / b["step_s_median"],
        "prm_passes_per_step": passes,
        "pool_rss_peak_ratio": (p["pool_rss_peak_gb"] / b["pool_rss_peak_gb"]) if b["pool_rss_peak_gb"] else None,
    }
    if cuda:
        gpu_p = p.get("actor/perf/max_memory_allocated_gb", 0.0) + p.get("prm/max_memory_allocated_gb", 0.0)
        gpu_b = b.get("actor/perf/max_memory_allocated_gb", 0.0)
        entry["actor_pool_gpu_peak_gb"] = {"prime": gpu_p, "baseline": gpu_b}
    report["prime"] = entry
    print(json.dumps(report, indent=2))
    (workdir / "report.json").write_text(json.dumps(report, indent=2))
    print(f"(workdir {workdir})")
    print("| step time / GRPO's | PRM phases / actor phases | PRM passes (minimum) |")
    print("|---|---|---|")
    print(
        f"| {entry['step_time_ratio']:.3f} | {p['prm_phases_over_actor_phases']:.3f} | "
        f"{sum(passes['today'].values())} ({sum(passes['minimum'].values())}) |"
    )


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
