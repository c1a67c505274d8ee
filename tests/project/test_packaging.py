"""The built wheel ships the config group and the veRL entry point, and `+recipe=prime_lora` composes through
veRL's real entry point from a directory outside the checkout.

The README's install lines (between `<!-- install:start -->` and `<!-- install:end -->`) are the commands run
here: the wheel is built with its `pip wheel` line, and its `pip install -e` and wheel `pip install` lines install
into a fresh virtualenv that holds nothing but veRL's installed set (this interpreter's site-packages, put on
its path by a plain `.pth` line). The test adds only what keeps it offline and aimed at that venv:
`--no-index`, `--no-build-isolation` (no setuptools download into an isolated build env), `--no-deps` (veRL's
set is there already; the extras' CUDA packages are `make check-gpu-extra`'s business), `-q`, `--python VENV`,
and its own `-w` folder.

In each install form a PRIME recipe composed where the plugin is not loaded stops the run, before Ray, with the reason
and the way to load it: the plugin turned off (`VERL_USE_EXTERNAL_PLUGINS=none`) or its import failing, run from
inside the checkout or outside it."""

import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
INSTALL_START, INSTALL_END = "<!-- install:start -->", "<!-- install:end -->"
TEST_PIP_FLAGS = ["--no-index", "--no-build-isolation", "--no-deps", "-q"]
# veRL 0.9.1's own extra for flash-attn (its METADATA): the README's flash-attn line must install that version.
VERL_FLASH_ATTN_EXTRA = "flash-attn-cu130torch211"
WHEEL_FILE = re.compile(r"(?P<path>.+\.whl)(?P<extras>\[[\w,-]+\])?")


def readme_install_commands() -> list[list[str]]:
    """Every command of the fenced code in the README's install block, split at `&&`, comments dropped."""
    text = README.read_text(encoding="utf-8")
    assert INSTALL_START in text and INSTALL_END in text, f"README.md lacks the {INSTALL_START} ... {INSTALL_END} block"
    block = text[text.index(INSTALL_START) + len(INSTALL_START) : text.index(INSTALL_END)]
    commands, in_code = [], False
    for line in block.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            command: list[str] = []
            for token in shlex.split(line, comments=True):
                if token == "&&":
                    commands.append(command)
                    command = []
                else:
                    command.append(token)
            if command:
                commands.append(command)
    return commands


def readme_command(description: str, match) -> list[str]:
    found = [command for command in readme_install_commands() if match(command)]
    assert len(found) == 1, f"README.md's install block should hold exactly one {description} line, has {found}"
    return found[0]


def readme_editable_install() -> list[str]:
    return readme_command("`pip install -e`", lambda c: c[:3] == ["pip", "install", "-e"])


def readme_wheel_build() -> list[str]:
    return readme_command("`pip wheel`", lambda c: c[:2] == ["pip", "wheel"])


def readme_wheel_install() -> list[str]:
    return readme_command(
        "`pip install <wheel>`", lambda c: c[:2] == ["pip", "install"] and any(WHEEL_FILE.fullmatch(t) for t in c)
    )


