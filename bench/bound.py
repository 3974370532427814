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
  Berger et al., SIGMETRICS 2018), solved exactly as a min-cost flow (with
  the HiGHS LP solver when ``highspy`` is installed, else networkx). Every
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

Three metrics: ``"objects"`` counts hits, ``"embeds"`` weighs each hit by the
item's size, ``"cost"`` by ``cost(size)`` (the encoder FLOPs a hit saves; pass
``cost``). The FOO bound with cost weights is the bound for a policy that
optimises encoder work rather than hit counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Literal, Sequence

Metric = Literal["objects", "embeds", "cost"]
CostFn = Callable[[int], float]

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


def access_value(size: int, metric: Metric, cost: CostFn | None = None) -> float:
    """What one hit on an item of ``size`` embeddings is worth."""
    if metric == "embeds":
        return float(size)
    if metric == "cost":
        if cost is None:
            raise ValueError("metric 'cost' needs a cost function")
        return float(cost(size))
    return 1.0


def _value(iv: Interval, metric: Metric, cost: CostFn | None = None) -> float:
    return access_value(iv.size, metric, cost)


def total_value(
    seq: Sequence[tuple[str, int]], metric: Metric, cost: CostFn | None = None
) -> float:
    """The metric's total over all accesses (the hit-ratio denominator)."""
    return float(sum(access_value(s, metric, cost) for _, s in seq))


def infinite_cache_hits(
    seq: Sequence[tuple[str, int]], metric: Metric, cost: CostFn | None = None
) -> float:
    """Hits with unbounded capacity: every non-first access."""
    return sum(_value(iv, metric, cost) for iv in reuse_intervals(seq))


def foo_solver() -> str:
    """The min-cost-flow solver :func:`foo_upper_bound` uses by default:
    ``"highs"`` (the HiGHS LP solver, from the ``highspy`` package) when it
    is installed, else networkx's network simplex (20-35x slower here)."""
    try:
        import highspy  # noqa: F401
    except ImportError:
        return "networkx"
    return "highs"


def foo_upper_bound(
    seq: Sequence[tuple[str, int]],
    capacity: int,
    metric: Metric = "embeds",
    cost: CostFn | None = None,
    solver: str | None = None,
) -> float:
    """Upper bound on the hits of any cache of ``capacity`` (see module doc).

    The flow network: one node per distinct interval endpoint, a chain of
    free arcs of capacity ``capacity`` from the first to the last, and per
    reuse interval an arc of capacity ``size`` that gains the interval's
    value per unit of flow divided by its size; ``capacity`` units flow from
    the first node to the last. Both solvers solve this same LP exactly."""
    ivs = [iv for iv in reuse_intervals(seq) if iv.size <= capacity]
    if not ivs:
        return 0.0
    unit = {iv.size: _value(iv, metric, cost) / iv.size for iv in ivs}
    if max(unit.values()) <= 0:
        return 0.0
    points = sorted({iv.start for iv in ivs} | {iv.end for iv in ivs})
    index = {p: i for i, p in enumerate(points)}
    arcs = [(index[iv.start], index[iv.end], iv.size, unit[iv.size]) for iv in ivs]
    if (solver or foo_solver()) == "highs":
        best = _flow_highs(len(points), arcs, capacity)
    else:
        best = _flow_networkx(len(points), arcs, capacity, metric)
    cap_value = sum(_value(iv, metric, cost) for iv in ivs)
    if metric == "embeds":
        # Integral LP (a network matrix with integer capacities).
        return float(min(round(best), cap_value))
    # Solver tolerance / rounded gains: a relative 1e-6 at most; the
    # infinite-cache hits are an upper bound too, so clip to them.
    return min(best * (1 + 1e-9), cap_value)


