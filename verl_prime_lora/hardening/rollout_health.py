"""Which of a run's vLLM rollout replicas are dead, and a run that stops when one dies.

A vLLM engine process that dies mid-run (out of memory, killed) ends a step in one of two ways. Either veRL
raises, with a message about something else: the colocated trainer sees every rollout of the step dropped
(`reward_failures.RolloutFailureError`), the split one gets vLLM's `EngineDeadError` from a weight sync. Or it
waits for ever: the colocated weight sync sends its first bucket over ZMQ to the dead engine's worker and blocks.
So while a PRIME trainer's `fit` runs, `EngineMonitor` asks each replica's server every `CHECK_EVERY_S` seconds
(veRL serves vLLM's OpenAI server, whose `/health` answers 503 once its engine is dead); a replica that fails
`CHECKS_TO_DEAD` checks in a row is dead: the monitor logs it and interrupts the trainer's thread (a
KeyboardInterrupt, the one exception that ends Ray's wait on a result, raised by the monitor's own SIGINT handler:
the process's may do nothing, see `EngineMonitor`). Whatever escapes `fit` while a replica is dead becomes
`RolloutEngineError`, naming the replica and what it answered, the original error chained.
"""

from __future__ import annotations

import _thread
import logging
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

logger = logging.getLogger(__name__)

HEALTH_TIMEOUT_S = 5.0
CHECK_EVERY_S = 10.0
CHECKS_TO_DEAD = 3  # ~30 s of failed checks: a server that is only slow to answer is not taken for dead
INTERRUPT_EVERY_S = 1.0  # an interrupt may be caught where it lands (an `except BaseException`): repeat until fit ends


class RolloutEngineError(RuntimeError):
    """A vLLM rollout replica died during the run."""


def replica_problem(address: str, timeout_s: float = HEALTH_TIMEOUT_S) -> str | None:
    """Why the replica serving at `address` ("host:port") is not healthy (None when /health answers 200)."""
    try:
        with urllib.request.urlopen(f"http://{address}/health", timeout=timeout_s) as response:
            return None if response.status == 200 else f"/health answered {response.status}"
    except urllib.error.HTTPError as exc:
        return (
            f"/health answered {exc.code} (its engine process is dead)"
            if exc.code == 503
            else f"/health answered {exc.code}"
        )
    except (urllib.error.URLError, OSError) as exc:
        return f"its server does not answer ({getattr(exc, 'reason', exc)})"


def dead_replicas(addresses: list[str]) -> list[str]:
    """ "replica i at ADDRESS: problem" for each unhealthy replica."""
    return [
        f"replica {i} at {address}: {problem}"
        for i, address in enumerate(addresses)
        if (problem := replica_problem(address)) is not None
    ]


def engine_error(dead: list[str], step: int, cause: BaseException) -> RolloutEngineError:
    if isinstance(cause, KeyboardInterrupt):  # EngineMonitor's interrupt
        how = "veRL was waiting on the dead engine (a weight sync or a generation that never ends) and was interrupted"
    else:
        how = f"veRL's error: {type(cause).__name__}: {(str(cause).splitlines() or [''])[0]}"
    return RolloutEngineError(
        f"actor_rollout_ref.rollout: the run stopped at step {step} because a vLLM rollout engine died "
        f"({'; '.join(dead)}); {how}. "
        "Every process of the run is ended with the driver. The last complete checkpoint resumes with "
        "trainer.resume_mode=auto; look in the vLLM server's log (vLLMHttpServer) for why its engine died "
        "(out of memory, a killed process)."
    )


def interrupt_main_thread() -> None:
    """SIGINT for this process's main thread, twice over: `_thread.interrupt_main` runs its Python handler at the next
    check for signals (Ray's wait on a result checks every second; a Ray worker blocks the OS signal), and SIGINT
    sent to the thread ends a blocking system call (a lock, a socket) where it is not blocked. Neither does anything
    while SIGINT is ignored."""
    _thread.interrupt_main()
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


class EngineMonitor:
    """While `fit` runs: each replica's /health every `check_every_s`; `checks_to_dead` failures in a row make it
    dead (`dead`), logged, and the thread that started the monitor is interrupted every `INTERRUPT_EVERY_S` until
    `stop` (only the main thread can be interrupted: from any other the monitor only logs).

    Started on the main thread, the monitor's SIGINT handler is in place until `stop`: once a replica is dead a
    SIGINT raises KeyboardInterrupt, before that it is handled as the process had it (ignored if it was ignored).
    The process's own handler cannot be relied on: a run started in the background of a shell inherits SIGINT
    ignored, in every Ray worker too, and `interrupt_main_thread` then does nothing; asyncio.run's absorbs the first
    (it cancels its task)."""

    def __init__(
        self,
        addresses: Callable[[], list[str]],
        problem: Callable[[str], str | None] = replica_problem,
        interrupt: Callable[[], None] = interrupt_main_thread,
        check_every_s: float = CHECK_EVERY_S,
        checks_to_dead: int = CHECKS_TO_DEAD,
    ):
        self._addresses, self._problem, self._interrupt = addresses, problem, interrupt
        self._check_every_s, self._checks_to_dead = check_every_s, checks_to_dead
        self._failures: dict[str, int] = {}
        self.dead: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._may_interrupt = False
        self._previous_sigint: Callable | int | None = None  # the handler `start` replaced, until `stop`

    def start(self) -> None:
        self._may_interrupt = threading.current_thread() is threading.main_thread()
        if self._may_interrupt and signal.getsignal(signal.SIGINT) is not None:  # None: set outside Python, kept
            self._previous_sigint = signal.signal(signal.SIGINT, self._on_sigint)
        self._thread = threading.Thread(target=self._watch, name="prime-rollout-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ends the checks and puts the process's SIGINT handler back. No interrupt comes after this returns: one that
        lands while it waits for the thread is swallowed (a dead replica is being reported), any other
        KeyboardInterrupt raised."""
        self._stop.set()
        while self._thread is not None:
            try:
                self._thread.join()
                time.sleep(0)  # an interrupt sent just before the thread ended lands here
                self._thread = None
            except KeyboardInterrupt:
                if not self.dead:
                    raise
        if self._previous_sigint is not None:
            signal.signal(signal.SIGINT, self._previous_sigint)
            self._previous_sigint = None

    def _on_sigint(self, signum: int, frame) -> None:
        if self.dead:
            raise KeyboardInterrupt
        if callable(self._previous_sigint):
            self._previous_sigint(signum, frame)
        elif self._previous_sigint == signal.SIG_DFL:
            raise KeyboardInterrupt  # the default would end the process: Python's own handler raises this instead

    def check(self) -> list[str]:
        """One round of checks: the replicas dead as of now ("replica i at ADDRESS: problem")."""
        dead = []
        for i, address in enumerate(self._addresses()):
            problem = self._problem(address)
            self._failures[address] = self._failures.get(address, 0) + 1 if problem else 0
            if problem and self._failures[address] >= self._checks_to_dead:
                dead.append(f"replica {i} at {address}: {problem}")
        return dead

    def _watch(self) -> None:
        while not self._stop.wait(self._check_every_s):
            self.dead = self.check()
            if self.dead:
                logger.error("PRIME: a vLLM rollout engine died (%s); the run is being stopped", "; ".join(self.dead))
                break
        while self._may_interrupt and not self._stop.wait(INTERRUPT_EVERY_S):
            self._interrupt()
