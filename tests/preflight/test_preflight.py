"""GPU preflight (verl_prime_lora.preflight): the parameter formula against transformers, the memory formulas,
and the CLI on the seed's model shape (R1-Distill-Qwen-1.5B, config.json written from its published
dimensions; nothing downloaded) for both recipes, plus configs that must not fit or must be refused."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from verl_prime_lora import preflight as pf
from verl_prime_lora.preflight import memory as mem
from verl_prime_lora.preflight import model_shape
from verl_prime_lora.preflight.memory import GIB
from verl_prime_lora.preflight.model_shape import R1_DISTILL_QWEN_1_5B_CONFIG, ModelShape

SEED_CONFIG = R1_DISTILL_QWEN_1_5B_CONFIG  # the seed's base model: actor, PRM and reference
SEED_PARAMS = 1_777_088_000
# Qwen2-7B's shape (a 7B that must not fit on a 24 GiB GPU with a full-parameter PRM)
QWEN2_7B_CONFIG = {
    **SEED_CONFIG,
    "vocab_size": 152064,
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
}
TINY_SHAPES = {
    "qwen2_tied": {
        "model_type": "qwen2",
        "vocab_size": 320,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
    },
    "llama_biases_untied": {
        "model_type": "llama",
        "vocab_size": 300,
        "hidden_size": 48,
        "intermediate_size": 80,
        "num_hidden_layers": 3,
        "num_attention_heads": 6,
        "num_key_value_heads": 3,
        "attention_bias": True,
        "mlp_bias": True,
        "tie_word_embeddings": False,
    },
    "qwen3_head_dim": {
        "model_type": "qwen3",
        "vocab_size": 256,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "tie_word_embeddings": False,
    },
}


def meta_param_count(config: dict) -> int:
    """transformers' own count: the model built on the meta device (no memory), parameters summed."""
    fields = {k: v for k, v in config.items() if k not in ("model_type", "architectures", "torch_dtype")}
    hf_config = AutoConfig.for_model(config["model_type"], **fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    return sum(p.numel() for p in model.parameters())


def write_model(folder: Path, config: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def seed_model(tmp_path_factory) -> Path:
    return write_model(tmp_path_factory.mktemp("r1_distill_qwen_1.5b"), SEED_CONFIG)


@pytest.fixture(scope="module")
def model_7b(tmp_path_factory) -> Path:
    return write_model(tmp_path_factory.mktemp("qwen2_7b"), QWEN2_7B_CONFIG)


def preflight(capsys, *argv) -> tuple[int, str, str]:
    code = pf.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def layout(model: Path, *overrides, recipe="prime_lora") -> pf.Layout:
    return pf.layout_from_config(
        pf.compose_config([f"+recipe={recipe}", f"actor_rollout_ref.model.path={model}", *overrides])
    )


def rows(report: pf.Report, gpu: int = 0) -> dict[str, float]:
    return {r.label: r.bytes / GIB for r in report.gpus[gpu].rows}


# -- parameter count ---------------------------------------------------------------------------------


def test_seed_shape_parameter_count_matches_transformers():
    shape = ModelShape.from_hf_config(SEED_CONFIG)
    assert model_shape.param_count(shape) == SEED_PARAMS  # ≈ 1.78B, untied embeddings
    assert meta_param_count(SEED_CONFIG) == SEED_PARAMS
    # the formula written out: embeddings + lm_head + final norm + 28 x (q/k/v with bias, o, MLP, 2 norms)
    h, i, kv, v = 1536, 8960, 2 * 128, 151936
    layer = (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * i + 2 * h
    assert 2 * v * h + h + 28 * layer == SEED_PARAMS


@pytest.mark.parametrize("name", sorted(TINY_SHAPES))
def test_parameter_formula_matches_transformers_on_tiny_shapes(name):
    config = TINY_SHAPES[name]
    assert model_shape.param_count(ModelShape.from_hf_config(config)) == meta_param_count(config)


def test_lora_parameter_count_matches_peft():
    from peft import LoraConfig, get_peft_model

    config = TINY_SHAPES["qwen2_tied"]
    fields = {k: v for k, v in config.items() if k != "model_type"}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("qwen2", **fields))
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=targets))
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    shape = ModelShape.from_hf_config(config)
    assert model_shape.lora_param_count(shape, 4, model_shape.lora_targets(targets)) == trainable
    assert model_shape.lora_targets("all-linear") == model_shape.LINEARS


