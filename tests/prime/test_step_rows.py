"""The step's rows (`prime.step_rows`): multi-output sessions refused before any update, the PRM's label column
(never the format reward), and the nested-tensor helpers."""

import pytest
import torch
from tensordict import NonTensorData

from verl_prime_lora.prime.step_rows import labels_from_extra_fields, nested_rows, pad_nested


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
