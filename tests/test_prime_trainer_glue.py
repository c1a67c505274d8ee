"""The PRIME glue that runs without Ray: config checks, the driver-side validation hook, LoRA dropout on
veRL's FSDP engine, the PRM loss function on hand-built TensorDicts, reference selection, labels and
checkpoint paths."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import verl
from hydra import compose, initialize_config_dir
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from tensordict import NonTensorData, TensorDict
from verl.protocol import DataProto

import verl_prime_lora.plugin.patches  # noqa: F401 - applies the patches under test (also loaded at `import verl`)
from verl_prime_lora.algo.implicit_prm import prm_bce_loss
from verl_prime_lora.algo.prm_metrics import (
    advantage_part_metrics,
    prm_diagnostics,
    prm_rewards_and_metrics,
    process_reward_stats,
    process_spread_metrics,
)
from verl_prime_lora.algo.process_gate import ProcessGate
from verl_prime_lora.checkpoints import prime_state_file, prm_checkpoint_dir
from verl_prime_lora.checks.config_checks import PrimeConfigError, validate_prime_config
from verl_prime_lora.config import prime_config
from verl_prime_lora.config.prime import PrmConfig, advantage_config
from verl_prime_lora.config.run import (
    REF_ACTOR_BASE,
    REF_ACTOR_REF,
    REF_FROZEN,
    REF_POLICY_OLD,
    REF_POLICY_T1,
    REF_PRM_ADAPTER_OFF,
    reference_source,
    resume_folder,
)
from verl_prime_lora.config.verl_view import algorithm_view, model_view, verl_view
from verl_prime_lora.hardening.step_guards import NonFiniteError
from verl_prime_lora.patching import is_patched
from verl_prime_lora.prime.prime_step import PrimeStep, StepContext, prime_advantages
from verl_prime_lora.prime.prm_loss import (
    CAPTURED_LOG_PROBS,
    PRM_LABEL_FIELD,
    PRM_REF_FIELD,
    PRM_ROW_FIELD,
    PRM_WEIGHT_FIELD,
    prm_loss,
)
from verl_prime_lora.prime.prm_passes import model_dropout, update_forward_is_pre_update
from verl_prime_lora.prime.prm_worker import assemble_captured_log_probs, build_prm_worker_config
from verl_prime_lora.prime.step_rows import labels_from_extra_fields, nested_rows, pad_nested
from verl_prime_lora.prime.trainer import PrimeTrainerSeparateAsync, PrimeTrainerSync

VERL_CONFIG_DIR = str(Path(verl.__file__).parent / "trainer" / "config")


def compose_ppo(*overrides):
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=list(overrides))
    return cfg


def colocated(*overrides):
    return compose_ppo("+recipe=prime_lora_colocated", "actor_rollout_ref.model.path=/m", *overrides)


# --------------------------------------------------------------------------------------------------
# config checks
# --------------------------------------------------------------------------------------------------


def test_both_recipes_are_valid():
    validate_prime_config(colocated())
    validate_prime_config(compose_ppo("+recipe=prime_lora", "actor_rollout_ref.model.path=/m"))
    validate_prime_config(colocated("algorithm.adv_estimator=prime_rloo"))


def test_plain_verl_configs_are_left_alone():
    """No PRIME trainer, no PRIME estimator: no view is built, so not even a value the plugin would refuse is read."""
    assert validate_prime_config(compose_ppo()) is None
    cfg = compose_ppo()
    cfg.trainer.n_gpus_per_node = "all"  # the view would refuse it (an int field); veRL's own checks are veRL's
    assert validate_prime_config(cfg) is None
    cfg.algorithm.adv_estimator = "prime_grpo"
    with pytest.raises(PrimeConfigError, match=r"^trainer\.n_gpus_per_node:"):
        validate_prime_config(cfg)


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["actor_rollout_ref.model.lora.merge=false"], "actor_rollout_ref.model.lora.merge"),
        (["actor_rollout_ref.rollout.n=1"], "actor_rollout_ref.rollout.n"),
        (["trainer.v1.trainer_mode=separate_async"], "trainer.v1.trainer_mode"),
        (["algorithm.adv_estimator=grpo"], "algorithm.adv_estimator"),
        (["prime.prm.update=reverse"], "prime.prm.update"),
        (["prime.prm.reference=sft"], "prime.prm.reference"),
        (["prime.prm.label_key=format"], "prime.prm.label_key"),
        (["prime.prm.balance_labels=sometimes"], "prime.prm.balance_labels"),
        (["prime.prm.mini_batch_size=3"], "prime.prm.mini_batch_size"),
        (["prime.prm.micro_batch_size_per_gpu=5"], "prime.prm.micro_batch_size_per_gpu"),
        (
            ["prime.prm.mini_batch_size=1", "actor_rollout_ref.rollout.n=6", "prime.prm.micro_batch_size_per_gpu=4"],
            "prime.prm.micro_batch_size_per_gpu",
        ),
        (["prime.prm.beta=0"], "prime.prm.beta"),
        (["algorithm.prime.process_gate=0.5"], "algorithm.prime.process_gate"),
        (["algorithm.prime.process_gate=1.5"], "algorithm.prime.process_gate"),
        (["algorithm.prime.process_gate=high"], "algorithm.prime.process_gate"),
        (["prime.process_rewards_fn.path=/no/such/file.py"], "prime.process_rewards_fn.path"),
        (["+prime.process_rewards_fn.color=red"], "prime.process_rewards_fn.color"),
    ],
)
def test_each_error_names_its_key(overrides, key):
    cfg = compose_ppo("+recipe=prime_lora", "actor_rollout_ref.model.path=/m", *overrides)
    with pytest.raises(PrimeConfigError) as err:
        validate_prime_config(cfg)
    assert str(err.value).startswith(key + ":"), str(err.value)


CPU_TWO_RANKS = ("+recipe=[prime_lora_colocated,cpu]", "trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.n=2")


@pytest.mark.parametrize(
    "overrides, key, share",
    [
        # cpu.yaml's micro-batches of 8 fit one rank's 8 responses (4 prompts x 2), not two ranks' 4 each
        ([], "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", "gives each rank 4 rows"),
        (
            ["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4"],
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
            "an actor mini-batch of 8 responses",
        ),
        (
            [
                "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
                "prime.prm.infer_micro_batch_size_per_gpu=3",
            ],
            "prime.prm.infer_micro_batch_size_per_gpu",
            "Pick one of \\[1, 2, 4\\]",
        ),
        (
            # 3 prompts x 2 = 6 responses, padded to a multiple of lcm(2 ranks, 4 x 2) = 8: 4 rows per rank
            ["data.train_batch_size=3", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=3"],
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
            "a step's batch of 8 responses .*padded by veRL to a multiple of 8",
        ),
    ],
)
def test_micro_batches_must_divide_each_ranks_share(overrides, key, share):
    cfg = compose_ppo(*CPU_TWO_RANKS, "actor_rollout_ref.model.path=/m", *overrides)
    with pytest.raises(PrimeConfigError) as err:
        validate_prime_config(cfg)
    assert str(err.value).startswith(key + ":") and re.search(share, str(err.value)), str(err.value)


def test_micro_batches_that_fit_two_ranks_pass():
    micro = (
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    )
    validate_prime_config(compose_ppo(*CPU_TWO_RANKS, "actor_rollout_ref.model.path=/m", *micro))
    # dynamic micro-batches (token budgets) are not checked
    dynamic = (
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
        "prime.prm.use_dynamic_bsz=true",
        "prime.prm.max_token_len_per_gpu=4096",
    )
    validate_prime_config(compose_ppo(*CPU_TWO_RANKS, "actor_rollout_ref.model.path=/m", *dynamic))


@pytest.mark.parametrize("estimator", ["prime_grpo", "prime_rloo"])
def test_prime_estimator_without_prime_trainer(estimator):
    cfg = compose_ppo(f"algorithm.adv_estimator={estimator}")
    with pytest.raises(PrimeConfigError, match=r"^trainer\.v1\.trainer_mode:"):
        validate_prime_config(cfg)


class _Tok:
    def __init__(self, vocab, eos=0):
        self._vocab, self.eos_token_id, self.bos_token_id, self.pad_token_id = vocab, eos, None, eos

    def get_vocab(self):
        return dict(self._vocab)


def test_prm_tokenizer_must_match(monkeypatch):
    import transformers

    toks = {"/actor": _Tok({"a": 0, "b": 1}), "/prm_same": _Tok({"a": 0, "b": 1}), "/prm_other": _Tok({"a": 0, "c": 1})}
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda p, **kw: toks[p])
    base = ("+recipe=prime_lora_colocated", "actor_rollout_ref.model.path=/actor")
    validate_prime_config(compose_ppo(*base, "prime.prm.model.path=/prm_same"))
    with pytest.raises(PrimeConfigError, match=r"^prime\.prm\.model\.path:.*vocabularies differ"):
        validate_prime_config(compose_ppo(*base, "prime.prm.model.path=/prm_other"))
    with pytest.raises(PrimeConfigError, match=r"^prime\.prm\.model\.tokenizer_path:"):
        validate_prime_config(compose_ppo(*base, "prime.prm.model.tokenizer_path=/prm_other"))


def test_separate_async_logger_accepts_flush(caplog):
    """veRL's split trainer logs with `flush=True` (trainer_separate_async.py:181); it must not crash."""
    from verl.trainer.ppo.v1 import trainer_separate_async

    with caplog.at_level("INFO", logger=trainer_separate_async.__name__):
        trainer_separate_async.logger.info("weights synced to %s", "rollout", flush=True)
    assert "weights synced to rollout" in caplog.text


