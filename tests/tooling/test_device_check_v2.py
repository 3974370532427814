# SPDX-License-Identifier: Apache-2.0
"""tools/device_check_v2.py: the parts that need no GPU.

The engine check itself needs CUDA (Model Runner V2 needs Triton); its
``--self-check`` and ``--cpu-v1`` modes need the v0.32.0 tree and venv. Here:
the command line, the refusal without CUDA, the overlay of a tree's sources on
a CUDA install's extensions, and the verdict computed from two engines'
results.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
SCRIPT = TOOLS / "device_check_v2.py"
sys.path.insert(0, str(TOOLS))
import device_check_v2 as dc  # noqa: E402


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_help_names_every_option():
    proc = _run("--help")
    assert proc.returncode == 0, proc.stderr
    for option in ("--tree", "--model", "--cuda-vllm", "--self-check", "--cpu-v1"):
        assert option in proc.stdout


def test_refuses_without_cuda():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc = _run("--tree", "build/tree-0.32.0", env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ok"] is False
    assert "CUDA is not available" in result["error"]


def test_importing_the_script_imports_no_vllm():
    """VLLM resolves device_check_v2.CheckManager in every process; the
    module itself (and --help) must not need vLLM."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import device_check_v2; "
        "print(any(m == 'vllm' or m.startswith('vllm.') for m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(TOOLS)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
    with pytest.raises(AttributeError, match="NoSuchThing"):
        dc.NoSuchThing  # noqa: B018


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_overlay_takes_sources_from_the_tree_and_extensions_from_cuda(tmp_path):
    tree = tmp_path / "tree" / "vllm"
    cuda = tmp_path / "site" / "vllm"
    _write(tree / "__init__.py", "tree init")
    _write(tree / "v1" / "worker" / "ec_manager_worker.py", "tree only")
    _write(tree / "_C.abi3.so", "cpu kernels")
    _write(tree / "__pycache__" / "x.pyc", "stale")
    _write(cuda / "__init__.py", "cuda init")
    _write(cuda / "_C.abi3.so", "cuda kernels")
    _write(cuda / "vllm_flash_attn" / "_vllm_fa2_C.abi3.so", "cuda only")
    _write(cuda / "third_party" / "data.json", "cuda only data")

    dest = tmp_path / "overlay"
    assert dc.build_overlay(tree, cuda, dest) == dest
    pkg = dest / "vllm"
    assert (pkg / "__init__.py").read_text() == "tree init"
    assert (pkg / "v1" / "worker" / "ec_manager_worker.py").read_text() == "tree only"
    assert (pkg / "_C.abi3.so").read_text() == "cuda kernels"
    assert (pkg / "vllm_flash_attn" / "_vllm_fa2_C.abi3.so").read_text() == (
        "cuda only"
    )
    assert (pkg / "third_party" / "data.json").read_text() == "cuda only data"
    assert not (pkg / "__pycache__").exists()
    # Symlinks, nothing copied; building it again starts afresh.
    assert (pkg / "__init__.py").is_symlink()
    (tree / "_C.abi3.so").unlink()
    _write(tree / "new.py", "new")
    dc.build_overlay(tree, cuda, dest)
    assert (pkg / "new.py").read_text() == "new"


def _engine(*, v2: bool = True, companion: str | None = None) -> dict[str, Any]:
    def call(encoded: int, hits: int) -> dict[str, Any]:
        return {
            "token_ids": [[1, 2, 3]] * dc.NUM_IMAGES,
            "counters": {"encoder_items": encoded, "hits": hits, "misses": 0},
            "encoder_outputs": 0 if companion else dc.NUM_IMAGES,
            "companion_counts": {"cache": dc.NUM_IMAGES} if companion else None,
            "companion_entries": dc.NUM_IMAGES if companion else None,
        }

    return {
        "facts": {"runner_class": "x", "v2": v2, "companion": companion},
        "calls": [call(dc.NUM_IMAGES, dc.NUM_IMAGES), call(0, dc.NUM_IMAGES)],
    }


def test_verdict_passes_when_everything_holds():
    checks = dc.evaluate(_engine(), _engine(companion="CheckWorker"))
    assert checks and all(checks.values()), checks
    cpu = dc.evaluate(
        _engine(v2=False), _engine(v2=False, companion="CheckWorker"), expect_v2=False
    )
    assert all(cpu.values()), cpu


def _broken(change) -> dict[str, Any]:
    custom = _engine(companion="CheckWorker")
    change(custom)
    return custom


@pytest.mark.parametrize(
    ("change", "failed"),
    [
        (lambda e: e.update(error="rc=1"), "custom_ran"),
        (lambda e: e["facts"].update(v2=False), "custom_on_v2"),
        (
            lambda e: e["calls"][1]["counters"].update(encoder_items=1),
            "custom_call2_encodes_none",
        ),
        (lambda e: e["calls"][1]["counters"].update(hits=0), "custom_call2_hits"),
        (lambda e: e["calls"][1].update(token_ids=[[9]] * 4), "token_identical"),
        (lambda e: e["facts"].update(companion=None), "custom_companion_built"),
        (
            lambda e: e["calls"][0].update(encoder_outputs=4),
            "custom_companion_holds_outputs",
        ),
    ],
)
def test_verdict_fails_on_each_broken_fact(change, failed: str):
    checks = dc.evaluate(_engine(), _broken(change))
    assert checks[failed] is False, checks
    assert not all(checks.values())
