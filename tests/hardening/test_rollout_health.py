"""A PRIME run stops when a vLLM engine dies, and says so: each replica's /health is asked while `fit` runs and
when it fails."""

import http.server
import socket
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from verl_prime_lora.config.run import PRIME_RUN_ENV
from verl_prime_lora.hardening import rollout_health as rh
from verl_prime_lora.hardening.reward_failures import RolloutFailureError
from verl_prime_lora.prime.trainer import PrimeTrainerMixin


@pytest.fixture(autouse=True)
def _in_a_prime_runs_task_runner(monkeypatch):
    """The trainers here are built where a PRIME trainer runs: in a Ray job that the PRIME recipe marked."""
    monkeypatch.setenv(PRIME_RUN_ENV, "1")


@pytest.fixture
def server():
    """A stand-in vLLM server whose /health answers `status["code"]`, on 127.0.0.1."""
    status = {"code": 200}

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(status["code"] if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{httpd.server_address[1]}", status
    httpd.shutdown()


def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def test_a_dead_engine_and_a_gone_server_are_named(server):
    address, status = server
    assert rh.replica_problem(address) is None
    status["code"] = 503  # vLLM's /health once its engine process is dead
    assert rh.replica_problem(address) == "/health answered 503 (its engine process is dead)"
    gone = closed_port()
    assert (
        rh.dead_replicas([gone, address])[1]
        == f"replica 1 at {address}: /health answered 503 (its engine process is dead)"
    )
    assert rh.dead_replicas([gone])[0].startswith(f"replica 0 at {gone}: its server does not answer")


class Stops:
    def fit(self, *args, **kwargs):
        raise RolloutFailureError("prime.max_failed_rollout_ratio: step 3 lost 7 of 8 rollouts")


class Trainer(PrimeTrainerMixin, Stops):
    def __init__(self, addresses):  # no veRL trainer behind it: just what `fit`'s wrapper reads
        self.global_steps = 3
        self.llm_server_manager = SimpleNamespace(server_addresses=addresses)


def test_a_stop_caused_by_a_dead_engine_names_the_replica(server):
    address, status = server
    status["code"] = 503
    with pytest.raises(rh.RolloutEngineError) as err:
        Trainer([address]).fit()
    message = str(err.value)
    assert message.startswith("actor_rollout_ref.rollout: the run stopped at step 3 because a vLLM rollout engine died")
    assert f"replica 0 at {address}: /health answered 503" in message
    assert "veRL's error: RolloutFailureError: prime.max_failed_rollout_ratio: step 3 lost 7 of 8" in message
    assert isinstance(err.value.__cause__, RolloutFailureError)


def test_a_stop_with_healthy_replicas_keeps_its_own_error(server):
    address, _ = server
    with pytest.raises(RolloutFailureError):
        Trainer([address]).fit()


def test_a_replica_is_dead_after_consecutive_failed_checks_only():
    answers = {"a": [None, "slow", "slow", None, "503", "503", "503"], "b": [None] * 7}
    monitor = rh.EngineMonitor(lambda: ["a", "b"], problem=lambda address: answers[address].pop(0), checks_to_dead=3)
    rounds = [monitor.check() for _ in range(7)]
    assert rounds[:6] == [[]] * 6  # two failures, a recovery, then two more: not yet
    assert rounds[6] == ["replica 0 at a: 503"]


def _monitor(interrupts: list, problem=lambda address: "/health answered 503") -> rh.EngineMonitor:
    return rh.EngineMonitor(
        lambda: ["a"], problem=problem, interrupt=lambda: interrupts.append(1), check_every_s=0.01, checks_to_dead=2
    )


def test_a_dead_replica_interrupts_the_thread_that_started_the_monitor_until_it_stops(monkeypatch):
    monkeypatch.setattr(rh, "INTERRUPT_EVERY_S", 0.01)
    interrupts: list = []
    monitor = _monitor(interrupts)
    monkeypatch.setattr(rh.threading, "main_thread", rh.threading.current_thread)  # as the trainer's thread is
    monitor.start()
    deadline = time.monotonic() + 10
    while len(interrupts) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    monitor.stop()
    assert monitor.dead == ["replica 0 at a: /health answered 503"] and len(interrupts) >= 3
    after = len(interrupts)
    time.sleep(0.05)
    assert len(interrupts) == after  # none after stop


def test_healthy_replicas_and_other_threads_are_never_interrupted(monkeypatch):
    interrupts: list = []
    healthy = _monitor(interrupts, problem=lambda address: None)
    healthy.start()
    time.sleep(0.1)
    healthy.stop()
    # started from a thread other than the main one: a dead replica is logged, nothing interrupted
    monkeypatch.setattr(rh, "INTERRUPT_EVERY_S", 0.01)
    dead = _monitor(interrupts)
    starter = threading.Thread(target=dead.start)
    starter.start()
    starter.join()
    time.sleep(0.1)
    dead.stop()
    assert healthy.dead == [] and dead.dead and interrupts == []


INTERRUPTED_WAIT = """
import threading, time
from verl_prime_lora.hardening import rollout_health as rh
rh.INTERRUPT_EVERY_S = 0.05
monitor = rh.EngineMonitor(lambda: ["a"], problem=lambda address: "503", check_every_s=0.05, checks_to_dead=2)
monitor.start()
try:
    threading.Event().wait(60)  # a wait that never ends by itself, as on a dead engine
    print("not interrupted")
except KeyboardInterrupt:
    monitor.stop()
    time.sleep(0.3)  # no interrupt after stop
    print("interrupted", monitor.dead)
"""


def test_the_interrupt_ends_a_blocked_wait_of_the_main_thread_and_stop_absorbs_the_rest():
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_WAIT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "interrupted ['replica 0 at a: 503']"


BLOCKED_FIT = """
import asyncio, functools, signal, sys, threading, time
from types import SimpleNamespace
from verl_prime_lora.hardening import rollout_health as rh
from verl_prime_lora.prime import trainer as tr
rh.INTERRUPT_EVERY_S = 0.05
tr.EngineMonitor = functools.partial(
    rh.EngineMonitor, problem=lambda address: "/health answered 503", check_every_s=0.05, checks_to_dead=2
)
if sys.argv[1] == "ray_worker_of_a_background_run":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited from a shell that started the run with `&`
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # as the raylet starts every worker
else:  # Python's own, whatever this test's process inherited
    signal.signal(signal.SIGINT, signal.default_int_handler)


async def weight_sync():
    # veRL's colocated weight sync on a dead engine: Ray's wait on a result inside asyncio.run, which waits in
    # short slices with a check for signals between them, and never ends by itself
    deadline = time.monotonic() + 20
    while not threading.Event().wait(0.05):
        if time.monotonic() > deadline:
            return "not interrupted"


class WaitsForEver:
    def fit(self):
        return asyncio.run(weight_sync())

class Trainer(tr.PrimeTrainerMixin, WaitsForEver):
    def __init__(self):
        self.global_steps = 3
        self.llm_server_manager = SimpleNamespace(server_addresses=["10.0.0.1:8000"])

try:
    print(Trainer().fit())
except rh.RolloutEngineError as err:
    print(err)
time.sleep(0.3)  # no interrupt after fit ended
handler = signal.getsignal(signal.SIGINT)
print("done; SIGINT:", getattr(handler, "name", None) or handler.__name__)
"""


@pytest.mark.parametrize(
    "process, sigint", [("plain", "default_int_handler"), ("ray_worker_of_a_background_run", "SIG_IGN")]
)
def test_a_fit_waiting_on_a_dead_engine_is_stopped_with_the_engine_named(process, sigint):
    """Whatever the process does with SIGINT: a Ray worker of a run started in the background ignores it (the
    interrupt would do nothing) and blocks it (only the check in Ray's wait sees the interrupt)."""
    done = subprocess.run([sys.executable, "-c", BLOCKED_FIT, process], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    message, last = done.stdout.strip().splitlines()
    assert message.startswith(
        "actor_rollout_ref.rollout: the run stopped at step 3 because a vLLM rollout engine died (replica 0 at "
        "10.0.0.1:8000: /health answered 503); veRL was waiting on the dead engine"
    )
    assert last == f"done; SIGINT: {sigint}"  # the process's own handler is back


SIGINT_BEFORE_A_DEATH = """
import signal, sys, time
from verl_prime_lora.hardening import rollout_health as rh
signal.signal(signal.SIGINT, signal.SIG_IGN if sys.argv[1] == "ignored" else signal.default_int_handler)
before = signal.getsignal(signal.SIGINT)
monitor = rh.EngineMonitor(lambda: ["a"], problem=lambda address: None, check_every_s=0.05)
monitor.start()
try:
    signal.raise_signal(signal.SIGINT)
    time.sleep(0.2)
    print("went on")
except KeyboardInterrupt:
    print("KeyboardInterrupt")
monitor.stop()
print(signal.getsignal(signal.SIGINT) is before)
"""


@pytest.mark.parametrize("sigint, outcome", [("default", "KeyboardInterrupt"), ("ignored", "went on")])
def test_while_every_replica_is_healthy_sigint_is_handled_as_the_process_had_it(sigint, outcome):
    done = subprocess.run(
        [sys.executable, "-c", SIGINT_BEFORE_A_DEATH, sigint], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [outcome, "True"]
