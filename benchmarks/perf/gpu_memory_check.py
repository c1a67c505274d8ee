"""The preflight's memory estimate against a GPU: the seed's LoRA actor and full-parameter PRM on random weights.

Three steps, because the GPU machine has PyTorch, transformers and PEFT but neither veRL nor vLLM:

    python -m benchmarks.perf.gpu_memory_check plan --out PLAN.json       # here: veRL composes the seed recipes
    python -m benchmarks.perf.gpu_memory_check measure --plan PLAN.json --out MEASURED.json   # on the GPU
    python -m benchmarks.perf.gpu_memory_check compare --plan PLAN.json --measured MEASURED.json [--out TABLE.md]

* `plan` composes `+recipe=prime_lora` and `+recipe=prime_lora_colocated` over DeepSeek-R1-Distill-Qwen-1.5B's
  shape (its published `config.json`; no weights) exactly as the preflight does, and writes every trainer-GPU
  worker's engine (`EngineSpec`) with the preflight's estimate of its resident states and of each phase.
* `measure` builds each distinct engine in its own process (a fresh allocator) the way veRL 0.9.1's FSDP engine
  builds it: `from_config` in the engine's `model_dtype` (fp32), PEFT LoRA for the actor (rank, alpha, dropout,
  targets from the plan), gradient checkpointing (`use_reentrant=False`), FSDP1 on one rank (decoder layers
  and, for LoRA, every adapter linear wrapped; `MixedPrecision(bf16, fp32, fp32)`), AdamW over the trainable
  parameters; every forward under `torch.autocast(bf16)`, as veRL's engine runs it. A micro-batch is the
  plan's token count packed into one row (veRL's remove-padding layout), attention SDPA (no flash-attn
  there). Log-probs: the lm_head logits ÷ temperature (a new tensor when T ≠ 1) and a log-softmax + gather
  per token row (veRL's path without flash-attn's cross-entropy). The update phase: forward, a loss on the
  log-probs (PRM: BCE-with-logits on β·Σ log-probs per sequence; actor: a policy-gradient surrogate),
  backward, gradient clipping and an AdamW step. Each phase runs once unmeasured (the first update allocates
  the AdamW moments, which are resident, not the phase's), then twice measured. Per phase it records
  `torch.cuda.max_memory_allocated` above what was allocated before the phase, the resident bytes after the
  steps, the CUDA context (device memory in use before the first tensor), and the time of one micro-batch.
* `compare` prints measured / estimated per engine and phase.

Random weights and random token ids: memory and time do not depend on the values. What this does not cover:
flash-attn's varlen attention and cross-entropy (a veRL GPU install usually has them: its logits term is
smaller than here), the weight-sync buckets, vLLM, and more than one rank.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RECIPES = ("prime_lora", "prime_lora_colocated")
GIB = 1 << 30


# -- plan (here, with veRL) -----------------------------------------------------------------------------


def plan(out: Path) -> dict:
    """Every trainer-GPU worker of the seed recipes, with the preflight's estimate (bytes) of each phase."""
    from verl_prime_lora import preflight as pf
    from verl_prime_lora.preflight import memory as mem
    from verl_prime_lora.preflight.model_shape import R1_DISTILL_QWEN_1_5B_CONFIG

    engines: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as model_dir:
        (Path(model_dir) / "config.json").write_text(json.dumps(R1_DISTILL_QWEN_1_5B_CONFIG))
        for recipe in RECIPES:
            cfg = pf.compose_config([f"+recipe={recipe}", f"actor_rollout_ref.model.path={model_dir}"])
            pf.check_config(cfg)
            layout = pf.layout_from_config(cfg)
            for shape, spec in layout.workers:
                est = mem.worker_estimate(shape, spec)
                key = json.dumps(
                    {k: v for k, v in dataclasses.asdict(spec).items() if k in MEASURED_FIELDS}, sort_keys=True
                )
                entry = engines.setdefault(
                    key,
                    {
                        "name": spec.name,
                        "recipes": [],
                        "spec": dataclasses.asdict(spec),
                        "estimate": {
                            "cuda_context": mem.CUDA_CONTEXT_BYTES,
                            "resident": est.resident_bytes,
                            "phases": {p: sum(r.bytes for r in rows) for p, rows in est.phases.items()},
                            "peak": est.peak_bytes,
                        },
                    },
                )
                entry["recipes"].append(recipe)
    result = {
        "model_config": R1_DISTILL_QWEN_1_5B_CONFIG,
        "sequence_tokens": 512 + 3584,
        "engines": list(engines.values()),
    }
    out.write_text(json.dumps(result, indent=2))
    return result