def test_unsupported_architecture_is_a_config_error():
    with pytest.raises(pf.PreflightConfigError, match="model_type 'mixtral'"):
        ModelShape.from_hf_config({**SEED_CONFIG, "model_type": "mixtral"})


# -- memory formulas ---------------------------------------------------------------------------------


def test_activation_and_logit_formulas_on_the_seed_shape():
    shape = ModelShape.from_hf_config(SEED_CONFIG)
    h, i, q, kv, c = 1536, 8960, 1536, 256, 2
    per_layer = 8 * h + c * (2 * h + 2 * q + 2 * kv + 4 * i)
    assert mem.layer_activation_bytes(shape, c) == per_layer == 97_280
    # LoRA r on the 7 linears with dropout: c·r + (c + 1)·in per linear
    ins = [h, h, h, q, h, h, i]
    assert mem.layer_activation_bytes(shape, c, 32, model_shape.LINEARS, 0.05) == per_layer + sum(
        c * 32 + 3 * x for x in ins
    )
    assert mem.layer_activation_bytes(shape, c, 32, model_shape.LINEARS, 0.0) == per_layer + 7 * c * 32
    tokens = 2 * 4096
    full = mem.train_activation_bytes(shape, tokens, c, checkpointing=False)
    ckpt = mem.train_activation_bytes(shape, tokens, c, checkpointing=True)
    final_norm = tokens * (4 + c) * h
    assert full == tokens * 28 * per_layer + final_norm
    assert ckpt == tokens * (28 * c * h + per_layer) + final_norm
    assert full > 10 * ckpt
    # logits: V·c, + 4 B when training, + c for a temperature copy
    assert mem.logits_bytes(shape, tokens, c, train=False, temperature_copy=False) == tokens * 151936 * 2
    assert mem.logits_bytes(shape, tokens, c, train=True, temperature_copy=True) == tokens * 151936 * 8
    # vLLM KV cache: 2·L·K·d·2 B per token
    assert mem.kv_cache_bytes_per_token(shape, 2, 1) == 2 * 28 * 2 * 128 * 2


def test_full_parameter_prm_costs_16_bytes_per_parameter_and_shards():
    shape = ModelShape.from_hf_config(SEED_CONFIG)
    spec = mem.EngineSpec(name="PRM", trainable=True, param_bytes=4, compute_bytes=2, shards=1, train_tokens=8192)
    one = mem.worker_estimate(shape, spec)
    states = sum(r.bytes for r in one.resident if "CUDA" not in r.label) + sum(
        r.bytes for r in one.phases["update"] if r.label.startswith("grads")
    )
    assert states == 16 * SEED_PARAMS
    four = mem.worker_estimate(shape, mem.EngineSpec(**{**spec.__dict__, "shards": 4}))
    assert four.resident_bytes - mem.CUDA_CONTEXT_BYTES == pytest.approx(
        (one.resident_bytes - mem.CUDA_CONTEXT_BYTES) / 4
    )
    # offloaded: weights and Adam leave the GPU between phases (CPU rows), the update brings them back
    off = mem.worker_estimate(
        shape, mem.EngineSpec(**{**spec.__dict__, "param_offload": True, "optimizer_offload": True})
    )
    assert off.resident_bytes == mem.CUDA_CONTEXT_BYTES
    assert sum(r.bytes for r in off.cpu) == 12 * SEED_PARAMS
    assert off.peak_bytes == one.peak_bytes
    assert off.held_bytes == mem.CUDA_CONTEXT_BYTES
    # not offloaded: it keeps its allocator's cache, ALLOCATOR_CACHE_FACTOR x its largest phase (measured)
    assert one.held_bytes == one.resident_bytes + int(2.0 * (one.peak_bytes - one.resident_bytes))
    assert mem.ALLOCATOR_CACHE_FACTOR == 2.0


