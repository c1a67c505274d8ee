"""Test-only reward that fails on a schedule (tests/e2e/test_reward_failures_e2e.py).

Per process, by call count: of the first `FIRST_STEP_ROLLOUTS` calls every other one fails (call 0 is
scored), alternately by raising (or, call `HANGING_CALL`, by never returning, as a grader stuck on a dead socket)
and by returning a NaN score, and every call after them raises. So with one reward-loop worker a run's first step
loses exactly half of its rollouts (one raised, one hung, two NaN) and the second step all of them; the driver's
reward dry run (`checks.inputs`, its own process, call 0) is scored.
Scored rows get `acc` = 1 when the response holds a digit (varied labels for the PRM, as prime_label_reward.py).
"""

import itertools
import threading

FIRST_STEP_ROLLOUTS = 8  # recipe/cpu.yaml's train_batch_size 4 x the test's rollout.n 2
HANGING_CALL = 5
_calls = itertools.count()  # next() is atomic under the GIL: the reward loop calls from executor threads


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    call = next(_calls)
    if call == HANGING_CALL:
        threading.Event().wait()  # never set: the call never returns
    if call >= FIRST_STEP_ROLLOUTS or call % 4 == 1:
        raise ValueError(f"half_failing_reward: cannot score a response of {len(solution_str)} characters")
    if call % 4 == 3:
        return {"score": float("nan"), "acc": float("nan"), "format": 0.0}
    acc = float(any(char.isdigit() for char in solution_str))
    return {"score": acc, "acc": acc, "format": 0.0}
