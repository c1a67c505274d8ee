"""The step watchdog: a step far past its usual time is logged once per doubling, with its phase."""

import time

import pytest

from verl_prime_lora.hardening import step_watchdog as sw
from verl_prime_lora.hardening.step_watchdog import StepWatchdog


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def watched():
    clock = Clock()
    return StepWatchdog(clock=clock), clock


def test_a_step_is_overdue_after_factor_times_the_median_and_at_least_the_floor(watched):
    dog, clock = watched
    for duration in (200.0, 240.0, 220.0):  # median 220 s: overdue after max(600, 5 x 220) = 1100 s
        dog.begin_step(1)
        clock.now += duration
        dog.end_step()
    assert dog.usual_step_s() == 220.0
    dog.begin_step(4)
    dog.enter("sampling", "rollouts from the vLLM replicas")
    clock.now += 1099
    assert dog.overdue_message() is None
    clock.now += 1
    message = dog.overdue_message()
    assert message.startswith("PRIME: step 4 has run 1100 s (steps took 220 s so far (median)), 1100 s of it in")
    assert "in sampling, waiting on rollouts from the vLLM replicas" in message
    assert dog.overdue_message() is None  # once: the next when the step's time doubles
    clock.now += 1099
    assert dog.overdue_message() is None
    clock.now += 1
    assert "step 4 has run 2200 s" in dog.overdue_message()


def test_short_steps_wait_for_the_floor_and_the_first_step_has_only_the_floor(watched):
    dog, clock = watched
    dog.begin_step(1)
    dog.enter("the PRM step", "the PRM worker group")
    clock.now += sw.FLOOR_S - 1
    assert dog.overdue_message() is None
    clock.now += 1
    assert "no step finished yet" in dog.overdue_message()
    dog.end_step()
    dog.begin_step(2)  # steps of 600 s: overdue after 3000 s
    clock.now += 5 * sw.FLOOR_S - 1
    assert dog.overdue_message() is None


def test_no_message_between_steps(watched):
    dog, clock = watched
    clock.now += 10 * sw.FLOOR_S
    assert dog.overdue_message() is None


def test_the_thread_logs_what_it_finds(monkeypatch):
    monkeypatch.setattr(sw, "CHECK_EVERY_S", 0.01)
    clock, logged = Clock(), []
    dog = StepWatchdog(clock=clock, log=logged.append)
    dog.begin_step(7)
    clock.now += sw.FLOOR_S
    dog.start()
    try:
        for _ in range(500):
            if logged:
                break
            time.sleep(0.01)
    finally:
        dog.stop()
    assert logged and logged[0].startswith("PRIME: step 7 has run 600 s")


def test_the_set_up_is_watched_past_the_floor_and_not_counted_as_a_step(watched):
    dog, clock = watched
    dog.begin_setup("building the worker groups", "Ray actors")
    dog.enter("the first weight sync", "the checkpoint engine")
    clock.now += sw.FLOOR_S - 1
    assert dog.overdue_message() is None
    clock.now += 1
    message = dog.overdue_message()
    assert message.startswith(f"PRIME: the set-up has run {sw.FLOOR_S:.0f} s (no step finished yet)")
    assert "in the first weight sync, waiting on the checkpoint engine" in message
    assert "if the set-up's time doubles" in message
    dog.end_setup()
    assert dog.usual_step_s() is None and dog.overdue_message() is None


def test_the_trainers_set_up_runs_under_the_watchdog_until_the_first_weight_sync_ends(monkeypatch):
    """`init` starts the watchdog on the set-up before veRL's own; `on_init_end` names the first weight sync while
    veRL's sync runs, and ends the set-up after it."""
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from verl_prime_lora.prime import trainer as trainer_module

    seen = []

    class Dog:
        def start(self):
            seen.append("start")

        def begin_setup(self, phase, waits_on):
            seen.append(("setup", phase))

        def enter(self, phase, waits_on):
            seen.append(("enter", phase))

        def end_setup(self):
            seen.append("end")

    def verl_init(self):
        seen.append("verl init")
        self.on_init_end()

    monkeypatch.setattr(PPOTrainerSync, "init", verl_init)
    monkeypatch.setattr(PPOTrainerSync, "on_init_end", lambda self: seen.append("verl first sync"))
    trainer = trainer_module.PrimeTrainerSync.__new__(trainer_module.PrimeTrainerSync)
    trainer.watchdog = Dog()
    trainer.init()
    assert seen == [
        "start",
        ("setup", "building the worker groups and the vLLM replicas"),
        "verl init",
        ("enter", "the first weight sync"),
        "verl first sync",
        "end",
    ]