def test_driver_validation_wraps_verl_validate_config():
    import verl.utils.config as verl_config

    assert is_patched(verl_config.validate_config)
    with pytest.raises(PrimeConfigError, match=r"^actor_rollout_ref\.rollout\.n:"):
        verl_config.validate_config(
            colocated("actor_rollout_ref.rollout.n=1"), use_reference_policy=False, use_critic=False
        )


# --------------------------------------------------------------------------------------------------
# LoRA dropout on veRL's FSDP engine
# --------------------------------------------------------------------------------------------------


def _tiny_causal_lm():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(cfg)


def _engine_stub(dropout):
    model_config = SimpleNamespace(
        lora_rank=4,
        lora_alpha=8,
        target_modules="all-linear",
        target_parameters=None,
        exclude_modules=None,
        lora_adapter_path=None,
        use_shm=False,
        lora={"dropout": dropout, "merge": False},
    )
    return SimpleNamespace(model_config=model_config)


@pytest.mark.parametrize("dropout", [0.05, 0.0])
def test_fsdp_engine_lora_gets_dropout(dropout, tmp_path):
    import torch.nn as nn
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    assert is_patched(FSDPEngine._build_lora_module)
    peft_model = FSDPEngine._build_lora_module(_engine_stub(dropout), _tiny_causal_lm())
    layers = [
        m.lora_dropout["default"]
        for m in peft_model.modules()
        if isinstance(getattr(m, "lora_dropout", None), nn.ModuleDict)
    ]
    assert layers
    if dropout > 0:
        assert all(isinstance(d, nn.Dropout) and d.p == pytest.approx(dropout) for d in layers)
    else:
        assert all(isinstance(d, nn.Identity) for d in layers)
    assert peft_model.peft_config["default"].lora_dropout == pytest.approx(dropout)

    # the saved adapter says so, and so does veRL's checkpoint metadata
    peft_model.save_pretrained(tmp_path / "adapter")
    saved = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert saved["lora_dropout"] == pytest.approx(dropout)
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    meta = FSDPCheckpointManager._get_lora_train_meta(None, peft_model)
    assert meta["lora_dropout"] == pytest.approx(dropout) and meta["r"] == 4


