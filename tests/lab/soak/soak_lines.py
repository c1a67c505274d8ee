"""Step lines as the soak's launcher (`benchmarks.soak.run`) writes them, for the tests of `sample` and `report`."""


def totals(rss_all, fds_all=100):
    return {"rss_mb": {"ray::WorkerDict": rss_all / 2, "all": rss_all}, "fds": {"all": fds_all}}


def line(segment, step, resumed_from, rss, log_kb, metrics=None):
    return {
        "segment": segment,
        "step": step,
        "t": 10.0 * step + 100 * segment,
        "resumed_from": resumed_from,
        "timing": {"timing_s/step": 10.0},
        "metrics": metrics or {},
        "totals": totals(rss),
        "cpu_s": None if step == resumed_from + 1 else {"all": 4.0},
        "disk": {"checkpoints_mb": 20.0, "checkpoint_folders": 2, "log_kb": log_kb},
    }
