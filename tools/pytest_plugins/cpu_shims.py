# SPDX-License-Identifier: Apache-2.0
"""pytest plugin: shims for CPU-platform methods that upstream tests call.

Loaded with ``-p cpu_shims`` by ``tools/series.py pytest``. Nothing here
changes vLLM's code: a shim is a method set on vLLM's ``CpuPlatform`` class
inside the pytest process only, and only while vLLM does not implement that
method itself (``CpuPlatform.__dict__`` lacks it). If a patch of the series,
or a later vLLM, implements the method, the shim steps aside. Shims are
installed at ``pytest_configure`` time, before tests are collected.

Shims (see :data:`SHIMS`):

``CpuPlatform.num_compute_units(device_id=0) -> int``
    The base ``Platform`` raises ``NotImplementedError``. ``GPUModelRunner``
    calls it in ``__init__`` (``_init_device_properties``: ``self.num_sms``);
    ``CPUModelRunner`` overrides that hook, but the upstream runner tests
    build a plain ``GPUModelRunner`` on the CPU device
    (tests/v1/worker/test_gpu_model_runner.py: the ``model_runner`` fixture
    and the ``test_init_kv_cache_*`` tests). The shim returns the number of
    CPUs this process may run on (``os.sched_getaffinity``), the CPU
    analogue of an SM count. ``num_sms`` is only used by GPU-kernel sizing
    paths that the CPU never reaches.

``CpuPlatform.get_current_memory_usage(device=None) -> float``
    The base ``Platform`` raises ``NotImplementedError``.
    ``GPUModelRunner.load_model`` measures the model's size with
    ``DeviceMemoryProfiler``, which calls it
    (tests/v1/worker/test_gpu_model_runner.py: ``test_reload_weights_*``,
    ``test_load_model_weights_inplace``). On CPU the "device" is host memory,
    so the shim returns this process's resident set size in bytes
    (``psutil``), which is what the profiler's before/after difference
    means there. The value is only logged.

Tests that cannot pass on CPU for other reasons are listed, with the reason,
in ``tools/known_cuda_only.txt``; they are not shimmed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def _num_compute_units(cls: Any, device_id: int = 0) -> int:
    """CPU analogue of the SM count: CPUs available to this process."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _get_current_memory_usage(cls: Any, device: Any = None) -> float:
    """Host memory in use by this process (resident set size, bytes)."""
    import psutil

    return float(psutil.Process().memory_info().rss)


# method name -> implementation (installed as classmethods on CpuPlatform).
SHIMS: dict[str, Callable[..., Any]] = {
    "num_compute_units": _num_compute_units,
    "get_current_memory_usage": _get_current_memory_usage,
}

# Names of the shims actually installed in this process (for the report).
INSTALLED: list[str] = []


def install() -> list[str]:
    """Install every shim whose method ``CpuPlatform`` lacks; return the
    names installed. Does nothing if vLLM is not importable."""
    try:
        from vllm.platforms.cpu import CpuPlatform
    except Exception:  # pragma: no cover - not a vLLM tree
        return []
    for name, impl in SHIMS.items():
        if name in CpuPlatform.__dict__:
            continue
        setattr(CpuPlatform, name, classmethod(impl))
        INSTALLED.append(name)
    return list(INSTALLED)


def pytest_configure(config: Any) -> None:
    install()


def pytest_report_header(config: Any) -> str:
    names = ", ".join(INSTALLED) or "none"
    return f"cpu_shims: CpuPlatform shims installed: {names}"
