"""Test-only reward that fails on a schedule (tests/e2e/test_prime_e2e.py, the `frozen_reference` run).

Per process, by call count: of the first `SCHEDULED_CALLS` calls every other one fails (call 0 is scored),
alternately by raising and by returning a NaN score, and every call after them raises. So with one
reward-loop worker a run's first two steps lose exactly half of their rollouts each (a quarter raised, a
quarter NaN) and the third step all of them; the driver's reward dry run (`input_checks`, its own process,
call 0) is scored. Scored rows get `acc` = 1 when the response holds a digit (varied labels for the PRM).
"""

import itertools

SCHEDULED_CALLS = 16  # two steps of recipe/cpu.yaml's train_batch_size 4 x the test's rollout.n 2
_calls = itertools.count()  # next() is atomic under the GIL: the reward loop calls from executor threads


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    call = next(_calls)
    if call >= SCHEDULED_CALLS or call % 4 == 1:
        raise ValueError(f"half_failing_reward: cannot score a response of {len(solution_str)} characters")
    if call % 4 == 3:
        return {"score": float("nan"), "acc": float("nan"), "format": 0.0}
    acc = float(any(char.isdigit() for char in solution_str))
    return {"score": acc, "acc": acc, "format": 0.0}
