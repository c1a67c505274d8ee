"""PRIME's math against plain float64 references written row by row from the formulas, plus
property tests (hypothesis) for the invariants the trainer relies on."""

import math
import statistics

import numpy as np
import pytest
import torch
from advantage_batches import algo_config, batches, groups_of, make_batch
from hypothesis import given, settings
from hypothesis import strategies as st
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from verl_prime_lora.algo import core_algos as ca
from verl_prime_lora.algo import groups

EPS = 1e-6


# ---------------------------------------------------------------------------------------------
# float64 references: one Python loop per formula, no vectorisation tricks
# ---------------------------------------------------------------------------------------------


def ref_suffix(row, gamma):
    return [sum(gamma ** (s - t) * row[s] for s in range(t, len(row))) for t in range(len(row))]


def ref_mean_std(values):
    if len(values) == 1:
        return 0.0, 1.0
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def ref_prime_grpo(
    rewards, mask, index, process, gamma=1.0, threshold=1e-2, norm=True, c_o=1.0, c_p=1.0, process_norm="sequence"
):
    """`sequence`: statistics of z_i = Σ_t r m, baseline μ_g/L_i per token; `token`: statistics of r̄_i."""
    rewards, mask = rewards.tolist(), mask.tolist()
    process = None if process is None else process.tolist()
    B, T = len(rewards), len(rewards[0])
    adv = [[0.0] * T for _ in range(B)]
    for members in groups_of(index).values():
        scores = [sum(rewards[i]) for i in members]
        mean, std = ref_mean_std(scores)
        if process is not None:
            stat = []
            for i in members:
                z = sum(process[i][t] * mask[i][t] for t in range(T))
                stat.append(z if process_norm == "sequence" else z / max(sum(mask[i]), 1))
            pmean, pstd = ref_mean_std(stat)
        for k, i in enumerate(members):
            a_o = (scores[k] - mean) / (std + EPS) if norm else scores[k] - mean
            a_p = [0.0] * T
            if process is not None and pstd >= threshold:
                base = pmean / max(sum(mask[i]), 1) if process_norm == "sequence" else pmean
                a_p = ref_suffix([(process[i][t] - base) / (pstd + EPS) * mask[i][t] for t in range(T)], gamma)
            adv[i] = [(c_o * a_o + c_p * a_p[t]) * mask[i][t] for t in range(T)]
    return torch.tensor(adv, dtype=torch.float64)


def ref_prime_rloo(rewards, mask, index, process, gamma=1.0):
    rewards, mask = rewards.tolist(), mask.tolist()
    process = None if process is None else process.tolist()
    B, T = len(rewards), len(rewards[0])
    adv = [[0.0] * T for _ in range(B)]
    for members in groups_of(index).values():
        n = len(members)
        scores = {i: sum(rewards[i]) for i in members}
        rbar = {}
        if process is not None:
            for i in members:
                rbar[i] = sum(process[i][t] * mask[i][t] for t in range(T)) / max(sum(mask[i]), 1)
        for i in members:
            others = [j for j in members if j != i]
            a_o = scores[i] - (sum(scores[j] for j in others) / (n - 1) if others else 0.0)
            a_p = [0.0] * T
            if process is not None:
                base = sum(rbar[j] for j in others) / (n - 1) if others else 0.0
                a_p = ref_suffix([(process[i][t] - base) * mask[i][t] for t in range(T)], gamma)
            adv[i] = [(a_o + a_p[t]) * mask[i][t] for t in range(T)]
    return torch.tensor(adv, dtype=torch.float64)


