#!/usr/bin/env bash
# Does `pip install '.[gpu]'` resolve? A dry run in a throwaway virtualenv (nothing is installed, the
# repo's .venv is not touched): pip resolves this checkout with its `gpu` extra from scratch
# (--ignore-installed) and writes its install report, from which the resolved torch, vllm, transformers
# and verl versions and the package count are printed. Resolve on the kind of machine the extra is for
# (Linux x86_64, Python 3.10-3.12): wheels are picked for the running interpreter and platform.
# Fetches the metadata (often whole wheels) of a CUDA stack: ~5 minutes. Not part of `make test`/CI.
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
import sys

with open(sys.argv[1], encoding="utf-8") as f:
    report = json.load(f)
resolved = {item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"] for item in report["install"]}
missing = [name for name in ("torch", "vllm", "transformers", "verl") if name not in resolved]
for name in ("torch", "vllm", "transformers", "verl"):
    print(f"  {name:<13} {resolved.get(name, 'MISSING')}")
print(f"  {len(resolved)} packages would be installed (verl-prime-lora itself included)")
if missing:
    sys.exit(f"check-gpu-extra: FAILED: resolved, but without {', '.join(missing)}")
print("check-gpu-extra: OK, '.[gpu]' resolves")
EOF
