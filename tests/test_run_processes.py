"""verl_prime_lora.run_processes: a run's processes found by their marker, named, and their CPU counted."""

import os
import subprocess
import sys
import time
import uuid

from verl_prime_lora.run_processes import (
    RUN_MARKER,
    RunProcess,
    cpu_seconds_by_name,
    kill_run,
    pids_with_marker,
    process_name,
    run_processes,
    start_order,
)


def test_process_names_are_the_titles_a_person_recognises():
    assert process_name(["ray::WorkerDict.actor_rollout_compute_log_prob    "]) == "ray::WorkerDict"
    assert process_name(["VLLM::EngineCore"]) == "VLLM::EngineCore"
    assert process_name(["/venv/bin/python", "-m", "verl.trainer.main_ppo", "+recipe=x"]) == "verl.trainer.main_ppo"
    assert process_name(["/venv/bin/python", "-u", "/venv/ray/_private/log_monitor.py", "--x"]) == "log_monitor.py"
    assert process_name(["/venv/ray/core/src/ray/gcs/gcs_server", "--log_dir=/tmp"]) == "gcs_server"
    assert process_name(["/venv/bin/python", "-c", "print(1)"]) == "python -c"
    assert process_name([]) == "?"


def test_cpu_is_summed_over_the_marked_processes_only():
    run_id = uuid.uuid4().hex
    burn = "import time; t = time.process_time()\nwhile time.process_time() - t < 0.4: pass\ntime.sleep(30)"
    env = {**os.environ, RUN_MARKER: run_id}
    children = [subprocess.Popen([sys.executable, "-c", burn], env=env) for _ in range(2)]
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            seconds = cpu_seconds_by_name(run_id)
            if seconds.get("python -c", 0.0) >= 0.8:
                break
            time.sleep(0.1)
        assert list(seconds) == ["python -c"]  # this test process is not marked
        assert 0.8 <= seconds["python -c"] < 3.0
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_start_order_is_each_kinds_first_start_after_the_runs_first_process():
    processes = [
        RunProcess(3, "VLLM::Worker", started_s=140.5, cpu_s=1.0),
        RunProcess(1, "verl.trainer.main_ppo", started_s=100.0, cpu_s=7.0),
        RunProcess(4, "ray::WorkerDict", started_s=121.0, cpu_s=8.0),
        RunProcess(2, "ray::WorkerDict", started_s=120.0, cpu_s=8.0),
    ]
    order = start_order(processes)
    assert order == {"verl.trainer.main_ppo": 0.0, "ray::WorkerDict": 20.0, "VLLM::Worker": 40.5}
    assert list(order) == ["verl.trainer.main_ppo", "ray::WorkerDict", "VLLM::Worker"]
    assert start_order([]) == {}


def test_a_later_child_is_read_as_starting_later():
    run_id = uuid.uuid4().hex
    env = {**os.environ, RUN_MARKER: run_id}
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    time.sleep(0.5)
    second = subprocess.Popen(["sleep", "30"], env=env)
    try:
        deadline = time.monotonic() + 20
        while len(found := run_processes(run_id)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        by_name = {process.name: process for process in found}
        assert set(by_name) == {"python -c", "sleep"}
        assert 0.3 <= by_name["sleep"].started_s - by_name["python -c"].started_s < 5.0
        assert list(start_order(found)) == ["python -c", "sleep"]
    finally:
        for child in (first, second):
            child.kill()
            child.wait()


DRIVER = """
import subprocess, sys, time
from verl_prime_lora.run_processes import reap_after_driver
reap_after_driver()
subprocess.Popen(["sleep", "600"])  # a child in the driver's session
subprocess.Popen(["sleep", "600"], start_new_session=True)  # a daemon of its own (as Ray's GCS and raylet are)
print("ready", flush=True)
time.sleep(600)
"""


def test_the_watcher_ends_a_run_whose_driver_is_terminated():
    """`reap_after_driver`: a driver ended by SIGTERM (a scheduler's stop, `kill`) leaves marked processes, in its
    session and outside it; the watcher kills them all within its poll and SIGTERM's effect."""
    run_id = uuid.uuid4().hex
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER], env={**os.environ, RUN_MARKER: run_id}, stdout=subprocess.PIPE, text=True
    )
    try:
        assert driver.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10  # a child in the middle of its exec may not be readable in /proc yet
        while len(pids_with_marker(run_id)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(pids_with_marker(run_id)) == 3  # the driver and its two sleeps (the watcher is not marked)
        driver.terminate()
        driver.wait(timeout=10)
        deadline = time.monotonic() + 10
        while pids_with_marker(run_id) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not pids_with_marker(run_id)
    finally:
        kill_run(run_id)
