"""`tools.plot_run`: a run plotted from veRL's metrics file(s), resumed launches joined by step, and its ETA."""

import json

import pytest

from verl_prime_lora.tools import plot_run


def write(path, rows):
    path.write_text("".join(json.dumps({"step": s, "data": d}) + "\n" for s, d in rows))
    return path


def test_launches_join_by_step_the_later_one_winning_and_the_plot_is_written(tmp_path):
    first = write(tmp_path / "a.jsonl", [(0, {"val-core/math/acc/mean@1": 0.2}), (1, {"timing_s/step": 100.0}),
                                         (2, {"timing_s/step": 120.0, "prm/ce_loss": 0.69})])  # fmt: skip
    resumed = write(
        tmp_path / "b.jsonl", [(2, {"timing_s/step": 110.0, "prm/ce_loss": 0.6}), (3, {"timing_s/step": 90.0})]
    )
    steps = plot_run.read_steps([first, resumed])
    assert list(steps) == [0, 1, 2, 3] and steps[2] == {"timing_s/step": 110.0, "prm/ce_loss": 0.6}
    assert plot_run.series(steps, "val-core/") == {"val-core/math/acc/mean@1": [(0, 0.2)]}
    # ETA: 7 steps to go at the median of 100, 110, 90 s
    assert plot_run.eta_hours(steps, 10) == pytest.approx(7 * 100 / 3600)
    assert plot_run.main([str(first), str(resumed), "--out", str(tmp_path / "run.png"), "--total-steps", "10"]) == 0
    assert (tmp_path / "run.png").read_bytes()[:4] == b"\x89PNG"


def test_a_line_that_is_not_the_file_loggers_is_named(tmp_path):
    bad = tmp_path / "m.jsonl"
    bad.write_text('{"step": 1, "data": {}}\nnot json\n')
    with pytest.raises(SystemExit, match=r"m.jsonl:2: not a line of veRL's file logger"):
        plot_run.read_steps([bad])
