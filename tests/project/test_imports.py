"""Import hygiene, each case in a fresh interpreter: any module may be imported before veRL (the plugin
that `import verl` loads then registers everything once, without an ERROR); the Ray-side modules stay
free of the reward's math-verify; the package's own INFO lines show at veRL's default log level."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

FIRST_IMPORT = textwrap.dedent("""
    import importlib, json, logging, sys
    importlib.import_module({module!r})
    first = ("verl", "verl_prime_lora.rewards.math_format", "math_verify")
    loaded_first = {{name: name in sys.modules for name in first}}
    import verl
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
    core_algos = sys.modules["verl_prime_lora.algo.core_algos"]
    trainer = sys.modules["verl_prime_lora.prime.trainer"]
    logging.getLogger("verl_prime_lora.prime.prm_worker").info("an INFO line of the package")
    print(json.dumps({{
        "loaded_first": loaded_first,
        # registered, and by the one copy of each module in this process (not a second, re-executed one)
        "estimators": ADV_ESTIMATOR_REGISTRY.get("prime_grpo") is core_algos.compute_prime_grpo_advantage
        and ADV_ESTIMATOR_REGISTRY.get("prime_rloo") is core_algos.compute_prime_rloo_advantage,
        "trainers": {{name: TRAINER_REGISTRY[name] is getattr(trainer, TRAINER_REGISTRY[name].__name__)
                     for name in ("prime_sync", "prime_separate_async")}},
    }}))
""")


def run_python(code, tmp_path, **env):
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run


@pytest.mark.parametrize(
    "module",
    [
        "verl_prime_lora.algo.core_algos",  # imported veRL, whose plugin re-entered it half-initialised
        "verl_prime_lora.prime.prm_loss",  # the same, through core_algos (and Ray workers unpickle it first)
        "verl_prime_lora.prime.prm_worker",
        "verl_prime_lora.prime.prompt_filter",
    ],
)
def test_any_module_imports_before_verl_and_registration_happens_once(module, tmp_path):
    run = run_python(FIRST_IMPORT.format(module=module), tmp_path)
    assert "ERROR" not in run.stderr and "Traceback" not in run.stderr, run.stderr[-3000:]
    facts = json.loads(run.stdout.splitlines()[-1])
    assert facts["estimators"] and facts["trainers"] == {"prime_sync": True, "prime_separate_async": True}
    assert not facts["loaded_first"]["verl_prime_lora.rewards.math_format"] and not facts["loaded_first"]["math_verify"]
    if module in (
        "verl_prime_lora.algo.core_algos",
        "verl_prime_lora.prime.prm_loss",
        "verl_prime_lora.prime.prm_worker",
    ):
        assert not facts["loaded_first"]["verl"]  # pure math and the PRM's loss: veRL is imported where used
    # veRL's root logger is at WARNING; the package's logger still shows its INFO lines, once
    assert run.stderr.count("an INFO line of the package") == 1


def test_package_logs_without_any_logging_setup_and_never_twice(tmp_path):
    run = run_python(
        textwrap.dedent("""
        import logging
        import verl_prime_lora.tools.export_adapter
        log = logging.getLogger("verl_prime_lora.tools.export_adapter")
        log.info("before any setup")
        logging.basicConfig(level=logging.WARNING)  # as `import verl` does
        log.info("after the root got a handler")
        logging.getLogger("verl_prime_lora.tools.export_adapter").debug("a DEBUG line")
    """),
        tmp_path,
    )
    assert run.stderr.count("before any setup") == 1 and run.stderr.count("after the root got a handler") == 1
    assert "a DEBUG line" not in run.stderr


def test_package_logs_where_the_root_handler_drops_info(tmp_path):
    """veRL's TaskRunner (a Ray actor) holds a root handler at ERROR: the trainer's INFO lines must still show."""
    run = run_python(
        textwrap.dedent("""
        import logging
        import verl_prime_lora.prime.trainer
        root_handler = logging.StreamHandler()
        root_handler.setLevel(logging.ERROR)
        logging.getLogger().handlers[:] = [root_handler]  # the TaskRunner's one root handler
        log = logging.getLogger("verl_prime_lora.prime.trainer")
        log.info("PRIME: an INFO line")
        log.error("PRIME: an ERROR line")
    """),
        tmp_path,
    )
    assert run.stderr.count("PRIME: an INFO line") == 1 and run.stderr.count("PRIME: an ERROR line") == 1


def test_logging_level_comes_from_its_environment_variable(tmp_path):
    code = "import logging, verl_prime_lora; logging.getLogger('verl_prime_lora.trainer_x').info('an INFO line')"
    assert "an INFO line" not in run_python(code, tmp_path, VERL_PRIME_LORA_LOGGING_LEVEL="warning").stderr
    bad = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "VERL_PRIME_LORA_LOGGING_LEVEL": "loud"},
    )
    assert bad.returncode != 0 and "VERL_PRIME_LORA_LOGGING_LEVEL='loud' is not a logging level" in bad.stderr
