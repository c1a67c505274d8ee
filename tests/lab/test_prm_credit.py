"""benchmarks/prm_credit.py on a made-up run: a random tiny model on chain problems, a PRM checkpoint saved as
veRL's FSDP shards are read back (`tools.fsdp_shards`), the frozen init as the PRM's reference."""

import json

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from verl_prime_lora.demo.chain_task import make_row, make_splits, tokenizer_corpus
from verl_prime_lora.tools.tiny import build_model, build_tokenizer


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("credit_run")
    chains = make_splits(0, {"sft_eval": 1, "test": 6, "train": 1})["test"]
    tokenizer = build_tokenizer(tokenizer_corpus(chains), 400)
    base = build_model(tokenizer, seed=0, initializer_range=0.02)
    base.save_pretrained(run / "assets" / "model")
    tokenizer.save_pretrained(run / "assets" / "model")
    (run / "assets" / "data").mkdir()
    pd.DataFrame([make_row(chain, i, "test") for i, chain in enumerate(chains)]).to_parquet(
        run / "assets" / "data" / "test.parquet"
    )
    config = {"prime": {"prm": {"beta": 0.05, "reference": "init"}}, "data": {"max_response_length": 12}}
    (run / "run" / "hydra" / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(config), run / "run" / "hydra" / ".hydra" / "config.yaml")
    prm_dir = run / "run" / "checkpoints" / "global_step_2" / "prm"
    (prm_dir / "huggingface").mkdir(parents=True)
    base.config.save_pretrained(prm_dir / "huggingface")
    moved = build_model(tokenizer, seed=1, initializer_range=0.02).state_dict()  # a PRM that left its init
    torch.save(moved, prm_dir / "model_world_size_1_rank_0.pt")
    return run


def test_the_credit_of_each_checkpoint_is_written(fake_run, tmp_path, monkeypatch):
    from benchmarks import prm_credit as bench

    monkeypatch.chdir(fake_run.parent)
    assert bench.main([fake_run.name, "--out", str(tmp_path), "--responses", "warm_start", "--samples", "2"]) == 0
    report = json.loads((tmp_path / "prm_credit.json").read_text())
    assert report["run"] == fake_run.name  # the run as given, not a path of the machine
    assert [result["step"] for result in report["results"]] == [0, 2]
    start, trained = report["results"]
    assert sum(start["responses"].values()) == 12  # 6 problems x 2 samples, the same set at both steps
    assert start["responses"] == trained["responses"]
    # step 0: the PRM is its reference, every reward 0: chance by construction
    assert start["prm"]["sequence_auc_stepwise"] in (None, 0.5)
    assert report["settings"] == {
        "beta": 0.05,
        "reference": "init",
        "max_response_length": 12,
        "responses": "warm_start",
        "samples": 2,
        "seed": 0,
    }
    assert (tmp_path / "prm_credit.png").stat().st_size > 0
    # every scored response is kept, with its problem; its step sums are those the localisation ranks
    rows = trained["per_response"]
    assert len(rows) == 12 and len({row["problem"] for row in rows}) == 6
    assert all(len(row["step_rewards"]) == len(row["step_likelihood_means"]) for row in rows)
    assert {"likelihood", "likelihood_per_token"} <= set(trained)
    assert trained["prm"]["best_position_share"] is None or trained["prm"]["best_position_share"] >= 0


def test_token_log_probs_are_those_of_each_sequence_alone(fake_run):
    """Batched with right padding, each response token's log-prob equals a forward of its sequence alone."""
    from benchmarks import prm_credit as bench

    model = build_model(build_tokenizer(["12+3=15, 4-1=3"], 300), seed=0, initializer_range=0.5).eval()
    rows = [(None, [5, 6, 7], [8, 9]), (None, [5, 6], [10, 11, 12, 13])]
    batched = bench.token_log_probs(model, rows)
    for (_, prompt, response), got in zip(rows, batched):
        ids = torch.tensor([prompt + response])
        with torch.no_grad():
            log_probs = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        want = [log_probs[len(prompt) - 1 + t, token].item() for t, token in enumerate(response)]
        assert got == pytest.approx(want, abs=1e-5)


def test_a_learning_benchmark_run_reads_like_a_demo(fake_run, tmp_path):
    """benchmarks/learning.py keeps its runs in OUT/<label>_seed<N> (main_ppo's folder) beside OUT/assets."""
    from benchmarks import prm_credit as bench

    out = tmp_path / "learning_out"
    out.mkdir()
    (out / "assets").symlink_to(fake_run / "assets")
    (out / "prime_grpo_seed0").symlink_to(fake_run / "run")
    assert bench.run_folders(out / "prime_grpo_seed0") == (out / "assets", out / "prime_grpo_seed0")
    assert bench.run_folders(fake_run) == (fake_run / "assets", fake_run / "run")
    with pytest.raises(SystemExit, match="neither a demo's --out folder"):
        bench.run_folders(tmp_path)
