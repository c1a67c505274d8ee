"""verl_prime_lora.cpu.launch: a SIGTERM to the launcher still runs its cleanup (the run sits in its own
session, so nothing else would stop Ray's and vLLM's processes)."""

import os
import signal
import sys
import threading

import pytest

from verl_prime_lora.cpu.launch import TIMEOUT_EXIT_CODE, _sigterm_unwinds, run_main_ppo
from verl_prime_lora.run_processes import RUN_MARKER


def test_sigterm_unwinds_in_the_main_thread_and_restores_the_handler():
    before = signal.getsignal(signal.SIGTERM)
    cleaned = []
    with pytest.raises(SystemExit) as exit_info:
        with _sigterm_unwinds():
            try:
                os.kill(os.getpid(), signal.SIGTERM)  # Python runs the handler right after the call
                pytest.fail("SIGTERM did not unwind")
            finally:
                cleaned.append(True)
    assert exit_info.value.code == 128 + signal.SIGTERM and cleaned == [True]
    assert signal.getsignal(signal.SIGTERM) is before


def test_sigterm_unwinds_is_a_no_op_off_the_main_thread():
    seen = []
    thread = threading.Thread(target=lambda: seen.append(_enter_and_read_handler()))
    thread.start()
    thread.join()
    assert seen == [signal.getsignal(signal.SIGTERM)]


def _enter_and_read_handler():
    with _sigterm_unwinds():
        return signal.getsignal(signal.SIGTERM)


def test_timeout_is_reported_on_the_console_and_in_the_log(tmp_path, monkeypatch, capsys):
    """A run past --timeout: the launcher says so on stderr (not only in the log file), without --echo too."""
    hanging = tmp_path / "hanging-python"
    hanging.write_text("#!/bin/sh\necho started\nexec sleep 60\n")  # stands in for `python -m verl...main_ppo`
    hanging.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(hanging))
    log = tmp_path / "run.log"
    assert run_main_ppo([], log, timeout_s=1.0) == TIMEOUT_EXIT_CODE
    console = capsys.readouterr()
    assert "[launch] timeout after 1 s: killing the run" in console.err
    assert "started" not in console.out  # the run's own output stays in the log without echo
    assert "started" in log.read_text() and "[launch] timeout after 1 s" in log.read_text()


def _fake_python(tmp_path, monkeypatch, body: str) -> None:
    script = tmp_path / "fake-python"  # stands in for `python -m verl...main_ppo`
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(script))


@pytest.mark.parametrize(
    "overrides, caller, seen",
    [
        ([], None, "local"),  # its own cluster, whatever `ray start` left on this machine
        (["+ray_kwargs.ray_init.address=127.0.0.1:6380"], None, ""),  # the cluster the overrides name
        ([], "10.0.0.7:6379", "10.0.0.7:6379"),  # the caller's choice wins
    ],
)
def test_a_run_starts_its_own_ray_cluster_unless_told_to_join_one(tmp_path, monkeypatch, overrides, caller, seen):
    _fake_python(tmp_path, monkeypatch, 'echo "RAY_ADDRESS=[$RAY_ADDRESS]"')
    if caller is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", caller)
    log = tmp_path / "run.log"
    assert run_main_ppo(overrides, log, timeout_s=30.0) == 0
    assert f"RAY_ADDRESS=[{seen}]" in log.read_text()


def test_the_start_up_summary_is_printed_at_step_1(tmp_path, monkeypatch, capsys):
    lines = ["Started a local Ray instance.", "INFO: all initialize finished, ready to fit", "step:1 - x:1.0"]
    _fake_python(tmp_path, monkeypatch, "\n".join(f'echo "{line}"' for line in lines))
    log = tmp_path / "run.log"
    assert run_main_ppo([], log, timeout_s=30.0) == 0
    summary = "[launch] start-up to the end of step 1: "
    assert summary in capsys.readouterr().err
    assert log.read_text().index("step:1 - x:1.0") < log.read_text().index(summary)


def test_the_cpu_the_run_used_is_printed_after_the_start_up_summary(tmp_path, monkeypatch, capsys):
    """The census counts the run's processes (the fake driver's busy child among them), not the launcher."""
    burned = tmp_path / "burned"  # the child has used its 0.3 s of CPU
    burn = (
        "import time; t = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
        f"open('{burned}', 'w')\ntime.sleep(30)"
    )
    script = (
        f'{sys.executable} -c "{burn}" &\nwhile [ ! -f {burned} ]; do sleep 0.05; done\necho "step:1 - x:1.0"\nsleep 2'
    )
    _fake_python(tmp_path, monkeypatch, script)  # the sleep: the run lives on while the launcher reads the line
    log = tmp_path / "run.log"
    assert run_main_ppo([], log, timeout_s=30.0) == 0
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if line.startswith("[launch] CPU to the end of step 1: "))
    total = float(line.split(": ", 1)[1].split(" s", 1)[0])
    assert 0.3 <= total < 2.0, line  # the child's 0.3 s, not the launcher's own CPU
    assert "python -c" in line
    assert err.index("[launch] start-up to the end of step 1") < err.index(line)


def test_the_local_ray_cluster_starts_no_idle_workers_unless_the_caller_says(tmp_path, monkeypatch):
    _fake_python(tmp_path, monkeypatch, 'echo "prestart=[$RAY_prestart_worker_first_driver]"')
    monkeypatch.delenv("RAY_prestart_worker_first_driver", raising=False)
    log = tmp_path / "run.log"
    assert run_main_ppo([], log, timeout_s=30.0) == 0
    assert "prestart=[0]" in log.read_text()
    monkeypatch.setenv("RAY_prestart_worker_first_driver", "1")
    assert run_main_ppo([], log, timeout_s=30.0) == 0
    assert "prestart=[1]" in log.read_text()


def test_the_run_carries_the_callers_marker_and_never_the_launchers_own(tmp_path, monkeypatch):
    """A caller that reads the run's processes while it runs names them by the marker it passes; a marker in the
    launcher's own environment is not reused (the cleanup kills whatever carries the run's marker)."""
    _fake_python(tmp_path, monkeypatch, f'echo "marker=[${RUN_MARKER}]"')
    log = tmp_path / "run.log"
    assert run_main_ppo([], log, timeout_s=30.0, env={RUN_MARKER: "caller-run"}) == 0
    assert "marker=[caller-run]" in log.read_text()
    monkeypatch.setenv(RUN_MARKER, "launcher-own")
    assert run_main_ppo([], log, timeout_s=30.0) == 0
    seen = log.read_text().split("marker=[", 1)[1].split("]", 1)[0]
    assert seen not in ("", "launcher-own")
