"""Group ids (`algo.groups`): dense ids from any hashable uids, and the estimators grouping alike whatever the
uids' type."""

import numpy as np
import pytest
import torch
from advantage_batches import algo_config, make_batch
from hypothesis import given, settings
from hypothesis import strategies as st
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from verl_prime_lora.algo import groups

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
