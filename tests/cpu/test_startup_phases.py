"""verl_prime_lora.cpu.startup_phases: the start-up summary a CPU launch prints at step 1."""

from verl_prime_lora.cpu.startup_phases import PHASES, StartupClock

# veRL's own lines, as a colocated PRIME launch printed them (prefixes and all)
PRIME_LAUNCH = [
    (8.0, "2026-12-03 09:22:22,000\tINFO worker.py:2038 -- Started a local Ray instance."),
    (20.4, "(TaskRunnerV1 pid=29286) INFO:2026-12-03 09:22:34,400:train and validate dataloader initialized, ..."),
    (28.5, "(TaskRunnerV1 pid=29286) INFO:2026-12-03 09:22:42,472:actor and ref model engine initialized"),
    (28.5, "(TaskRunnerV1 pid=29286) INFO:2026-12-03 09:22:42,510:reward loop manager initialized"),
    (60.0, "(TaskRunnerV1 pid=29286) INFO:2026-12-03 09:23:13,958:checkpoint engine manager initialized"),
    (69.0, "(TaskRunnerV1 pid=29286) INFO:2026-12-03 09:23:22,936:all initialize finished, ready to fit"),
    (85.5, "(TaskRunnerV1 pid=29286) step:1 - global_seqlen/min:8043.0 - ..."),
    (90.0, "(TaskRunnerV1 pid=29286) step:10 - global_seqlen/min:8043.0 - ..."),
]


def feed_all(lines):
    now = [0.0]
    clock = StartupClock(clock=lambda: now[0])
    summaries = []
    for at, line in lines:
        now[0] = at
        summaries.append(clock.feed(line))
    return summaries


def test_the_summary_comes_once_at_step_1_with_each_phase_since_the_previous_one():
    summaries = feed_all(PRIME_LAUNCH)
    assert summaries[:6] == [None] * 6 and summaries[7] is None
    assert summaries[6] == (
        "[launch] start-up to the end of step 1: 85.5 s (driver imports + Ray 8.0 s, TaskRunner + data 12.4 s, "
        "actor + reference 8.1 s, reward workers 0.0 s, vLLM servers 31.5 s, PRM + checkpoint 9.0 s, step 1 16.5 s)"
    )


def test_a_phase_that_never_ends_counts_in_the_next_one_seen():
    without_ray_line = [entry for entry in PRIME_LAUNCH if "Ray instance" not in entry[1]]
    summary = feed_all(without_ray_line)[5]
    assert "driver imports + Ray" not in summary and "TaskRunner + data 20.4 s" in summary
    assert summary.startswith("[launch] start-up to the end of step 1: 85.5 s")


def test_markers_are_in_set_up_order_and_step_10_is_not_step_1():
    assert [phase for phase, _ in PHASES][-1] == "step 1"
    assert StartupClock().feed("(TaskRunnerV1 pid=1) step:12 - global_seqlen/min:1.0") is None
