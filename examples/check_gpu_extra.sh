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
# The lock, constraints/gpu.txt (the exact set of a resolution, for `pip install -c constraints/gpu.txt`):
# - CONSTRAINTS=PATH resolves with `-c PATH` (what a user installing with the lock gets) and fails unless the
#   resolution is exactly PATH's set: every resolved package pinned there at that version, every pin resolved
#   (make check-gpu-extra);
# - WRITE_LOCK=PATH resolves without constraints and writes the resolution to PATH as a lock, with a header
#   saying how it was made (make gpu-lock).
# pip resolves against INDEX_URL alone (default https://pypi.org/simple), not the machine's pip configuration
# (config files, PIP_* index, find-links and constraint variables): a mirror or a site constraints file would
# otherwise change the resolution. Set INDEX_URL for a mirror.
# Resolve on the kind of machine the extra is for (Linux x86_64, Python 3.10-3.12; the lock: 3.11): wheels are
# picked for the running interpreter and platform (--platform/--python-version cannot be used: they need
# --only-binary=:all:, and hydra-core's antlr4-python3-runtime 4.9.3 is an sdist only). Fetches the metadata
# (often whole wheels) of a CUDA stack: ~4 minutes. Not part of `make test`/CI. docs/install.md says what each
# package is for.
#
#   examples/check_gpu_extra.sh            (make check-gpu-extra: with CONSTRAINTS=constraints/gpu.txt)
#
# Env: PYTHON (default python3), the interpreter of the throwaway virtualenv; KEEP_REPORT=PATH copies
# pip's JSON report there; CONSTRAINTS, WRITE_LOCK, INDEX_URL (above).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
INDEX_URL=${INDEX_URL:-https://pypi.org/simple}
CONSTRAINTS=${CONSTRAINTS:-}
WRITE_LOCK=${WRITE_LOCK:-}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/check-gpu-extra.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

fail() {
    echo "check-gpu-extra: FAILED: $*" >&2
    exit 1
}

if [ -n "$CONSTRAINTS" ] && [ -n "$WRITE_LOCK" ]; then
    fail "CONSTRAINTS (check a lock) and WRITE_LOCK (write one) exclude each other"
fi
if [ -n "$CONSTRAINTS" ]; then
    [ -f "$CONSTRAINTS" ] || fail "CONSTRAINTS=$CONSTRAINTS: no such file (make gpu-lock writes constraints/gpu.txt)"
    CONSTRAINTS=$(cd "$(dirname "$CONSTRAINTS")" && pwd)/$(basename "$CONSTRAINTS")
fi
if [ -n "$WRITE_LOCK" ]; then
    WRITE_LOCK=$(cd "$(dirname "$WRITE_LOCK")" && pwd)/$(basename "$WRITE_LOCK")
fi

# pip sees INDEX_URL and nothing of the machine's pip configuration (PIP_CONFIG_FILE=/dev/null: no config file).
unset PIP_EXTRA_INDEX_URL PIP_FIND_LINKS PIP_CONSTRAINT PIP_NO_INDEX PIP_REQUIREMENT PIP_TARGET PIP_PREFIX
export PIP_CONFIG_FILE=/dev/null PIP_INDEX_URL=$INDEX_URL PIP_DISABLE_PIP_VERSION_CHECK=1

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
PIP_ARGS=(install --dry-run --ignore-installed --progress-bar off --report "$REPORT")
if [ -n "$CONSTRAINTS" ]; then
    PIP_ARGS+=(-c "$CONSTRAINTS")
fi
echo "check-gpu-extra: pip ${PIP_ARGS[*]} '.[gpu]' in $ROOT, index $INDEX_URL (takes minutes) ..."
STARTED=$SECONDS
# pip runs in the background so that a TERM/INT (timeout, Ctrl-C) stops it at once and the EXIT trap
# removes the throwaway virtualenv.
(cd "$ROOT" && exec "$VPY" -m pip "${PIP_ARGS[@]}" '.[gpu]') &
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

"$VPY" - "$REPORT" "$CONSTRAINTS" "$WRITE_LOCK" "$INDEX_URL" "$((SECONDS - STARTED))" <<'EOF'
import datetime
import json
import os
import platform
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
SELF = "verl-prime-lora"


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


def read_lock(path):
    """{normalised name: version} of the `name==version` lines of a constraints file."""
    pins = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                name, sep, version = line.partition("==")
                if not sep:
                    raise SystemExit(f"check-gpu-extra: FAILED: {path}: not name==version: {line!r}")
                pins[norm(name)] = version.strip()
    return pins


report_path, constraints, write_lock, index_url, seconds = sys.argv[1:6]
with open(report_path, encoding="utf-8") as f:
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
    cuda_line = f"torch's CUDA {cuda.group(1)} (its cuda-toolkit pin): NVIDIA driver {driver}"
else:
    cuda_line = "torch's CUDA: no cuda-toolkit pin in torch's metadata (not a Linux CUDA wheel?)"
print(f"  {cuda_line}")

pin = exact_pins(verl, FLASH_ATTN_EXTRA).get("flash-attn")
flash = f"flash-attn=={pin}" if pin else FLASH_ATTN_DEFAULT
source = f"veRL's `{FLASH_ATTN_EXTRA}` extra" if pin else "veRL 0.9.1's pin; not found in the report"
prefix = "" if "wheel" in resolved else "pip install wheel && "
print(f"  flash-attn       {flash} ({source}), not in the extra; after '.[gpu]':")
print(f"                   {prefix}pip install --no-build-isolation {flash}")
print("                   (compiles against the installed torch: CUDA 13's nvcc; or the sdpa overrides,")
print("                   docs/install.md)")

locked = {name: version for name, version in resolved.items() if name != SELF}
if constraints:
    pins = read_lock(constraints)
    unpinned = sorted(set(locked) - set(pins))
    differ = sorted(n for n in set(locked) & set(pins) if locked[n] != pins[n])
    stale = sorted(set(pins) - set(locked))
    if unpinned:
        failures.append(f"resolved but not in {constraints} (regenerate: make gpu-lock): {', '.join(unpinned)}")
    if differ:
        failures.append("resolved at another version than " + constraints + ": "
                        + ", ".join(f"{n} {locked[n]} (lock {pins[n]})" for n in differ))
    if stale:
        failures.append(f"in {constraints} but not resolved (regenerate: make gpu-lock): {', '.join(stale)}")
    if not (unpinned or differ or stale):
        print(f"check-gpu-extra: the resolution is exactly the {len(pins)} packages of {constraints}")

for failure in failures:
    print(f"check-gpu-extra: FAILED: {failure}", file=sys.stderr)
if failures:
    sys.exit(1)

if write_lock:
    env = report["environment"]
    libc = "-".join(platform.libc_ver()) or "unknown libc"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    names = {norm(item["metadata"]["name"]): item["metadata"]["name"] for item in report["install"]}
    header = [
        "# The exact set '.[gpu]' resolves to: pip constraints (-c), not requirements. Install with",
        "#   pip install -e '.[gpu]' -c constraints/gpu.txt",
        f"# For {env['platform_system']} {env['platform_machine']}, CPython {env['python_version']}"
        " (what it was resolved for; docs/install.md says what else was",
        "# checked). Resolved, not installed, and not run on a GPU. flash-attn is not in it (docs/install.md).",
        "# Made by `make gpu-lock` (examples/check_gpu_extra.sh with WRITE_LOCK): in a throwaway virtualenv,",
        f"#   pip install --dry-run --ignore-installed --report report.json --index-url {index_url} '.[gpu]'",
        "# (no other index, find-links or constraints), then every package of the report but verl-prime-lora,",
        "# as name==version. Regenerate: `make gpu-lock`. Check: `make check-gpu-extra` (resolves '.[gpu]' with -c",
        "# this file; fails unless it gets exactly this set); tests/project/test_gpu_lock.py (offline: setup.py's ranges,",
        "# veRL 0.9.1's pins, the versions the docs quote).",
        f"# This run: {date}; pip {report['pip_version']}; CPython {env['python_full_version']}, "
        f"{env['platform_system']} {env['platform_machine']}, {libc}; {seconds} s;",
        f"# {len(locked)} packages; {cuda_line}.",
    ]
    body = [f"{names[n]}=={locked[n]}" for n in sorted(locked)]
    tmp = write_lock + ".new"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(header + body) + "\n")
    os.replace(tmp, write_lock)
    print(f"check-gpu-extra: wrote {write_lock} ({len(locked)} packages)")
print("check-gpu-extra: OK, '.[gpu]' resolves with every package the GPU path imports")
EOF