def test_optimizer_step_is_the_full_parameter_peak_on_short_micro_batches():
    """PyTorch's foreach AdamW allocates one fp32 temporary of the trainable size (√v) next to the grads:
    on an H200 the full PRM's update peak above its resident states was exactly grads + that (2 x 4 B x P)."""
    shape = ModelShape.from_hf_config(SEED_CONFIG)
    spec = mem.EngineSpec(name="PRM", trainable=True, param_bytes=4, compute_bytes=2, shards=1, train_tokens=512)
    est = mem.worker_estimate(shape, spec)
    step = sum(r.bytes for r in est.phases["optimizer step"])
    assert step == 2 * 4 * SEED_PARAMS
    assert est.peak_phase == "optimizer step"
    lora = mem.worker_estimate(
        shape, mem.EngineSpec(**{**spec.__dict__, "lora_rank": 32, "targets": model_shape.LINEARS})
    )
    assert sum(r.bytes for r in lora.phases["optimizer step"]) == 2 * 4 * model_shape.lora_param_count(
        shape, 32, model_shape.LINEARS
    )


# -- the seed's layouts ------------------------------------------------------------------------------


def test_seed_recipe_fits_on_80_gib(capsys, seed_model, tmp_path):
    code, out, err = preflight(
        capsys,
        "+recipe=prime_lora",
        f"actor_rollout_ref.model.path={seed_model}",
        "--json",
        tmp_path / "e.json",
    )
    assert code == 0, out + err
    assert "1.777B params" in out and "verdict: fits" in out
    assert "the run needs 2 GPUs: 1 for training + 1 for vLLM" in out
    report = json.loads((tmp_path / "e.json").read_text())
    gpu0, gpu1 = report["gpus"]
    assert gpu0["title"].startswith("GPU 0 (trainer pool, 1 GPU): actor (LoRA r=32) + PRM (full)")
    assert gpu1["title"].startswith("GPU 1 (rollout pool, 1 GPU): vLLM")
    components = {r["component"]: r["gib"] for r in gpu0["rows"]}
    # veRL 0.9.1 holds the LoRA actor's base in fsdp_config.model_dtype = fp32; the PRM: fp32 weights + Adam
    assert components["actor (LoRA r=32): base weights fp32 (1 GPU)"] == pytest.approx(SEED_PARAMS * 4 / GIB)
    assert components["PRM (full): AdamW 2 moments fp32 (1 GPU)"] == pytest.approx(SEED_PARAMS * 8 / GIB)
    assert not any("reference" in c for c in components)  # the seed's PRM reference is the actor, adapter off
    # the nccl sender's two buckets stay in cupy's pool: resident on GPU 0 (the recipe's 512 MB buckets)
    assert components["actor (LoRA r=32): nccl weight-sync buckets (2, in cupy's pool)"] == pytest.approx(1.0)
    assert gpu0["total_gib"] == pytest.approx(60.64, abs=0.01)  # README's Hardware table
    assert gpu1["total_gib"] == pytest.approx(0.8 * 80 + 1)  # vLLM's share + the nccl receive buffers


def test_seed_recipe_alone_passes_veRL_checks_and_fits(capsys, seed_model):
    """The recipe sets the micro-batches veRL has no default for: main_ppo's checks pass with no other override."""
    cfg = pf.compose_config(["+recipe=prime_lora", f"actor_rollout_ref.model.path={seed_model}"])
    assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 2
    assert cfg.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu == 4
    assert cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu == 4
    pf.check_config(cfg)  # PRIME's checks + veRL's validate_config + the device layout: no exception
    code, out, err = preflight(
        capsys, "+recipe=prime_lora", f"actor_rollout_ref.model.path={seed_model}", "--gpu-memory-gib", "80"
    )
    assert code == 0, out + err
    assert "verdict: fits" in out


README = Path(__file__).resolve().parents[2] / "README.md"
# The README's names for the changes in its Hardware table's "fits with" column.
HARDWARE_CHANGES = {
    "as is": (),
    "actor offload": (
        "actor_rollout_ref.actor.fsdp_config.param_offload=true",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
    ),
    "PRM offload": ("prime.prm.engine.param_offload=true", "prime.prm.engine.optimizer_offload=true"),
    "LoRA PRM": ("prime.prm.model.lora_rank=32",),
}


