# SPDX-License-Identifier: Apache-2.0
"""Make vLLM 0.32.0's CPU fallback for the slot-mapping kernel take the
kernel's arguments.

Installed into ``.venv-0.32.0`` only (by ``tools/setup_venv.sh``, as
``site-packages/vllm_cpu_slot_mapping.py`` plus a one-line ``.pth`` that
calls :func:`install`; that adds an import hook and imports nothing).

Why: without triton-cpu (``requirements/cpu.txt`` fetches it from GitHub; the
package index does not have it) vLLM 0.32.0's CPU platform replaces its
Triton kernels with C++ fallbacks
(``CpuPlatform.register_triton_kernel_overrides``). The dispatcher
(``vllm/triton_utils/dispatcher.py``) hands a fallback the launch arguments
by the *kernel's* parameter names, or positionally in the kernel's order when
the names differ. ``ComputeSlotMappingKernel.kernel``
(``vllm/v1/worker/block_table.py``) takes ``(num_tokens, max_num_tokens,
query_start_loc_ptr, positions_ptr, block_table_ptr, block_table_stride,
slot_mapping_ptr, KV_CACHE_BLOCK_SIZE, TOTAL_CP_WORLD_SIZE, TOTAL_CP_RANK,
CP_KV_CACHE_INTERLEAVE_SIZE, PAD_ID, BLOCK_SIZE)``, but its fallback
``vllm/utils/cpu_triton_utils.py::_compute_slot_mapping_kernel_impl`` still
has an older order with ``block_size`` before ``slot_mapping`` and a
``BLOCKS_PER_KV_BLOCK`` parameter. The positional hand-over shifts every
argument from ``slot_mapping_ptr`` on, and the V1 model runner fails its
first forward step on CPU ("Boolean value of Tensor with more than one value
is ambiguous" from the fallback's ``block_size * BLOCKS_PER_KV_BLOCK``
check). So vLLM 0.32.0's engine does not run on a CPU without triton-cpu, in
the pristine tree as in the series tree.

What it does: right after ``vllm.utils.cpu_triton_utils`` is imported (before
the platform registers the fallbacks), it replaces
``_compute_slot_mapping_kernel_impl`` with an adapter that has the kernel's
parameter names and calls the original with the slot mapping, the KV cache
block size as ``block_size`` and one kernel block per KV block. The C++ op
it ends in (``torch.ops._C.compute_slot_mapping_kernel_impl``) is unchanged.
It applies to every tree run from ``.venv-0.32.0`` alike (base and series),
changes nothing else, and steps aside if a later vLLM's fallback already
takes the kernel's parameter names.
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

from cpu_import_hook import after_import

_TARGET = "vllm.utils.cpu_triton_utils"
# ComputeSlotMappingKernel.kernel's parameters (vLLM 0.32.0).
KERNEL_PARAMS = (
    "num_tokens",
    "max_num_tokens",
    "query_start_loc_ptr",
    "positions_ptr",
    "block_table_ptr",
    "block_table_stride",
    "slot_mapping_ptr",
    "KV_CACHE_BLOCK_SIZE",
    "TOTAL_CP_WORLD_SIZE",
    "TOTAL_CP_RANK",
    "CP_KV_CACHE_INTERLEAVE_SIZE",
    "PAD_ID",
    "BLOCK_SIZE",
)


def make_adapter(orig: Any) -> Any:
    """The fallback with the kernel's parameters, calling ``orig``."""

    def _compute_slot_mapping_kernel_impl(
        num_tokens: int,
        max_num_tokens: int,
        query_start_loc_ptr: Any,
        positions_ptr: Any,
        block_table_ptr: Any,
        block_table_stride: int,
        slot_mapping_ptr: Any,
        KV_CACHE_BLOCK_SIZE: int,
        TOTAL_CP_WORLD_SIZE: int = 1,
        TOTAL_CP_RANK: int = 0,
        CP_KV_CACHE_INTERLEAVE_SIZE: int = 1,
        PAD_ID: int = -1,
        BLOCK_SIZE: int = 1024,
    ) -> None:
        return orig(
            num_tokens,
            max_num_tokens,
            query_start_loc_ptr,
            positions_ptr,
            block_table_ptr,
            block_table_stride,
            KV_CACHE_BLOCK_SIZE,
            slot_mapping_ptr,
            KV_CACHE_BLOCK_SIZE=KV_CACHE_BLOCK_SIZE,
            BLOCKS_PER_KV_BLOCK=1,
            TOTAL_CP_WORLD_SIZE=TOTAL_CP_WORLD_SIZE,
            TOTAL_CP_RANK=TOTAL_CP_RANK,
            CP_KV_CACHE_INTERLEAVE_SIZE=CP_KV_CACHE_INTERLEAVE_SIZE,
            PAD_ID=PAD_ID,
            BLOCK_SIZE=BLOCK_SIZE,
        )

    # Not __wrapped__: inspect.signature (the dispatcher) would follow it.
    _compute_slot_mapping_kernel_impl._stale_impl = orig  # type: ignore[attr-defined]
    return _compute_slot_mapping_kernel_impl


def fix(module: ModuleType) -> bool:
    """Replace the fallback in ``module`` if its parameters are the stale
    ones; return whether it did."""
    orig = getattr(module, "_compute_slot_mapping_kernel_impl", None)
    if orig is None:
        return False
    params = tuple(inspect.signature(orig).parameters)
    if params == KERNEL_PARAMS or "BLOCKS_PER_KV_BLOCK" not in params:
        return False
    module._compute_slot_mapping_kernel_impl = make_adapter(orig)
    return True


def install() -> None:
    """Add the import hook (the ``.pth`` line calls this): :func:`fix` runs
    right after ``vllm.utils.cpu_triton_utils`` runs."""
    after_import(_TARGET, fix)
