"""Every launch the docs print composes and passes the driver's checks as printed.

The fenced code of README.md, docs/operations.md and docs/install.md is read line by line (a trailing `\\` joins
lines, `#` starts a comment). Each `python -m verl.trainer.main_ppo …` or `python -m verl_prime_lora.preflight …`
command, and each line that holds nothing but Hydra overrides (install.md's sdpa pair), is composed as main_ppo
composes it, run through what main_ppo checks before Ray (`preflight.check_config`: devices, PRIME's config checks,
veRL's `validate_config`) and through the preflight's memory estimate at the GPU size it gives (80 GB unless
`--gpu-memory-gib` says otherwise). The only changes made to a printed line: `...` (the reader's own overrides) is
dropped, the model path points at a folder holding the seed model's `config.json`, and a line of bare overrides
gets `+recipe=prime_lora` in front.

The worked example of docs/operations.md's "Your own data and reward" (its parquet and its reward function) goes
through the driver's data-file check and reward dry run.
"""

import json
import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/operations.md", "docs/install.md", "docs/card.md")
LAUNCHERS = ("verl.trainer.main_ppo", "verl_prime_lora.preflight")
OVERRIDE = re.compile(r"^\+{0,2}[A-Za-z_][\w.\[\]]*=")
MODEL_KEY = "actor_rollout_ref.model.path"


def fenced_blocks(text: str) -> list[tuple[str, list[tuple[int, str]]]]:
    """(language, [(line number, line)]) of each fenced code block."""
    blocks, current, language = [], None, ""
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            if current is None:
                current, language = [], line.strip().strip("`")
            else:
                blocks.append((language, current))
                current = None
        elif current is not None:
            current.append((number, line))
    return blocks


