"""benchmarks/warm_start_threads.py: builds in the order asked, each with its thread count, the ratios to the first
count's mean, the weight comparison, and the neighbours stopped afterwards."""

import json
import multiprocessing
import sys

from benchmarks import warm_start_threads as bench


def test_builds_alternate_and_report_ratios_and_weights(tmp_path, monkeypatch):
    seconds = iter([0.0, 10.0, 0.0, 2.0, 0.0, 30.0, 0.0, 3.0])  # perf_counter at each build's start and end
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(seconds))
    calls = []

    def fake_build(out, seed, skill_acc, mix_steps, max_steps):
        calls.append((out.name, bench.warm_start.NUM_THREADS, seed, skill_acc > 1, mix_steps, max_steps))
        (out / "model").mkdir(parents=True)
        weights = b"w" if len(calls) != 3 else b"other"  # the third build's weights differ
        (out / "model" / "model.safetensors").write_bytes(weights)
        return {"stats": {"sft_seconds": 1.0, "sft_steps": max_steps + 1, "greedy_acc": 0.05}}

    monkeypatch.setattr(bench.warm_start, "write_warm_assets", lambda out, seed, **kw: fake_build(out, seed, **kw))
    monkeypatch.setattr(sys, "argv", ["x", "--out", str(tmp_path), "--busy", "1", "--max-steps", "7"])
    bench.main()

    assert calls == [
        ("build_0_threads_2", 2, 0, True, 1, 7),
        ("build_1_threads_1", 1, 0, True, 1, 7),
        ("build_2_threads_2", 2, 0, True, 1, 7),
        ("build_3_threads_1", 1, 0, True, 1, 7),
    ]
    result = json.loads((tmp_path / "warm_start_threads.json").read_text())
    builds = result["builds"]
    # 10, 2, 30 and 3 s: each against the mean of the 2-thread builds, 20 s
    assert [b["seconds_ratio"] for b in builds] == [0.5, 0.1, 1.5, 0.15]
    assert [b["same_weights"] for b in builds] == [True, True, False, True]
    assert result["busy"] == 1 and result["max_steps"] == 7
    assert not multiprocessing.active_children()  # the spinning neighbour is gone
