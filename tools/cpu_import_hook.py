# SPDX-License-Identifier: Apache-2.0
"""Run a function on a module right after its first import.

The import hook both ``.pth`` adapters of ``.venv-0.32.0`` use
(``tools/torchvision_cpu_ops.py``, ``tools/vllm_cpu_slot_mapping.py``);
``tools/setup_venv.sh`` copies it into site-packages beside them. Installing
a hook costs nothing: it only looks at import names, and removes itself once
its module has been found.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any


class _Finder(MetaPathFinder):
    """Runs ``then(module)`` right after module ``target`` executes."""

    def __init__(self, target: str, then: Callable[[ModuleType], None]) -> None:
        self.target = target
        self.then = then

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> ModuleSpec | None:
        if fullname != self.target:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module
        then = self.then

        def exec_then(module: ModuleType) -> None:
            exec_module(module)
            then(module)

        loader.exec_module = exec_then  # type: ignore[method-assign]
        return spec


def after_import(target: str, then: Callable[[ModuleType], None]) -> None:
    """Call ``then(module)`` once ``target`` is imported (one hook per
    target, however often this is called)."""
    if not any(isinstance(f, _Finder) and f.target == target for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(target, then))
