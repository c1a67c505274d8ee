"""The PRM worker (`prime.prm_worker`): the log-probs its update captured put back in row order, and the worker
config it builds (fp32 master weights, the recipe's compute dtype, the actor's log-prob micro-batches)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from main_ppo_driver import compose_ppo
from omegaconf import OmegaConf

from verl_prime_lora.config import prime_config
from verl_prime_lora.config.verl_view import verl_view
from verl_prime_lora.prime.prm_worker import assemble_captured_log_probs, build_prm_worker_config


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 5), min_size=1, max_size=10),
    ranks=st.sampled_from([1, 2]),
    micro=st.integers(1, 4),
    epochs=st.integers(1, 2),
    seed=st.integers(0, 2**16),
)
def test_captured_log_probs_are_put_back_in_row_order(lengths, ranks, micro, epochs, seed):
    """However veRL splits the rows (shuffled, over ranks and micro-batches) and nests the loss metric (micro-
    batches in a list, ranks in a list when all-gathered, mini-batches in a list), every row gets its first
    epoch's log-probs; a row that was never captured is an error, not a zero."""
    generator = torch.Generator().manual_seed(seed)
    values = [torch.randn(n, generator=generator) for n in lengths]
    width = max(lengths)

    def one_epoch(shift):
        order = torch.randperm(len(lengths), generator=generator).tolist()
        shards = [order[rank::ranks] for rank in range(ranks)]
        per_rank = [
            [
                [(i, values[i] + shift) for i in shard[j : j + micro] if lengths[i] > 0]
                for j in range(0, len(shard), micro)
            ]
            for shard in shards
        ]
        return per_rank if ranks > 1 else per_rank[0]

    captured = [one_epoch(shift=float(epoch)) for epoch in range(epochs)]  # later epochs: other values
    expected = torch.zeros(len(lengths), width)
    for i, v in enumerate(values):
        expected[i, : len(v)] = v
    assert torch.equal(assemble_captured_log_probs(captured, lengths, width), expected)
    with_rows = [i for i, n in enumerate(lengths) if n > 0]
    if with_rows:

        def without(value, row):  # the nested lists with row's pairs removed
            if isinstance(value, tuple):
                return value
            return [without(v, row) for v in value if not (isinstance(v, tuple) and v[0] == row)]

        with pytest.raises(RuntimeError, match=rf"rows \[{with_rows[-1]}\] were not captured"):
            assemble_captured_log_probs(without(captured, with_rows[-1]), lengths, width)
        with pytest.raises(RuntimeError, match="not captured"):
            assemble_captured_log_probs(None, lengths, width)


def test_prm_worker_config_fp32_master_bf16_compute(tiny_model):
    cfg = compose_ppo(
        "+recipe=[prime_lora_colocated,cpu]",
        f"actor_rollout_ref.model.path={tiny_model}",
        "prime.prm.micro_batch_size_per_gpu=2",
        "prime.prm.optim.lr=3e-6",
    )
    view = verl_view(cfg)
    wc = build_prm_worker_config(view.prm, prime_config(view).prm, total_training_steps=11)
    assert wc.model_type == "language_model"
    assert wc.model_config.path == tiny_model and wc.model_config.lora_rank == 0
    # the seed recipe: fp32 master weights, bf16 compute; the CPU preset computes in fp32 as well. veRL's FSDP
    # engine computes in `mixed_precision.param_dtype` (bf16 when unset) and does not read `dtype`.
    assert (wc.engine_config.model_dtype, wc.engine_config.mixed_precision["param_dtype"]) == ("fp32", "fp32")
    seed_cfg = compose_ppo("+recipe=prime_lora_colocated", f"actor_rollout_ref.model.path={tiny_model}")
    seed_view = verl_view(seed_cfg)
    seed = build_prm_worker_config(seed_view.prm, prime_config(seed_view).prm, total_training_steps=11)
    assert (seed.engine_config.model_dtype, seed.engine_config.mixed_precision["param_dtype"]) == ("fp32", "bf16")
    assert wc.engine_config.strategy == "fsdp2" and not wc.engine_config.forward_only
    # the log-prob micro-batches follow the actor's (cpu.yaml: 8); the fused log-prob kernels too
    assert wc.engine_config.micro_batch_size_per_gpu == 2 and wc.engine_config.infer_micro_batch_size_per_gpu == 8
    assert wc.model_config.use_fused_kernels is True
    assert wc.optimizer_config.lr == pytest.approx(3e-6) and wc.optimizer_config.total_training_steps == 11
    assert wc.model_config.override_config["attn_implementation"] == "sdpa"
    lora_view = verl_view(OmegaConf.merge(cfg, {"prime": {"prm": {"model": {"lora_rank": 8}}}}))
    ref = build_prm_worker_config(lora_view.prm, prime_config(lora_view).prm, 11, forward_only=True)
    assert ref.engine_config.forward_only and ref.model_config.lora_rank == 0
