"""benchmarks/soak/sample.py: the process readings, the whole run's kill, the per-step records."""

import os
import subprocess
import sys
import time
import uuid

import pytest
from soak_lines import line, totals

from benchmarks.soak import sample
from verl_prime_lora.run_processes import RUN_MARKER, pids_with_marker

# ---------------------------------------------------------------------------------------------------------------
# reading processes
# ---------------------------------------------------------------------------------------------------------------

STATUS = """Name:\tpython
State:\tS (sleeping)
VmPeak:\t 9000000 kB
VmRSS:\t  812345 kB
RssAnon:\t  700000 kB
RssFile:\t  100000 kB
RssShmem:\t   12345 kB
Threads:\t42
"""


def test_status_is_parsed_to_bytes_and_threads():
    assert sample.parse_status(STATUS) == {
        "VmRSS": 812345 * 1024,
        "RssAnon": 700000 * 1024,
        "RssFile": 100000 * 1024,
        "RssShmem": 12345 * 1024,
        "Threads": 42,
    }
    assert sample.parse_status("Name:\tkthreadd\nThreads:\t1\n") == {"Threads": 1}  # a kernel thread has no VmRSS


def fake_process(proc, pid, status, fds):
    folder = proc / str(pid)
    (folder / "fd").mkdir(parents=True)
    (folder / "status").write_text(status)
    for number, target in enumerate(fds):
        os.symlink(target, folder / "fd" / str(number))  # dangling, as /proc's socket and pipe links are


def test_a_process_is_read_from_a_proc_tree_and_summed_by_kind(tmp_path):
    fds = ["/dev/null", "socket:[123]", "socket:[124]", "pipe:[9]", "anon_inode:[eventfd]"]
    fake_process(tmp_path, 10, STATUS, fds)
    fake_process(tmp_path, 11, "VmRSS:\t1024 kB\nRssAnon:\t512 kB\nThreads:\t3\n", ["/tmp/x.log"])
    first, second = sample.read_process(10, tmp_path), sample.read_process(11, tmp_path)
    assert first["rss"] == 812345 * 1024 and first["threads"] == 42 and first["fds"] == 5
    assert first["fd_types"] == {"device": 1, "socket": 2, "pipe": 1, "anon_inode": 1}
    assert sample.read_process(12, tmp_path) is None  # gone
    totals = sample.kind_totals([("ray::WorkerDict", first), ("ray::WorkerDict", second), ("raylet", second)])
    assert totals["procs"] == {"ray::WorkerDict": 2, "raylet": 1, "all": 3}
    assert totals["rss_mb"]["ray::WorkerDict"] == pytest.approx((812345 + 1024) / 1024)
    assert totals["rss_mb"]["all"] == pytest.approx((812345 + 2048) / 1024)
    assert totals["fds"] == {"ray::WorkerDict": 6, "raylet": 1, "all": 7}
    assert totals["fd_types"]["file"] == 2 and totals["threads"]["all"] == 48
    flat = sample.flatten(totals)
    assert flat["rss_anon_mb/all"] == pytest.approx((700000 + 1024) / 1024) and flat["fd_types/socket"] == 2


def test_this_process_reads_from_the_real_proc():
    reading = sample.read_process(os.getpid())
    assert reading["rss"] > 10 * 1024 * 1024 and reading["fds"] >= 3 and reading["threads"] >= 1


def test_fd_types_and_the_ray_session_folder():
    assert [
        sample.fd_type(t) for t in ("socket:[1]", "pipe:[2]", "anon_inode:[eventpoll]", "/dev/shm/x", "/a", "x")
    ] == [
        "socket",
        "pipe",
        "anon_inode",
        "device",
        "file",
        "other",
    ]
    raylet = ["/x/raylet", "--raylet_socket_name=/tmp/ray/s/sockets/raylet", "--session_dir=/tmp/ray/session_1_2"]
    assert sample.session_dir([["python", "-m", "x"], raylet]) == "/tmp/ray/session_1_2"
    assert sample.session_dir([["python"]]) is None


def test_cpu_per_step_by_kind_counts_new_processes_whole_and_a_reused_pid_as_new():
    before = {1: ("ray::WorkerDict", 10.0), 2: ("VLLM::EngineCore", 5.0), 3: ("python -c", 1.0)}
    after = {1: ("ray::WorkerDict", 12.5), 2: ("VLLM::EngineCore", 6.0), 4: ("python -c", 0.5), 3: ("raylet", 0.25)}
    assert sample.cpu_deltas(before, after) == pytest.approx(
        {"ray::WorkerDict": 2.5, "VLLM::EngineCore": 1.0, "python -c": 0.5, "raylet": 0.25, "all": 4.25}
    )


def test_the_whole_run_is_killed_with_sigkill_children_included():
    run_id = uuid.uuid4().hex
    env = {**os.environ, RUN_MARKER: run_id}
    # a parent that ignores SIGTERM, and its child: only SIGKILL ends both
    script = "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    script += "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    parent = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        for _ in range(100):
            if len(pids_with_marker(run_id)) == 2:
                break
            time.sleep(0.05)
        assert len(pids_with_marker(run_id)) == 2
        assert sample.kill_whole_run(run_id) == 2
        assert parent.wait(timeout=10) == -9
        assert pids_with_marker(run_id) == []
    finally:
        parent.kill()


# ---------------------------------------------------------------------------------------------------------------
# per-step records
# ---------------------------------------------------------------------------------------------------------------


def test_step_records_key_peaks_to_the_step_in_progress_and_mark_replayed_steps():
    lines = [line(0, s, 0, 1000 + s, 10.0 * s) for s in (1, 2, 3, 4)]  # killed during 5, last save at 2
    lines += [line(1, s, 2, 900 + s, 50.0 + 12.0 * s) for s in (3, 4, 5)]
    samples = [
        {"segment": 0, "step": None, "t": 0.5, "totals": totals(5000)},  # start-up: no step
        {"segment": 0, "step": 2, "t": 15.0, "totals": totals(3000)},  # during step 2
        {"segment": 0, "step": 2, "t": 20.0, "totals": totals(1002)},  # at step 2's line
        {"segment": 1, "step": 4, "t": 140.0, "totals": totals(2500)},
    ]
    records = sample.step_records(lines, samples)
    assert [(r["segment"], r["step"], r["replayed"], r["since_resume"]) for r in records] == [
        (0, 1, False, 1),
        (0, 2, False, 2),
        (0, 3, False, 3),
        (0, 4, False, 4),
        (1, 3, True, 1),
        (1, 4, True, 2),
        (1, 5, False, 3),
    ]
    by_key = {(r["segment"], r["step"]): r["values"] for r in records}
    assert by_key[(0, 2)]["peak/rss_mb/all"] == 3000 and by_key[(0, 2)]["rss_mb/all"] == 1002
    assert by_key[(1, 4)]["peak/rss_mb/ray::WorkerDict"] == 1250 and "peak/rss_mb/all" not in by_key[(0, 1)]
    assert by_key[(0, 2)]["disk/log_kb_per_step"] == 10.0 and "disk/log_kb_per_step" not in by_key[(1, 3)]
    assert by_key[(1, 4)]["disk/log_kb_per_step"] == 12.0 and by_key[(0, 2)]["cpu_s/all"] == 4.0
    assert "cpu_s/all" not in by_key[(1, 3)] and by_key[(0, 1)]["timing_s/step"] == 10.0
