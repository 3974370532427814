# SPDX-License-Identifier: Apache-2.0
"""tools/torchvision_cpu_ops.py: the import hook .venv-0.32.0 installs so
that PyPI's (CUDA) torchvision imports beside the CPU build of torch.

A stand-in ``torchvision`` package reproduces the failure exactly as
torchvision 0.28.0 does it: ``extension`` cannot load the C++ ops
(``_has_ops()`` is False) and the package then registers fake kernels for
``torchvision::nms`` and ``::qnms`` unconditionally. It shadows the real
torchvision in a subprocess, so the real one is never touched.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools"

EXTENSION = """\
def _has_ops():
    return False
"""
INIT = """\
import torch

from . import extension  # noqa: F401  (torchvision loads its ops here)


@torch.library.register_fake("torchvision::nms")
def meta_nms(dets, scores, iou_threshold):
    return dets.new_empty(0, dtype=torch.long)


@torch.library.register_fake("torchvision::qnms")
def meta_qnms(dets, scores, iou_threshold):
    return dets.new_empty(0, dtype=torch.long)
"""


def _run(tmp_path: Path, code: str) -> subprocess.CompletedProcess:
    pkg = tmp_path / "torchvision"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text(INIT)
    (pkg / "extension.py").write_text(EXTENSION)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(TOOLS)]))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        env=env,
        text=True,
        capture_output=True,
    )


def test_without_the_hook_torchvision_does_not_import(tmp_path):
    proc = _run(tmp_path, "import torchvision")
    assert proc.returncode != 0
    assert "torchvision::nms" in proc.stderr


def test_the_hook_defines_the_two_operators_and_nothing_else(tmp_path):
    proc = _run(
        tmp_path,
        """
        import torchvision_cpu_ops
        torchvision_cpu_ops.install()
        torchvision_cpu_ops.install()  # idempotent: one hook
        import os, sys, torch, torchvision
        assert torchvision.__file__.startswith(os.getcwd())  # the stand-in
        assert not torchvision.extension._has_ops()
        print(torch.ops.torchvision.nms.default._schema)
        print(torch.ops.torchvision.qnms.default._schema)
        hooks = [f for f in sys.meta_path if type(f).__name__ == "_Finder"]
        print("hooks left", len(hooks))
        try:
            torch.ops.torchvision.nms(torch.zeros(1, 4), torch.zeros(1), 0.5)
        except (NotImplementedError, RuntimeError) as e:
            print("no kernel:", type(e).__name__)
        """,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == (
        "torchvision::nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
    )
    assert lines[1].startswith("torchvision::qnms(")
    # The hook removes itself once torchvision.extension has been imported.
    assert lines[2] == "hooks left 0"
    assert lines[3].startswith("no kernel:")


def test_the_hook_does_nothing_when_the_ops_load(tmp_path):
    (tmp_path / "torchvision").mkdir()
    proc = _run(
        tmp_path,
        """
        import pathlib
        ext = pathlib.Path("torchvision/extension.py")
        ext.write_text(ext.read_text().replace("return False", "return True"))
        import torch
        lib = torch.library.Library("torchvision", "DEF")  # the C++ ops' stand-in
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        import torchvision_cpu_ops
        torchvision_cpu_ops.install()
        import torchvision
        assert torchvision.extension._has_ops()
        print("defined by hook:", torchvision_cpu_ops._LIBRARY is not None)
        """,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "defined by hook: False"
