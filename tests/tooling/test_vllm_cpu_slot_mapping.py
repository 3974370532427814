# SPDX-License-Identifier: Apache-2.0
"""tools/vllm_cpu_slot_mapping.py: the adapter .venv-0.32.0 installs for
vLLM 0.32.0's CPU slot-mapping fallback, whose parameters no longer match
the Triton kernel's (see the module's docstring).

The stand-in module has the exact v0.32.0 signature of the fallback and
records what reaches the C++ op; the kernel's arguments are passed the way
vLLM's dispatcher passes them (by name when the names match, else
positionally in the kernel's order).
"""

from __future__ import annotations

import inspect
import sys
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import vllm_cpu_slot_mapping as vcsm  # noqa: E402


def _stand_in_module(calls: list[dict[str, Any]]) -> types.ModuleType:
    """``vllm.utils.cpu_triton_utils`` of v0.32.0, its C++ call recorded."""

    def _compute_slot_mapping_kernel_impl(
        num_tokens,
        max_num_tokens,
        query_start_loc,
        positions,
        block_table,
        block_table_stride,
        block_size,
        slot_mapping,
        KV_CACHE_BLOCK_SIZE=None,
        BLOCKS_PER_KV_BLOCK=1,
        TOTAL_CP_WORLD_SIZE=1,
        TOTAL_CP_RANK=0,
        CP_KV_CACHE_INTERLEAVE_SIZE=1,
        PAD_ID=-1,
        BLOCK_SIZE=1024,
    ):
        assert TOTAL_CP_WORLD_SIZE == 1
        if BLOCKS_PER_KV_BLOCK != 1:
            assert block_size * BLOCKS_PER_KV_BLOCK == KV_CACHE_BLOCK_SIZE
        calls.append(
            dict(
                query_start_loc=query_start_loc,
                positions=positions,
                block_table=block_table,
                slot_mapping=slot_mapping,
                block_size=block_size,
            )
        )

    mod = types.ModuleType("vllm.utils.cpu_triton_utils")
    mod._compute_slot_mapping_kernel_impl = _compute_slot_mapping_kernel_impl
    return mod


def _dispatch(impl: Any, kwargs: dict[str, Any]) -> None:
    """vllm/triton_utils/dispatcher.py's _launch for kwargs-only launches."""
    if tuple(inspect.signature(impl).parameters) == vcsm.KERNEL_PARAMS:
        impl(**kwargs)
    else:
        impl(*(kwargs[n] for n in vcsm.KERNEL_PARAMS if n in kwargs))


LAUNCH = dict(
    num_tokens=5,
    max_num_tokens=8,
    query_start_loc_ptr="QSL",
    positions_ptr="POS",
    block_table_ptr="BT",
    block_table_stride=4,
    slot_mapping_ptr="SLOTS",
    KV_CACHE_BLOCK_SIZE=16,
    TOTAL_CP_WORLD_SIZE=1,
    TOTAL_CP_RANK=0,
    CP_KV_CACHE_INTERLEAVE_SIZE=1,
    PAD_ID=-1,
    BLOCK_SIZE=1024,
)


def test_v0_32_0_fallback_gets_shifted_arguments():
    """The bug as it is: the positional hand-over puts the slot mapping in
    block_size and TOTAL_CP_RANK (0) in BLOCKS_PER_KV_BLOCK."""
    calls: list[dict[str, Any]] = []
    mod = _stand_in_module(calls)
    try:
        _dispatch(mod._compute_slot_mapping_kernel_impl, LAUNCH)
    except (AssertionError, TypeError):
        pass
    assert not calls or calls[0]["slot_mapping"] != "SLOTS"


def test_adapter_passes_the_kernel_arguments_to_the_op():
    calls: list[dict[str, Any]] = []
    mod = _stand_in_module(calls)
    assert vcsm.fix(mod)
    assert tuple(
        inspect.signature(mod._compute_slot_mapping_kernel_impl).parameters
    ) == (vcsm.KERNEL_PARAMS)
    _dispatch(mod._compute_slot_mapping_kernel_impl, LAUNCH)
    assert calls == [
        dict(
            query_start_loc="QSL",
            positions="POS",
            block_table="BT",
            slot_mapping="SLOTS",
            block_size=16,
        )
    ]
    # Idempotent: an adapted module is left alone.
    assert not vcsm.fix(mod)


def test_fix_steps_aside_when_the_fallback_already_matches():
    mod = types.ModuleType("m")

    def impl(
        num_tokens,
        max_num_tokens,
        query_start_loc_ptr,
        positions_ptr,
        block_table_ptr,
        block_table_stride,
        slot_mapping_ptr,
        KV_CACHE_BLOCK_SIZE,
        TOTAL_CP_WORLD_SIZE=1,
        TOTAL_CP_RANK=0,
        CP_KV_CACHE_INTERLEAVE_SIZE=1,
        PAD_ID=-1,
        BLOCK_SIZE=1024,
    ):
        pass

    mod._compute_slot_mapping_kernel_impl = impl
    assert not vcsm.fix(mod)
    assert mod._compute_slot_mapping_kernel_impl is impl
