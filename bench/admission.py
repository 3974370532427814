# SPDX-License-Identifier: Apache-2.0
"""What the wasted-share target asks of the host's admission.

The target (issue 11: wasted demotion bytes <= 25% of the bytes demoted, 25%
and 50% of the footprint pooled, hit ratio never below LRU) asks the host to
demote, when an entry leaves the device, only what comes back before the host
evicts it. This tool replays the access sequence the real two-tier manager
(policy ``lru``) served, at each seed's harness capacities (device:host =
1:8), through two exclusive LRU tiers (:func:`two_tier_lru_traffic`, the
order of ``bench.tiers``' ``swap_first``), with each demotion decided by:

* ``admit all``: the two-tier LRU;
* ``features``: a predictor over what a manager can see of an entry when it
  leaves the device, namely its access count (capped at :data:`MAX_COUNT`)
  and the log2 of the embeddings accessed between its last two accesses
  (:func:`entry_features`): per feature value, the share of such entries
  that came back within a horizon of :data:`HORIZONS` total capacities (or
  ever) (:class:`FittedRates`). An entry is demoted when its share reaches
  a threshold. Every horizon and threshold (:data:`THRESHOLDS`) is tried,
  at each capacity on its own, and the best kept. With ``--fit-seed`` the
  shares are fitted on other seeds of the family, so the predictor knows
  the family's statistics, which an online policy must learn while it
  runs: a generous stand-in for any policy that reads these features, not
  a proof. Without it they are fitted in hindsight on the judged seeds
  themselves, and the finer feature sets below then partly memorise the
  traces (a heavy_chat seed has 137-267 accesses);
* ``+ request``: the same, with the request context as a third feature: does
  the request carry an item accessed before it arrived (round eight in
  bench/README.md: a running session's next turn, or a session's first turn
  and a scan image)?
* ``+ size`` and ``+ phase``: each adds to the one before the entry's size
  (log2) and which quarter of the trace the access is in (rates fitted per
  quarter: a trace whose reuse changes as it goes, piecewise);
* ``oracle``: knows whether the entry comes back within the horizon, or
  ever. This is future knowledge, a bound;
* ``inclusive`` and ``incl. oracle``: admit-all, the ``features`` predictor
  and the oracle in *inclusive* tiers, where the host keeps a promoted
  entry's copy, so a promoted entry that leaves the device again is not
  copied twice (``inclusive=True`` of :func:`two_tier_lru_traffic`). The
  copies take host room that exclusive tiers give to other entries: this
  answers whether the series' exclusive tiers (the design doc's "The tiers
  are exclusive") are what makes the target unreachable.

For each it prints the best choice at 25% and 50% whose pooled wasted share
meets the target (:func:`best_within`), and by how much its hit ratios beat
admit-all's at the worse of the two capacities. The simple tiers have no
tails (an entry never straddles the tiers) and pin nothing, so admit-all's
figures differ from the manager's by a few thousandths.

``--frac F`` judges at ``F`` and ``2F`` of the footprint (default 25% and
50%, the target's); ``--fit-seed S`` fits the predictors on ``--seeds``
seeds from ``S`` (bench/README.md's table: seeds 0-4 fitted on 5-9, and
5-9 on 0-4).

    python -m bench.admission --family heavy_chat --scenario pc_off --seeds 5 \
        --fit-seed 5
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from collections import OrderedDict, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

Access = tuple[str, int]
#: Access counts above this share one feature value.
MAX_COUNT = 8
#: Horizons of the ``features`` predictor and of the oracle, in total
#: capacities (device + host) of embeddings accessed; ``None`` is "ever".
HORIZONS: tuple[float | None, ...] = (1, 2, 4, None)
#: Thresholds on the fitted share of entries that came back.
THRESHOLDS = tuple(i / 10 for i in range(11))
TWO_TIER_LRU = {"kind": "twotier", "policy": "lru", "via": "config"}
#: The issue's target on the pooled wasted demotion share.
WASTED_TARGET = 0.25


@dataclass(frozen=True)
class Traffic:
    """One replay: embeddings hit, accessed, demoted and wasted (demoted,
    then evicted from the host before any promotion)."""

    hits: int
    accessed: int
    demoted: int
    wasted: int

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.accessed if self.accessed else 0.0


def two_tier_lru_traffic(
    seq: Sequence[Access],
    device: int,
    host: int,
    admit: Callable[[int], bool] = lambda _: True,
    inclusive: bool = False,
) -> Traffic:
    """Two exclusive LRU tiers with hard budgets, every access moving its
    item to the device. A promoted item leaves the host before device room is
    made (``bench.tiers``' ``swap_first``). When the device evicts an item
    whose latest access is ``seq[i]``, ``admit(i)`` decides: demote it to
    the host (a copy), or drop it. The host evicts in LRU order; in exclusive
    tiers every host eviction is a wasted demotion.

    ``inclusive=True`` makes the host keep a promoted item's copy (moved to
    the host's most recent end, in the host's budget): when the device
    evicts an item whose copy is still on the host, it leaves without a copy
    and without ``admit`` being asked. A host eviction is then wasted only
    when that copy was never promoted."""
    if max((size for _, size in seq), default=0) > device:
        raise ValueError("the device tier must hold the largest item")
    dev: OrderedDict[str, int] = OrderedDict()
    # key -> size on the host; the keys of copies promoted since demotion.
    hst: OrderedDict[str, int] = OrderedDict()
    promoted: set[str] = set()
    latest: dict[str, int] = {}
    dev_used = host_used = hits = accessed = demoted = wasted = 0
    for i, (key, size) in enumerate(seq):
        accessed += size
        latest[key] = i
        if key in dev:
            dev.move_to_end(key)
            hits += size
            continue
        if key in hst:
            hits += size
            if inclusive:
                hst.move_to_end(key)
                promoted.add(key)
            else:
                host_used -= hst.pop(key)
        while dev_used + size > device:
            victim, vsize = dev.popitem(last=False)
            dev_used -= vsize
            if victim in hst:  # inclusive: its copy is still there
                continue
            if admit(latest[victim]):
                hst[victim] = vsize
                host_used += vsize
                demoted += vsize
        dev[key] = size
        dev_used += size
        while host_used > host:
            old, osize = hst.popitem(last=False)
            host_used -= osize
            if old in promoted:
                promoted.discard(old)
            else:
                wasted += osize
    return Traffic(hits, accessed, demoted, wasted)


def entry_features(
    seq: Sequence[Access], requests: Sequence[str] | None = None
) -> list[tuple[int, ...]]:
    """At each access: the item's access count so far (capped at
    :data:`MAX_COUNT`) and ``floor(log2(1 + g))`` for the ``g`` embeddings
    accessed since its previous access (-1 on a first access). With the
    accesses' ``requests``, a third value: 1 when the request carries an
    item accessed before the request's first access (a running session's
    next turn), else 0 (a session's first turn, a scan image): the request
    context of round eight in bench/README.md, known when a request arrives."""
    counts: dict[str, int] = defaultdict(int)
    seen_at: dict[str, int] = {}
    out: list[tuple[int, ...]] = []
    pos = 0
    for key, size in seq:
        counts[key] += 1
        gap = int(math.log2(1 + pos - seen_at[key])) if key in seen_at else -1
        out.append((min(counts[key], MAX_COUNT), gap))
        seen_at[key] = pos
        pos += size
    if requests is None:
        return out
    first_of_key: dict[str, int] = {}
    first_of_req: dict[str, int] = {}
    keys_of_req: dict[str, set[str]] = defaultdict(set)
    for i, ((key, _), req) in enumerate(zip(seq, requests, strict=True)):
        first_of_key.setdefault(key, i)
        first_of_req.setdefault(req, i)
        keys_of_req[req].add(key)
    carries_seen = {
        req: int(any(first_of_key[k] < first_of_req[req] for k in keys))
        for req, keys in keys_of_req.items()
    }
    return [(*f, carries_seen[req]) for f, req in zip(out, requests)]


def comes_back(seq: Sequence[Access], horizon: float | None) -> list[bool]:
    """Whether the item of each access is accessed again within ``horizon``
    embeddings accessed after this access began (ever if ``None``)."""
    starts = []
    pos = 0
    for _, size in seq:
        starts.append(pos)
        pos += size
    out = [False] * len(seq)
    after: dict[str, int] = {}
    for i in range(len(seq) - 1, -1, -1):
        key = seq[i][0]
        j = after.get(key)
        out[i] = j is not None and (horizon is None or starts[j] - starts[i] <= horizon)
        after[key] = i
    return out


#: Fewest fitted accesses a feature value needs before its own share is
#: used; with fewer, the share of the longest prefix of the value that has
#: enough is, and with none, the entry is demoted (no evidence, admit).
MIN_SAMPLES = 4


class FittedRates:
    """Per feature value (a tuple), the share of the fitted accesses with it
    whose item came back, pooled over the ``(features, labels)`` samples.
    A value with fewer than :data:`MIN_SAMPLES` accesses backs off to its
    longest prefix that has them (the last features dropped first); one
    with no such prefix gets 1.0."""

    def __init__(
        self, samples: Sequence[tuple[Sequence[tuple[int, ...]], Sequence[bool]]]
    ) -> None:
        self._good: dict[tuple[int, ...], int] = defaultdict(int)
        self._seen: dict[tuple[int, ...], int] = defaultdict(int)
        for features, labels in samples:
            for f, ok in zip(features, labels, strict=True):
                for n in range(1, len(f) + 1):
                    self._seen[f[:n]] += 1
                    self._good[f[:n]] += ok

    def __call__(self, f: tuple[int, ...]) -> float:
        for n in range(len(f), 0, -1):
            seen = self._seen.get(f[:n], 0)
            if seen >= MIN_SAMPLES:
                return self._good[f[:n]] / seen
        return 1.0


@dataclass(frozen=True)
class Choice:
    """One admission at one capacity, over every seed: the mean hit ratio
    and the bytes (embeddings) demoted and wasted in all."""

    label: str
    hit_ratio: float
    demoted: int
    wasted: int


def pooled(runs: Sequence[Traffic], label: str) -> Choice:
    return Choice(
        label,
        sum(r.hit_ratio for r in runs) / len(runs) if runs else 0.0,
        sum(r.demoted for r in runs),
        sum(r.wasted for r in runs),
    )


def wasted_share(*choices: Choice) -> float:
    demoted = sum(c.demoted for c in choices)
    return sum(c.wasted for c in choices) / demoted if demoted else 0.0


def best_within(
    low: Sequence[Choice],
    high: Sequence[Choice],
    ref: tuple[float, float],
    target: float = WASTED_TARGET,
) -> tuple[Choice, Choice] | None:
    """The pair (one choice at each capacity) whose pooled wasted share is
    at most ``target`` and whose worse hit-ratio margin over ``ref`` (the
    reference's hit ratios at the two capacities) is the largest; ``None``
    when no pair meets the target."""
    best = None
    best_margin = -math.inf
    for a in low:
        for b in high:
            if wasted_share(a, b) > target:
                continue
            margin = min(a.hit_ratio - ref[0], b.hit_ratio - ref[1])
            if margin > best_margin:
                best, best_margin = (a, b), margin
    return best


def _horizon_name(h: float | None) -> str:
    return "ever" if h is None else f"{h:g}x"


@dataclass(frozen=True)
class Run:
    """One seed at one capacity: the access sequence the manager served,
    the tier sizes and, when recorded, the request of each access."""

    seq: Sequence[Access]
    device: int
    host: int
    requests: Sequence[str] | None = None


def _replay_all(
    runs: Sequence[Run],
    admits: Sequence[Callable[[int], bool]],
    label: str,
    inclusive: bool = False,
) -> Choice:
    return pooled(
        [
            two_tier_lru_traffic(r.seq, r.device, r.host, admit, inclusive)
            for r, admit in zip(runs, admits, strict=True)
        ],
        label,
    )


#: Segments of a trace that ``+ phase`` fits apart.
PHASES = 4


def feature_sets(runs: Sequence[Run]) -> dict[str, list[list[tuple[int, ...]]]]:
    """The ``features`` of each run's accesses, and each refinement of them
    in turn: ``+ request`` (the request context, when every run recorded its
    requests), ``+ size`` (``floor(log2(embeddings))``) and ``+ phase``
    (which of :data:`PHASES` equal parts of the trace the access is in, so
    the rates are fitted per part: a trace whose reuse changes as it goes
    is fitted piecewise)."""
    sets = {"features": [entry_features(r.seq) for r in runs]}
    last = sets["features"]
    if runs and all(r.requests is not None for r in runs):
        last = sets["+ request"] = [entry_features(r.seq, r.requests) for r in runs]
    last = sets["+ size"] = [
        [(*f, int(math.log2(size))) for f, (_, size) in zip(fs, r.seq)]
        for fs, r in zip(last, runs)
    ]
    sets["+ phase"] = [
        [(*f, PHASES * i // len(fs)) for i, f in enumerate(fs)] for fs in last
    ]
    return sets


def choices_at(
    runs: Sequence[Run], fit: Sequence[Run] | None = None
) -> dict[str, list[Choice]]:
    """Every admission of the module docstring replayed on ``runs`` (one
    per seed, at one capacity): admit all, a predictor on each of
    :func:`feature_sets` and the oracle in exclusive tiers, then admit all,
    the ``features`` predictor and the oracle in inclusive ones. The
    predictors are fitted on ``fit`` (other seeds at the same capacity), or
    in hindsight on ``runs`` themselves when ``fit`` is ``None``."""
    fit = runs if fit is None else fit
    sets = feature_sets(runs)
    fit_sets = feature_sets(fit)
    admit_all = [lambda _: True] * len(runs)
    out: dict[str, list[Choice]] = {
        "admit all": [_replay_all(runs, admit_all, "admit all")],
        **{kind: [] for kind in sets},
    }
    out["oracle"] = []
    out["inclusive"] = [_replay_all(runs, admit_all, "admit all", inclusive=True)]
    out["incl. oracle"] = []
    for horizon in HORIZONS:
        labels = [
            comes_back(
                r.seq, None if horizon is None else horizon * (r.device + r.host)
            )
            for r in runs
        ]
        name = _horizon_name(horizon)
        oracle = [lab.__getitem__ for lab in labels]
        out["oracle"].append(_replay_all(runs, oracle, f"comes back {name}"))
        out["incl. oracle"].append(
            _replay_all(runs, oracle, f"comes back {name}", inclusive=True)
        )
        fit_labels = [
            comes_back(
                r.seq, None if horizon is None else horizon * (r.device + r.host)
            )
            for r in fit
        ]
        for kind, features in sets.items():
            rates = FittedRates(list(zip(fit_sets[kind], fit_labels, strict=True)))
            for th in THRESHOLDS:
                admits = [
                    lambda i, f=f, r=rates, th=th: r(f[i]) >= th for f in features
                ]
                out[kind].append(_replay_all(runs, admits, f"{name}, >= {th:.1f}"))
                if kind == "features":
                    out["inclusive"].append(
                        _replay_all(runs, admits, f"{name}, >= {th:.1f}", True)
                    )
    return out


def report(
    low: dict[str, list[Choice]],
    high: dict[str, list[Choice]],
    names: tuple[str, str] = ("25%", "50%"),
    target: float = WASTED_TARGET,
) -> list[str]:
    """The table's lines: per admission, the best pair under the target
    (``names`` are the two capacities')."""
    ref_low, ref_high = low["admit all"][0], high["admit all"][0]
    ref = (ref_low.hit_ratio, ref_high.hit_ratio)
    lines = [
        f"{'admission':12s} {names[0] + ' hit':>8s} {names[1] + ' hit':>8s} "
        f"{'wasted':>7s} {'vs admit-all':>12s}  choice ({names[0]} / {names[1]})"
    ]
    for kind in low:
        pair = best_within(low[kind], high[kind], ref, target)
        if pair is None:
            lines.append(f"{kind:12s} no choice meets wasted share <= {target:.2f}")
            continue
        a, b = pair
        margin = min(a.hit_ratio - ref[0], b.hit_ratio - ref[1])
        lines.append(
            f"{kind:12s} {a.hit_ratio:8.3f} {b.hit_ratio:8.3f} "
            f"{wasted_share(a, b):7.2f} {margin:+12.3f}  {a.label} / {b.label}"
        )
    if wasted_share(ref_low, ref_high) > target:
        lines.append(
            f"(admit all: {ref[0]:.3f} / {ref[1]:.3f}, wasted share "
            f"{wasted_share(ref_low, ref_high):.2f}, over the target)"
        )
    if "inclusive" in low:
        inc_low, inc_high = low["inclusive"][0], high["inclusive"][0]
        copied = inc_low.demoted + inc_high.demoted
        lines.append(
            f"(admit all, inclusive: {inc_low.hit_ratio:.3f} / "
            f"{inc_high.hit_ratio:.3f}, wasted share "
            f"{wasted_share(inc_low, inc_high):.2f}, copies "
            f"{copied / max(1, ref_low.demoted + ref_high.demoted):.2f} of "
            "exclusive admit-all's)"
        )
    return lines


def served_sequences(
    child: Any,
    family: str,
    scenario: str,
    seeds: Sequence[int],
    fracs: Sequence[float],
    tree: Path,
) -> dict[float, list[Run]]:
    """Per capacity (fraction of the footprint), one :class:`Run` per seed:
    the accesses the two-tier ``lru`` manager served in ``child`` at the
    harness's tier sizes, with their requests."""
    from bench.tiers import binding_setup

    runs: dict[float, list[Run]] = {f: [] for f in fracs}
    with tempfile.TemporaryDirectory() as tmpd:
        for seed in seeds:
            for frac in fracs:
                spec, dev, host = binding_setup(
                    child, family, scenario, seed, frac, Path(tmpd), tree
                )
                res = child.run(spec(TWO_TIER_LRU, record_access_requests=True))
                seq = [(h, s) for h, s in res.get("access_seq", [])]
                runs[frac].append(Run(seq, dev, host, res.get("access_requests")))
    return runs


def main(argv: list[str] | None = None) -> int:
    from bench.runner import TreeProcess
    from bench.tiers import binding_args, seed_range

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    binding_args(p)
    p.add_argument(
        "--fit-seed",
        type=int,
        default=None,
        help="fit the predictors on --seeds seeds from this one (default: in "
        "hindsight, on the judged seeds)",
    )
    a = p.parse_args(argv)
    fracs = (a.frac, 2 * a.frac)
    judged = seed_range(a)
    fit_seeds = None if a.fit_seed is None else range(a.fit_seed, a.fit_seed + a.seeds)
    if fit_seeds is not None and set(fit_seeds) & set(judged):
        p.error(f"--fit-seed {a.fit_seed}: the fitted seeds overlap the judged ones")
    with TreeProcess("admission", a.tree) as child:
        runs = served_sequences(child, a.family, a.scenario, judged, fracs, a.tree)
        fit = (
            None
            if fit_seeds is None
            else served_sequences(child, a.family, a.scenario, fit_seeds, fracs, a.tree)
        )
    fitted = (
        "in hindsight"
        if fit_seeds is None
        else f"on seeds {fit_seeds[0]}-{fit_seeds[-1]}"
    )
    print(
        f"{a.family} [{a.scenario}] @{fracs[0]:.0%} and {fracs[1]:.0%}, seeds "
        f"{judged[0]}-{judged[-1]}, predictors fitted {fitted}: the best "
        f"admission whose pooled wasted share is <= {WASTED_TARGET:.2f}"
    )
    names = (f"{fracs[0]:.0%}", f"{fracs[1]:.0%}")
    low, high = (choices_at(runs[f], None if fit is None else fit[f]) for f in fracs)
    print("\n".join(report(low, high, names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