# ---------------------------------------------------------------------------------------------
# Advantages vs references
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("process_norm", ["sequence", "token"])
@pytest.mark.parametrize("gamma", [1.0, 0.9, 0.0])
@pytest.mark.parametrize("norm", [True, False])
def test_prime_grpo_matches_reference(gamma, norm, process_norm):
    rewards, mask, index, process = make_batch(0)
    cfg = algo_config(gamma=gamma, norm=norm, process_std_threshold=1e-2, process_norm=process_norm)
    adv, ret = get_adv_estimator_fn("prime_grpo")(rewards, mask, index, config=cfg, process_rewards=process)
    expected = ref_prime_grpo(rewards, mask, index, process, gamma=gamma, norm=norm, process_norm=process_norm)
    torch.testing.assert_close(adv, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ret, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("gamma", [1.0, 0.95])
def test_prime_rloo_matches_reference(gamma):
    rewards, mask, index, process = make_batch(1, groups=(2, 5, 1, 3))
    adv, _ = get_adv_estimator_fn("prime_rloo")(
        rewards, mask, index, config=algo_config(gamma=gamma), process_rewards=process
    )
    torch.testing.assert_close(adv, ref_prime_rloo(rewards, mask, index, process, gamma), rtol=1e-10, atol=1e-10)


def test_coefficients_scale_the_two_parts():
    rewards, mask, index, process = make_batch(2)
    cfg = algo_config(outcome_coef=0.5, process_coef=2.0, process_std_threshold=0.0)
    adv, _ = ca.compute_prime_grpo_advantage(rewards, mask, index, config=cfg, process_rewards=process)
    expected = ref_prime_grpo(rewards, mask, index, process, threshold=0.0, c_o=0.5, c_p=2.0)
    torch.testing.assert_close(adv, expected, rtol=1e-10, atol=1e-10)


def test_std_threshold_switches_process_part_off_per_group():
    rewards, mask, index, process = make_batch(3, groups=(4, 4), shuffle=False)
    process[:4] = 1e-5 * torch.randn(4, mask.shape[1], dtype=torch.float64) * mask[:4]  # group 0: σ ≪ 1e-2
    cfg = algo_config(process_std_threshold=1e-2)
    with_p, _ = ca.compute_prime_grpo_advantage(rewards, mask, index, config=cfg, process_rewards=process)
    outcome_only, _ = ca.compute_prime_grpo_advantage(rewards, mask, index, config=cfg)
    torch.testing.assert_close(with_p[:4], outcome_only[:4])  # below threshold: outcome only
    assert not torch.allclose(with_p[4:], outcome_only[4:])


def test_padding_does_not_leak_into_returns():
    """Values in masked positions (e.g. garbage PRM rewards on padding) must not change anything."""
    rewards, mask, index, process = make_batch(4)
    dirty = process + 5.0 * (1 - mask)
    for name in ("prime_grpo", "prime_rloo"):
        fn = get_adv_estimator_fn(name)
        clean, _ = fn(rewards, mask, index, config=algo_config(), process_rewards=process)
        noisy, _ = fn(rewards, mask, index, config=algo_config(), process_rewards=dirty)
        torch.testing.assert_close(clean, noisy)


def test_discounted_suffix_sum_long_rows_no_underflow():
    x = torch.randn(3, 5000, dtype=torch.float64)
    for gamma in (0.5, 0.99):
        got = ca.discounted_suffix_sum(x, gamma)
        # recursion G_t = x_t + γ G_{t+1}, evaluated backwards in float64
        ref = torch.zeros_like(x)
        acc = torch.zeros(3, dtype=torch.float64)
        for t in range(x.shape[1] - 1, -1, -1):
            acc = x[:, t] + gamma * acc
            ref[:, t] = acc
        torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-9)


def test_whitening_is_masked_and_optional():
    rewards, mask, index, process = make_batch(5)
    adv, ret = ca.compute_prime_grpo_advantage(
        rewards, mask, index, config=algo_config(whiten_advantages=True), process_rewards=process
    )
    valid = mask.bool()
    assert abs(adv[valid].mean().item()) < 1e-9
    assert abs(adv[valid].std().item() - 1.0) < 1e-6
    assert torch.all(adv[~valid] == 0)
    torch.testing.assert_close(ret, ref_prime_grpo(rewards, mask, index, process))


# ---------------------------------------------------------------------------------------------
# The process term's scale: length-free by default, the seed's O(L) formula on request
# ---------------------------------------------------------------------------------------------


def spread(z, lengths, T, gen, dtype=torch.float64):
    """Token rewards whose masked row sums are z_i: random positive shares of z_i over L_i tokens."""
    mask = (torch.arange(T)[None, :] < torch.as_tensor(lengths)[:, None]).to(dtype)
    shares = torch.rand(len(z), T, generator=gen, dtype=dtype) * mask
    shares = shares / shares.sum(-1, keepdim=True)
    return torch.as_tensor(z, dtype=dtype)[:, None] * shares, mask


