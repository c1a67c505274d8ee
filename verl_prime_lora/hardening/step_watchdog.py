"""A step that runs far past its usual time is logged, with the phase it is in and what that phase waits on.

veRL's trainer waits without a word: on rollouts that never come back, on a reward call, on a worker group. The PRIME
trainers mark each phase of a step here (`enter`), and a daemon thread checks every `CHECK_EVERY_S` seconds: once a
step has run `FACTOR` times longer than the median of the steps before it (and at least `FLOOR_S`; the first step,
with its warm-up, only past `FLOOR_S`), one warning names the step, the phase, how long, and what the phase waits
on; another follows each time the step's time doubles. The set-up before the first step (workers, vLLM replicas,
the first weight sync) is watched the same way (`begin_setup`), past `FLOOR_S`. Nothing is stopped: a reward call
has its own time limit (`prime.reward_timeout_s`), and the run is the user's to end.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

CHECK_EVERY_S = 30.0
FACTOR = 5.0  # a step this many times its usual time is overdue
FLOOR_S = 600.0  # never overdue before this (GPU steps of the seed take minutes; CPU steps seconds)


class StepWatchdog:
    """The phase of the running step, and a warning when the step is overdue (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, log: Callable[[str], None] = logger.warning):
        self._clock, self._log = clock, log
        self._lock = threading.Lock()
        self._durations: list[float] = []
        self._step: int | None = None
        self._what = ""  # "step N" or "the set-up"
        self._step_start = self._phase_start = 0.0
        self._phase, self._waits_on = "", ""
        self._next_warning_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def begin_step(self, step: int) -> None:
        self._begin(step, f"step {step}", "the step's start")

    def begin_setup(self, phase: str, waits_on: str) -> None:
        """The run's set-up: watched like a step, never counted among the steps' durations."""
        self._begin(-1, "the set-up", phase, waits_on)

    def _begin(self, step: int, what: str, phase: str, waits_on: str = "") -> None:
        with self._lock:
            now = self._clock()
            self._step, self._what, self._step_start = step, what, now
            self._phase, self._waits_on, self._phase_start = phase, waits_on, now
            self._next_warning_at = 0.0

    def enter(self, phase: str, waits_on: str) -> None:
        with self._lock:
            self._phase, self._waits_on, self._phase_start = phase, waits_on, self._clock()

    def end_setup(self) -> None:
        self.end_step()

    def end_step(self) -> None:
        with self._lock:
            if self._step is not None and self._step >= 0:
                self._durations.append(self._clock() - self._step_start)
            self._step = None

    def usual_step_s(self) -> float | None:
        """The median of the finished steps' durations (None before the first)."""
        with self._lock:
            return statistics.median(self._durations) if self._durations else None

    def overdue_message(self) -> str | None:
        """The warning for the running step when it is overdue and not yet warned at this length, else None."""
        usual = self.usual_step_s()
        with self._lock:
            if self._step is None:
                return None
            now = self._clock()
            elapsed = now - self._step_start
            limit = max(FLOOR_S, FACTOR * usual) if usual is not None and self._step >= 0 else FLOOR_S
            if elapsed < max(limit, self._next_warning_at):
                return None
            self._next_warning_at = 2 * elapsed
            usual_text = f"steps took {usual:.0f} s so far (median)" if usual is not None else "no step finished yet"
            return (
                f"PRIME: {self._what} has run {elapsed:.0f} s ({usual_text}), {now - self._phase_start:.0f} s of "
                f"it in {self._phase}" + (f", waiting on {self._waits_on}" if self._waits_on else "") + ". Nothing "
                f"is stopped; the next warning comes if {self._what if self._step < 0 else 'the step'}'s time doubles."
            )

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="prime-step-watchdog", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(CHECK_EVERY_S):
            message = self.overdue_message()
            if message:
                self._log(message)
