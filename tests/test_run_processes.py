"""verl_prime_lora.run_processes: a run's processes found by their marker, named, and their CPU counted."""

import os
import subprocess
import sys
import time
import uuid

from verl_prime_lora.run_processes import RUN_MARKER, cpu_seconds_by_name, process_name


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