def test_lora_dropout_is_active_in_train_mode_only():
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    peft_model = FSDPEngine._build_lora_module(_engine_stub(0.5), _tiny_causal_lm())
    for m in peft_model.modules():  # make the adapter non-zero so dropout shows in the output
        if hasattr(m, "lora_B") and "default" in m.lora_B:
            torch.nn.init.normal_(m.lora_B["default"].weight)
    ids = torch.arange(10).unsqueeze(0)
    peft_model.eval()
    a, b = peft_model(input_ids=ids).logits, peft_model(input_ids=ids).logits
    assert torch.equal(a, b)
    peft_model.train()
    torch.manual_seed(1)
    c = peft_model(input_ids=ids).logits
    assert not torch.allclose(a, c)


# --------------------------------------------------------------------------------------------------
# the PRM loss function on hand-built TensorDicts (what TrainingWorker hands to it)
# --------------------------------------------------------------------------------------------------


def _nested(rows):
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def _micro_batch(beta=0.05, weights=(1.0, 1.0, 1.0)):
    torch.manual_seed(0)
    prompt_lens, resp_lens = [2, 3, 2], [3, 2, 1]
    resp_mask = [torch.ones(3), torch.ones(2), torch.zeros(1)]  # row 2 = a veRL padding row
    seq_lp = [torch.randn(p + r, requires_grad=True) for p, r in zip(prompt_lens, resp_lens)]
    ref = [torch.randn(r) for r in resp_lens]
    labels = torch.tensor([1.0, 0.0, 1.0])
    data = TensorDict(
        {
            "prompts": _nested([torch.zeros(p, dtype=torch.long) for p in prompt_lens]),
            "responses": _nested([torch.zeros(r, dtype=torch.long) for r in resp_lens]),
            "response_mask": _nested(resp_mask),
            PRM_REF_FIELD: _nested(ref),
            PRM_LABEL_FIELD: nested_rows(labels, resp_lens),
            PRM_WEIGHT_FIELD: nested_rows(torch.tensor(weights), resp_lens),
            "global_batch_size": NonTensorData(4),
            "dp_size": NonTensorData(2),
        },
        batch_size=[3],
    )
    # model log-probs over the whole sequence; position t predicts token t+1 (veRL's convention)
    model_output = {"log_probs": _nested(seq_lp)}
    expected_logits = []
    for lp, p, r, rf, m in zip(seq_lp, prompt_lens, resp_lens, ref, resp_mask):
        resp_lp = lp[p - 1 : p + r - 1]
        expected_logits.append(beta * ((resp_lp - rf) * m).sum())
    return model_output, data, seq_lp, torch.stack(expected_logits), labels


def test_prm_loss_matches_the_bce_of_core_algos_with_global_normalisation():
    beta = 0.05
    model_output, data, seq_lp, logits, labels = _micro_batch(beta)
    loss, metrics = prm_loss(model_output, data, beta=beta)
    mask = torch.tensor([[1.0], [1.0], [0.0]])
    expected = prm_bce_loss(logits, labels, mask, reduction="sum") * 2 / 4  # x dp_size / global_batch_size
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    # by hand: the padding row is excluded
    by_hand = sum(
        -(y * math.log(torch.sigmoid(z).item()) + (1 - y) * math.log(1 - torch.sigmoid(z).item()))
        for z, y in zip(logits[:2], labels[:2].tolist())
    )
    assert loss.item() == pytest.approx(by_hand * 2 / 4, rel=1e-5)
    loss.backward()
    assert seq_lp[0].grad is not None and seq_lp[0].grad.abs().sum() > 0
    assert seq_lp[2].grad is None or seq_lp[2].grad.abs().sum() == 0  # padding row gets no gradient


def test_prm_loss_weights_each_row_by_its_label_weight():
    beta = 0.05
    model_output, data, _, logits, labels = _micro_batch(beta, weights=(1.5, 0.5, 0.0))
    loss, _ = prm_loss(model_output, data, beta=beta)
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits[:2].detach(), labels[:2], reduction="none")
    assert loss.item() == pytest.approx((1.5 * bce[0] + 0.5 * bce[1]).item() * 2 / 4, rel=1e-6)


def test_prm_loss_captures_each_rows_response_log_probs_on_request():
    """With `capture_log_probs`, the loss also returns (row in the step's batch, the row's response log-probs)
    for every row of the micro-batch: what the PRM would compute in a forward of its own, before the update."""
    beta = 0.05
    model_output, data, seq_lp, _, _ = _micro_batch(beta)
    loss, metrics = prm_loss(model_output, data, beta=beta)
    assert metrics == {}  # not asked
    data[PRM_ROW_FIELD] = nested_rows(torch.tensor([5.0, 0.0, 9.0]), [3, 2, 1])
    data["capture_log_probs"] = NonTensorData(True)
    captured_loss, metrics = prm_loss(model_output, data, beta=beta)
    assert captured_loss.item() == loss.item()
    rows = metrics[CAPTURED_LOG_PROBS]
    assert [row for row, _ in rows] == [5, 0, 9]
    for (_, values), lp, p, r in zip(rows, seq_lp, [2, 3, 2], [3, 2, 1]):
        assert not values.requires_grad
        assert torch.equal(values, lp[p - 1 : p + r - 1].detach())  # position t predicts token t+1


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


