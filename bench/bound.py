# SPDX-License-Identifier: Apache-2.0
"""Offline bounds on encoder-cache hits for a sequence of item accesses.

An access sequence is a list of ``(item_id, size)``. A policy with capacity
``C`` (the sum of the sizes of the resident items never exceeds ``C``) *hits*
access ``j`` of item ``x`` iff ``x`` stayed resident since its previous access
``p`` (a cache only gains an item by computing it on a miss), i.e. iff it
keeps the *reuse interval* ``(p, j)``. So the hits of any policy are a set of
reuse intervals whose sizes never sum to more than ``C`` across any gap
between consecutive accesses.

* :func:`foo_upper_bound`: the LP relaxation of that interval packing (FOO,
  Berger et al., SIGMETRICS 2018), solved exactly as a min-cost flow. Every
  real policy is a feasible 0/1 point of the LP, so the LP optimum is an
  upper bound on the hits of *any* policy, online or offline. Gains are
  rounded *up* to integers for the flow solver, which only loosens it.
  With equal sizes the constraint matrix is an interval matrix (totally
  unimodular), the LP is integral and the bound equals Belady's optimum.
* :func:`belady_size_hits`: a feasible offline policy (evict the resident
  item with the largest ``next_use_distance x size``; bypass the incoming
  item if it is the worst). Its hits are a lower bound on the optimum, so
  OPT lies in ``[belady_size_hits, foo_upper_bound]``.
* :func:`exact_opt_small`: exhaustive optimum for tiny sequences (tests).

Two metrics: ``"objects"`` counts hits, ``"embeds"`` weighs each hit by the
item's size (encoder work avoided is roughly proportional to it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

Metric = Literal["objects", "embeds"]

#: Integer scale for per-unit gains in the flow problem (objects metric).
GAIN_SCALE = 1_000_000


@dataclass(frozen=True)
class Interval:
    """A reuse interval: the item is accessed at ``start`` and again at ``end``."""

    start: int
    end: int
    size: int
    item: str


def reuse_intervals(seq: Sequence[tuple[str, int]]) -> list[Interval]:
    """Consecutive-access intervals of every item, in order of ``end``."""
    last: dict[str, int] = {}
    out: list[Interval] = []
    for j, (item, size) in enumerate(seq):
        p = last.get(item)
        if p is not None:
            out.append(Interval(p, j, size, item))
        last[item] = j
    return out


def _value(iv: Interval, metric: Metric) -> float:
    return float(iv.size) if metric == "embeds" else 1.0


def total_value(seq: Sequence[tuple[str, int]], metric: Metric) -> float:
    """The metric's total over all accesses (the hit-ratio denominator)."""
    return float(sum(s for _, s in seq)) if metric == "embeds" else float(len(seq))


def infinite_cache_hits(seq: Sequence[tuple[str, int]], metric: Metric) -> float:
    """Hits with unbounded capacity: every non-first access."""
    return sum(_value(iv, metric) for iv in reuse_intervals(seq))


def foo_upper_bound(
    seq: Sequence[tuple[str, int]], capacity: int, metric: Metric = "embeds"
) -> float:
    """Upper bound on the hits of any cache of ``capacity`` (see module doc)."""
    import networkx as nx

    ivs = [iv for iv in reuse_intervals(seq) if iv.size <= capacity]
    if not ivs:
        return 0.0
    # Adjacent accesses (end == start + 1) span one gap; the rest is a flow
    # over the compressed gap chain. Nodes: distinct interval endpoints.
    points = sorted({iv.start for iv in ivs} | {iv.end for iv in ivs})
    index = {p: i for i, p in enumerate(points)}
    g = nx.DiGraph()
    n = len(points)
    g.add_node(0, demand=-capacity)
    g.add_node(n - 1, demand=capacity)
    for i in range(n - 1):
        g.add_edge(i, i + 1, capacity=capacity, weight=0)
    # Parallel intervals between the same endpoints are merged by summing
    # capacities when their per-unit gain is equal; otherwise a helper node
    # keeps the DiGraph simple.
    aux = n
    for iv in ivs:
        u, v = index[iv.start], index[iv.end]
        if metric == "embeds":
            gain = 1  # value per unit of flow = size / size
        else:
            gain = math.ceil(GAIN_SCALE / iv.size)  # round up: stays an upper bound
        if g.has_edge(u, v) and g[u][v]["weight"] == -gain:
            g[u][v]["capacity"] += iv.size
            continue
        g.add_edge(u, aux, capacity=iv.size, weight=-gain)
        g.add_edge(aux, v, capacity=iv.size, weight=0)
        aux += 1
    cost, _ = nx.network_simplex(g)
    best = -cost
    if metric == "embeds":
        return float(best)
    # Rounding gains up may overshoot by < 1e-6 per interval; the
    # infinite-cache hits are an upper bound too, so clip to them.
    return min(best / GAIN_SCALE, float(len(ivs)))


def belady_size_hits(
    seq: Sequence[tuple[str, int]], capacity: int, metric: Metric = "embeds"
) -> float:
    """Hits of the offline Belady-size policy (a feasible schedule: OPT >= this)."""
    n = len(seq)
    next_use = [n] * n
    last: dict[str, int] = {}
    for j in range(n - 1, -1, -1):
        item = seq[j][0]
        next_use[j] = last.get(item, n + 1)
        last[item] = j
    resident: dict[str, tuple[int, int]] = {}  # item -> (size, next use)
    used = 0
    hits = 0.0
    for j, (item, size) in enumerate(seq):
        if item in resident:
            hits += float(size) if metric == "embeds" else 1.0
            resident[item] = (size, next_use[j])
            continue
        if size > capacity or next_use[j] > n:
            continue  # never fits, or never used again: bypass
        # Make room, evicting by largest (distance x size); bypass if the
        # incoming item would be the first victim.
        while used + size > capacity:
            victim, (vs, vn) = max(
                resident.items(), key=lambda kv: ((kv[1][1] - j) * kv[1][0], kv[0])
            )
            if (next_use[j] - j) * size >= (vn - j) * vs:
                break
            del resident[victim]
            used -= vs
        if used + size <= capacity:
            resident[item] = (size, next_use[j])
            used += size
    return hits


def exact_opt_small(
    seq: Sequence[tuple[str, int]],
    capacity: int,
    metric: Metric = "embeds",
    max_intervals: int = 18,
) -> float:
    """Exact optimum by enumerating interval subsets (tiny sequences only)."""
    ivs = [iv for iv in reuse_intervals(seq) if iv.size <= capacity]
    if len(ivs) > max_intervals:
        raise ValueError(f"{len(ivs)} intervals: too many for exhaustive search")
    gaps = max((iv.end for iv in ivs), default=0)
    best = 0.0
    for mask in range(1 << len(ivs)):
        load = [0] * (gaps + 1)
        ok = True
        val = 0.0
        for b, iv in enumerate(ivs):
            if mask >> b & 1:
                val += _value(iv, metric)
                for t in range(iv.start, iv.end):
                    load[t] += iv.size
                    if load[t] > capacity:
                        ok = False
                        break
            if not ok:
                break
        if ok and val > best:
            best = val
    return best
