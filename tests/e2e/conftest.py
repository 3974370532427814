# SPDX-License-Identifier: Apache-2.0
"""Fixtures shared by the real-engine end-to-end tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import make_tiny_mm_model  # noqa: E402


@pytest.fixture(scope="module")
def tiny_model() -> Path:
    """The tiny Qwen2-VL model directory (generated if missing or stale)."""
    assert make_tiny_mm_model.main([]) == 0
    return make_tiny_mm_model.DEFAULT_OUT
