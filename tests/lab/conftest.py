"""Fixtures of the lab's tests."""

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from verl_prime_lora.demo.chain_task import make_row, make_splits, tokenizer_corpus
from verl_prime_lora.tools.tiny import build_model, build_tokenizer


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory):
    """A made-up run: a random tiny model on chain problems, a PRM checkpoint saved as veRL's FSDP shards are read
    back (`tools.fsdp_shards`), the frozen init as the PRM's reference."""
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
