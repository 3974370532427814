# SPDX-License-Identifier: Apache-2.0
"""Peer policies: libCacheSim's online policies on our access sequences.

``libcachesim`` (PyPI, Python bindings of libCacheSim) replays the same access
sequence (an item once per request admission, size in embeddings) at the same
total capacity. The peers run **without vLLM's constraints**: a miss need not
be admitted (the policy may bypass it), nothing is pinned while a request uses
it, and there is one tier, so no copy is ever paid. Their hit ratios are what
the same memory could give a policy free of those rules.

Belady and BeladySize (offline, clairvoyant) come from the same library; they
cross-check :mod:`bench.bound`: neither may exceed the FOO bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

#: The online peers issue 11 asks for, in table order, plus W-TinyLFU with a
#: 10% window: libCacheSim's default window is 1% of the capacity, smaller
#: than most encoder outputs at the capacities we test, so it admits almost
#: nothing there (Caffeine sizes its window adaptively).
ONLINE = ("LRU", "GDSF", "LHD", "S3FIFO", "WTinyLFU", "WTinyLFU-w10", "ARC", "Sieve")
#: Offline policies used as a cross-check of the bound.
OFFLINE = ("Belady", "BeladySize")
#: peer name -> (libcachesim class, constructor keyword arguments)
CONFIG: dict[str, tuple[str, dict[str, Any]]] = {
    **{name: (name, {}) for name in ONLINE + OFFLINE},
    "WTinyLFU-w10": ("WTinyLFU", {"window_size": 0.1}),
}
NEVER = 1 << 62  # next-access time of an access never repeated
#: Hash table size (2^n buckets); the default 24 costs ~0.1 s per cache
HASHPOWER = 16


class PeersUnavailable(RuntimeError):
    """libcachesim is not installed (``pip install --no-deps libcachesim``)."""


def _lib() -> Any:
    try:
        import libcachesim
    except ImportError as e:  # pragma: no cover - the venv has it
        raise PeersUnavailable(
            "libcachesim is not importable; install it with "
            "`pip install --no-deps libcachesim==0.3.5` (see tools/setup_venv.sh)"
        ) from e
    return libcachesim


def _next_access(seq: Sequence[tuple[str, int]]) -> list[int]:
    n = len(seq)
    nxt = [NEVER] * n
    last: dict[str, int] = {}
    for j in range(n - 1, -1, -1):
        nxt[j] = last.get(seq[j][0], NEVER)
        last[seq[j][0]] = j
    return nxt


def simulate(
    policy: str,
    seq: Sequence[tuple[str, int]],
    capacity: int,
    cost: Callable[[int], float] | None = None,
) -> dict[str, float]:
    """Replay ``seq`` through libcachesim's ``policy`` at ``capacity``.

    Returns hits weighed three ways: ``objects``, ``embeds`` and, with
    ``cost``, ``cost`` (encoder FLOPs saved)."""
    lcs = _lib()
    cls_name, kwargs = CONFIG[policy]
    cls = getattr(lcs, cls_name)
    out = {"objects": 0.0, "embeds": 0.0, "cost": 0.0}
    if capacity <= 0 or not seq:
        return out
    cache = cls(int(capacity), hashpower=HASHPOWER, **kwargs)
    ids: dict[str, int] = {}
    nxt = _next_access(seq)
    req = lcs.Request()
    req.op = lcs.ReqOp.OP_GET
    for j, (item, size) in enumerate(seq):
        req.obj_id = ids.setdefault(item, len(ids) + 1)
        req.obj_size = int(size)
        req.clock_time = j
        req.next_access_vtime = nxt[j]
        if cache.get(req):
            out["objects"] += 1
            out["embeds"] += size
            if cost is not None:
                out["cost"] += cost(size)
    return out


def skip_reason(
    policy: str, seq: Sequence[tuple[str, int]], capacity: int
) -> str | None:
    """Why ``policy`` cannot run on ``seq`` at ``capacity`` (None if it can).

    libcachesim 0.3.5's BeladySize never returns when an insertion must evict
    every resident object (e.g. sizes 1024, 1024, 1024 at capacity 2000); no
    insertion needs that while every item fits in half the capacity."""
    if policy == "BeladySize" and seq and 2 * max(s for _, s in seq) > capacity:
        return "skipped: an item is larger than half the capacity (libcachesim hangs)"
    return None


def run_peers(
    seq: Sequence[tuple[str, int]],
    capacity: int,
    cost: Callable[[int], float] | None = None,
    policies: Sequence[str] = ONLINE + OFFLINE,
) -> dict[str, dict[str, float]]:
    """Every peer's hit ratios (``embeds``, ``objects``, ``cost``) on ``seq``.

    Ratios are None when ``seq`` is empty (no multimodal item), or when a
    policy cannot run there (``skipped`` says why, see :func:`skip_reason`)."""
    tot_e = float(sum(s for _, s in seq))
    tot_o = float(len(seq))
    tot_c = float(sum(cost(s) for _, s in seq)) if cost is not None else 0.0
    res: dict[str, dict[str, Any]] = {}
    for name in policies:
        why = skip_reason(name, seq, capacity)
        if why is not None:
            res[name] = {"embeds": None, "objects": None, "cost": None, "skipped": why}
            continue
        h = simulate(name, seq, capacity, cost)
        res[name] = {
            "embeds": h["embeds"] / tot_e if tot_e else None,
            "objects": h["objects"] / tot_o if tot_o else None,
            "cost": h["cost"] / tot_c if tot_c else None,
        }
    return res


def best_online(peers: dict[str, dict[str, float]], metric: str = "embeds") -> str:
    """Name of the online peer with the highest hit ratio (first on ties)."""
    return max(
        (p for p in ONLINE if p in peers),
        key=lambda p: (peers[p][metric] or 0.0, -ONLINE.index(p)),
    )
