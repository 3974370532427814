# SPDX-License-Identifier: Apache-2.0
"""Means with 95% confidence intervals over seeds (or repetitions).

The interval is Student's t: ``mean +- t(0.975, n-1) * s / sqrt(n)`` with the
sample standard deviation ``s``; it assumes the per-seed values are
independent draws of a roughly normal quantity, which is what seeds of a
generator are. With one value the half-width is undefined (None).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

#: two-sided 95% quantiles of Student's t by degrees of freedom (1..30)
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else 1.96


def mean_ci(values: Sequence[float | None]) -> dict[str, Any]:
    """``{"mean", "ci95", "n", "min", "max", "values"}`` of the non-None values.

    ``ci95`` is the half-width (None for fewer than two values); ``mean`` is
    None when there is no value at all."""
    xs = [float(v) for v in values if v is not None and not math.isnan(v)]
    out: dict[str, Any] = {
        "n": len(xs),
        "values": xs,
        "mean": statistics.fmean(xs) if xs else None,
        "ci95": None,
        "min": min(xs) if xs else None,
        "max": max(xs) if xs else None,
    }
    if len(xs) >= 2:
        out["ci95"] = t975(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return out


def fmt_ci(s: dict[str, Any] | None, digits: int = 3) -> str:
    """``0.512 ± 0.013`` (or ``-`` without a value)."""
    if not s or s.get("mean") is None:
        return "-"
    m = f"{s['mean']:.{digits}f}"
    return m if s.get("ci95") is None else f"{m} ± {s['ci95']:.{digits}f}"
