"""PRIME's math against plain float64 references written row by row from the formulas, plus
property tests (hypothesis) for the invariants the trainer relies on."""

import math
import statistics

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from verl_prime_lora.algo import core_algos as ca
from verl_prime_lora.algo import groups
from verl_prime_lora.algo import implicit_prm as iprm

EPS = 1e-6


# ---------------------------------------------------------------------------------------------
# float64 references: one Python loop per formula, no vectorisation tricks
# ---------------------------------------------------------------------------------------------


def groups_of(index):
    out = {}
    for i, key in enumerate(index):
        out.setdefault(key, []).append(i)
    return out


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


def make_batch(seed, groups=(3, 1, 4), T=7, shuffle=True, empty_rows=(), dtype=torch.float64):
    """Rows of several groups, right-padded masks of random lengths, outcome reward at the last token."""
    gen = torch.Generator().manual_seed(seed)
    index = np.array([f"uid-{g}" for g, size in enumerate(groups) for _ in range(size)], dtype=object)
    B = len(index)
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    for row in empty_rows:
        lengths[row] = 0
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(dtype)
    outcome = torch.randint(0, 2, (B,), generator=gen).to(dtype)
    rewards = torch.zeros(B, T, dtype=dtype)
    rows = torch.nonzero(lengths > 0).flatten()
    rewards[rows, lengths[rows] - 1] = outcome[rows]
    process = torch.randn(B, T, generator=gen, dtype=dtype) * 0.3 * mask
    if shuffle:
        perm = torch.randperm(B, generator=gen)
        index, mask, rewards, process = index[perm.numpy()], mask[perm], rewards[perm], process[perm]
    return rewards, mask, index, process


def algo_config(**prime):
    return OmegaConf.create(
        {"gamma": prime.pop("gamma", 1.0), "norm_adv_by_std_in_grpo": prime.pop("norm", True), "prime": prime}
    )


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

batches = st.builds(
    make_batch,
    seed=st.integers(0, 10_000),
    groups=st.lists(st.integers(1, 5), min_size=1, max_size=5).map(tuple),
    T=st.integers(1, 9),
    shuffle=st.booleans(),
)


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


# ---------------------------------------------------------------------------------------------
# Implicit PRM: rewards, loss, metrics
# ---------------------------------------------------------------------------------------------