@pytest.mark.parametrize(
    "update, dropout, rows, micro, fp32, exact",
    [
        ("after", 0.0, 16, (2, 4), True, True),  # one mini-batch of 8 prompts x 2: its first forward is pre-update
        ("before", 0.0, 16, (2, 4), True, True),
        ("after", 0.0, 32, (2, 4), True, False),  # two mini-batches: the second's forward follows an optimizer step
        ("after", 0.1, 16, (2, 4), True, False),  # dropout in the model or its LoRA adapter
        ("none", 0.0, 16, (2, 4), True, False),  # no update
        ("after", 0.0, 16, (2, 4), False, False),  # bf16: other micro-batches than the log-prob forward's round apart
        ("after", 0.0, 16, (4, 4), False, True),  # bf16 with the log-prob forward's micro-batches: the same numbers
    ],
)
def test_the_update_forward_is_the_pre_update_forward_only_where_exact(update, dropout, rows, micro, fp32, exact):
    train, infer = micro
    prm = PrmConfig(
        update=update, mini_batch_size=8, micro_batch_size_per_gpu=train, infer_micro_batch_size_per_gpu=infer
    )
    assert update_forward_is_pre_update(prm, dropout, rows, n=2, fp32_compute=fp32) is exact


def test_model_dropout_reads_the_config_and_its_overrides(tiny_model, tmp_path):
    model = OmegaConf.create({"path": tiny_model, "override_config": {}})
    assert model_dropout(model_view(model)) == 0.0  # Qwen2: attention_dropout 0
    model.override_config = {"attention_dropout": 0.1}
    assert model_dropout(model_view(model)) == 0.1
    assert model_dropout(model_view(OmegaConf.create({"path": str(tmp_path / "missing")}))) == 1.0  # unknown: not 0


def test_model_dropout_counts_a_lora_prm_adapters_dropout(tiny_model, tmp_path):
    model = OmegaConf.create({"path": tiny_model, "lora_rank": 8})
    assert model_dropout(model_view(model)) == 0.0  # veRL's LoraConfig has none; nothing asked for one
    model.lora = {"dropout": 0.05}  # applied by plugin.patches.install_lora_dropout
    assert model_dropout(model_view(model)) == 0.05
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_dropout": 0.1}))
    loaded = OmegaConf.create({"path": tiny_model, "lora_adapter_path": str(adapter)})
    assert model_dropout(model_view(loaded)) == 0.1  # peft keeps a loaded adapter's own dropout
    loaded.lora = {"dropout": 0.02}
    assert model_dropout(model_view(loaded)) == 0.02  # ... unless model.lora.dropout replaces it
    loaded = OmegaConf.create({"path": tiny_model, "lora_adapter_path": str(tmp_path / "hdfs-only")})
    assert model_dropout(model_view(loaded)) == 1.0  # unreadable here: unknown, not 0


def test_multi_output_sessions_are_refused_before_any_update():
    from verl_prime_lora.prime.step_rows import refuse_multi_output_sessions

    refuse_multi_output_sessions(["u_1_0", "u_2_0", "my_uid_3_0"], [False, False, False])
    refuse_multi_output_sessions(["u_1_0", "u_1_1"], [False, True])  # a padding row copies another's key
    with pytest.raises(NotImplementedError, match=r"^trainer\.v1\.trainer_mode: .*'u_1_1'"):
        refuse_multi_output_sessions(["u_1_0", "u_1_1"], [False, False])


def test_prm_label_column_is_never_the_format_reward():
    extra = [
        {"reward_extra_info": {"acc": 1.0, "format": 0.0, "score": 1.0}},
        NonTensorData({"reward_extra_info": {"acc": 0, "format": 1.0}}),
        {"reward_extra_info": {}},
    ]
    labels = labels_from_extra_fields(extra, [False, False, True], "acc")
    assert labels.tolist() == [1.0, 0.0, 0.0]  # padding row -> 0 (its response mask is empty anyway)
    with pytest.raises(KeyError, match="prime.prm.label_key"):
        labels_from_extra_fields([{"reward_extra_info": {"format": 1.0}}], [False], "acc")


def test_nested_helpers_round_trip():
    x = torch.arange(12.0).reshape(3, 4)
    nt = nested_rows(x, [4, 2, 0])
    assert pad_nested(nt, 4).tolist() == [[0, 1, 2, 3], [4, 5, 0, 0], [0, 0, 0, 0]]
    lab = nested_rows(torch.tensor([1.0, 0.0]), [3, 1])
    assert pad_nested(lab, 3).tolist() == [[1, 1, 1], [0, 0, 0]]


def test_process_reward_stats_ignore_padding_rows():
    r = torch.tensor([[0.1, 0.2, 0.0], [-0.3, 0.0, 0.0], [5.0, 5.0, 5.0]])
    m = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]]).float()
    stats = process_reward_stats(r, m, torch.tensor([1.0, 0.0, 1.0]))
    assert stats["prm/process_reward/token_max"] == pytest.approx(0.2)
    assert stats["prm/process_reward/seq_mean"] == pytest.approx((0.3 - 0.3) / 2)
    assert stats["prm/process_reward/seq_mean_correct"] == pytest.approx(0.3)
    assert all(math.isfinite(v) for v in stats.values())


# --------------------------------------------------------------------------------------------------
# reference selection, trainer mode, checkpoint paths, worker config
# --------------------------------------------------------------------------------------------------


