"""What the tests of the input checks (`verl_prime_lora.checks.inputs`) share: the CPU PRIME recipe on the tiny
assets (`config`), `check_inputs` failing with a message that starts with the config key (`fails`), and the data rows
and reward files they write. (The tiny assets themselves: the `assets` fixture of this folder's conftest.py.)"""

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from main_ppo_driver import compose_ppo

from verl_prime_lora.checks.inputs import InputCheckError, check_inputs

E2E = Path(__file__).resolve().parents[2] / "e2e"
PARTIAL_CREDIT_REWARD = E2E / "partial_credit_reward.py"  # returns a float
PRIME_LABEL_REWARD = E2E / "prime_label_reward.py"  # returns {score, acc, format}
REWARD_FN = "reward.custom_reward_function.path"
GRPO = ("algorithm.adv_estimator=grpo", "trainer.v1.trainer_mode=sync")  # no PRIME trainer


def config(assets, *overrides, recipe="prime_lora_colocated,cpu"):
    """The CPU PRIME recipe on the tiny assets (as examples/run_cpu_smoke.sh), plus `overrides`."""
    return compose_ppo(
        f"+recipe=[{recipe}]",
        f"data.train_files={assets['train']}",
        f"data.val_files={assets['test']}",
        f"actor_rollout_ref.model.path={assets['model']}",
        *overrides,
    )


def fails(cfg, pattern: str) -> str:
    """check_inputs(cfg) raises InputCheckError whose message matches `pattern` (from its start); the message."""
    with pytest.raises(InputCheckError) as err:
        check_inputs(cfg)
    message = str(err.value)
    assert re.match(pattern, message, re.S), message
    return message


def esc(path) -> str:
    return re.escape(str(path))


def tiny_row(**changes) -> dict:
    row = {
        "data_source": "lighteval/MATH",
        "prompt": [{"role": "user", "content": "What is 1 + 1?"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "2"},
        "extra_info": {"split": "train", "index": 0},
    }
    row.update(changes)
    return {key: value for key, value in row.items() if value is not None}


def write_parquet(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_reward(path: Path, body: str) -> Path:
    path.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n" + body)
    return path