# the spec fields that change what is built or run (others are placement flags the GPU check does not see)
MEASURED_FIELDS = (
    "name",
    "trainable",
    "param_bytes",
    "compute_bytes",
    "lora_rank",
    "targets",
    "lora_dropout",
    "checkpointing",
    "train_tokens",
    "infer_tokens",
    "train_temperature_copy",
    "forward_only",
)


# -- measure (on the GPU: torch, transformers, peft) -----------------------------------------------------


def measure(plan_path: Path, out: Path, device: str, alloc_conf: str | None = None) -> dict:
    """Runs every engine of the plan in its own process (with `PYTORCH_CUDA_ALLOC_CONF=alloc_conf` if given);
    writes and returns the measurements."""
    plan_data = json.loads(plan_path.read_text())
    results = []
    for index, engine in enumerate(plan_data["engines"]):
        with tempfile.NamedTemporaryFile("r", suffix=".json") as part:
            cmd = [sys.executable, __file__, "_one", "--plan", str(plan_path), "--index", str(index)]
            cmd += ["--device", device, "--out", part.name]
            started = time.perf_counter()
            env = {**os.environ, **({"PYTORCH_CUDA_ALLOC_CONF": alloc_conf} if alloc_conf else {})}
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
            wall = time.perf_counter() - started
            if proc.returncode != 0:
                results.append({"name": engine["name"], "error": proc.stderr[-3000:], "wall_s": wall})
                print(f"{engine['name']}: FAILED\n{proc.stderr[-3000:]}", flush=True)
                continue
            measured = json.loads(Path(part.name).read_text())
            measured["wall_s"] = wall
            results.append(measured)
            print(f"{engine['name']}: {json.dumps(measured)}", flush=True)
    env = {"device": device, "python": sys.version.split()[0], "alloc_conf": alloc_conf}
    try:
        import torch
        import transformers

        env.update(torch=torch.__version__, transformers=transformers.__version__)
        if device == "cuda":
            env["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    result = {"env": env, "engines": results}
    out.write_text(json.dumps(result, indent=2))
    return result


def _measure_one(plan_path: Path, index: int, device: str, out: Path) -> None:
    import torch
    import torch.distributed as dist

    plan_data = json.loads(plan_path.read_text())
    engine = plan_data["engines"][index]
    spec = engine["spec"]
    seq = int(plan_data["sequence_tokens"])
    cuda = device == "cuda"
    dev = torch.device(device)

    context = 0
    if cuda:
        torch.cuda.init()
        free0, total = torch.cuda.mem_get_info()
        torch.zeros(1, device=dev)
        free1, _ = torch.cuda.mem_get_info()
        context = (total - free1) - torch.cuda.memory_reserved()  # the driver's and the libraries' share
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + index))
    dist.init_process_group("nccl" if cuda else "gloo", rank=0, world_size=1)

    model = _build_model(plan_data["model_config"], spec, dev)
    trainable = [p for p in model.parameters() if p.requires_grad]
    resident_built = _allocated(cuda)
    result = {
        "name": engine["name"],
        "cuda_context": context,
        "resident_built": resident_built,
        "params": sum(p.numel() for p in model.parameters()),
        "trainable_params": sum(p.numel() for p in trainable),
        "phases": {},
        "seconds": {},
    }

    vocab = int(plan_data["model_config"]["vocab_size"])
    temperature = 0.7 if spec["train_temperature_copy"] else 1.0
    if spec["infer_tokens"]:
        ids, pos = _packed_batch(spec["infer_tokens"], seq, vocab, dev)
        with torch.no_grad():
            peak, seconds = _phase(cuda, lambda: _log_probs(model, ids, pos, temperature), repeats=2)
        result["phases"]["log-prob"], result["seconds"]["log-prob"] = peak, seconds
    if spec["trainable"] and spec["train_tokens"]:
        optimizer = torch.optim.AdamW(trainable, lr=1e-6, weight_decay=0.0)
        ids, pos = _packed_batch(spec["train_tokens"], seq, vocab, dev)
        rows = max(1, spec["train_tokens"] // seq)
        is_prm = spec["lora_rank"] == 0

        def update():
            lp = _log_probs(model, ids, pos, 1.0 if is_prm else temperature)
            per_seq = lp.view(rows, -1).sum(-1)
            if is_prm:  # BCE-with-logits on z = β·Σ log-ratio (the reference's log-probs are a constant here)
                labels = torch.arange(rows, device=dev, dtype=torch.float32) % 2
                loss = torch.nn.functional.binary_cross_entropy_with_logits(0.05 * per_seq, labels)
            else:  # a policy-gradient surrogate: −mean(A · log π)
                loss = -(lp * torch.linspace(-1, 1, lp.numel(), device=dev).view_as(lp)).mean()
            loss.backward()
            if hasattr(model, "clip_grad_norm_"):  # FSDP's (CUDA)
                model.clip_grad_norm_(1.0)
            else:
                torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        peak, seconds = _phase(cuda, update, repeats=2)
        result["phases"]["update"], result["seconds"]["update"] = peak, seconds
        result["resident_after_update"] = _allocated(cuda)
    if cuda:  # since the last reset: the last update (or log-prob) call
        result["max_reserved"] = torch.cuda.max_memory_reserved()
    dist.destroy_process_group()
    out.write_text(json.dumps(result))


def _build_model(model_config: dict, spec: dict, dev):
    """The model as veRL's FSDP engine builds it (see the module docstring)."""
    import functools

    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import _or_policy, lambda_auto_wrap_policy, transformer_auto_wrap_policy
    from transformers import AutoConfig, AutoModelForCausalLM

    dtype = {4: torch.float32, 2: torch.bfloat16}[spec["param_bytes"]]
    fields = {k: v for k, v in model_config.items() if k not in ("architectures", "model_type", "torch_dtype")}
    hf_config = AutoConfig.for_model(model_config["model_type"], **fields)
    hf_config.use_cache = False
    with dev:
        model = AutoModelForCausalLM.from_config(hf_config, dtype=dtype, attn_implementation="sdpa")
    if spec["checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if spec["lora_rank"]:
        from peft import LoraConfig, get_peft_model

        model.enable_input_require_grads()
        lora = LoraConfig(
            r=spec["lora_rank"],
            lora_alpha=4 * spec["lora_rank"],  # the seed's 128 at r=32; alpha scales values, not memory
            lora_dropout=spec["lora_dropout"],
            target_modules=list(spec["targets"]),
            bias="none",
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, lora)
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.to(dtype)
    if not spec["trainable"]:
        model.requires_grad_(False)
    if dev.type != "cuda":  # FSDP1 needs an accelerator; on CPU the script only checks its own plumbing
        return model
    layer_cls = {type(m) for m in model.modules() if type(m).__name__.endswith("DecoderLayer")}
    policies = [functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=layer_cls)]
    if spec["lora_rank"]:

        def lora_leaf(module) -> bool:
            weight = getattr(module, "weight", None)
            return len(list(module.named_children())) == 0 and weight is not None and weight.requires_grad

        policies.insert(0, functools.partial(lambda_auto_wrap_policy, lambda_fn=lora_leaf))
    compute = {4: torch.float32, 2: torch.bfloat16}[spec["compute_bytes"]]
    return FSDP(
        model,
        auto_wrap_policy=functools.partial(_or_policy, policies=policies),
        device_id=dev if dev.type == "cuda" else None,
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        mixed_precision=MixedPrecision(param_dtype=compute, reduce_dtype=torch.float32, buffer_dtype=torch.float32),
        use_orig_params=False,
    )


def _packed_batch(tokens: int, seq: int, vocab: int, dev):
    """One row of `tokens` random ids; position ids restart every `seq` tokens (remove-padding layout)."""
    import torch

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, tokens), generator=g).to(dev)
    pos = (torch.arange(tokens) % seq).unsqueeze(0).to(dev)
    return ids, pos