def reference_of(config, use_reference_policy):
    view = verl_view(config)
    return reference_source(view, prime_config(view).prm, use_reference_policy)


def test_reference_source_picks_the_cheapest_correct_one():
    assert reference_of(colocated(), use_reference_policy=False) == REF_ACTOR_BASE  # T=0.7: recompute at 1
    assert reference_of(colocated("actor_rollout_ref.rollout.temperature=1.0"), True) == REF_ACTOR_REF
    assert reference_of(colocated("actor_rollout_ref.rollout.temperature=1.0"), False) == REF_ACTOR_BASE
    assert reference_of(colocated("prime.prm.model.lora_rank=8"), False) == REF_PRM_ADAPTER_OFF
    assert reference_of(colocated("prime.prm.model.path=/other"), False) == REF_FROZEN
    assert reference_of(colocated("actor_rollout_ref.model.lora_rank=0"), False) == REF_FROZEN
    assert reference_of(colocated("prime.prm.reference=policy"), False) == REF_POLICY_T1
    assert (
        reference_of(colocated("prime.prm.reference=policy", "actor_rollout_ref.rollout.temperature=1.0"), False)
        == REF_POLICY_OLD
    )


def test_prime_trainers_present_their_verl_mode():
    for cls, base, name in (
        (PrimeTrainerSync, "sync", "prime_sync"),
        (PrimeTrainerSeparateAsync, "separate_async", "prime_separate_async"),
    ):
        trainer = object.__new__(cls)
        trainer.trainer_mode = name  # what PPOTrainer.__init__ assigns
        assert trainer.trainer_mode == base and trainer.prime_trainer_mode == name
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls

    assert get_trainer_cls("prime_sync") is PrimeTrainerSync
    assert get_trainer_cls("prime_separate_async") is PrimeTrainerSeparateAsync


def _trainer_with_gate(pairwise_ema: float) -> PrimeTrainerSync:
    """A trainer whose step holds only its gate, at `pairwise_ema`."""
    trainer = object.__new__(PrimeTrainerSync)
    trainer.prime_step = object.__new__(PrimeStep)
    trainer.prime_step.gate = ProcessGate(0.75)
    trainer.prime_step.gate.pairwise_ema = pairwise_ema
    return trainer


def test_the_process_gate_state_is_saved_and_restored(tmp_path, caplog):
    """The gate's running mean travels with the checkpoint through the step's state: a resumed run continues it,
    not ½ again."""
    path = prime_state_file(str(tmp_path / "global_step_4"))
    _trainer_with_gate(0.73)._save_prime_state(path)
    resumed = _trainer_with_gate(0.5)  # as a run starts
    resumed._load_prime_state(path)
    assert resumed.prime_step.gate.pairwise_ema == 0.73
    older = _trainer_with_gate(0.5)
    with caplog.at_level("WARNING"):
        older._load_prime_state(str(tmp_path / "global_step_1" / "prime_state.json"))  # a checkpoint without it
    assert older.prime_step.gate.pairwise_ema == 0.5 and "the gate restarts at 1/2" in caplog.text


def test_resume_folder_and_prm_nesting(tmp_path, monkeypatch):
    ckpt = tmp_path / "ckpts"
    (ckpt / "global_step_2").mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("2")
    c = OmegaConf.create({"trainer": {"resume_mode": "auto", "default_local_dir": str(ckpt), "resume_from_path": None}})
    t = c.trainer
    assert resume_folder(verl_view(c)) == str(ckpt / "global_step_2")
    assert prm_checkpoint_dir(resume_folder(verl_view(c))) == str(ckpt / "global_step_2" / "prm")
    t.resume_mode = "disable"
    assert resume_folder(verl_view(c)) is None
    t.resume_mode, t.resume_from_path = "resume_path", "rel/global_step_7"
    monkeypatch.chdir(tmp_path)
    assert resume_folder(verl_view(c)) == str(tmp_path / "rel" / "global_step_7")
    t.resume_mode, t.default_local_dir = "auto", str(tmp_path / "empty")
    assert resume_folder(verl_view(c)) is None


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    subprocess.run(
        [sys.executable, "-m", "verl_prime_lora.tools.tiny", "--out", str(out)], check=True, capture_output=True
    )
    return str(out / "model")


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


# --------------------------------------------------------------------------------------------------
# process rewards -> registered estimator: padding rows and reordered batches (groups by uid)
# --------------------------------------------------------------------------------------------------


def _step_tensors(seed=0):
    g = torch.Generator().manual_seed(seed)
    B, T = 6, 5
    lengths = torch.tensor([5, 3, 4, 2, 5, 1])
    mask = (torch.arange(T)[None] < lengths[:, None]).float()
    mask[5] = 0  # a veRL padding row (uid "pad...", empty response)
    prm = -torch.rand(B, T, generator=g) * mask
    ref = -torch.rand(B, T, generator=g) * mask
    labels = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    scores = torch.zeros(B, T)
    scores[torch.arange(B), (lengths - 1).clamp_min(0)] = labels * 2
    scores = scores * mask
    uid = ["a", "a", "b", "b", "c", "pad0"]
    return prm, ref, mask, labels, uid, scores