def test_implicit_rewards_and_sequence_logits():
    lp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0]], dtype=torch.float64)
    lr = torch.tensor([[-1.5, -1.0, -3.0], [-1.0, -0.5, -1.0]], dtype=torch.float64)
    m = torch.tensor([[1, 1, 1], [1, 1, 0]])
    r = iprm.implicit_process_rewards(lp, lr, m, beta=0.05)
    torch.testing.assert_close(r, torch.tensor([[0.025, -0.05, 0.0], [0.025, 0.0, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(
        iprm.prm_sequence_logits(lp, lr, m, 0.05), torch.tensor([-0.025, 0.025], dtype=torch.float64)
    )
    assert iprm.implicit_process_rewards(lp.bfloat16(), lr.bfloat16(), m, 0.05).dtype == torch.float32


def test_mean_token_log_ratio_and_the_length_term_of_a_uniform_shift():
    lp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0]], dtype=torch.float64)
    lr = torch.tensor([[-1.5, -1.0, -3.0], [-1.0, -0.5, -1.0]], dtype=torch.float64)
    m = torch.tensor([[1, 1, 1], [1, 1, 0]])
    # q on the 5 masked tokens: 0.5, -1, 0, 0.5, 0 -> q̄ = 0
    assert iprm.mean_token_log_ratio(lp, lr, m).item() == pytest.approx(0.0)
    shifted = lp - 0.4  # the PRM lowered every token by 0.4: q̄ = -0.4
    assert iprm.mean_token_log_ratio(shifted, lr, m).item() == pytest.approx(-0.4)
    # the shift is a length term: z falls by β·0.4·L_i (L = 3, 2)
    torch.testing.assert_close(
        iprm.prm_sequence_logits(shifted, lr, m, 0.05) - iprm.prm_sequence_logits(lp, lr, m, 0.05),
        torch.tensor([-0.06, -0.04], dtype=torch.float64),
    )


def test_bce_loss_matches_formula_and_skips_empty_rows():
    z = torch.tensor([0.3, -2.0, 40.0, 7.0], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    m = torch.tensor([[1, 1], [1, 0], [1, 1], [0, 0]])  # last row: empty response
    per_row = [
        -(yi * math.log(1 / (1 + math.exp(-zi))) + (1 - yi) * math.log(1 - 1 / (1 + math.exp(-zi))))
        for zi, yi in zip(z.tolist()[:2], y.tolist()[:2])
    ]
    per_row.append(40.0 + math.log1p(math.exp(-40.0)))  # −log(1 − σ(40)), exact in logits form
    loss = iprm.prm_bce_loss(z, y, m)
    assert loss.item() == pytest.approx(sum(per_row) / 3, rel=1e-12)
    assert iprm.prm_bce_loss(z, y, m, reduction="sum").item() == pytest.approx(sum(per_row), rel=1e-12)
    loss.backward()
    assert z.grad[3] == 0 and torch.isfinite(z.grad).all()
    assert iprm.prm_bce_loss(z, y, torch.zeros_like(m)).item() == 0.0
    with pytest.raises(ValueError, match="acc"):
        iprm.prm_bce_loss(z, torch.tensor([1.0, -1.0, 0.0, 1.0]), m)


def test_balanced_label_weights_by_hand():
    y = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    m = torch.tensor([[1], [1], [1], [1], [0]])  # last row: empty response (it counts nowhere)
    # 4 valid rows, 1 right and 3 wrong: right gets 4/(2·1) = 2, each wrong 4/(2·3) = 2/3
    torch.testing.assert_close(
        iprm.balanced_label_weights(y, m), torch.tensor([2, 2 / 3, 2 / 3, 2 / 3, 0], dtype=torch.float64)
    )
    one_class = torch.zeros(5, dtype=torch.float64)
    torch.testing.assert_close(
        iprm.balanced_label_weights(one_class, m), torch.tensor([1, 1, 1, 1, 0], dtype=torch.float64)
    )
    z = torch.tensor([0.5, -1.0, 2.0, 0.0, 3.0], dtype=torch.float64)
    w = iprm.balanced_label_weights(y, m)
    bce = torch.nn.functional.binary_cross_entropy_with_logits(z, y, reduction="none")
    expected = (2 * bce[0] + 2 / 3 * (bce[1] + bce[2] + bce[3])) / 4
    assert iprm.prm_bce_loss(z, y, m, weights=w).item() == pytest.approx(expected.item(), rel=1e-12)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=40))
def test_balanced_label_weights_give_both_classes_half(rows):
    y = torch.tensor([float(right) for right, _ in rows], dtype=torch.float64)
    m = torch.tensor([[int(valid)] for _, valid in rows])
    w = iprm.balanced_label_weights(y, m)
    valid = m[:, 0].bool()
    n = int(valid.sum())
    assert (w[~valid] == 0).all()
    assert w.sum().item() == pytest.approx(n)  # the weighted mean keeps the plain mean's scale
    right, wrong = w[valid & (y == 1)].sum().item(), w[valid & (y == 0)].sum().item()
    if right and wrong:
        assert right == pytest.approx(wrong)
        # a shift of every z (what a base rate would ask for) has zero gradient at z = 0
        z = torch.zeros(len(rows), dtype=torch.float64, requires_grad=True)
        iprm.prm_bce_loss(z, y, m, weights=w).backward()
        assert z.grad.sum().item() == pytest.approx(0.0, abs=1e-12)


