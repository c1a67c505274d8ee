"""`pkg://benchmarks.planted_error_task`: the path registered plans give veRL for the planted task's reward, and
`study` as the plan's `"module"`; the task lives in `benchmarks.studies.planted_error.task`."""

from benchmarks.studies.planted_error.task import ARMS, METRICS, compute_score, write_assets

__all__ = ["ARMS", "METRICS", "compute_score", "write_assets"]
