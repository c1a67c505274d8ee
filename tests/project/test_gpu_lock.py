"""constraints/gpu.txt, the lock of the GPU set, against what it locks (offline; `make check-gpu-extra` is the
online check that pip resolves '.[gpu]' to exactly this set).

- every requirement of setup.py's install_requires and `gpu` extra is pinned in the lock, inside its range;
- torch is pinned in the `gpu` extra, and the extra and the lock pin what veRL 0.9.1's own `vllm` and
  `cupy-cu130` extras pin (torch, torchvision, torchaudio, vllm, transformers, cupy-cuda13x);
- the header records the run that made it (date, pip, the pip command, the package count, torch's CUDA);
- the versions of GPU-set packages that the docs quote are the lock's;
- the Makefile's targets and the Dockerfile use this file, and the Dockerfile's CUDA image and flash-attn pin
  agree with the lock and with veRL.
"""

import importlib.metadata
import re
import runpy
import subprocess
from pathlib import Path

import pytest
import setuptools
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "constraints" / "gpu.txt"
DOCKERFILE = REPO / "examples" / "docker" / "Dockerfile"
# The environment the lock was resolved for (its header), for requirement markers.
LOCK_ENV = {"python_version": "3.11", "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"}
# veRL 0.9.1's extras that the `gpu` extra repeats, and its flash-attn extra (a separate install step).
VERL_EXTRAS = ("vllm", "cupy-cu130")
VERL_FLASH_ATTN_EXTRA = "flash-attn-cu130torch211"


