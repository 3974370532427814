# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the replay harness's own tests (run from the repo root).

Both children (build/base, and build/tree when it has the two-tier manager)
start together, so their vLLM imports overlap. ``BENCH_TEST_TREE`` points
the tree child at another checkout (e.g. a feature worktree).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _tree_path() -> Path:
    from bench.runner import TREE_DIR

    return Path(os.environ.get("BENCH_TEST_TREE", TREE_DIR))


def _has_two_tier(tree: Path) -> bool:
    return (
        tree / "vllm" / "v1" / "core" / "two_tier_encoder_cache_manager.py"
    ).is_file()


@pytest.fixture(scope="session")
def _children():
    from bench.runner import BASE_DIR, BENCH_DIR, TreeProcess, series

    procs = {}
    hf = Path(series.tree_env(BASE_DIR)["HF_HOME"])
    if (BASE_DIR / "vllm" / "__init__.py").is_file() and hf.is_dir():
        procs["base"] = TreeProcess("test-base", BASE_DIR, BENCH_DIR / "test-logs")
        if _has_two_tier(_tree_path()):
            procs["tree"] = TreeProcess(
                "test-tree", _tree_path(), BENCH_DIR / "test-logs"
            )
    yield procs
    for p in procs.values():
        p.close()


@pytest.fixture(scope="session")
def base_child(_children):
    """A child process with build/base's vLLM imported (shared by tests)."""
    if "base" not in _children:
        pytest.skip("build/base or the offline HF cache build/hf is missing")
    _children["base"].wait_ready()
    return _children["base"]


@pytest.fixture(scope="session")
def tree_child(_children):
    """A child for the series tree, only if it has the two-tier manager."""
    if "tree" not in _children:
        pytest.skip(f"{_tree_path()} has no two-tier encoder cache manager yet")
    _children["tree"].wait_ready()
    return _children["tree"]