@pytest.mark.parametrize("estimator", ["prime_grpo", "prime_rloo"])
def test_advantages_follow_uid_groups_and_ignore_padding(estimator):
    prm, ref, mask, labels, uid, scores = _step_tensors()  # prm, ref: independent seeded random log-probs
    algo = algorithm_view(
        OmegaConf.create(
            {
                "adv_estimator": estimator,
                "gamma": 1.0,
                "norm_adv_by_std_in_grpo": True,
                "prime": {"process_std_threshold": 0.0},
            }
        )
    )
    r, metrics, _ = prm_rewards_and_metrics(prm, prm, ref, mask, labels, np.array(uid, dtype=object), 0.05)
    assert all(math.isfinite(v) for v in metrics.values())
    assert torch.all(r[5] == 0)
    assert torch.all(r[mask.bool()] != 0)  # a process part on every valid token: the check below covers it
    adv, _ = prime_advantages(algo, scores, mask, np.array(uid, dtype=object), r)
    assert torch.all(adv[5] == 0)

    perm = [4, 2, 5, 0, 3, 1]  # veRL's _balance_batch reorders rows
    r_p, metrics_p, _ = prm_rewards_and_metrics(
        prm[perm], prm[perm], ref[perm], mask[perm], labels[perm], np.array([uid[i] for i in perm], dtype=object), 0.05
    )
    adv_p, _ = prime_advantages(algo, scores[perm], mask[perm], np.array([uid[i] for i in perm], dtype=object), r_p)
    assert torch.allclose(adv_p, adv[perm], atol=1e-6)
    assert metrics_p == pytest.approx(metrics)  # labels travel with their rows

    # the gate's weight reaches the estimator: 0 gives the outcome-only advantage
    r_prm, _, _ = prm_rewards_and_metrics(prm, prm, ref, mask, labels, np.array(uid, dtype=object), 0.05)
    full, _ = prime_advantages(algo, scores, mask, np.array(uid, dtype=object), r_prm)
    gated, _ = prime_advantages(algo, scores, mask, np.array(uid, dtype=object), r_prm, process_scale=0.0)
    outcome_only, _ = prime_advantages(algo, scores, mask, np.array(uid, dtype=object), torch.zeros_like(r))
    assert torch.equal(gated, outcome_only) and not torch.allclose(full, outcome_only)


def test_the_metrics_show_what_reached_the_advantage():
    """`prm/process_group_std/*` and `prm/process_groups_on` (is the process term on at all), and the mean |A| of the
    outcome and the process part that the actor receives (gate and threshold applied)."""
    prm, ref, mask, labels, uid, scores = _step_tensors()
    uid = np.array(uid, dtype=object)
    algo = algorithm_view(
        OmegaConf.create({"adv_estimator": "prime_grpo", "gamma": 1.0, "prime": {"process_std_threshold": 0.01}})
    )
    options = advantage_config(algo.node)
    untrained, _, _ = prm_rewards_and_metrics(ref, ref, ref, mask, labels, uid, 0.05)  # PRM == reference
    trained, _, _ = prm_rewards_and_metrics(prm, prm, ref, mask, labels, uid, 0.05)

    quiet = process_spread_metrics(untrained, mask, uid, options, "prime_grpo")
    assert quiet == {
        "prm/process_group_std/mean": 0.0,
        "prm/process_group_std/max": 0.0,
        "prm/process_groups_on": 0.0,
    }  # groups a, b and c (c is a singleton + the padding row's own group: not counted)
    loud = process_spread_metrics(trained, mask, uid, options, "prime_grpo")
    assert loud["prm/process_group_std/max"] >= loud["prm/process_group_std/mean"] > 0.01
    assert loud["prm/process_groups_on"] == 1.0
    assert "prm/process_groups_on" not in process_spread_metrics(trained, mask, uid, options, "prime_rloo")

    for rewards, gate, process_on in ((trained, 1.0, True), (trained, 0.0, False), (untrained, 1.0, False)):
        _, returns = prime_advantages(algo, scores, mask, uid, rewards, process_scale=gate)
        _, outcome = prime_advantages(algo, scores, mask, uid, rewards, process_scale=0.0)
        parts = advantage_part_metrics(returns, outcome, mask)
        assert parts["prm/advantage/outcome_abs_mean"] > 0
        assert (parts["prm/advantage/process_abs_mean"] > 0) is process_on


def test_prm_metrics_before_and_after_the_update():
    prm, ref, mask, labels, uid, _ = _step_tensors()
    uid = np.array(uid, dtype=object)
    _, m0, _ = prm_rewards_and_metrics(
        ref, ref, ref, mask, labels, uid, 0.05, {"loss": 0.7, "grad_norm": 1.0, "lr": 1e-6}
    )
    assert m0["prm/ce_loss"] == pytest.approx(math.log(2))  # PRM == reference: z = 0
    assert m0["prm/update_loss"] == 0.7 and m0["prm/grad_norm"] == 1.0 and m0["prm/lr"] == 1e-6
    # a PRM that ranks the correct answer higher: group a (labels 1, 0) is right after the update;
    # groups b (1, 1) and c (one row) have no pair and count 1/2 (core_algos' convention)
    better = ref + 0.5 * labels[:, None] * mask
    _, m1, _ = prm_rewards_and_metrics(ref, better, ref, mask, labels, uid, 0.05)
    assert m1["prm/dpo_acc_before"] == pytest.approx(0.5)
    assert m1["prm/dpo_acc"] == pytest.approx((1.0 + 0.5 + 0.5) / 3)
    assert m1["prm/dpo_acc_mixed"] == pytest.approx(1.0)  # over group a only, the one with a right and a wrong
    assert m1["prm/dpo_acc_before_mixed"] == pytest.approx(0.5)  # the gate's input: the PRM before the update
    _, m2, _ = prm_rewards_and_metrics(better, better, ref, mask, labels, uid, 0.05)
    assert m2["prm/dpo_acc_before_mixed"] == pytest.approx(1.0)  # group a only: b and c hold no pair


