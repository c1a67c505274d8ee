"""Where a `main_ppo` launch spends its time before step 1, read from the lines it prints.

veRL's trainer logs one line as each part of its set-up completes; the launcher feeds every output line to a
`StartupClock`, which keeps the time each of the `PHASES` ends (its marker's first appearance) and, at the
first step's metrics line, gives one summary: each phase's seconds since the previous marker seen, and the
total since launch. A phase whose marker never appears (no PRM in a GRPO run) is left out and its time counts
in the next phase seen.
"""

import time
from typing import Callable

# (phase, the first output line that ends it contains this), in the order veRL's set-up runs them
PHASES = (
    ("driver imports + Ray", "Started a local Ray instance"),
    ("TaskRunner + data", "train and validate dataloader initialized"),
    ("actor + reference", "actor and ref model engine initialized"),
    ("reward workers", "reward loop manager initialized"),
    ("vLLM servers", "checkpoint engine manager initialized"),
    ("PRM + checkpoint", "all initialize finished, ready to fit"),
    ("step 1", "step:1 - "),
)
FIRST_STEP_MARKER = PHASES[-1][1]


class StartupClock:
    """Seconds from launch to each phase's end, from output lines as they arrive."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._started = clock()
        self._ended: dict[str, float] = {}

    def feed(self, line: str) -> str | None:
        """Note the phases `line` ends; the summary once it is step 1's metrics line, else None."""
        for phase, marker in PHASES:
            if phase not in self._ended and marker in line:
                self._ended[phase] = self._clock() - self._started
                if marker == FIRST_STEP_MARKER:
                    return self.summary()
        return None

    def summary(self) -> str:
        parts, previous = [], 0.0
        for phase, _ in PHASES:
            if phase in self._ended:
                parts.append(f"{phase} {self._ended[phase] - previous:.1f} s")
                previous = self._ended[phase]
        return f"[launch] start-up to the end of step 1: {previous:.1f} s ({', '.join(parts)})"