def _flow_highs(
    n: int, arcs: list[tuple[int, int, int, float]], capacity: int
) -> float:
    """Max gain of the FOO flow, as an LP solved by HiGHS (sparse, column-wise)."""
    import highspy
    import numpy as np

    m = len(arcs)
    nv = n - 1 + m
    # Columns: chain arcs i -> i+1 (i < n-1), then the interval arcs.
    tail = np.concatenate([np.arange(n - 1), np.array([a[0] for a in arcs])])
    head = np.concatenate([np.arange(1, n), np.array([a[1] for a in arcs])])
    lp = highspy.HighsLp()
    lp.num_col_ = nv
    lp.num_row_ = n
    lp.col_cost_ = np.concatenate(
        [np.zeros(n - 1), -np.array([a[3] for a in arcs], dtype=float)]
    )
    lp.col_lower_ = np.zeros(nv)
    lp.col_upper_ = np.concatenate(
        [np.full(n - 1, float(capacity)), np.array([a[2] for a in arcs], dtype=float)]
    )
    rhs = np.zeros(n)
    rhs[0], rhs[-1] = -capacity, capacity
    lp.row_lower_ = rhs
    lp.row_upper_ = rhs
    # Each column has -1 at its tail row and +1 at its head row.
    lo, hi = np.minimum(tail, head), np.maximum(tail, head)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.arange(0, 2 * nv + 1, 2, dtype=np.int32)
    lp.a_matrix_.index_ = np.stack([lo, hi], axis=1).reshape(-1).astype(np.int32)
    lp.a_matrix_.value_ = np.where(
        np.stack([lo == tail, hi == tail], axis=1), -1.0, 1.0
    ).reshape(-1)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.passModel(lp)
    h.run()
    status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(
            f"HiGHS: FOO flow not solved ({h.modelStatusToString(status)})"
        )
    return -h.getInfo().objective_function_value


def _flow_networkx(
    n: int, arcs: list[tuple[int, int, int, float]], capacity: int, metric: Metric
) -> float:
    """The same flow with networkx's network simplex (integer gains: for the
    non-embeds metrics the per-unit gains are scaled so that the largest is
    GAIN_SCALE and rounded up, which only loosens the bound)."""
    import networkx as nx

    top = max(a[3] for a in arcs)
    g = nx.DiGraph()
    g.add_node(0, demand=-capacity)
    g.add_node(n - 1, demand=capacity)
    for i in range(n - 1):
        g.add_edge(i, i + 1, capacity=capacity, weight=0)
    # Parallel intervals between the same endpoints are merged by summing
    # capacities when their per-unit gain is equal; otherwise a helper node
    # keeps the DiGraph simple.
    aux = n
    for u, v, size, gain_f in arcs:
        gain = 1 if metric == "embeds" else math.ceil(gain_f * GAIN_SCALE / top)
        if g.has_edge(u, v) and g[u][v]["weight"] == -gain:
            g[u][v]["capacity"] += size
            continue
        g.add_edge(u, aux, capacity=size, weight=-gain)
        g.add_edge(aux, v, capacity=size, weight=0)
        aux += 1
    flow_cost, _ = nx.network_simplex(g)
    best = -flow_cost
    return float(best) if metric == "embeds" else best * top / GAIN_SCALE


def belady_size_hits(
    seq: Sequence[tuple[str, int]],
    capacity: int,
    metric: Metric = "embeds",
    cost: CostFn | None = None,
) -> float:
    """Hits of the offline Belady-size policy (a feasible schedule: OPT >= this).

    It evicts the resident item with the largest ``next-use distance x
    size`` (divided by the value per embedding for the cost metric)."""
    n = len(seq)
    next_use = [n] * n
    last: dict[str, int] = {}
    for j in range(n - 1, -1, -1):
        item = seq[j][0]
        next_use[j] = last.get(item, n + 1)
        last[item] = j

    def weight(size: int) -> float:
        """Space-time an item may take per unit of value (ranking only)."""
        if metric != "cost":
            return float(size)
        return size * size / access_value(size, metric, cost)

    resident: dict[str, tuple[int, int]] = {}  # item -> (size, next use)
    used = 0
    hits = 0.0
    for j, (item, size) in enumerate(seq):
        if item in resident:
            hits += access_value(size, metric, cost)
            resident[item] = (size, next_use[j])
            continue
        if size > capacity or next_use[j] > n:
            continue  # never fits, or never used again: bypass
        # Make room, evicting by largest (distance x weight); bypass if the
        # incoming item would be the first victim.
        while used + size > capacity:
            victim, (vs, vn) = max(
                resident.items(),
                key=lambda kv: ((kv[1][1] - j) * weight(kv[1][0]), kv[0]),
            )
            if (next_use[j] - j) * weight(size) >= (vn - j) * weight(vs):
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
    cost: CostFn | None = None,
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
                val += _value(iv, metric, cost)
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