def test_prm_diagnostics_of_length_drift_and_the_policy_shift():
    """Over the mixed group a only (row 0 right, 5 tokens; row 1 wrong, 3 tokens)."""
    prm, ref, mask, labels, uid, _ = _step_tensors()
    uid = np.array(uid, dtype=object)
    # a PRM that raised right answers' tokens by 0.1 nats, and lowered every token by 0.5
    drifted = ref + (0.1 * labels[:, None] - 0.5) * mask
    wrong_up = ref + 0.3 * (1 - labels[:, None]) * mask  # a policy that moved towards the wrong answers
    _, m, _ = prm_rewards_and_metrics(drifted, drifted, ref, mask, labels, uid, 0.05)
    m.update(prm_diagnostics(drifted, ref, mask, labels, uid, 0.05, policy=wrong_up))
    assert m["prm/token_log_ratio_mean"] == pytest.approx(0.1 * 11 / 19 - 0.5)  # 11 of 19 tokens are right ones
    assert m["prm/length_pairwise_mixed"] == 1.0  # the right answer is the longer one
    assert m["prm/dpo_acc_mixed"] == 0.0  # z0 = β(0.5 − 2.5) < z1 = β(−1.5): the drift ranks the shorter first
    # what the reference's own likelihood Σ_t log π_ref ranks, on planted references: row 0 = 5 × −0.2 = −1.0 against
    # row 1 = 3 × −0.5 = −1.5 (the right answer more likely: 1), then against 3 × −0.2 = −0.6 (the wrong one: 0)
    for row_1_token, ranked in ((-0.5, 1.0), (-0.2, 0.0)):
        planted = ref.clone()
        planted[0], planted[1] = -0.2 * mask[0], row_1_token * mask[1]
        assert prm_diagnostics(drifted, planted, mask, labels, uid, 0.05)["prm/ref_likelihood_dpo_acc_mixed"] == ranked
    assert m["prm/policy_dpo_acc_mixed"] == 0.0
    assert "prm/policy_dpo_acc_mixed" not in prm_diagnostics(drifted, ref, mask, labels, uid, 0.05)  # no policy


# --------------------------------------------------------------------------------------------------
# passes of the PRM per step, against the minimum
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "update, reference, today, minimum",
    [
        # (PRM forwards, PRM forward+backward, reference forwards)
        ("after", "actor_ref_log_prob", (1, 1, 0), (0, 1, 0)),  # veRL's ref log-probs reused
        ("before", "actor_ref_log_prob", (2, 1, 0), (1, 1, 0)),
        ("none", "actor_ref_log_prob", (1, 0, 0), (1, 0, 0)),
        ("after", "frozen_prm_copy", (1, 1, 1), (0, 1, 1)),
        ("before", "actor_policy_t1", (2, 1, 1), (1, 1, 1)),  # rollout temperature != 1: one actor forward
        ("after", "actor_old_log_probs", (1, 1, 0), (0, 1, 0)),
    ],
)
def test_prm_passes_per_step_and_their_minimum(update, reference, today, minimum):
    from verl_prime_lora.prime.prm_passes import PrmPasses, prm_passes

    assert prm_passes(update, reference) == (PrmPasses(*today), PrmPasses(*minimum))
    # only the pre-update PRM forward of a training mode is above the minimum
    now, least = prm_passes(update, reference)
    assert now.total() - least.total() == (update != "none")
    assert prm_passes(update, reference, epochs=2)[0].prm_train == (0 if update == "none" else 2)
    # with the pre-update log-probs taken from the update's first forward, a training mode makes the minimum
    if update != "none":
        assert prm_passes(update, reference, from_update=True) == (PrmPasses(*minimum), PrmPasses(*minimum))


# A mini-batch of rows for the data-parallel check: (prompt length, response length, label, weight);
# response length 0 = a padding row of veRL's batch balancing.
_DP_ROWS = st.lists(
    st.tuples(st.integers(1, 3), st.integers(0, 4), st.sampled_from([0.0, 1.0]), st.floats(0.25, 2.0, allow_nan=False)),
    min_size=2,
    max_size=12,
)


def _prm_micro_batch(rows, theta, features, global_batch_size, dp_size):
    """`prm_loss` on one micro-batch whose per-token PRM log-probs are features @ theta (a shared 'model')."""
    prompt_lens = [p for p, _, _, _ in rows]
    resp_lens = [max(r, 1) for _, r, _, _ in rows]  # a padding row keeps one masked token, as veRL's do
    data = TensorDict(
        {
            "prompts": _nested([torch.zeros(p, dtype=torch.long) for p in prompt_lens]),
            "responses": _nested([torch.zeros(r, dtype=torch.long) for r in resp_lens]),
            "response_mask": _nested([torch.full((max(r, 1),), float(r > 0)) for _, r, _, _ in rows]),
            PRM_REF_FIELD: _nested([f[:n, 0] for f, n in zip(features, resp_lens)]),
            PRM_LABEL_FIELD: nested_rows(torch.tensor([y for _, _, y, _ in rows]), resp_lens),
            PRM_WEIGHT_FIELD: nested_rows(torch.tensor([w for _, _, _, w in rows]), resp_lens),
            "global_batch_size": NonTensorData(global_batch_size),
            "dp_size": NonTensorData(dp_size),
        },
        batch_size=[len(rows)],
    )
    log_probs = _nested([f[: p + r] @ theta for f, p, r in zip(features, prompt_lens, resp_lens)])
    return prm_loss({"log_probs": log_probs}, data, beta=0.5)[0]


