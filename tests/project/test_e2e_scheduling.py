"""`make test` runs the e2e tier with `-n 2 --dist loadgroup`: each test module marks its tests with one
`xdist_group`, so that one run of `main_ppo` (a module- or group-scoped fixture) is made once, on one worker. If
pytest-xdist stops honouring the mark (pytest 9.2 renamed the node attribute that xdist 3.8 rewrites), every worker
would make each run again, side by side, and the tier would take twice as long without failing. This pins it."""

import json
import os
import subprocess
import sys
import textwrap

GROUPED = textwrap.dedent(
    """
    import json, os, pytest

    pytestmark = [pytest.mark.xdist_group("one_run")]

    @pytest.mark.parametrize("i", range(6))
    def test_worker(i):
        with open(os.path.join(os.environ["WORKERS_OUT"], f"{i}.json"), "w") as f:
            json.dump(os.environ["PYTEST_XDIST_WORKER"], f)
    """
)


def test_an_xdist_group_runs_on_one_worker(tmp_path):
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    out = tmp_path / "workers"
    out.mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider"]
        + ["test_grouped.py"],
        cwd=tmp_path,
        env={**os.environ, "WORKERS_OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    workers = [json.loads(f.read_text()) for f in out.glob("*.json")]
    assert len(workers) == 6 and len(set(workers)) == 1, workers


def test_every_e2e_run_has_its_place_in_the_longest_first_order():
    """A new run left out of `conftest.E2E_RUNS_LONGEST_FIRST` would start last, whatever its length."""
    import ast
    import re
    from pathlib import Path

    tests = Path(__file__).resolve().parents[1]
    # read from the file: under xdist the module name `conftest` may be tests/e2e's
    tree = ast.parse((tests / "conftest.py").read_text())
    (order,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "E2E_RUNS_LONGEST_FIRST"
    ]
    E2E_RUNS_LONGEST_FIRST = ast.literal_eval(order)
    # the e2e tier and the unit tests (tests/demo/test_chain_task.py runs on the demo's worker); not the lab's
    paths = sorted(path for path in tests.rglob("test_*.py") if path.relative_to(tests).parts[0] != "lab")
    sources = "".join(path.read_text() for path in paths)
    groups = set(re.findall(r'xdist_group\("(\w+)"\)', sources)) - {"one_run"}  # one_run: this file's probe
    (named,) = re.findall(r"xdist_group\(name\) for name in \(([^)]*)\)", sources)  # test_prime_e2e.py's runs
    groups |= set(re.findall(r"\w+", named))
    assert groups == set(E2E_RUNS_LONGEST_FIRST), sorted(groups)
