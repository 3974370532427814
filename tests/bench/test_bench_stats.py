# SPDX-License-Identifier: Apache-2.0
"""Confidence intervals over seeds, and the deployment's KV arithmetic."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from bench import deployment as D
from bench.stats import fmt_ci, mean_ci, t975


def test_mean_ci_student_t():
    xs = [0.2, 0.4, 0.3, 0.5, 0.1]
    s = mean_ci(xs)
    assert s["n"] == 5 and s["mean"] == pytest.approx(0.3)
    half = t975(4) * statistics.stdev(xs) / math.sqrt(5)
    assert s["ci95"] == pytest.approx(half)
    assert (s["min"], s["max"]) == (0.1, 0.5)
    assert fmt_ci(s) == f"0.300 ± {half:.3f}"


def test_mean_ci_degenerate_inputs():
    assert mean_ci([]) == {
        "n": 0,
        "values": [],
        "mean": None,
        "ci95": None,
        "min": None,
        "max": None,
    }
    one = mean_ci([0.7, None, float("nan")])
    assert one["n"] == 1 and one["mean"] == 0.7 and one["ci95"] is None
    assert fmt_ci(one) == "0.700" and fmt_ci(None) == "-"
    assert mean_ci([2.0, 2.0, 2.0])["ci95"] == 0.0


def test_t_quantiles_shrink_towards_normal():
    qs = [t975(df) for df in range(1, 40)]
    assert all(a > b for a, b in zip(qs[:29], qs[1:30]))
    assert qs[-1] == pytest.approx(1.96)
    with pytest.raises(ValueError):
        t975(0)


def test_ci_covers_the_true_mean_about_95_percent_of_the_time():
    rng = random.Random(0)
    trials, covered = 2000, 0
    for _ in range(trials):
        s = mean_ci([rng.gauss(1.0, 0.3) for _ in range(5)])
        covered += abs(s["mean"] - 1.0) <= s["ci95"]
    assert 0.93 <= covered / trials <= 0.97


def _tiny_config(tied: bool) -> dict:
    return {
        "hidden_size": 8,
        "intermediate_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "vocab_size": 10,
        "tie_word_embeddings": tied,
    }


def test_param_count_and_kv_bytes_of_a_small_config():
    cfg = _tiny_config(tied=True)
    # Per layer: q 8x8+8, k and v 8x4+4 each, o 8x8, MLP 3x8x16, 2 norms x8.
    layer = (64 + 8) + 2 * (32 + 4) + 64 + 3 * 8 * 16 + 2 * 8
    assert D.param_count(cfg)["text"] == 10 * 8 + 2 * layer + 8
    untied = D.param_count(_tiny_config(tied=False))["text"]
    assert untied == D.param_count(cfg)["text"] + 10 * 8
    assert D.param_count(cfg)["vision"] == 0
    # K and V, 2 layers, 1 KV head of width 4, 2 bytes.
    assert D.kv_bytes_per_token(cfg) == 2 * 2 * 1 * 4 * 2


def test_kv_capacity_subtracts_the_weights():
    cfg = _tiny_config(tied=True)
    kv = D.kv_capacity(cfg, gpu_gib=1.0, utilization=0.5, block_size=16)
    block = 16 * D.kv_bytes_per_token(cfg)
    free = int(0.5 * D.GIB) - 2 * D.param_count(cfg)["total"]
    assert kv["num_blocks"] == free // block
    assert kv["kv_tokens"] == kv["num_blocks"] * 16
    big = dict(cfg, vocab_size=10**9)  # weights larger than the GPU
    with pytest.raises(ValueError, match="exceed"):
        D.kv_capacity(big, gpu_gib=1.0)


def test_scenarios_differ_only_in_prefix_caching():
    kv = {"num_blocks": 1234}
    a = D.scenario_sched("default", "m", kv)
    b = D.scenario_sched("pc_off", "m", kv)
    assert a["enable_prefix_caching"] and not b["enable_prefix_caching"]
    assert {k: v for k, v in a.items() if k != "enable_prefix_caching"} == {
        k: v for k, v in b.items() if k != "enable_prefix_caching"
    }
    assert a["num_blocks"] == 1234 and a["max_num_seqs"] == 1024
    with pytest.raises(ValueError, match="unknown scenario"):
        D.scenario_sched("nope", "m", kv)