def readme_hardware_rows() -> list[tuple[str, int, list[float], tuple[str, ...]]]:
    """(recipe, GPU GiB, GiB per GPU, overrides) of each row of the README's Hardware table."""
    block = README.read_text().split("<!-- hardware:start -->")[1].split("<!-- hardware:end -->")[0]
    out = []
    for line in block.splitlines():
        if not line.startswith("| `"):
            continue
        recipe, gpus, gib, fits = (cell.strip() for cell in line.strip().strip("|").split("|"))
        changes = tuple(o for name in fits.split(" + ") for o in HARDWARE_CHANGES[name])
        size = int(gpus.split("×")[1].split()[0])
        out.append((recipe.strip("`"), size, [float(v) for v in gib.split("/")], changes))
    return out


@pytest.mark.parametrize("recipe, size, totals, changes", readme_hardware_rows())
def test_the_readme_hardware_table_is_the_preflights(seed_model, recipe, size, totals, changes):
    report = pf.estimate(layout(seed_model, *changes, recipe=recipe), size * GIB)
    assert report.fits
    assert [round(gpu.total / GIB, 1) for gpu in report.gpus] == totals


def test_the_readme_hardware_table_has_a_row_per_recipe_and_size():
    assert {(recipe, size) for recipe, size, _, _ in readme_hardware_rows()} == {
        (recipe, size) for recipe in ("prime_lora", "prime_lora_colocated") for size in (80, 40, 24)
    }


def test_unset_actor_micro_batch_is_refused_like_main_ppo(capsys, seed_model):
    """veRL's own validate_config requires the actor's micro-batch (it has no default); the hint names the key."""
    code, out, err = preflight(
        capsys,
        "+recipe=prime_lora",
        f"actor_rollout_ref.model.path={seed_model}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null",
    )
    assert code == 2, out + err
    hint = err.split("hint:", 1)[1]
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=N" in hint
    assert "the recipes set 2 and 4" in hint


def test_colocated_recipe_counts_vllm_on_the_same_gpu(capsys, seed_model):
    code, out, err = preflight(capsys, "+recipe=prime_lora_colocated", f"actor_rollout_ref.model.path={seed_model}")
    report = pf.estimate(layout(seed_model, recipe="prime_lora_colocated"), 80 * GIB)
    assert len(report.gpus) == 1
    table = rows(report)
    assert table["vLLM colocated: gpu_memory_utilization share (0.5)"] == pytest.approx(40)
    assert "the run needs 1 GPU(s)" in out
    # at rollout vLLM takes its whole share next to what the trainers hold; the PRM keeps its cached peak
    assert report.gpus[0].total >= 40 * GIB + 20 * GIB
    # as is, 94.4 GiB on 80: the PRM's full states and its allocator cache beside vLLM's share
    assert code == 1 and not report.fits and round(report.gpus[0].total / GIB, 1) == 94.4
    assert "prime.prm.engine.param_offload=true" in out
    # on an H200 (141 GiB) it fits; on 80 GiB it fits with the PRM offloaded
    assert pf.estimate(layout(seed_model, recipe="prime_lora_colocated"), 141 * GIB).fits
    code, out, err = preflight(
        capsys,
        "+recipe=prime_lora_colocated",
        f"actor_rollout_ref.model.path={seed_model}",
        "prime.prm.engine.param_offload=true",
        "prime.prm.engine.optimizer_offload=true",
    )
    assert code == 0, out + err
    assert "CPU RAM per trainer GPU" in out


def test_7b_with_a_full_prm_does_not_fit_on_24_gib_and_names_knobs(capsys, model_7b):
    code, out, err = preflight(
        capsys, "+recipe=prime_lora", f"actor_rollout_ref.model.path={model_7b}", "--gpu-memory-gib", "24"
    )
    assert code == 1, out + err
    assert "DOES NOT FIT" in out and "verdict: does NOT fit" in out
    knobs = out.split("verdict: does NOT fit", 1)[1]
    assert "prime.prm.model.lora_rank=" in knobs or "prime.prm.engine.param_offload=true" in knobs
    assert "trainer.n_gpus_per_node=" in knobs  # FSDP shards: more GPUs


# -- what changes the estimate -----------------------------------------------------------------------


