"""The V1 `separate_async` trainer with `hybrid_engine=false` on CPU: trainer and vLLM on separate "GPUs".

Two fake Ray GPUs: one for the FSDP2 LoRA actor, one for a standalone vLLM-CPU replica. Weights
travel through our `cpu_zmq` checkpoint engine (veRL's own engines all need CUDA or RDMA libraries),
which the CPU preset selects by itself for a split layout, and, for LoRA, merged into the base weights
(`model.lora.merge=True`: veRL 0.9.1's disaggregated sync ships no adapter otherwise).
`num_warmup_batches=0` keeps each step's rollouts on the newest weights, so that the actor/rollout
agreement below tests the sync rather than staleness.
"""

import pytest
from loop_runs import LORA_OVERRIDES, STEP_METRICS, assert_finite, common_overrides, load_actor, policy_shift, run_loop

pytestmark = pytest.mark.e2e

STEPS = 2
SEPARATE_ASYNC = [
    "trainer.v1.trainer_mode=separate_async",
    "actor_rollout_ref.hybrid_engine=false",
    "ray_kwargs.ray_init.num_gpus=2",  # trainer 1 + standalone rollout 1
    "actor_rollout_ref.rollout.nnodes=1",
    "actor_rollout_ref.rollout.n_gpus_per_node=1",
    "actor_rollout_ref.model.lora.merge=True",
    "trainer.v1.separate_async.parameter_sync_step=1",  # train_batch_size == 1 x ppo_mini_batch_size
    "trainer.v1.separate_async.num_warmup_batches=0",
]


@pytest.fixture(scope="module")
def split_run(tiny_assets, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("separate_async")
    overrides = common_overrides(tiny_assets, "separate_async", workdir, STEPS) + LORA_OVERRIDES + SEPARATE_ASYNC
    run = run_loop(workdir, overrides)
    assert run.returncode == 0, f"main_ppo exited {run.returncode}:\n{run.tail()}"
    return run


def test_runs_all_steps_and_trains(split_run):
    assert len(split_run.steps) == STEPS
    for step in split_run.steps:
        assert_finite(step, STEP_METRICS)
        assert step["actor/grad_norm"] > 0 and step["critic/advantages/max"] > 0


def test_merged_weights_reached_the_standalone_replica(split_run, tiny_assets):
    moved = policy_shift(tiny_assets, load_actor(split_run.checkpoints / "global_step_1", lora=True))
    assert moved > 0.05, f"one update barely moved the policy ({moved}); the check below would prove nothing"
    for step in split_run.steps[1:]:
        assert step["training/off_policy/trajectory_staleness/mean"] == 0, step
        assert step["training/rollout_actor_probs_pearson_corr"] > 0.95, step
        assert step["rollout_corr/k3_kl"] < moved / 5, f"rollout/actor KL vs one update's shift {moved}"
