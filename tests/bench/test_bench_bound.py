# SPDX-License-Identifier: Apache-2.0
"""The offline bound is never below what any policy achieves."""

from __future__ import annotations

import random
from collections import OrderedDict

import pytest

from bench import bound as B


def _random_seq(
    rng: random.Random, n: int, items: int, sizes: list[int]
) -> list[tuple[str, int]]:
    size_of = {f"i{k}": rng.choice(sizes) for k in range(items)}
    return [(k, size_of[k]) for k in (f"i{rng.randrange(items)}" for _ in range(n))]


def _simulate(seq, capacity, victim, metric):
    """Hits of an online policy; ``victim(resident, j)`` picks what to evict."""
    resident: OrderedDict[str, int] = OrderedDict()
    meta: dict[str, int] = {}
    hits = 0.0
    for j, (item, size) in enumerate(seq):
        meta[item] = meta.get(item, 0) + 1
        if item in resident:
            hits += size if metric == "embeds" else 1
            resident.move_to_end(item)
            continue
        if size > capacity:
            continue
        while sum(resident.values()) + size > capacity:
            del resident[victim(resident, meta)]
        resident[item] = size
    return hits


POLICIES = {
    "lru": lambda res, meta: next(iter(res)),
    "mru": lambda res, meta: next(reversed(res)),
    "largest": lambda res, meta: max(res, key=lambda k: (res[k], k)),
    "lfu": lambda res, meta: min(res, key=lambda k: (meta[k], k)),
}


@pytest.mark.parametrize("metric", ["embeds", "objects"])
@pytest.mark.parametrize("seed", range(12))
def test_foo_bounds_exact_opt_and_policies(seed, metric):
    rng = random.Random(seed)
    seq = _random_seq(rng, n=14, items=5, sizes=[1, 2, 3, 5, 8])
    cap = rng.choice([5, 8, 11])
    foo = B.foo_upper_bound(seq, cap, metric)
    opt = B.exact_opt_small(seq, cap, metric, max_intervals=16)
    bel = B.belady_size_hits(seq, cap, metric)
    assert bel <= opt + 1e-9 <= foo + 2e-9
    for name, victim in POLICIES.items():
        assert _simulate(seq, cap, victim, metric) <= foo + 1e-9, name
    assert foo <= B.infinite_cache_hits(seq, metric) + 1e-9


@pytest.mark.parametrize("seed", range(8))
def test_equal_sizes_bound_is_exact(seed):
    rng = random.Random(100 + seed)
    seq = _random_seq(rng, n=16, items=6, sizes=[4])
    for cap in (4, 8, 12):
        assert B.foo_upper_bound(seq, cap) == pytest.approx(B.exact_opt_small(seq, cap))


@pytest.mark.parametrize("seed", range(5))
def test_bound_on_longer_sequences(seed):
    """Larger sequences: random feasible schedules never beat the bound."""
    rng = random.Random(200 + seed)
    seq = _random_seq(rng, n=400, items=40, sizes=[64, 256, 576, 1024, 2304])
    cap = 4096
    foo = B.foo_upper_bound(seq, cap)
    for victim in POLICIES.values():
        assert _simulate(seq, cap, victim, "embeds") <= foo + 1e-6
    assert B.belady_size_hits(seq, cap) <= foo + 1e-6
    # Monotone in capacity.
    assert B.foo_upper_bound(seq, 2 * cap) >= foo


def test_items_larger_than_capacity_never_hit():
    seq = [("big", 10), ("big", 10), ("s", 1), ("s", 1)]
    assert B.foo_upper_bound(seq, 5) == 1.0
    assert B.foo_upper_bound(seq, 10) == 11.0


def _vit_like(n: int) -> float:
    return n * (1.0 + n / 700.0)  # superlinear in the item's size


@pytest.mark.parametrize("seed", range(6))
def test_cost_weighted_bound(seed):
    """FOO with cost weights bounds every policy's encoder work saved."""
    rng = random.Random(300 + seed)
    seq = _random_seq(rng, n=14, items=5, sizes=[1, 2, 3, 5, 8])
    cap = rng.choice([5, 8, 11])
    foo = B.foo_upper_bound(seq, cap, "cost", _vit_like)
    opt = B.exact_opt_small(seq, cap, "cost", max_intervals=16, cost=_vit_like)
    bel = B.belady_size_hits(seq, cap, "cost", _vit_like)
    assert bel <= opt + 1e-9 <= foo + 1e-6
    assert foo <= B.infinite_cache_hits(seq, "cost", _vit_like) + 1e-6
    # Weighted by size only, the cost bound is the embeds bound.
    assert B.foo_upper_bound(seq, cap, "cost", float) == pytest.approx(
        B.foo_upper_bound(seq, cap)
    )
    with pytest.raises(ValueError, match="cost function"):
        B.total_value(seq, "cost")


@pytest.mark.parametrize("metric", ["embeds", "objects", "cost"])
@pytest.mark.parametrize("seed", range(4))
def test_solvers_agree(metric, seed):
    """HiGHS (the default when installed) and networkx solve the same LP."""
    pytest.importorskip("highspy")
    rng = random.Random(400 + seed)
    seq = _random_seq(rng, n=300, items=40, sizes=[64, 256, 576, 1024, 2304])
    for cap in (2000, 6000):
        a = B.foo_upper_bound(seq, cap, metric, _vit_like, solver="highs")
        b = B.foo_upper_bound(seq, cap, metric, _vit_like, solver="networkx")
        # networkx rounds non-integer gains up to integers (scaled so that the
        # largest is 1e6), which only loosens its bound, by at most the
        # largest/smallest gain ratio (36x here) times 1e-6.
        assert b * (1 - 1e-4) <= a <= b * (1 + 1e-8)
        if metric == "embeds":
            assert a == b