def test_bce_gradient_flows_to_prm_log_probs():
    lp = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    lr = torch.randn(4, 5, dtype=torch.float64)
    m = torch.ones(4, 5)
    y = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    loss = iprm.prm_bce_loss(iprm.prm_sequence_logits(lp, lr, m, 0.05), y, m)
    loss.backward()
    z = (0.05 * (lp - lr).sum(-1)).detach()
    expected_row_grad = 0.05 * (torch.sigmoid(z) - y) / 4  # d mean-BCE / d lp[i,t]
    torch.testing.assert_close(lp.grad, expected_row_grad[:, None].expand(4, 5))


def test_classification_accuracy():
    z = torch.tensor([1.0, -1.0, 2.0, -3.0, 5.0])
    y = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0])
    m = torch.tensor([[1], [1], [1], [1], [0]])
    assert iprm.prm_classification_accuracy(z, y, m).item() == pytest.approx(2 / 4)


def ref_pairwise(z, y, index, valid, mixed_only=False):
    accs = []
    for members in groups_of(index).values():
        members = [i for i in members if valid[i]]
        if not members:
            continue
        num = den = 0.0
        for i in members:
            for j in members:
                w = abs(y[i] - y[j])
                if w == 0:
                    continue
                a = 0.5 if z[i] == z[j] else float((z[i] - z[j]) * (y[i] - y[j]) > 0)
                num, den = num + w * a, den + w
        if den or not mixed_only:
            accs.append(num / den if den else 0.5)
    return sum(accs) / len(accs) if accs else (0.5 if mixed_only else 0.0)


@settings(max_examples=60, deadline=None)
@given(batch=batches, tie=st.booleans(), mixed_only=st.booleans())
def test_pairwise_accuracy_matches_reference(batch, tie, mixed_only):
    _, mask, index, process = batch
    gen = torch.Generator().manual_seed(len(index))
    z = torch.randn(len(index), generator=gen, dtype=torch.float64)
    if tie:
        z = z.round()
    y = torch.randint(0, 2, (len(index),), generator=gen).to(torch.float64)
    got = iprm.prm_pairwise_accuracy(z, y, index, mask, mixed_only=mixed_only).item()
    valid = (mask.sum(-1) > 0).tolist()
    assert got == pytest.approx(ref_pairwise(z.tolist(), y.tolist(), list(index), valid, mixed_only))


def test_pairwise_accuracy_perfect_and_inverted():
    index = np.array(["a", "a", "a", "b", "b"], dtype=object)
    y = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0])
    m = torch.ones(5, 2)
    z = torch.tensor([2.0, -1.0, 1.0, 0.3, 0.1])
    assert iprm.prm_pairwise_accuracy(z, y, index, m).item() == pytest.approx((1.0 + 0.5) / 2)
    assert iprm.prm_pairwise_accuracy(-z, y, index, m).item() == pytest.approx((0.0 + 0.5) / 2)
    # over mixed groups only, the one-label group "b" does not pull the result towards 1/2
    assert iprm.prm_pairwise_accuracy(z, y, index, m, mixed_only=True).item() == pytest.approx(1.0)
    assert iprm.prm_pairwise_accuracy(-z, y, index, m, mixed_only=True).item() == pytest.approx(0.0)
    assert iprm.prm_pairwise_accuracy(z, torch.zeros(5), index, m, mixed_only=True).item() == 0.5  # no pair at all


def ref_ranking_z(z, y, index, valid):
    """Stratified Mann–Whitney z by loops: Σ_g (U_g − k m / 2) / sqrt(Σ_g k m (k + m + 1) / 12)."""
    excess = variance = 0.0
    for members in groups_of(index).values():
        right = [i for i in members if valid[i] and y[i] > 0.5]
        wrong = [j for j in members if valid[j] and y[j] <= 0.5]
        u = sum(1.0 if z[i] > z[j] else 0.5 if z[i] == z[j] else 0.0 for i in right for j in wrong)
        k, m = len(right), len(wrong)
        excess += u - k * m / 2
        variance += k * m * (k + m + 1) / 12
    return excess / variance**0.5 if variance else 0.0