def seed_case(L, process_norm, threshold=1e-2):
    """The issue's case: K=6, z=[-3,-2,-1,1,2,3] spread over L tokens, acc=[1,1,0,0,1,0]."""
    z = [-3.0, -2.0, -1.0, 1.0, 2.0, 3.0]
    process, mask = spread(z, [L] * 6, L, torch.Generator().manual_seed(L))
    rewards = torch.zeros(6, L, dtype=torch.float64)
    rewards[:, -1] = torch.tensor([1.0, 1, 0, 0, 1, 0])
    index = np.array(["q"] * 6, dtype=object)
    cfg = algo_config(process_norm=process_norm, process_std_threshold=threshold)
    fn = get_adv_estimator_fn("prime_grpo")
    full, _ = fn(rewards, mask, index, config=cfg, process_rewards=process)
    outcome, _ = fn(rewards, mask, index, config=cfg)
    return z, full - outcome, outcome


def test_sequence_norm_at_seed_length_is_grpo_of_sequence_logits():
    z, process_part, outcome = seed_case(3584, "sequence")
    mean, std = ref_mean_std(z)
    expected = torch.tensor([(v - mean) / (std + EPS) for v in z], dtype=torch.float64)
    torch.testing.assert_close(process_part[:, 0], expected, rtol=1e-9, atol=1e-9)
    assert process_part.abs().max() <= 2.0 * outcome.abs().max()  # comparable to the outcome part


def test_token_norm_is_dead_at_seed_length_and_order_L_below_threshold():
    """Why `token` (the seed's formula) is not the default: the numbers quoted in the README/yaml."""
    _, dead, outcome = seed_case(3584, "token")
    assert torch.all(dead == 0)  # σ_g(r̄) = σ_g(z)/L ≈ 6.6e-4 < 1e-2: plain GRPO
    assert 0.85 < outcome.abs().max().item() < 0.95
    _, alive, _ = seed_case(3584, "token", threshold=0.0)
    assert 4.0e3 < alive[:, 0].abs().max().item() < 5.0e3  # O(L) returns against an O(1) outcome part