def _log_probs(model, ids, pos, temperature: float):
    """log π(y_t | y_<t) of the next token, all under bf16 autocast as in veRL's `forward_step`.

    The (tokens, V) logits [÷ T: a new tensor], then one log-softmax per token row, which autocast runs in
    fp32: veRL's `logprobs_from_logits` without flash-attn's cross-entropy (`logprobs_from_logits_v2` on the
    remove-padding layout). A row's fp32 output is kept for backward when training; only one row's fp32 copy
    is live in a forward.
    """
    import torch

    with torch.autocast(device_type=ids.device.type, dtype=torch.bfloat16):
        output = model(input_ids=ids, position_ids=pos, use_cache=False)  # alive to the end, as in forward_step
        logits = output.logits[0]
        if temperature != 1.0:
            logits = logits / temperature
        targets = torch.roll(ids[0], shifts=-1)
        rows = [torch.log_softmax(row, dim=-1).gather(-1, t.view(1)) for row, t in zip(logits, targets, strict=True)]
        return torch.cat(rows)


def _allocated(cuda: bool) -> int:
    import torch

    return torch.cuda.memory_allocated() if cuda else 0


def _phase(cuda: bool, fn, repeats: int) -> tuple[int, float]:
    """(peak bytes allocated above the bytes allocated before the phase, seconds of one call), over `repeats`
    calls after one unmeasured call (which allocates AdamW's moments: they are resident, not the phase's)."""
    import torch

    fn()
    peak, seconds = 0, 0.0
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
            peak = max(peak, torch.cuda.max_memory_allocated() - before)
        seconds = time.perf_counter() - started
    return peak, seconds