@settings(max_examples=60, deadline=None)
@given(batch=batches, tie=st.booleans())
def test_ranking_z_matches_reference(batch, tie):
    _, mask, index, _ = batch
    gen = torch.Generator().manual_seed(len(index) + 1)
    z = torch.randn(len(index), generator=gen, dtype=torch.float64)
    if tie:
        z = z.round()
    y = torch.randint(0, 2, (len(index),), generator=gen).to(torch.float64)
    valid = (mask.sum(-1) > 0).tolist()
    got = iprm.prm_ranking_z(z, y, index, mask).item()
    assert got == pytest.approx(ref_ranking_z(z.tolist(), y.tolist(), list(index), valid), abs=1e-12)


def test_ranking_z_of_a_perfect_ranking_and_of_chance():
    # one group of 4 right and 4 wrong, ranked perfectly: U = 16, excess 8, variance 16·9/12 = 12
    index = np.array(["a"] * 8 + ["b"] * 3, dtype=object)
    y = torch.tensor([1.0] * 4 + [0.0] * 4 + [1.0] * 3)  # group b holds one label: no pair
    z = torch.tensor([4.0, 3, 2, 1, 0, -1, -2, -3, 9, 9, 9], dtype=torch.float64)
    m = torch.ones(11, 3)
    assert iprm.prm_ranking_z(z, y, index, m).item() == pytest.approx(8 / 12**0.5)
    assert iprm.prm_ranking_z(-z, y, index, m).item() == pytest.approx(-8 / 12**0.5)
    assert iprm.prm_ranking_z(z, torch.ones(11), index, m).item() == 0.0
    # random scores: Z over many batches of 16 groups of 8 is standard normal (mean 0, variance 1)
    gen = torch.Generator().manual_seed(0)
    index = np.repeat(np.arange(16), 8)
    draws = []
    for _ in range(2000):
        labels = torch.randint(0, 2, (128,), generator=gen).double()
        draws.append(
            iprm.prm_ranking_z(
                torch.randn(128, generator=gen, dtype=torch.float64), labels, index, m[:1].expand(128, 3)
            ).item()
        )
    draws = torch.tensor(draws)
    assert abs(draws.mean().item()) < 0.1 and abs(draws.var().item() - 1) < 0.1  # 2000 draws: se 0.022, 0.032
    assert (draws > 3.09).float().mean().item() < 0.004  # the one-sided p < 0.001 bound holds


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


# ---------------------------------------------------------------------------------------------
# group ids from any hashable uids
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "index, expected",
    [
        (np.array([-5, 3, -5, 10**15, 3]), [0, 1, 0, 2, 1]),  # negative and huge int64 ids
        (torch.tensor([-1, -1, 7]), [0, 0, 1]),
        ([2**70, -(2**70), 2**70], [0, 1, 0]),  # Python ints past int64
        (np.array([2**70, "b", None, "b", 2**70], dtype=object), [0, 1, 2, 1, 0]),  # mixed, unorderable types
        (np.array(["uid-b", "uid-a", "uid-b"]), [0, 1, 0]),
        (np.array([], dtype=object), []),
    ],
)
def test_group_ids_are_dense_for_any_hashable_uids(index, expected):
    gid = groups.group_ids(index, "cpu")
    assert gid.dtype == torch.long and gid.tolist() == expected


@settings(max_examples=40, deadline=None)
@given(
    keys=st.lists(st.integers(-(2**80), 2**80), min_size=3, max_size=3, unique=True),
    name=st.sampled_from(["prime_grpo", "prime_rloo"]),
)
def test_integer_uids_group_as_their_string_form(keys, name):
    """An estimator gives the same advantages whether the uids are strings or ints of any sign and size."""
    rewards, mask, index, process = make_batch(3)
    as_ints = np.array([keys[int(uid.removeprefix("uid-"))] for uid in index], dtype=object)
    estimator, cfg = get_adv_estimator_fn(name), algo_config()
    expected, _ = estimator(rewards, mask, index, config=cfg, process_rewards=process)
    got, _ = estimator(rewards, mask, as_ints, config=cfg, process_rewards=process)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