@pytest.mark.parametrize("L", [256, 3584])
def test_rloo_process_term_is_order_z_at_any_length(L):
    """The paper's RLOO form sums β·q, so at equal lengths A^p[i,0] = z_i − mean_{j≠i} z_j (no L)."""
    z = [-3.0, -2.0, -1.0, 1.0, 2.0, 3.0]
    process, mask = spread(z, [L] * 6, L, torch.Generator().manual_seed(1))
    gid = groups.group_ids(np.array(["q"] * 6, dtype=object), "cpu")
    first = ca.rloo_process_advantage(process, mask, gid)[:, 0]
    expected = torch.tensor([v - (sum(z) - v) / 5 for v in z], dtype=torch.float64)
    torch.testing.assert_close(first, expected, rtol=1e-9, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(
    z=st.lists(st.integers(-500, 500).map(lambda v: v / 100), min_size=2, max_size=8),
    lengths=st.sampled_from([(256, 3584), (3584, 256), (17, 900)]),
    seed=st.integers(0, 1000),
)
def test_sequence_norm_first_token_is_length_free_and_ordered_like_z(z, lengths, seed):
    """The same z spread over short or long responses: the same A^p[:,0] = GRPO(z); unequal lengths
    in a group give it too (the baseline is spread over each response's own tokens)."""
    gen = torch.Generator().manual_seed(seed)
    index = np.array(["g"] * len(z), dtype=object)
    gid = groups.group_ids(index, "cpu")
    zt = torch.tensor(z, dtype=torch.float64)
    first = {}
    for L in lengths:
        process, mask = spread(z, [L] * len(z), L, gen)
        first[L] = ca.sequence_norm_process_advantage(process, mask, gid, std_threshold=0.0)[:, 0]
    # atol: with all z equal, rounding residues of the sums (~1e-15) are divided by ε = 1e-6
    torch.testing.assert_close(first[lengths[0]], first[lengths[1]], rtol=1e-9, atol=1e-7)
    mean, std = ref_mean_std(z)
    torch.testing.assert_close(first[lengths[0]], (zt - mean) / (std + EPS), rtol=1e-9, atol=1e-7)

    process, mask = spread(z, [lengths[i % 2] for i in range(len(z))], max(lengths), gen)
    mixed = ca.sequence_norm_process_advantage(process, mask, gid, std_threshold=0.0)[:, 0]
    torch.testing.assert_close(mixed, (zt - mean) / (std + EPS), rtol=1e-9, atol=1e-7)
    bigger = zt[:, None] > zt[None, :]
    for ranked in (first[lengths[0]], mixed):
        assert torch.all((ranked[:, None] > ranked[None, :])[bigger])


# Per-token noise of β·q of an untrained PRM: 0 where PRM and reference compute alike (the recipes: bf16 from the
# same weights, the same fused fp32 log-probs and micro-batches; measured exactly 0 at step 1 in bf16 by
# tests/e2e/test_launch_rehearsal.py and at every length by benchmarks/bf16_log_ratio_noise.py), and 5e-5 (q noise
# 1e-3: over 3584 tokens σ(z) ≈ 3e-3) as a margin for kernels that round apart now and then.
@pytest.mark.parametrize("noise", [0.0, 5e-5])
def test_sequence_norm_vanishes_while_prm_equals_reference(noise):
    """z ≈ 0 (PRM = its reference up to rare rounding): no process term, at any length."""
    gen = torch.Generator().manual_seed(0)
    rewards, mask, index, _ = make_batch(11, groups=(6, 6), T=3584)
    process = noise * torch.randn(mask.shape, generator=gen, dtype=torch.float64) * mask
    cfg = algo_config(process_norm="sequence", process_std_threshold=1e-2)
    with_p, _ = get_adv_estimator_fn("prime_grpo")(rewards, mask, index, config=cfg, process_rewards=process)
    outcome_only, _ = get_adv_estimator_fn("prime_grpo")(rewards, mask, index, config=cfg)
    torch.testing.assert_close(with_p, outcome_only, rtol=0, atol=0)


@pytest.mark.parametrize("process_norm", ["sequence", "token"])
def test_process_group_spread_is_the_std_the_process_part_holds_against_the_threshold(process_norm):
    rewards, mask, index, process = make_batch(21, groups=(3, 1, 4))
    spread, size, _ = ca.process_group_spread(process, mask, index, process_norm)
    expected_spread, expected_size = [], []
    for members in groups_of(index).values():  # groups in order of first appearance
        stat = []
        for i in members:
            z = sum(process[i, t].item() * mask[i, t].item() for t in range(mask.shape[1]))
            stat.append(z if process_norm == "sequence" else z / max(mask[i].sum().item(), 1))
        expected_spread.append(ref_mean_std(stat)[1])
        expected_size.append(len(members))
    torch.testing.assert_close(spread, torch.tensor(expected_spread, dtype=torch.float64), rtol=1e-12, atol=0)
    assert size.tolist() == expected_size
    # the process part is on exactly in the groups whose spread reaches the threshold
    threshold = float(spread[spread < 1].median())
    cfg = algo_config(process_norm=process_norm, process_std_threshold=threshold)
    with_p, _ = get_adv_estimator_fn("prime_grpo")(rewards, mask, index, config=cfg, process_rewards=process)
    outcome, _ = get_adv_estimator_fn("prime_grpo")(rewards, mask, index, config=cfg)
    for g, members in enumerate(groups_of(index).values()):
        has_process = not torch.equal(with_p[members], outcome[members])
        assert has_process == bool(spread[g] >= threshold), g
    zero, _, _ = ca.process_group_spread(torch.zeros_like(process), mask, index, process_norm)
    # a PRM equal to its reference: 0 (a singleton group: 1)
    assert zero.tolist() == [0.0 if n > 1 else 1.0 for n in expected_size]


def test_a_per_token_threshold_scales_with_each_groups_mean_length():
    """τ_g = τ_0 + τ_L·L̄_g, L̄_g the group's mean response length (float64 reference): the process part is on exactly
    in the groups whose σ_g(z) reaches their own τ_g, and `process_group_spread` reports the same τ_g."""
    rewards, mask, index, process = make_batch(23, groups=(3, 2, 4, 3))
    spread, _, _ = ca.process_group_spread(process, mask, index)
    members_of = list(groups_of(index).values())
    lengths = {g: statistics.mean(mask[i].sum().item() for i in members) for g, members in enumerate(members_of)}
    per_token = float(statistics.median(spread[g].item() / lengths[g] for g in lengths))  # about half the groups on
    cfg = algo_config(process_norm="sequence", process_std_threshold=1e-3, process_std_threshold_per_token=per_token)
    _, _, threshold = ca.process_group_spread(process, mask, index, "sequence", 1e-3, per_token)
    with_p, _ = get_adv_estimator_fn("prime_grpo")(rewards, mask, index, config=cfg, process_rewards=process)
    outcome, _ = get_adv_estimator_fn("prime_grpo")(rewards, mask, index, config=cfg)
    on = []
    for g, members in enumerate(groups_of(index).values()):
        expected = 1e-3 + per_token * lengths[g]
        assert threshold[g].item() == pytest.approx(expected, rel=1e-12)
        on.append(not torch.equal(with_p[members], outcome[members]))
        assert on[-1] == (spread[g].item() >= expected), g
    assert any(on) and not all(on)


def test_with_the_token_norm_the_per_token_threshold_adds_once():
    """z / L is per token already: its threshold is τ_0 + τ_L, whatever the lengths."""
    _, mask, index, process = make_batch(24, groups=(3, 2))
    _, _, threshold = ca.process_group_spread(process, mask, index, "token", 1e-3, 2e-4)
    torch.testing.assert_close(threshold, torch.full_like(threshold, 1.2e-3), rtol=1e-12, atol=0)


def test_prime_grpo_follows_process_norm():
    rewards, mask, index, process = make_batch(12)
    for process_norm in ("sequence", "token"):
        cfg = algo_config(process_norm=process_norm)
        adv, _ = get_adv_estimator_fn("prime_grpo")(rewards, mask, index, config=cfg, process_rewards=process)
        expected = ref_prime_grpo(rewards, mask, index, process, process_norm=process_norm)
        torch.testing.assert_close(adv, expected, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="process_norm"):
        get_adv_estimator_fn("prime_grpo")(
            rewards, mask, index, config=algo_config(process_norm="length"), process_rewards=process
        )


# ---------------------------------------------------------------------------------------------
# Outcome-only equals veRL's estimators
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", [True, False])
def test_prime_grpo_without_process_equals_verl_grpo(norm):
    rewards, mask, index, _ = make_batch(7, groups=(4, 1, 3, 6), dtype=torch.float32)
    verl_adv, _ = get_adv_estimator_fn("grpo")(rewards.clone(), mask, index, norm_adv_by_std_in_grpo=norm)
    ours, _ = get_adv_estimator_fn("prime_grpo")(rewards, mask, index, config=algo_config(norm=norm))
    torch.testing.assert_close(ours, verl_adv, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("process_norm", ["sequence", "token"])
@pytest.mark.parametrize("name, verl_name", [("prime_grpo", "grpo"), ("prime_rloo", "rloo")])
def test_zero_process_rewards_equal_verl(name, verl_name, process_norm):
    rewards, mask, index, process = make_batch(10, groups=(4, 1, 3, 6), dtype=torch.float32)
    verl_adv, _ = get_adv_estimator_fn(verl_name)(rewards.clone(), mask, index)
    cfg = algo_config(process_norm=process_norm, process_std_threshold=0.0)
    ours, _ = get_adv_estimator_fn(name)(rewards, mask, index, config=cfg, process_rewards=torch.zeros_like(process))
    torch.testing.assert_close(ours, verl_adv, rtol=1e-5, atol=1e-6)


def test_prime_rloo_without_process_equals_verl_rloo():
    rewards, mask, index, _ = make_batch(8, groups=(4, 1, 3, 6), dtype=torch.float32)
    verl_adv, _ = get_adv_estimator_fn("rloo")(rewards.clone(), mask, index)
    ours, _ = get_adv_estimator_fn("prime_rloo")(rewards, mask, index, config=algo_config())
    torch.testing.assert_close(ours, verl_adv, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(batch=batches, perm_seed=st.integers(0, 10_000), name=st.sampled_from(["prime_grpo", "prime_rloo"]))
def test_permuting_rows_permutes_advantages(batch, perm_seed, name):
    rewards, mask, index, process = batch
    perm = torch.randperm(len(index), generator=torch.Generator().manual_seed(perm_seed))
    fn = get_adv_estimator_fn(name)
    adv, _ = fn(rewards, mask, index, config=algo_config(), process_rewards=process)
    adv_p, _ = fn(rewards[perm], mask[perm], index[perm.numpy()], config=algo_config(), process_rewards=process[perm])
    torch.testing.assert_close(adv_p, adv[perm], rtol=1e-9, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(batch=batches, name=st.sampled_from(["prime_grpo", "prime_rloo"]))
def test_zero_process_rewards_give_outcome_only(batch, name):
    rewards, mask, index, process = batch
    fn = get_adv_estimator_fn(name)
    zero, _ = fn(
        rewards, mask, index, config=algo_config(process_std_threshold=0.0), process_rewards=torch.zeros_like(process)
    )
    none, _ = fn(rewards, mask, index, config=algo_config())
    torch.testing.assert_close(zero, none)


@settings(max_examples=60, deadline=None)
@given(batch=batches, name=st.sampled_from(["prime_grpo", "prime_rloo"]), norm=st.sampled_from(["sequence", "token"]))
def test_matches_reference_on_random_batches(batch, name, norm):
    rewards, mask, index, process = batch
    cfg = algo_config(process_norm=norm)
    adv, _ = get_adv_estimator_fn(name)(rewards, mask, index, config=cfg, process_rewards=process)
    if name == "prime_grpo":
        ref = ref_prime_grpo(rewards, mask, index, process, process_norm=norm)
    else:
        ref = ref_prime_rloo(rewards, mask, index, process)
    torch.testing.assert_close(adv, ref, rtol=1e-9, atol=1e-9)


DEGENERATE = {
    "all_equal": dict(groups=(4, 4)),
    "singletons": dict(groups=(1, 1, 1)),
    "empty_responses": dict(groups=(3, 2), empty_rows=(0, 1, 2, 3, 4)),
    "some_empty": dict(groups=(3, 2), empty_rows=(1,)),
}


@pytest.mark.parametrize("case", DEGENERATE)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("name", ["prime_grpo", "prime_rloo"])
@pytest.mark.parametrize("whiten", [False, True])
def test_finite_on_degenerate_batches(case, dtype, name, whiten):
    rewards, mask, index, process = make_batch(9, dtype=dtype, **DEGENERATE[case])
    if case == "all_equal":
        rewards = torch.zeros_like(rewards)
        process = torch.full_like(process, 0.25) * mask
    # veRL's padding rows: own uid, zero mask
    index = np.concatenate([index, np.array(["pad_0", "pad_1"], dtype=object)])
    pad = torch.zeros(2, mask.shape[1], dtype=dtype)
    rewards, mask, process = (torch.cat([t, pad]) for t in (rewards, mask, process))
    adv, ret = get_adv_estimator_fn(name)(
        rewards, mask, index, config=algo_config(whiten_advantages=whiten), process_rewards=process
    )
    assert adv.dtype == torch.float32
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    assert torch.all(adv[mask == 0] == 0)


@settings(max_examples=40, deadline=None)
@given(batch=batches, w=st.floats(0.0, 1.0), name=st.sampled_from(["prime_grpo", "prime_rloo"]))
def test_process_scale_interpolates_between_outcome_only_and_full(batch, w, name):
    """A(w) = A(0) + w·(A(1) − A(0)), A(0) the outcome-only advantage: the gate scales the process part only."""
    rewards, mask, index, process = batch
    estimator, cfg = get_adv_estimator_fn(name), algo_config(process_std_threshold=0.0)
    full, _ = estimator(rewards, mask, index, config=cfg, process_rewards=process)
    none, _ = estimator(rewards, mask, index, config=cfg, process_rewards=process, process_scale=0.0)
    outcome_only, _ = estimator(rewards, mask, index, config=cfg)
    gated, _ = estimator(rewards, mask, index, config=cfg, process_rewards=process, process_scale=w)
    torch.testing.assert_close(none, outcome_only, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(gated, outcome_only + w * (full - outcome_only), rtol=1e-9, atol=1e-9)