def test_lora_prm_drops_the_adam_state_of_the_base(seed_model):
    full = rows(pf.estimate(layout(seed_model), 80 * GIB))
    lora = rows(pf.estimate(layout(seed_model, "prime.prm.model.lora_rank=32"), 80 * GIB))
    assert "PRM (full): AdamW 2 moments fp32 (1 GPU)" in full
    assert lora["PRM (LoRA r=32): AdamW 2 moments fp32 (1 GPU)"] < 0.5
    assert sum(lora.values()) < sum(full.values()) - 15


def test_prm_from_another_model_gets_a_frozen_reference_in_cpu_ram(seed_model, tmp_path):
    other = write_model(tmp_path / "other", SEED_CONFIG)
    lay = layout(seed_model, f"prime.prm.model.path={other}")
    assert lay.prm_reference == "frozen_prm_copy"
    report = pf.estimate(lay, 80 * GIB)
    assert "PRM reference (frozen copy)" in report.gpus[0].title
    cpu = {r.label: r.bytes for r in report.cpu_rows}
    assert cpu["PRM reference (frozen copy): frozen weights fp32 (1 GPU, FSDP CPU offload)"] == 4 * SEED_PARAMS
    # reference: policy needs no copy
    assert "PRM reference" not in pf.estimate(layout(seed_model, "prime.prm.reference=policy"), 80 * GIB).gpus[0].title


def test_more_trainer_gpus_shard_the_states(seed_model):
    one = rows(pf.estimate(layout(seed_model), 80 * GIB))
    two = rows(pf.estimate(layout(seed_model, "trainer.n_gpus_per_node=2"), 80 * GIB))
    assert two["PRM (full): AdamW 2 moments fp32 (÷2)"] == pytest.approx(
        one["PRM (full): AdamW 2 moments fp32 (1 GPU)"] / 2
    )


def test_gradient_checkpointing_and_micro_batch_move_the_activations(seed_model):
    def prm_update(est: pf.Layout) -> dict[str, int]:
        prm = next(mem.worker_estimate(shape, spec) for shape, spec in est.workers if spec.name == "PRM (full)")
        return {r.label: r.bytes for r in prm.phases["update"]}

    base = prm_update(layout(seed_model))["activations (8192 tok, checkpointing)"]
    no_ckpt = prm_update(layout(seed_model, "actor_rollout_ref.model.enable_gradient_checkpointing=false"))
    assert no_ckpt["activations (8192 tok, no checkpointing)"] > 10 * base
    dyn = layout(seed_model, "prime.prm.use_dynamic_bsz=true", "prime.prm.max_token_len_per_gpu=2048")
    prm = next(mem.worker_estimate(shape, spec) for shape, spec in dyn.workers if spec.name == "PRM (full)")
    assert "activations (2048 tok, checkpointing)" in [r.label for r in prm.phases["update"]]
    # a short micro-batch: the optimizer step (grads + AdamW's temporary) is the PRM's peak
    assert prm.peak_phase == "optimizer step"
    table = rows(pf.estimate(dyn, 80 * GIB))
    assert any(k.startswith("PRM (full): optimizer step phase: AdamW step temporary") for k in table)


def test_impossible_placement_is_a_config_error(capsys, seed_model):
    code, out, err = preflight(
        capsys,
        "+recipe=prime_lora",
        f"actor_rollout_ref.model.path={seed_model}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
    )
    assert code == 2 and "tensor_model_parallel_size" in err


def test_model_folder_without_config_json_is_a_config_error(capsys, tmp_path):
    code, out, err = preflight(capsys, "+recipe=prime_lora", f"actor_rollout_ref.model.path={tmp_path}")
    assert code == 2 and "actor_rollout_ref.model.path" in err and "config.json" in err


def test_cli_runs_as_a_module(seed_model):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "verl_prime_lora.preflight", "+recipe=prime_lora"]
        + [f"actor_rollout_ref.model.path={seed_model}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "GPU 0 (trainer pool, 1 GPU)" in run.stdout and "verdict: fits" in run.stdout


def test_options_may_stand_between_overrides(capsys, seed_model):
    """`--gpu-memory-gib` anywhere on the command line, as users type it after the recipe."""
    code, out, _ = preflight(
        capsys, "+recipe=prime_lora", "--gpu-memory-gib", "141", f"actor_rollout_ref.model.path={seed_model}"
    )
    assert code == 0 and "141" in out
