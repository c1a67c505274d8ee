#!/usr/bin/env bash
# Does `pip install '.[gpu]'` resolve, and does it bring every package the GPU path imports? A dry run in a
# throwaway virtualenv (nothing is installed, the repo's .venv is not touched): pip resolves this checkout
# with its `gpu` extra from scratch (--ignore-installed) and writes its install report. From the report:
# - every package the GPU path imports, with its resolved version (torch, vllm, transformers, verl,
#   cupy-cuda13x, ray, peft, TransferQueue, math-verify, tensordict, ...); a missing one fails the check;
# - torch, vllm, transformers and cupy-cuda13x must be what veRL 0.9.1's own `vllm` and `cupy-cu130` extras
#   pin (read from the resolved verl's metadata); a difference fails the check;
# - the CUDA version torch's wheel is built for (its cuda-toolkit pin), hence the NVIDIA driver it needs;
# - flash-attn, which the extra cannot hold (its setup imports torch, so it does not build in pip's isolated
#   build env, and PyPI has no wheel of it): the separate command that installs the version veRL pins.
# Resolve on the kind of machine the extra is for (Linux x86_64, Python 3.10-3.12): wheels are picked for the
# running interpreter and platform. Fetches the metadata (often whole wheels) of a CUDA stack: ~5 minutes.
# Not part of `make test`/CI. docs/install.md says what each package is for.
#
#   examples/check_gpu_extra.sh            (or: make check-gpu-extra)
#
# Env: PYTHON (default python3), the interpreter of the throwaway virtualenv; KEEP_REPORT=PATH copies
# pip's JSON report there.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/check-gpu-extra.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

fail() {
    echo "check-gpu-extra: FAILED: $*" >&2
    exit 1
}

"$PYTHON" - <<'EOF' || fail "$PYTHON is not Python 3.10-3.12 (veRL 0.9.1's range); set PYTHON"
import sys
sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 12) else 1)
EOF

echo "check-gpu-extra: throwaway virtualenv in $WORK"
"$PYTHON" -m venv "$WORK/venv" || fail "could not create a virtualenv with $PYTHON"
VPY=$WORK/venv/bin/python
# --dry-run --report needs pip >= 23.0 (stable report format).
if ! "$VPY" -c 'import sys, pip; sys.exit(int(pip.__version__.split(".")[0]) < 23)'; then
    "$VPY" -m pip install -q --upgrade pip || fail "could not upgrade pip in the throwaway virtualenv"
fi

REPORT=$WORK/report.json
echo "check-gpu-extra: resolving '.[gpu]' of $ROOT (pip install --dry-run; takes minutes) ..."
# pip runs in the background so that a TERM/INT (timeout, Ctrl-C) stops it at once and the EXIT trap
# removes the throwaway virtualenv.
(cd "$ROOT" && exec "$VPY" -m pip install --dry-run --ignore-installed --progress-bar off --report "$REPORT" '.[gpu]') &
PIP_PID=$!
trap 'kill "$PIP_PID" 2>/dev/null; echo "check-gpu-extra: interrupted" >&2; exit 130' INT TERM
set +e
wait "$PIP_PID"
status=$?
set -e
trap - INT TERM
if [ "$status" -ne 0 ] || [ ! -s "$REPORT" ]; then
    fail "'.[gpu]' does not resolve (pip exit status $status); the conflict is in pip's output above"
fi
if [ -n "${KEEP_REPORT:-}" ]; then
    cp "$REPORT" "$KEEP_REPORT"
fi

"$VPY" - "$REPORT" <<'EOF'
import json
import re
import sys

# What the GPU path imports: the `gpu` extra, veRL and what its trainer, workers and rollout import (veRL's
# requirements; cupy, ray.util.collective and pyzmq for the split layout's nccl weight sync), and what this
# plugin imports (setup.py's install_requires).
GPU_PATH = (
    "torch", "vllm", "transformers", "verl", "cupy-cuda13x", "ray", "peft", "transferqueue", "math-verify",
    "tensordict", "hydra-core", "omegaconf", "accelerate", "datasets", "torchdata", "codetiming", "numpy",
    "pandas", "pyarrow", "einops", "pyzmq", "wandb", "matplotlib", "psutil",
)
# veRL 0.9.1's extras the `gpu` extra repeats, and the one it cannot hold (flash-attn: a separate step).
VERL_EXTRAS = ("vllm", "cupy-cu130")
FLASH_ATTN_EXTRA, FLASH_ATTN_DEFAULT = "flash-attn-cu130torch211", "flash-attn==2.8.3"


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def exact_pins(meta, extra):
    """{name: version} of the `name==version` requirements in `meta` that apply under `extra`."""
    out = {}
    for req in meta.get("requires_dist") or []:
        spec, _, marker = req.partition(";")
        if not re.search(r"extra\s*==\s*[\"']" + re.escape(extra) + r"[\"']", marker):
            continue
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*==\s*([^\s,]+)\s*", spec)
        if m:
            out[norm(m.group(1))] = m.group(2)
    return out


with open(sys.argv[1], encoding="utf-8") as f:
    report = json.load(f)
items = {norm(item["metadata"]["name"]): item["metadata"] for item in report["install"]}
resolved = {name: meta["version"] for name, meta in items.items()}
failures = []

print("check-gpu-extra: the packages the GPU path imports, as resolved")
for name in GPU_PATH:
    print(f"  {name:<16} {resolved.get(name, 'MISSING')}")
print(f"  {len(resolved)} packages would be installed (verl-prime-lora itself included)")
missing = [name for name in GPU_PATH if name not in resolved]
if missing:
    failures.append(f"resolved, but without {', '.join(missing)}")

verl = items.get("verl", {})
for extra in VERL_EXTRAS:
    for name, version in exact_pins(verl, extra).items():
        if name in resolved and resolved[name] != version:
            failures.append(f"{name} {resolved[name]} resolved; veRL's `{extra}` extra pins {version}")

toolkit = [r for r in items.get("torch", {}).get("requires_dist") or [] if r.startswith("cuda-toolkit")]
cuda = re.search(r"==\s*([0-9][0-9.]*)", toolkit[0]) if toolkit else None
if cuda:
    driver = ">= 580" if cuda.group(1).startswith("13.") else "see NVIDIA's CUDA compatibility table"
    print(f"  torch's CUDA     {cuda.group(1)} (its cuda-toolkit pin): NVIDIA driver {driver}")
else:
    print("  torch's CUDA     no cuda-toolkit pin in torch's metadata (not a Linux CUDA wheel?)")

pin = exact_pins(verl, FLASH_ATTN_EXTRA).get("flash-attn")
flash = f"flash-attn=={pin}" if pin else FLASH_ATTN_DEFAULT
source = f"veRL's `{FLASH_ATTN_EXTRA}` extra" if pin else "veRL 0.9.1's pin; not found in the report"
prefix = "" if "wheel" in resolved else "pip install wheel && "
print(f"  flash-attn       {flash} ({source}), not in the extra; after '.[gpu]':")
print(f"                   {prefix}pip install --no-build-isolation {flash}")
print("                   (compiles against the installed torch: CUDA 13's nvcc; or the sdpa overrides,")
print("                   docs/install.md)")

for failure in failures:
    print(f"check-gpu-extra: FAILED: {failure}", file=sys.stderr)
if failures:
    sys.exit(1)
print("check-gpu-extra: OK, '.[gpu]' resolves with every package the GPU path imports")
EOF