def option_value(command: list[str], option: str) -> str:
    assert option in command, f"{shlex.join(command)}: no {option}"
    return command[command.index(option) + 1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel, built in the checkout with the README's `pip wheel` line (its `-w` folder replaced)."""
    command = readme_wheel_build()
    assert command[-1] == ".", f"{shlex.join(command)}: the README builds the clone it stands in ('.')"
    out = tmp_path_factory.mktemp("wheel")
    args = command[1:]
    args[args.index("-w") + 1] = str(out)
    build = subprocess.run(
        [sys.executable, "-m", "pip", *args, "--no-index", "--no-build-isolation", "-q"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    (path,) = out.glob("verl_prime_lora-*.whl")
    return path


def test_wheel_contents(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "verl_prime_lora/recipe/prime_lora.yaml" in names
    assert "verl_prime_lora/algo/core_algos.py" in names
    assert "[verl.plugins]" in entry_points and "verl_prime_lora.plugin.plugin" in entry_points
    assert "[vllm.general_plugins]" in entry_points and "verl_prime_lora.cpu.vllm_plugin:apply" in entry_points


def test_no_repository_address_is_invented():
    """This project publishes no repository address: the install starts in the reader's checkout, setup.py names no
    `url`, and no doc names an address under this project's name."""
    assert not any(c[:2] == ["git", "clone"] for c in readme_install_commands())
    assert not re.search(r"\burl\s*=", (REPO / "setup.py").read_text(encoding="utf-8"))
    for doc in [README, *sorted((REPO / "docs").glob("*.md"))]:
        assert not re.search(r"github\.com/verl-prime-lora", doc.read_text(encoding="utf-8"), re.IGNORECASE), doc


def test_readme_install_block_names_its_extras_and_verls_flash_attn(wheel):
    with zipfile.ZipFile(wheel) as zf:
        metadata = next(zf.read(n).decode() for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    extras = set(re.findall(r"^Provides-Extra: (\S+)$", metadata, flags=re.MULTILINE))
    assert readme_editable_install()[3] == ".[gpu]"
    (wheel_arg,) = [t for t in readme_wheel_install() if WHEEL_FILE.fullmatch(t)]
    assert WHEEL_FILE.fullmatch(wheel_arg)["extras"] == "[gpu]"
    assert "gpu" in extras, f"README installs the `gpu` extra; the wheel provides {sorted(extras)}"

    flash = readme_command("flash-attn", lambda c: any(t.startswith("flash-attn") for t in c))
    assert flash[:3] == ["pip", "install", "--no-build-isolation"], "flash-attn's setup imports torch: no isolation"
    pins = [
        r.split(";")[0].replace(" ", "")
        for r in importlib.metadata.requires("verl") or []
        if r.startswith("flash-attn") and VERL_FLASH_ATTN_EXTRA in r
    ]
    assert pins and flash[3:] == pins, f"README's flash-attn line {flash[3:]} is not veRL's pin {pins}"


def fresh_venv_with_verls_set(root: Path) -> tuple[Path, Path]:
    """A new virtualenv (no pip, no packages) whose only third-party packages are this interpreter's
    site-packages, by a plain `.pth` line: the editable install of this checkout that lives there (a `.pth`
    that runs an import finder) is not processed, so `verl_prime_lora` is not importable until installed."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True, cwd=root
        ).strip()
    )
    (site / "verls_set.pth").write_text(sysconfig.get_path("purelib") + "\n", encoding="utf-8")
    return python, site


BEFORE_PROBE = "import importlib.util as u; print(u.find_spec('verl_prime_lora'), u.find_spec('verl').origin)"
PROBE = """
import importlib.metadata as md, json, sys
import verl  # imports every `verl.plugins` entry point
from verl_prime_lora.plugin.hydra_search_path import config_root
plugin = sys.modules.get("verl_prime_lora.plugin.plugin")
print(json.dumps({
    "plugin": plugin and plugin.__file__,
    "verl": verl.__file__,
    "entry_points": [
        [ep.name, str(ep.dist.locate_file(""))]
        for ep in md.entry_points(group="verl.plugins") if ep.value.startswith("verl_prime_lora")
    ],
    "dists": [str(d.locate_file("")) for d in md.distributions() if d.metadata["Name"] == "verl-prime-lora"],
    "config_root": str(config_root()),
}))
"""


# Loaded by Python at start-up from PYTHONPATH: makes a module that only the plugin imports fail to import, as a
# broken install would.
FAILING_IMPORT = """
import importlib.abc, sys

class FailPluginImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "verl_prime_lora.algo.verl_bindings":
            raise ImportError("planted by tests/project/test_packaging.py")

sys.meta_path.insert(0, FailPluginImport())
"""
UNLOADED = "a PRIME recipe (+recipe=prime_lora...) is composed, but veRL did not load the plugin ("
WHY_AND_HOW = {
    "disabled": (
        "VERL_USE_EXTERNAL_PLUGINS=none turns veRL's plugin loading off",
        "Unset VERL_USE_EXTERNAL_PLUGINS, or set it to name prime_lora.",
    ),
    "failing": (
        "importing verl_prime_lora.plugin.plugin failed: ImportError: planted by tests/project/test_packaging.py",
        "Fix that error: `python -c 'import verl_prime_lora.plugin.plugin'` shows its traceback.",
    ),
}
# Sub-cases per install form, crossed so that both forms run inside and outside the checkout and meet both causes
# (four runs of main_ppo instead of eight; whether the recipe is found depends on form and folder, the reason on
# the cause alone).
UNLOADED_CASES = {
    "wheel": (("inside", "disabled"), ("outside", "failing")),
    "clone": (("inside", "failing"), ("outside", "disabled")),
}


def assert_missing_plugin_is_named(run, python: Path, workdir: Path, tmp_path: Path, how: str) -> None:
    """main_ppo with `+recipe=[prime_lora_colocated,cpu]`, as in the report that the plugin's absence went unnamed:
    each case of `UNLOADED_CASES[how]` stops before Ray with the reason and the remedy."""
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "sitecustomize.py").write_text(FAILING_IMPORT, encoding="utf-8")
    for where, cause in UNLOADED_CASES[how]:
        env = {"VERL_USE_EXTERNAL_PLUGINS": "none"} if cause == "disabled" else {"PYTHONPATH": str(planted)}
        env["HYDRA_FULL_ERROR"] = "0"  # Hydra's own report, as a user sees it
        args = [str(python), "-m", "verl.trainer.main_ppo", "+recipe=[prime_lora_colocated,cpu]"]
        stopped = run([*args, f"hydra.run.dir={tmp_path / 'hydra'}"], cwd=REPO if where == "inside" else workdir, **env)
        reason, remedy = WHY_AND_HOW[cause]
        said = " ".join(stopped.stderr.split())
        assert stopped.returncode != 0 and "Started a local Ray instance" not in stopped.stdout + stopped.stderr
        assert UNLOADED + reason + ")" in said and remedy in said, (how, where, cause, stopped.stderr[-3000:])
        assert "full_key: hydra.callbacks.verl_prime_lora" in said  # the recipe's callback: before veRL's main ran


@pytest.mark.parametrize("how", ["wheel", "clone"])
def test_readme_install_lines_resolve_the_recipe_in_a_fresh_venv(how, wheel, tmp_path):
    """A fresh venv with veRL's set and this package installed by the README's line (`pip install -e` in the
    clone, or the built wheel): veRL loads the plugin once, from that install, and `+recipe=prime_lora`
    composes from a directory outside the checkout. Where the plugin is not loaded, the recipe says so
    (`assert_missing_plugin_is_named`)."""
    python, site = fresh_venv_with_verls_set(tmp_path)
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VERL_USE_EXTERNAL_PLUGINS")}
    env.update(HYDRA_FULL_ERROR="1", PYTHONNOUSERSITE="1")

    def run(args, cwd=workdir, timeout=300, **extra_env):
        return subprocess.run(args, cwd=cwd, env={**env, **extra_env}, capture_output=True, text=True, timeout=timeout)

    verls_set = Path(sysconfig.get_path("purelib"))
    before = run([str(python), "-c", BEFORE_PROBE])
    assert before.returncode == 0, before.stderr[-2000:]
    assert before.stdout.split() == ["None", str(verls_set / "verl" / "__init__.py")], (
        "the fresh venv should see veRL's set but not this checkout's editable install: " + before.stdout
    )

    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    if how == "wheel":
        command = readme_wheel_install()
        (wheel_arg,) = [t for t in command if WHEEL_FILE.fullmatch(t)]
        named = WHEEL_FILE.fullmatch(wheel_arg)
        assert Path(named["path"]) == Path(option_value(readme_wheel_build(), "-w")) / wheel.name, (
            f"README installs {named['path']}, its `pip wheel` line builds {wheel.name}"
        )
        args = [str(wheel) + (named["extras"] or "") if t == wheel_arg else t for t in command[1:]]
        cwd, expected_root = REPO, site
    else:
        args, cwd, expected_root = readme_editable_install()[1:], REPO, REPO
    editable = sorted(verls_set.glob("verl_prime_lora-*.dist-info"))
    install = run([*pip, *args, *TEST_PIP_FLAGS], cwd=cwd)
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]
    # pip sees the checkout's install in veRL's set, and leaves it alone ("outside environment").
    assert sorted(verls_set.glob("verl_prime_lora-*.dist-info")) == editable

    probe = run([str(python), "-c", PROBE])
    assert probe.returncode == 0, probe.stderr[-3000:]
    facts = json.loads(probe.stdout.strip().splitlines()[-1])
    assert Path(facts["verl"]).is_relative_to(verls_set), facts
    assert Path(facts["plugin"]).is_relative_to(expected_root / "verl_prime_lora"), facts
    # Two `verl-prime-lora` distributions are on the path (this one, and the checkout's editable one in veRL's
    # set); the fresh venv's comes first, and veRL's entry-point scan (one per distribution name) yields its
    # plugin once.
    assert facts["dists"][0] == str(site) and len(facts["dists"]) == 1 + len(editable), facts
    assert facts["entry_points"] == [["prime_lora", str(site)]], facts
    assert facts["config_root"] == str(REPO if how == "clone" else site / "verl_prime_lora"), facts

    main = run([str(python), "-m", "verl.trainer.main_ppo", "+recipe=prime_lora", "--cfg", "job"])
    assert main.returncode == 0, main.stderr[-3000:]
    assert "adv_estimator: prime_grpo" in main.stdout
    assert "\nrecipe:" not in main.stdout

    assert_missing_plugin_is_named(run, python, workdir, tmp_path, how)