def logical_lines(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Backslash-continued lines joined; each with the number of its first line."""
    out, start, parts = [], None, []
    for number, line in lines:
        start = number if start is None else start
        if line.rstrip().endswith("\\"):
            parts.append(line.rstrip()[:-1])
            continue
        parts.append(line)
        out.append((start, " ".join(parts)))
        start, parts = None, []
    return out


def printed_shell_lines() -> list[tuple[str, list[str]]]:
    """(where, tokens) of every logical line of the docs' shell blocks."""
    found = []
    for doc in DOCS:
        for language, block in fenced_blocks((REPO / doc).read_text(encoding="utf-8")):
            if language in ("", "bash", "sh"):
                found += [(f"{doc}:{n}", shlex.split(line, comments=True)) for n, line in logical_lines(block)]
    return found


def printed_launches() -> list[tuple[str, list[str], float]]:
    """(where, overrides, GPU GiB) of every launch the docs print."""
    found = []
    for where, tokens in printed_shell_lines():
        module = next((t for t in LAUNCHERS if t in tokens), None)
        if module is not None:
            args = tokens[tokens.index(module) + 1 :]
        elif tokens and all(OVERRIDE.match(t) for t in tokens):
            args = ["+recipe=prime_lora", *tokens]
        else:
            continue
        gib, overrides, skip = 80.0, [], False
        for i, token in enumerate(args):
            if skip:
                skip = False
            elif token == "--gpu-memory-gib":
                gib, skip = float(args[i + 1]), True
            elif token.startswith("--"):
                skip = "=" not in token
            elif token != "...":
                overrides.append(token)
        found.append((where, overrides, gib))
    return found


def printed_script_launches() -> list[tuple[str, str, list[str]]]:
    """(where, script, arguments) of every `bash examples/run_*.sh ...` line the docs print."""
    found = []
    for where, tokens in printed_shell_lines():
        if "bash" in tokens and tokens.index("bash") + 1 < len(tokens):
            script = tokens[tokens.index("bash") + 1]
            if re.fullmatch(r"examples/run_(prime|grpo|gpu)[\w.]*\.sh", script):
                found.append((where, script, tokens[tokens.index("bash") + 2 :]))
    return found


LAUNCHES = printed_launches()


def test_the_docs_print_the_launches_this_test_checks():
    """The parser finds the examples it is meant to hold to the checks (a parser that reads nothing passes)."""
    printed = {where.split(":")[0]: [] for where, _, _ in LAUNCHES}
    for where, overrides, _ in LAUNCHES:
        printed[where.split(":")[0]].append(overrides)
    every = [o for group in printed.values() for overrides in group for o in overrides]
    assert "trainer.n_gpus_per_node=4" in every and "trainer.n_gpus_per_node=8" in every  # operations.md
    assert "++actor_rollout_ref.model.override_config.attn_implementation=sdpa" in every  # install.md
    assert {"README.md", "docs/operations.md", "docs/install.md"} <= set(printed)
    assert len(LAUNCHES) >= 5


@pytest.fixture(scope="module")
def seed_model(tmp_path_factory):
    from verl_prime_lora.preflight.model_shape import R1_DISTILL_QWEN_1_5B_CONFIG

    folder = tmp_path_factory.mktemp("seed_model")
    (folder / "config.json").write_text(json.dumps(R1_DISTILL_QWEN_1_5B_CONFIG))
    return folder


@pytest.mark.parametrize("where, overrides, gib", LAUNCHES, ids=[where for where, _, _ in LAUNCHES])
def test_each_printed_launch_composes_passes_the_checks_and_fits(where, overrides, gib, seed_model):
    from verl_prime_lora import preflight as pf
    from verl_prime_lora.preflight import memory as mem

    args = [o for o in overrides if not o.startswith(f"{MODEL_KEY}=")] + [f"{MODEL_KEY}={seed_model}"]
    cfg = pf.compose_config(args)  # a Hydra composition error fails here, with the printed line's place in the id
    pf.check_config(cfg)
    report = pf.estimate(pf.layout_from_config(cfg), gib * mem.GIB)
    assert report.fits, (where, [(gpu.title, round(gpu.total / mem.GIB, 1)) for gpu in report.gpus])


def python_block(doc: str, first_line: str) -> str:
    """The fenced python block of `doc` whose first line is `first_line` (the whole block when it is "")."""
    for language, block in fenced_blocks((REPO / doc).read_text(encoding="utf-8")):
        lines = [line for _, line in block]
        if language == "python" and lines and (not first_line or lines[0].strip() == first_line):
            return "\n".join(lines) + "\n"
    raise AssertionError(f"{doc} has no python block starting {first_line!r}")


def test_the_own_data_and_reward_example_passes_the_drivers_input_checks(tmp_path, monkeypatch, seed_model):
    from main_ppo_driver import compose_ppo

    from verl_prime_lora.checks.config_checks import validate_prime_config
    from verl_prime_lora.checks.inputs.data_files import check_data_files
    from verl_prime_lora.checks.inputs.reward_dry_run import dry_run_reward
    from verl_prime_lora.config.verl_view import verl_view

    data = next(
        code
        for language, block in fenced_blocks((REPO / "docs/operations.md").read_text(encoding="utf-8"))
        if language == "python" and "to_parquet" in (code := "\n".join(line for _, line in block))
    )
    monkeypatch.chdir(tmp_path)
    exec(compile(data, "operations.md (data example)", "exec"), {})
    reward = tmp_path / "my_reward.py"
    reward.write_text(python_block("docs/operations.md", "# my_reward.py"))
    cfg = compose_ppo(
        "+recipe=prime_lora",
        f"{MODEL_KEY}={seed_model}",
        f"data.train_files={tmp_path / 'train.parquet'}",
        f"data.val_files={tmp_path / 'train.parquet'}",
        f"reward.custom_reward_function.path={reward}",
        "reward.custom_reward_function.name=compute_score",
    )
    run = validate_prime_config(cfg, check_tokenizers=False)
    first_row = check_data_files(verl_view(cfg))
    assert first_row is not None
    dry_run_reward(run, *first_row)  # must not raise: `score` and the PRM's label `acc`, finite

    namespace: dict = {}
    exec(reward.read_text(), namespace)
    right = namespace["compute_score"]("my_math", "<think>2 + 3</think> \\boxed{5}", "5")
    wrong = namespace["compute_score"]("my_math", "<think>2 + 3</think> \\boxed{6}", "5")
    assert (right["score"], right["acc"], wrong["score"], wrong["acc"]) == (1.0, 1.0, 0.0, 0.0)


def test_the_gpu_smoke_test_launches_twice_the_second_resuming_and_both_pass_the_checks(tmp_path, seed_model):
    """`examples/run_gpu_smoke.sh` (README): with a stand-in PYTHON that records its arguments, two main_ppo launches
    of the colocated recipe, alike but for the run length (2 steps, then 3: the resume), each composing, passing the
    driver's checks and fitting one 80 GB GPU."""
    import subprocess

    from verl_prime_lora import preflight as pf
    from verl_prime_lora.preflight import memory as mem

    calls = tmp_path / "calls"
    fake = tmp_path / "python"
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" >> {calls}\necho --- >> {calls}\n')
    fake.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/u", "PYTHON": str(fake), "MODEL": str(seed_model)}
    subprocess.run(["bash", str(REPO / "examples" / "run_gpu_smoke.sh")], check=True, env=env)
    launches = [call.strip().splitlines() for call in calls.read_text().split("---\n") if call.strip()]
    assert len(launches) == 2 and all(argv[:2] == ["-m", "verl.trainer.main_ppo"] for argv in launches)
    first, resumed = (pf.compose_config(argv[2:]) for argv in launches)
    assert (first.trainer.total_training_steps, resumed.trainer.total_training_steps) == (2, 3)
    assert first.trainer.save_freq == 2 and first.trainer.resume_mode == resumed.trainer.resume_mode == "auto"
    assert first.trainer.default_local_dir == resumed.trainer.default_local_dir == "checkpoints/smoke"
    assert first.data.max_response_length == 1024 and first.trainer.n_gpus_per_node == 1
    for cfg in (first, resumed):
        pf.check_config(cfg)
        report = pf.estimate(pf.layout_from_config(cfg), 80 * mem.GIB)
        assert report.fits and len(report.gpus) == 1


SCRIPT_LAUNCHES = printed_script_launches()


def test_the_docs_print_script_launches_with_overrides():
    assert any(where.startswith("docs/card.md") and args for where, _, args in SCRIPT_LAUNCHES)
    assert any(script == "examples/run_gpu_smoke.sh" for _, script, _ in SCRIPT_LAUNCHES)


@pytest.mark.parametrize("where, script, args", SCRIPT_LAUNCHES, ids=[w for w, _, _ in SCRIPT_LAUNCHES])
def test_each_printed_script_launch_composes_passes_the_checks_and_fits(where, script, args, tmp_path, seed_model):
    """A `bash examples/run_*.sh OVERRIDES` line as printed: the script's main_ppo command lines (a stand-in PYTHON
    records them), with the printed overrides last, compose, pass the driver's checks and fit 80 GB GPUs."""
    import subprocess

    from verl_prime_lora import preflight as pf
    from verl_prime_lora.preflight import memory as mem

    calls = tmp_path / "calls"
    fake = tmp_path / "python"
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" >> {calls}\necho --- >> {calls}\n')
    fake.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/u", "PYTHON": str(fake), "MODEL": str(seed_model)}
    subprocess.run(["bash", str(REPO / script), *[a for a in args if a != "..."]], check=True, env=env)
    launches = [call.strip().splitlines() for call in calls.read_text().split("---\n") if call.strip()]
    assert launches, where
    for argv in launches:
        assert argv[:2] == ["-m", "verl.trainer.main_ppo"], where
        cfg = pf.compose_config(argv[2:])
        pf.check_config(cfg)
        report = pf.estimate(pf.layout_from_config(cfg), 80 * mem.GIB)
        assert report.fits, (where, [(gpu.title, round(gpu.total / mem.GIB, 1)) for gpu in report.gpus])
