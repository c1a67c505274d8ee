"""benchmarks/studies/prm_credit/measure.py on a made-up run (`fake_run`, tests/lab/conftest.py)."""

import json


def test_the_credit_of_each_checkpoint_is_written(fake_run, tmp_path, monkeypatch):
    from benchmarks.studies.prm_credit import measure as bench

    monkeypatch.chdir(fake_run.parent)
    assert bench.main([fake_run.name, "--out", str(tmp_path), "--responses", "warm_start", "--samples", "2"]) == 0
    report = json.loads((tmp_path / "prm_credit.json").read_text())
    assert report["run"] == fake_run.name  # the run as given, not a path of the machine
    assert [result["step"] for result in report["results"]] == [0, 2]
    start, trained = report["results"]
    assert sum(start["responses"].values()) == 12  # 6 problems x 2 samples, the same set at both steps
    assert start["responses"] == trained["responses"]
    # step 0: the PRM is its reference, every reward 0: chance by construction
    assert start["prm"]["sequence_auc_stepwise"] in (None, 0.5)
    assert report["settings"] == {
        "beta": 0.05,
        "reference": "init",
        "max_response_length": 12,
        "responses": "warm_start",
        "samples": 2,
        "seed": 0,
    }
    assert (tmp_path / "prm_credit.png").stat().st_size > 0
    # every scored response is kept, with its problem; its step sums are those the localisation ranks
    rows = trained["per_response"]
    assert len(rows) == 12 and len({row["problem"] for row in rows}) == 6
    assert all(len(row["step_rewards"]) == len(row["step_likelihood_means"]) for row in rows)
    assert {"likelihood", "likelihood_per_token"} <= set(trained)
    assert trained["prm"]["best_position_share"] is None or trained["prm"]["best_position_share"] >= 0
