# SPDX-License-Identifier: Apache-2.0
"""bench.rules' summary of fixed-rule and duel runs (pure; the runs
themselves are tested in test_bench_replay.py)."""

from __future__ import annotations

import pytest

from bench.rules import rule_rows


def _res(hit: float, demoted: int, wasted: int, shadows=None) -> dict:
    r = {"hit_ratio": hit, "bytes_demoted": demoted, "bytes_wasted_demotion": wasted}
    if shadows is not None:
        r["shadow_hit_ratios"] = shadows
    return r


def test_rule_rows_means_and_own_shadow():
    rows = rule_rows(
        {
            "rule 0": [
                _res(0.5, 100, 50, [0.52, 0.1]),
                _res(0.3, 300, 30, [0.28, 0.2]),
            ],
            "rule 1": [_res(0.6, 0, 0, [0.9, 0.61]), _res(0.4, 0, 0, [0.9, 0.43])],
            "duel": [_res(0.45, 200, 20), _res(0.35, 0, 0)],
        }
    )
    by = {r["run"]: r for r in rows}
    assert by["rule 0"]["hit_ratio"] == pytest.approx(0.4)
    # Each rule is judged by its own shadow, not the others'.
    assert by["rule 0"]["shadow"] == pytest.approx(0.40)
    assert by["rule 1"]["shadow"] == pytest.approx(0.52)
    assert by["duel"]["shadow"] is None
    # Every shadow's mean prediction while the rule is held, in rule order.
    assert by["rule 0"]["shadows"] == pytest.approx([0.40, 0.15])
    assert by["rule 1"]["shadows"] == pytest.approx([0.9, 0.52])
    assert by["duel"]["shadows"] is None
    # Wasted share: bytes over all seeds, not a mean of per-seed shares.
    assert by["rule 0"]["wasted_share"] == pytest.approx(80 / 400)
    assert by["rule 1"]["wasted_share"] is None  # nothing demoted
    assert by["duel"]["seeds"] == [0.45, 0.35]
    assert [r["run"] for r in rows] == ["rule 0", "rule 1", "duel"]