# -- compare (here) ---------------------------------------------------------------------------------------


def compare(plan_path: Path, measured_path: Path) -> str:
    """A markdown table: estimated, measured and their ratio, per engine and phase (GiB)."""
    plan_data = json.loads(plan_path.read_text())
    measured = json.loads(measured_path.read_text())
    env = measured["env"]
    lines = [
        f"Device: {env.get('gpu', env['device'])}; torch {env.get('torch')}, transformers {env.get('transformers')}; "
        f"PYTORCH_CUDA_ALLOC_CONF {env.get('alloc_conf') or 'unset'}.",
        "",
        "| engine (recipes) | quantity | estimated GiB | measured GiB | measured / estimated "
        "| time of one micro-batch |",
        "|---|---|---|---|---|---|",
    ]
    for engine, got in zip(plan_data["engines"], measured["engines"], strict=True):
        label = f"{engine['name']} ({', '.join(engine['recipes'])})"
        if "error" in got:
            lines.append(f"| {label} | failed | | | | {got['error'].splitlines()[-1]} |")
            continue
        est = engine["estimate"]
        resident = got.get("resident_after_update", got["resident_built"])
        pairs = [
            ("CUDA context", est["cuda_context"], got["cuda_context"], ""),
            ("resident (weights, LoRA, AdamW moments)", est["resident"] - est["cuda_context"], resident, ""),
        ]
        phases = dict(est["phases"])
        if "update" in phases:  # measured as one: forward, backward and the optimizer step
            phases["update"] = max(phases["update"], phases.pop("optimizer step", 0))
        for phase, bytes_ in phases.items():
            if phase in got["phases"]:
                pairs.append((f"{phase} phase, above resident", bytes_, got["phases"][phase], phase))
            else:
                lines.append(f"| {label} | {phase} phase | {bytes_ / GIB:.2f} | not measured | | |")
        pairs.append(("peak (context + resident + largest measured phase)", est_peak(est, got), _peak(got), ""))
        if "max_reserved" in got:  # what PyTorch's caching allocator held at most (freed blocks it kept)
            reserved = got["max_reserved"] + got["cuda_context"]
            pairs.append(("peak reserved by the allocator + context", est["peak"], reserved, ""))
        for what, e, m, phase in pairs:
            t = got["seconds"].get(phase)
            lines.append(
                f"| {label} | {what} | {e / GIB:.2f} | {m / GIB:.2f} | {m / e if e else float('nan'):.2f} | "
                f"{f'{t:.2f} s' if t is not None else ''} |"
            )
    return "\n".join(lines)


def est_peak(est: dict, got: dict) -> int:
    """The estimated peak over the phases the GPU run measured."""
    measured = [b for p, b in est["phases"].items() if p in got["phases"] or p == "optimizer step"]
    return est["resident"] + max(measured, default=0)


def _peak(got: dict) -> int:
    resident = got.get("resident_after_update", got["resident_built"])
    return got["cuda_context"] + resident + max(got["phases"].values(), default=0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan")
    p.add_argument("--out", type=Path, required=True)
    m = sub.add_parser("measure")
    m.add_argument("--plan", type=Path, required=True)
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    m.add_argument("--alloc-conf", default=None, help="PYTORCH_CUDA_ALLOC_CONF for the engines' processes")
    c = sub.add_parser("compare")
    c.add_argument("--plan", type=Path, required=True)
    c.add_argument("--measured", type=Path, required=True)
    c.add_argument("--out", type=Path, default=None)
    one = sub.add_parser("_one")  # one engine, in its own process (measure)
    one.add_argument("--plan", type=Path, required=True)
    one.add_argument("--index", type=int, required=True)
    one.add_argument("--device", required=True)
    one.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "plan":
        plan(args.out)
    elif args.command == "measure":
        measure(args.plan, args.out, args.device, args.alloc_conf)
    elif args.command == "compare":
        table = compare(args.plan, args.measured)
        print(table)
        if args.out:
            args.out.write_text(table + "\n")
    else:
        _measure_one(args.plan, args.index, args.device, args.out)


if __name__ == "__main__":
    main()
