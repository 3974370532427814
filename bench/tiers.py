# SPDX-License-Identifier: Apache-2.0
"""Why two-tier LRU hits less than one LRU of the same total size.

Replays the access sequence the real two-tier manager (policy ``lru``)
served, offline, through five hierarchies of the same total capacity:

* ``single``: one LRU of device + host (libCacheSim's LRU peer);
* ``shared_free``: two exclusive LRU tiers whose host may also use the
  device tier's free room (no hard split). The two memories are pooled, so
  an item may straddle them, as in the series' manager: a demoted entry
  keeps what the host's free blocks cannot take (its tail) in the device's
  spare room, and the tail moves to the host when the device needs the
  room back; no placement of whole entries does this;
* ``parked``: the whole-entry version: ``swap_first``, but a host victim
  of a demotion is kept whole in the room the demotion made on the device
  beyond the new item's need (copied back there), and is the first to go
  when the device needs room again;
* ``swap_first``: two exclusive LRU tiers with a hard budget each, a
  promoted entry's host space freed before device room is made (the
  manager's order, which swaps a promoted entry with what it displaces);
* ``held``: the same, but the promoted entry keeps its host space while
  device room is made, so the host may evict one entry more (the order of a
  manager whose host region tensor-parallel ranks share, which holds a
  promotion's blocks to the end of the step);

and prints them beside the manager's own hit ratio (``real``), per seed and
as means. ``single - swap_first`` is the cost of a fixed split (of which
``parked - swap_first`` is what copying host victims into the device's
spare room would recover), ``swap_first - held`` that of holding a
promotion's blocks, ``shared_free - real`` that of vLLM's constraints
(pinned entries, forced admission), since the manager's tails share the
free room as ``shared_free`` does.

    python -m bench.tiers --family heavy_chat --scenario pc_off --seeds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Sequence

Access = tuple[str, int]
HIERARCHIES = ("single", "shared_free", "parked", "swap_first", "held")


def single_lru_hits(seq: Sequence[Access], capacity: int) -> int:
    """Embeddings hit by one LRU of ``capacity`` (a miss is always admitted
    and evicts from the LRU end until it fits)."""
    cache: OrderedDict[str, int] = OrderedDict()
    used = hits = 0
    for key, size in seq:
        if key in cache:
            cache.move_to_end(key)
            hits += size
            continue
        cache[key] = size
        used += size
        while used > capacity:
            used -= cache.popitem(last=False)[1]
    return hits


def two_tier_lru_hits(
    seq: Sequence[Access],
    device: int,
    host: int,
    *,
    swap_first: bool = True,
    shared_free: bool = False,
    park: bool = False,
) -> int:
    """Embeddings hit by two exclusive LRU tiers: every access moves the
    item to the device (an item must be on the device to be used), device
    victims go to the host in LRU order, the host evicts in LRU order.

    ``swap_first=False`` keeps a promoted item's host space until device
    room is made (``held``). ``shared_free=True`` lets the host
    also use the device's free room (``host`` is then ignored: the host may
    hold ``device + host`` minus what the device holds).

    ``park=True`` (with ``swap_first``) keeps a host victim whole on the
    device when it fits in the room made there beyond the new item's need;
    parked items count against the device and are dropped first, oldest
    first, when it needs room again; a parked item's access is a device
    hit."""
    if max((size for _, size in seq), default=0) > device:
        raise ValueError("the device tier must hold the largest item")
    if park and (shared_free or not swap_first):
        # A parked victim's host blocks take the demotions of the same step,
        # and parking is the whole-entry form of sharing the free room.
        raise ValueError("park=True needs swap_first=True and shared_free=False")
    total = device + host
    dev: OrderedDict[str, int] = OrderedDict()
    hst: OrderedDict[str, int] = OrderedDict()
    parked: OrderedDict[str, int] = OrderedDict()
    dev_used = host_used = hits = 0
    for key, size in seq:
        if key in dev:
            dev.move_to_end(key)
            hits += size
            continue
        if key in parked:
            dev[key] = parked.pop(key)  # already counted in dev_used
            hits += size
            continue
        promoted = key in hst
        if promoted:
            hits += size
            if swap_first:
                host_used -= hst.pop(key)
        while dev_used + size > device:
            if parked:
                dev_used -= parked.popitem(last=False)[1]
                continue
            victim, vsize = dev.popitem(last=False)
            dev_used -= vsize
            hst[victim] = vsize
            host_used += vsize
        spare = device - dev_used - size if park else 0
        dev[key] = size
        dev_used += size
        limit = total - dev_used if shared_free else host
        if promoted and not swap_first:
            # The promoted item leaves the host only after the host made
            # room for the device's victims.
            for old in list(hst):
                if host_used <= limit:
                    break
                if old != key:
                    host_used -= hst.pop(old)
            host_used -= hst.pop(key)
        while host_used > limit:
            old, osize = hst.popitem(last=False)
            host_used -= osize
            if osize <= spare:
                parked[old] = osize
                spare -= osize
                dev_used += osize
    return hits


def replay_hierarchies(
    seq: Sequence[Access], device: int, host: int
) -> dict[str, float]:
    """Hit ratio (embeddings) of each of :data:`HIERARCHIES` on ``seq``."""
    total = sum(size for _, size in seq)
    if not total:
        return {name: 0.0 for name in HIERARCHIES}
    hits = {
        "single": single_lru_hits(seq, device + host),
        "shared_free": two_tier_lru_hits(seq, device, host, shared_free=True),
        "parked": two_tier_lru_hits(seq, device, host, park=True),
        "swap_first": two_tier_lru_hits(seq, device, host),
        "held": two_tier_lru_hits(seq, device, host, swap_first=False),
    }
    return {name: h / total for name, h in hits.items()}


def binding_setup(
    child: Any,
    family: str,
    scenario: str,
    seed: int,
    frac: float,
    tmp: Path,
    tree: Path,
) -> tuple[Callable[..., dict[str, Any]], int, int]:
    """The harness's setup for one seed of ``family`` at ``frac`` of its
    footprint: ``(spec, device, host)``, where ``spec(manager, **over)`` is
    a run spec of that trace and scenario at those tier sizes (the footprint
    is measured as the harness does, with a pilot run of the default manager
    on an unbounded cache)."""
    from bench import deployment as D
    from bench import workloads as W
    from bench.run import split, total_capacity
    from bench.runner import cost_model_path, default_spec
    from bench.trace import Trace

    path = tmp / f"{family}-s{seed}.jsonl"
    W.families()[family](seed).save(path)
    summ = Trace.load(path).summary()
    sched = D.scenario_sched(scenario, "Qwen/Qwen2-VL-2B-Instruct")
    cpath = cost_model_path(tree)

    def spec(
        manager: dict[str, Any], dev: int, host: int, **over: Any
    ) -> dict[str, Any]:
        return default_spec(
            path,
            cost_model_path=cpath,
            manager=manager,
            device_embeds=int(dev),
            host_embeds=int(host),
            sched=sched,
            **over,
        )

    room = max(summ["distinct_embeds"], summ["max_item_embeds"], 1)
    pilot = child.run(spec({"kind": "default"}, room, 0))
    footprint = sum(dict((h, s) for h, s in pilot.get("access_seq", [])).values())
    max_item = summ["max_item_embeds"]
    dev, host = split(total_capacity(frac, footprint, max_item), max_item)

    def at_capacity(manager: dict[str, Any], **over: Any) -> dict[str, Any]:
        return spec(manager, dev, host, **over)

    return at_capacity, dev, host


def seed_range(a: argparse.Namespace) -> range:
    """The seeds the options name: ``--seeds`` of them from ``--seed``
    (:func:`binding_args`' and bench/run.py's; seeds 5 and up are held out,
    nothing was tuned on them)."""
    return range(a.seed, a.seed + a.seeds)


def binding_args(p: argparse.ArgumentParser) -> None:
    """The options that pick a :func:`binding_setup` (also bench.rules')."""
    from bench.runner import TREE_DIR

    p.add_argument("--family", default="heavy_chat")
    p.add_argument("--scenario", default="pc_off")
    p.add_argument("--seed", type=int, default=0, help="first seed")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--frac", type=float, default=0.25, help="of the footprint")
    p.add_argument("--tree", type=Path, default=TREE_DIR)


def main(argv: list[str] | None = None) -> int:
    from bench.runner import TreeProcess

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    binding_args(p)
    a = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmpd, TreeProcess("tiers", a.tree) as child:
        for seed in seed_range(a):
            spec, dev, host = binding_setup(
                child, a.family, a.scenario, seed, a.frac, Path(tmpd), a.tree
            )
            res = child.run(spec({"kind": "twotier", "policy": "lru", "via": "config"}))
            seq = [(h, s) for h, s in res.get("access_seq", [])]
            row = replay_hierarchies(seq, dev, host)
            row["real"] = res.get("hit_ratio") or 0.0
            rows.append(row)
            print(f"seed {seed}: " + "  ".join(f"{k} {v:.4f}" for k, v in row.items()))
    cols = (*HIERARCHIES, "real")
    means = {c: statistics.fmean(r[c] for r in rows) for c in cols}
    print(
        f"{a.family} [{a.scenario}] @{a.frac:.0%}, {a.seeds} seeds, means: "
        + "  ".join(f"{c} {means[c]:.3f}" for c in cols)
    )
    print(
        f"fixed split {means['single'] - means['swap_first']:.3f} "
        f"(parking recovers {means['parked'] - means['swap_first']:.3f}), "
        f"held promotion blocks {means['swap_first'] - means['held']:.3f}, "
        f"vLLM's constraints {means['shared_free'] - means['real']:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
