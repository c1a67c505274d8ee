"""A run's saved checkpoints as models: the warm start it began from, its actor (LoRA merged into the fp32 base),
its PRM and the PRM's reference at any saved step, and per-token log-probabilities under any of them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from omegaconf import OmegaConf
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl_prime_lora.demo.chain_task import Chain
from verl_prime_lora.tools import export_adapter, fsdp_shards

BATCH = 128  # sequences per forward


def run_folders(run: Path) -> tuple[Path, Path]:
    """(assets, main_ppo folder) of a demo's `--out` (`assets/`, `run/`) or of a learning-benchmark run
    (`OUT/<label>_seed<N>`, its assets in `OUT/assets`)."""
    if (run / "run").is_dir():
        return run / "assets", run / "run"
    if (run / "hydra").is_dir() and (run.parent / "assets").is_dir():
        return run.parent / "assets", run
    raise SystemExit(f"{run}: neither a demo's --out folder (assets/, run/) nor a run of the learning study")


def run_settings(run_dir: Path) -> dict:
    """β, the PRM's reference and the response length of the run (its Hydra config)."""
    config = OmegaConf.load(run_dir / "hydra" / ".hydra" / "config.yaml")
    return {
        "beta": float(config.prime.prm.beta),
        "reference": str(config.prime.prm.reference),
        "max_response_length": int(config.data.max_response_length),
    }


@dataclass
class CheckpointedRun:
    """A run's warm start (tokenizer, fp32 base model), settings (`run_settings`), RL test problems and saved steps,
    and its models at any of them (`models`)."""

    base_dir: Path
    run_dir: Path
    settings: dict
    tokenizer: object
    base: object
    chains: list[Chain]

    @classmethod
    def load(cls, run: Path) -> CheckpointedRun:
        assets, run_dir = run_folders(run)
        base_dir = assets / "model"
        test = pd.read_parquet(assets / "data" / "test.parquet")
        return cls(
            base_dir,
            run_dir,
            run_settings(run_dir),
            AutoTokenizer.from_pretrained(base_dir),
            AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval(),
            [Chain.from_question(info["question"]) for info in test["extra_info"]],
        )

    def steps(self) -> list[int]:
        """0 (the warm start, the PRM equal to its reference) and every saved step, in order."""
        saved = (self.run_dir / "checkpoints").glob("global_step_*")
        return [0, *sorted(int(folder.name.removeprefix("global_step_")) for folder in saved)]

    def models(self, step: int, scratch: Path, policy: bool = True) -> tuple:
        """(policy, PRM, the PRM's reference) at `step`: the step's LoRA actor merged into the fp32 base (the base
        without `policy`, unless the reference is the policy), its PRM, and the policy (`reference: policy`) or the
        base (`init`). At step 0 all three are the base."""
        if step == 0:
            return self.base, self.base, self.base
        step_dir = self.run_dir / "checkpoints" / f"global_step_{step}"
        on_policy = self.settings["reference"] == "policy"
        actor = merged_actor(step_dir, self.base_dir, scratch) if policy or on_policy else self.base
        return actor, fsdp_shards.load_model(step_dir / "prm"), actor if on_policy else self.base


def token_log_probs(model, rows: list) -> list[list[float]]:
    """log π(y_t | prompt, y_<t) of every response token, at temperature 1, in fp32."""
    result = []
    for low in range(0, len(rows), BATCH):
        chunk = rows[low : low + BATCH]
        sequences = [prompt + response for _, prompt, response in chunk]
        width = max(map(len, sequences))
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        for i, sequence in enumerate(sequences):  # right padding: positions are the unpadded ones
            ids[i, : len(sequence)] = torch.tensor(sequence)
            mask[i, : len(sequence)] = 1
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask).logits.float()
        log_probs = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
        for i, (_, prompt, response) in enumerate(chunk):
            result.append(log_probs[i, len(prompt) - 1 : len(prompt) - 1 + len(response)].tolist())
    return result


def merged_actor(step_dir: Path, base_dir: Path, scratch: Path):
    """The LoRA actor of a checkpoint, merged into the exact fp32 base (`tools.export_adapter`)."""
    target = scratch / step_dir.name
    export_adapter.export(step_dir, target, merged=True, base_model=str(base_dir), dtype="float32")
    return AutoModelForCausalLM.from_pretrained(target / "merged", dtype=torch.float32).eval()
