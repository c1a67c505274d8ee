"""benchmarks/gpu_memory_check.py: the plan is the preflight's own estimate of the seed, and the measuring
half (run on a lent GPU) still runs, here on CPU on a shrunken plan, so it does not rot between GPU sessions."""

import json
import os
import subprocess
import sys

import pytest

from verl_prime_lora.preflight import memory as mem
from verl_prime_lora.preflight import model_shape
from verl_prime_lora.preflight.model_shape import R1_DISTILL_QWEN_1_5B_CONFIG


@pytest.fixture(scope="module")
def gmc():
    from benchmarks.perf import gpu_memory_check

    return gpu_memory_check


@pytest.fixture(scope="module")
def seed_plan(gmc, tmp_path_factory):
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    gmc.plan(out)
    return json.loads(out.read_text())


def test_plan_holds_the_seed_workers_with_the_preflight_estimate(seed_plan):
    engines = {e["name"]: e for e in seed_plan["engines"]}
    assert set(engines) == {"actor (LoRA r=32)", "PRM (full)"}
    for engine in engines.values():
        assert engine["recipes"] == ["prime_lora", "prime_lora_colocated"]
        assert engine["spec"]["train_tokens"] == 2 * 4096 and engine["spec"]["infer_tokens"] == 4 * 4096
    shape = model_shape.ModelShape.from_hf_config(R1_DISTILL_QWEN_1_5B_CONFIG)
    prm = engines["PRM (full)"]
    expected = mem.worker_estimate(shape, mem.EngineSpec(**{**prm["spec"], "targets": tuple(prm["spec"]["targets"])}))
    assert prm["estimate"]["peak"] == expected.peak_bytes
    assert prm["estimate"]["phases"]["optimizer step"] == 2 * 4 * model_shape.param_count(shape)


def test_measure_and_compare_run_on_a_shrunken_plan(gmc, seed_plan, tmp_path):
    tiny = json.loads(json.dumps(seed_plan))
    tiny["model_config"].update(
        vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
    )
    tiny["sequence_tokens"] = 16
    for engine in tiny["engines"]:
        engine["spec"].update(train_tokens=32, infer_tokens=64)
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(tiny))
    measured = tmp_path / "measured.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, gmc.__file__, "measure", "--plan", str(plan_path), "--out", str(measured), "--device", "cpu"]
    subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=300)
    got = {e["name"]: e for e in json.loads(measured.read_text())["engines"]}
    assert all("error" not in e for e in got.values()), got
    # the LoRA actor trains only its adapters; the PRM every parameter
    shape = model_shape.ModelShape.from_hf_config(tiny["model_config"])
    assert got["actor (LoRA r=32)"]["trainable_params"] == model_shape.lora_param_count(shape, 32, model_shape.LINEARS)
    assert got["PRM (full)"]["params"] == model_shape.param_count(shape)
    assert got["PRM (full)"]["trainable_params"] == got["PRM (full)"]["params"]
    assert all(set(e["phases"]) == {"log-prob", "update"} for e in got.values())
    table = gmc.compare(plan_path, measured)
    assert "| actor (LoRA r=32) (prime_lora, prime_lora_colocated) | weight sync phase |" in table
    assert table.count("update phase, above resident") == 2