def read_lock(path: Path = LOCK) -> tuple[list[str], dict[str, str]]:
    """(header comment lines, {canonical name: version})."""
    header, pins = [], {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            header.append(line)
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][^\s;#]*)", line)
        assert m, f"{path.name}: not a name==version line: {line!r}"
        name = canonicalize_name(m.group(1))
        assert name not in pins, f"{path.name}: {name} pinned twice"
        pins[name] = m.group(2)
    return header, pins


@pytest.fixture(scope="module")
def lock() -> dict[str, str]:
    return read_lock()[1]


@pytest.fixture(scope="module")
def setup_kwargs() -> dict:
    """The keyword arguments setup.py passes to setuptools.setup (run with setup() replaced)."""
    captured = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(REPO)
        mp.setattr(setuptools, "setup", lambda **kw: captured.update(kw))
        runpy.run_path(str(REPO / "setup.py"))
    assert captured, "setup.py did not call setuptools.setup"
    return captured


def exact_pins(requirements) -> dict[str, str]:
    """{canonical name: version} of the `name==version` requirements among `requirements`."""
    out = {}
    for req in requirements:
        specs = list(req.specifier)
        if len(specs) == 1 and specs[0].operator == "==":
            out[canonicalize_name(req.name)] = specs[0].version
    return out


def verl_extra(extra: str) -> list[Requirement]:
    """The requirements veRL's installed metadata lists under `extra`."""
    reqs = [Requirement(r) for r in importlib.metadata.requires("verl") or []]
    return [r for r in reqs if r.marker is not None and r.marker.evaluate({"extra": extra})]


def test_the_lock_is_one_exact_pin_per_package_without_this_package_or_flash_attn(lock):
    assert len(lock) > 100, f"{len(lock)} pins: not the GPU set"
    assert "verl-prime-lora" not in lock, "the lock pins the checkout itself"
    assert "flash-attn" not in lock, "flash-attn is a separate step (its setup imports torch)"
    assert lock.get("verl") == "0.9.1"


def test_every_requirement_of_setup_py_is_locked_inside_its_range(setup_kwargs, lock):
    reqs = [Requirement(r) for r in setup_kwargs["install_requires"] + setup_kwargs["extras_require"]["gpu"]]
    outside = []
    for req in reqs:
        if req.marker is not None and not req.marker.evaluate({**LOCK_ENV, "extra": "gpu"}):
            continue
        name = canonicalize_name(req.name)
        if name not in lock:
            outside.append(f"{req}: not in {LOCK.name}")
        elif not req.specifier.contains(Version(lock[name]), prereleases=True):
            outside.append(f"{req}: {LOCK.name} has {lock[name]}")
    assert not outside, "regenerate the lock (make gpu-lock): " + "; ".join(outside)


def test_torch_is_pinned_in_the_gpu_extra_and_locked_as_verls_extras_pin_it(setup_kwargs, lock):
    gpu = exact_pins(Requirement(r) for r in setup_kwargs["extras_require"]["gpu"])
    verl = {}
    for extra in VERL_EXTRAS:
        verl.update(exact_pins(verl_extra(extra)))
    assert {"torch", "vllm", "transformers", "cupy-cuda13x"} <= set(verl), f"veRL's extras pin only {verl}"
    assert "torch" in gpu, "the `gpu` extra must pin torch itself, as veRL's `vllm` extra does"
    assert {name: gpu[name] for name in gpu if name in verl} == {name: verl[name] for name in gpu if name in verl}
    assert {name: lock.get(name) for name in verl} == verl, "the lock differs from veRL 0.9.1's pins"


def test_the_header_records_the_run_that_made_it(lock):
    header = "\n".join(read_lock()[0])
    assert "make gpu-lock" in header and "make check-gpu-extra" in header
    assert re.search(
        r"pip install --dry-run --ignore-installed --report report\.json --index-url \S+ '\.\[gpu\]'", header
    )
    run = re.search(
        r"This run: (\d{4}-\d\d-\d\d \d\d:\d\d UTC); pip (\d+\.\d+(?:\.\d+)?); CPython (3\.\d+)\.\d+", header
    )
    assert run, "the header lacks the run's date, pip version and Python"
    assert run.group(3) == LOCK_ENV["python_version"]
    count = re.search(r"# (\d+) packages;", header)
    assert count and int(count.group(1)) == len(lock), f"the header counts {count and count.group(1)}, {len(lock)} pins"
    cuda = re.search(r"torch's CUDA (\S+) \(its cuda-toolkit pin\)", header)
    assert cuda and cuda.group(1) == lock["cuda-toolkit"]


# Versions of GPU-set packages the docs quote, e.g. "vLLM 0.24.0", "`flashinfer-python==0.6.12`", "torch 2.11".
QUOTED = re.compile(
    r"(?<![\w-])(?P<name>vLLM|vllm|torch|torchvision|torchaudio|transformers|math-verify|cupy-cuda13x|flashinfer-python"
    r"|nvidia-nccl-cu13|nvidia-cudnn-cu13|cuda-toolkit(?:\[[^\]]*\])?|NCCL|peft|tensordict|TransferQueue|setuptools"
    r"|numpy|pandas|matplotlib|ninja|antlr4-python3-runtime)"
    r"`?(?: |==)(?P<version>\d+(?:\.\d+)+)(?!\w|\.\d)(?! ?(?:s|ms|min|GiB|GB)\b)"
)
# Versions of the same packages that belong to other sets: the CPU set (constraints/cpu.txt), the card's
# environment (docs/card.md), transformers 5.10 (a feature bound in setup.py).
OTHER_SETS = {
    "torch": {"2.13.0", "2.13", "2.5.1"},
    "transformers": {"5.10.4", "5.10", "4.48.2", "4.50.0"},
    "vllm": {"0.7.2"},
    "peft": {"0.14.0", "0.15.0"},
    "math-verify": {"0.5.2"},
}
# Quotes that must be there (so the scan cannot pass by finding none): (file, package).
REQUIRED_QUOTES = [
    ("docs/evaluation.md", "vllm"),
    ("docs/evaluation.md", "math-verify"),
    ("docs/install.md", "torch"),
    ("docs/install.md", "vllm"),
    ("docs/install.md", "cuda-toolkit"),
    ("docs/install.md", "nvidia-nccl-cu13"),
    ("docs/install.md", "flashinfer-python"),
]
DOCS = ["README.md", "setup.py", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]


def quoted_versions(text: str) -> list[tuple[str, str, int]]:
    """(canonical package, version, line) for each version quote in `text`."""
    out = []
    for m in QUOTED.finditer(text):
        name = re.sub(r"\[.*", "", m.group("name"))
        name = "nvidia-nccl-cu13" if name == "NCCL" else canonicalize_name(name)
        out.append((name, m.group("version"), text.count("\n", 0, m.start()) + 1))
    return out


def same_release(quoted: str, locked: str) -> bool:
    """A quote names the lock's release: "2.11" quotes 2.11.0; "2.11.0" quotes 2.11.0+cu130 (a local label)."""
    parts = Version(locked).release
    return Version(quoted).release == parts[: len(Version(quoted).release)]


def test_the_versions_the_docs_quote_are_the_locks(lock):
    wrong, found = [], set()
    for doc in DOCS:
        for name, version, line in quoted_versions((REPO / doc).read_text(encoding="utf-8")):
            found.add((doc, name))
            if name not in lock or version in OTHER_SETS.get(name, ()):
                continue
            if not same_release(version, lock[name]):
                wrong.append(f"{doc}:{line}: {name} {version}, the lock has {lock[name]}")
    assert not wrong, wrong
    assert not [q for q in REQUIRED_QUOTES if q not in found], "a quote the check relies on is gone"


def test_the_quote_scan_finds_a_wrong_version(lock):
    """The scan above would see a wrong quote (a guard against a pattern that matches nothing)."""
    text = "in math-verify 0.8.1, the version here; vLLM 0.24.0; `nvidia-nccl-cu13==2.0.1`; NCCL 2.28.9; Ray 11.2 s"
    quotes = quoted_versions(text)
    assert [(n, v) for n, v, _ in quotes] == [
        ("math-verify", "0.8.1"),
        ("vllm", "0.24.0"),
        ("nvidia-nccl-cu13", "2.0.1"),
        ("nvidia-nccl-cu13", "2.28.9"),
    ]
    assert [same_release(v, lock[n]) for n, v, _ in quotes] == [False, True, False, True]


def test_the_make_targets_write_and_check_this_file():
    def dry(target):
        return subprocess.run(["make", "-n", target], cwd=REPO, capture_output=True, text=True, check=True).stdout

    assert "WRITE_LOCK=constraints/gpu.txt" in dry("gpu-lock") and "check_gpu_extra.sh" in dry("gpu-lock")
    assert "CONSTRAINTS=constraints/gpu.txt" in dry("check-gpu-extra")


def test_the_dockerfile_installs_the_lock_on_its_cuda_with_verls_flash_attn(lock):
    text = DOCKERFILE.read_text(encoding="utf-8")
    image = re.search(r"^ARG CUDA_IMAGE=nvidia/cuda:(\d+\.\d+\.\d+)-devel-", text, re.MULTILINE)
    assert image, "the Dockerfile's base is not a CUDA devel image (nvcc, for flash-attn)"
    assert image.group(1) == lock["cuda-toolkit"], "the image's CUDA differs from torch's (the lock's cuda-toolkit)"
    assert re.search(r"pip install -c constraints/gpu\.txt '\.\[gpu\]'", text)
    (verl_pin,) = [str(r.specifier) for r in verl_extra(VERL_FLASH_ATTN_EXTRA) if r.name == "flash-attn"]
    assert re.findall(r"flash-attn(==\S+)", text) == [verl_pin]