@settings(max_examples=60, deadline=None)
@given(rows=_DP_ROWS, micro_1=st.integers(1, 5), micro_2=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_prm_gradient_is_the_same_on_one_rank_and_on_two(rows, micro_1, micro_2, seed):
    """The PRM's mini-batch gradient does not depend on how veRL lays the rows out: one rank, or two ranks
    (veRL's dispatch gives each a contiguous half; FSDP averages their gradients), each summing its own
    micro-batches of any size, padding rows anywhere. All equal the gradient of
    Σ_i w_i·BCE(z_i, acc_i) / G, G = the mini-batch's rows (padding included; veRL's `global_batch_size`)."""
    if len(rows) % 2:
        rows = rows[:-1]
    generator = torch.Generator().manual_seed(seed)
    features = [torch.randn(p + max(r, 1), 3, generator=generator, dtype=torch.float64) for p, r, _, _ in rows]
    theta0 = torch.randn(3, generator=generator, dtype=torch.float64)
    n = len(rows)

    def gradient(shards, micro, dp_size):
        theta = theta0.clone().float().requires_grad_()
        for shard in shards:  # each rank: the sum of its micro-batch losses
            for i in range(shard.start, shard.stop, micro):
                chunk = range(i, min(i + micro, shard.stop))
                loss = _prm_micro_batch(
                    [rows[j] for j in chunk], theta, [features[j].float() for j in chunk], n, dp_size
                )
                loss.backward()
        return theta.grad.double() / dp_size  # FSDP's mean over the ranks

    one_rank = gradient([range(n)], micro_1, dp_size=1)
    two_ranks = gradient([range(n // 2), range(n // 2, n)], micro_2, dp_size=2)

    theta = theta0.clone().requires_grad_()
    z, labels, weights, valid = [], [], [], []
    for (p, r, y, w), f in zip(rows, features):
        q = f[p - 1 : p + r - 1] @ theta - f[:r, 0]  # log π_φ − log π_ref of the response tokens
        z.append(0.5 * q.sum())
        labels.append(y), weights.append(w), valid.append(float(r > 0))
    bce = torch.nn.functional.binary_cross_entropy_with_logits(
        torch.stack(z), torch.tensor(labels, dtype=torch.float64), reduction="none"
    )
    (bce * torch.tensor(weights, dtype=torch.float64) * torch.tensor(valid, dtype=torch.float64)).sum().div(
        n
    ).backward()

    torch.testing.assert_close(one_rank, theta.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(two_ranks, theta.grad, rtol=1e-4, atol=1e-6)


STEP_3 = StepContext(global_step=3)


def _step_with_process_rewards_fn(fn) -> PrimeStep:
    step = object.__new__(PrimeStep)
    step.run = SimpleNamespace(
        process_rewards_fn=fn,
        prime=SimpleNamespace(process_rewards_fn=SimpleNamespace(name=getattr(fn, "__name__", "fn"))),
    )
    return step


def test_a_process_rewards_fn_replaces_the_prm_rewards_masked():
    rewards = torch.randn(3, 4, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float64)
    data = DataProto.from_dict({"responses": torch.arange(12).reshape(3, 4)})
    step = SimpleNamespace(reward_infos=[{"k": 0}, {"k": 1}, {"k": 2}])
    seen = {}

    def flip(process_rewards, response_mask, responses, reward_infos, tokenizer):
        seen.update(responses=responses, infos=reward_infos)
        process_rewards.fill_(0)  # the function gets a copy: the PRM's rewards stay as they were
        return -torch.ones(3, 4)

    replaced = _step_with_process_rewards_fn(flip)._replaced_process_rewards(data, step, rewards, mask, STEP_3)
    assert torch.equal(replaced, -mask) and replaced.dtype == torch.float64
    assert torch.equal(seen["responses"], data.batch["responses"]) and seen["infos"] == step.reward_infos
    assert rewards.abs().sum() > 0


@pytest.mark.parametrize(
    "result, message",
    [
        (torch.zeros(3, 5), r"returned \(3, 5\); expected a tensor of shape \(3, 4\)"),
        ([0.0] * 12, "returned list"),
        (torch.full((3, 4), math.nan), "replaced token process rewards are NaN"),
    ],
)
def test_a_process_rewards_fn_that_returns_the_wrong_thing_stops_the_step(result, message):
    rewards, mask = torch.zeros(3, 4), torch.ones(3, 4)
    data = DataProto.from_dict({"responses": torch.zeros(3, 4, dtype=torch.long)})
    step = _step_with_process_rewards_fn(lambda **kwargs: result)
    with pytest.raises((PrimeConfigError, NonFiniteError), match=message) as err:
        step._replaced_process_rewards(data, SimpleNamespace(reward_infos=[{}] * 3), rewards, mask, STEP_3)
    assert str(err.value).startswith("prime.process_rewards_fn")


def test_what_a_process_rewards_fn_puts_on_padding_never_reaches_the_advantage():
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    step = _step_with_process_rewards_fn(lambda **kwargs: torch.tensor([[1.0, 2.0, math.nan]]))
    data = DataProto.from_dict({"responses": torch.zeros(1, 3, dtype=torch.long)})
    replaced = step._replaced_process_rewards(data, SimpleNamespace(reward_infos=[{}]), torch.zeros(1, 3), mask, STEP_3)
    assert torch.equal(replaced, torch.tensor([[1.0, 2.0, 0.0]]))


def test_the_process_rewards_fn_is_loaded_before_ray(tmp_path):
    source = tmp_path / "credit.py"
    source.write_text("def zero(process_rewards, **kwargs):\n    return process_rewards * 0\n")
    cfg = colocated(f"prime.process_rewards_fn.path={source}", "prime.process_rewards_fn.name=zero")
    validate_prime_config(cfg)
    with pytest.raises(PrimeConfigError, match=r"^prime.process_rewards_fn.path: cannot load 'one'"):
        validate_prime_config(colocated(f"prime.process_rewards_fn.path={source}", "prime.process_rewards_fn.name=one"))
