# SPDX-License-Identifier: Apache-2.0
"""bench/admission.py: the tiers with an admission at demotion, the features
and labels the predictor is fitted on, and the search under the target."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.admission import (
    HORIZONS,
    MAX_COUNT,
    THRESHOLDS,
    MIN_SAMPLES,
    Choice,
    FittedRates,
    Run,
    Traffic,
    best_within,
    choices_at,
    comes_back,
    entry_features,
    feature_sets,
    report,
    served_sequences,
    two_tier_lru_traffic,
    wasted_share,
)
from bench.tiers import single_lru_hits, two_tier_lru_hits

#: Eight items of fixed sizes 1-4.
ITEMS = [(key, 1 + i % 4) for i, key in enumerate("ABCDEFGH")]
#: Access sequences of :data:`ITEMS` and tier sizes that hold the largest.
tier_cases = given(
    seq=st.lists(st.sampled_from(ITEMS), max_size=60),
    device=st.integers(4, 8),
    host=st.integers(0, 12),
)


@settings(max_examples=300, deadline=None)
@tier_cases
def test_admitting_all_or_nothing_are_the_two_lru_hierarchies(seq, device, host):
    t = two_tier_lru_traffic(seq, device, host)
    assert t.hits == two_tier_lru_hits(seq, device, host)
    assert t.accessed == sum(s for _, s in seq)
    assert 0 <= t.wasted <= t.demoted
    # Admitting nothing leaves a device LRU that copies nothing.
    none = two_tier_lru_traffic(seq, device, host, lambda _: False)
    assert none.hits == single_lru_hits(seq, device)
    assert none.demoted == none.wasted == 0


def test_a_promoted_or_kept_entry_is_not_wasted():
    # B's demotion for A is never promoted, but the host still holds it at
    # the end; A's was promoted. Nothing is wasted.
    t = two_tier_lru_traffic([("A", 1), ("B", 1), ("A", 1)], 1, 1)
    assert t == Traffic(hits=1, accessed=3, demoted=2, wasted=0)


def test_a_host_eviction_before_promotion_is_wasted():
    # Device 1, host 1: A, B and C are demoted in turn. The host evicts A
    # for B's demotion, so A misses, and B for C's.
    t = two_tier_lru_traffic([("A", 1), ("B", 1), ("C", 1), ("A", 1)], 1, 1)
    assert t == Traffic(hits=0, accessed=4, demoted=3, wasted=2)


def test_admission_is_asked_with_the_latest_access_of_the_victim():
    asked = []

    def admit(i: int) -> bool:
        asked.append(i)
        return i != 0

    # A's first eviction (latest access 0) is refused, so its second access
    # misses; B's, A's second (latest access 2) and C's are admitted, and B
    # hits on the host.
    seq = [("A", 1), ("B", 1), ("A", 1), ("C", 1), ("B", 1)]
    t = two_tier_lru_traffic(seq, 1, 5, admit)
    assert asked == [0, 1, 2, 3]
    assert t == Traffic(hits=1, accessed=5, demoted=3, wasted=0)
    assert t.hit_ratio == pytest.approx(0.2)
    assert Traffic(0, 0, 0, 0).hit_ratio == 0.0


def test_inclusive_tiers_copy_a_promoted_entry_once():
    # Device 1, host 2: A and B take turns. Exclusive tiers copy each to the
    # host every time it leaves the device; inclusive ones keep a promoted
    # entry's copy, so only the first demotion of each is a copy.
    seq = [("A", 1), ("B", 1), ("A", 1), ("B", 1), ("A", 1)]
    assert two_tier_lru_traffic(seq, 1, 2) == Traffic(3, 5, 4, 0)
    assert two_tier_lru_traffic(seq, 1, 2, inclusive=True) == Traffic(3, 5, 2, 0)


def test_inclusive_copies_take_host_room_and_are_not_wasted_once_promoted():
    # Device 1, host 1: A's copy stays on the host when A is promoted, so
    # B's demotion evicts it (promoted: not wasted), and A leaving the
    # device for C is a second copy. That one evicts B's copy (never
    # promoted: wasted), and C's demotion for B evicts A's second copy
    # (wasted). Exclusive tiers copy and waste as much here.
    seq = [("A", 1), ("B", 1), ("A", 1), ("C", 1), ("B", 1)]
    assert two_tier_lru_traffic(seq, 1, 1, inclusive=True) == Traffic(1, 5, 4, 2)
    assert two_tier_lru_traffic(seq, 1, 1) == Traffic(1, 5, 4, 2)
    # With room for two, A's promoted copy survives B's demotion: A leaving
    # the device for C copies nothing, C's demotion for B evicts it
    # (promoted: not wasted), and B hits.
    assert two_tier_lru_traffic(seq, 1, 2, inclusive=True) == Traffic(2, 5, 3, 0)


@settings(max_examples=300, deadline=None)
@tier_cases
def test_inclusive_tiers_account_every_copy(seq, device, host):
    t = two_tier_lru_traffic(seq, device, host, inclusive=True)
    assert t.accessed == sum(s for _, s in seq)
    assert 0 <= t.wasted <= t.demoted
    # A host that holds nothing makes both the device LRU alone.
    if host < min((s for _, s in seq), default=1):
        assert t == two_tier_lru_traffic(seq, device, host)
    # Admitting nothing leaves the device LRU, inclusive or not.
    none = two_tier_lru_traffic(seq, device, host, lambda _: False, inclusive=True)
    assert none == two_tier_lru_traffic(seq, device, host, lambda _: False)


def test_device_must_hold_the_largest_item():
    with pytest.raises(ValueError, match="largest item"):
        two_tier_lru_traffic([("A", 3)], 2, 10)


def test_features_are_the_count_and_the_log_gap():
    seq = [("A", 2), ("B", 1), ("A", 2), ("A", 2)]
    # A again after 3 embeddings (A's 2 and B's 1): log2(4) = 2; then after
    # 2: floor(log2(3)) = 1.
    assert entry_features(seq) == [(1, -1), (1, -1), (2, 2), (3, 1)]
    counts = [c for c, _ in entry_features([("A", 1)] * (MAX_COUNT + 3))]
    assert counts == [*range(1, MAX_COUNT + 1), MAX_COUNT, MAX_COUNT, MAX_COUNT]


def test_comes_back_within_the_horizon_in_embeddings():
    seq = [("A", 1), ("B", 5), ("A", 1), ("B", 1)]
    # A's next access starts 6 embeddings after its first; B's 6 as well.
    assert comes_back(seq, None) == [True, True, False, False]
    assert comes_back(seq, 6) == [True, True, False, False]
    assert comes_back(seq, 5) == [False, False, False, False]


def test_request_context_is_whether_the_request_carries_an_item_seen_before():
    # r1 brings A and B, r2 (a next turn) re-sends A with a new C, r3 brings
    # D only (a scan), r4 brings E and then D (seen before r4 arrived).
    seq = [("A", 1), ("B", 1), ("A", 1), ("C", 1), ("D", 1), ("E", 1), ("D", 1)]
    reqs = ["r1", "r1", "r2", "r2", "r3", "r4", "r4"]
    ctx = [f[2] for f in entry_features(seq, reqs)]
    assert ctx == [0, 0, 1, 1, 0, 1, 1]
    assert [f[:2] for f in entry_features(seq, reqs)] == entry_features(seq)
    with pytest.raises(ValueError):
        entry_features(seq, reqs[:-1])


def test_choices_with_requests_add_the_context_kind():
    seq = [("A", 1), ("B", 1), ("A", 1), ("S", 1), ("C", 1), ("A", 1)] * 2
    reqs = [f"r{i // 2}" for i in range(len(seq))]
    out = choices_at([Run(seq, 1, 2, reqs)])
    assert list(out) == [
        "admit all",
        "features",
        "+ request",
        "+ size",
        "+ phase",
        "oracle",
        "inclusive",
        "incl. oracle",
    ]
    assert len(out["+ request"]) == len(out["features"])
    # Without the requests of every run, no context kind.
    assert "+ request" not in choices_at([Run(seq, 1, 2, reqs), Run(seq, 1, 2)])


def test_each_feature_set_refines_the_one_before():
    seq = [("A", 1), ("B", 4), ("A", 1), ("C", 3)] * 2
    reqs = ["r0", "r0", "r1", "r1", "r2", "r2", "r3", "r3"]
    sets = feature_sets([Run(seq, 4, 4, reqs)])
    (base,), (ctx,), (size,), (phase,) = (
        sets[k] for k in ("features", "+ request", "+ size", "+ phase")
    )
    assert [f[:2] for f in ctx] == base
    assert [f[:3] for f in size] == ctx
    assert [f[3] for f in size] == [0, 2, 0, 1] * 2
    assert [f[:4] for f in phase] == size
    assert [f[4] for f in phase] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_rates_pool_the_samples_and_back_off_to_a_prefix():
    n = MIN_SAMPLES
    rates = FittedRates(
        [
            ([(1, 0)] * n + [(1, 1)] * (n - 1), [True] * (n - 1) + [False] * n),
            ([(2, 0)] * n, [True] * n),
        ]
    )
    # (1, 0): n samples, n - 1 came back.
    assert rates((1, 0)) == pytest.approx((n - 1) / n)
    # (1, 1) has too few samples of its own: its prefix (1,) pools
    # 2n - 1 samples, n - 1 of which came back; (1, 7) was never seen.
    assert rates((1, 1)) == rates((1, 7)) == pytest.approx((n - 1) / (2 * n - 1))
    assert rates((2, 5)) == 1.0
    # No evidence at all: demote, as admit-all does.
    assert rates((3, 0)) == 1.0
    with pytest.raises(ValueError):
        FittedRates([([(1, 0)], [True, False])])


def test_predictors_fitted_on_other_runs():
    seen = [("A", 1), ("B", 1), ("C", 1), ("A", 1), ("B", 1), ("D", 1)] * 3
    # Fitted on a trace of first accesses that never come back, a predictor
    # refuses an entry whose latest access was its first, and demotes the
    # others: their feature values were never fitted (no evidence, admit).
    never = [(f"X{i}", 1) for i in range(len(seen))]
    fitted = choices_at([Run(seen, 1, 2)], fit=[Run(never, 1, 2)])
    first = [f[0] == 1 for f in entry_features(seen)]
    expect = two_tier_lru_traffic(seen, 1, 2, lambda i: not first[i])
    for c in fitted["features"]:
        if not c.label.endswith(">= 0.0"):
            assert (c.hit_ratio, c.demoted, c.wasted) == (
                expect.hit_ratio,
                expect.demoted,
                expect.wasted,
            )
    # In hindsight, on the judged trace itself, the shares differ.
    hindsight = choices_at([Run(seen, 1, 2)])
    assert {(c.demoted, c.wasted) for c in hindsight["features"]} != {
        (expect.demoted, expect.wasted)
    }
    # The oracle and admit-all never depend on the fit.
    assert fitted["oracle"] == hindsight["oracle"]
    assert fitted["admit all"] == hindsight["admit all"]


def _c(label: str, hit: float, demoted: int, wasted: int) -> Choice:
    return Choice(label, hit, demoted, wasted)


def test_best_within_maximises_the_worse_margin_under_the_pooled_target():
    low = [_c("all", 0.40, 100, 60), _c("strict", 0.35, 40, 4)]
    high = [_c("all", 0.70, 100, 10), _c("strict", 0.60, 40, 0)]
    ref = (0.40, 0.70)
    # all/all wastes 70 of 200; all/strict 60 of 140; strict/all 14 of 140
    # (margins -0.05, +0.00); strict/strict 4 of 80 (-0.05, -0.10).
    assert wasted_share(low[0], high[0]) == pytest.approx(0.35)
    assert best_within(low, high, ref) == (low[1], high[0])
    assert best_within(low, high, ref, target=0.01) is None
    assert best_within(low, high, ref, target=1.0) == (low[0], high[0])
    assert wasted_share() == 0.0


def test_choices_at_threshold_zero_and_admit_all_agree():
    runs = [
        Run([("A", 1), ("B", 1), ("C", 1), ("A", 1), ("B", 1), ("D", 1)] * 3, 1, 2),
        Run([("A", 1), ("B", 2), ("A", 1), ("C", 2), ("B", 2)] * 2, 2, 3),
    ]
    out = choices_at(runs)
    admit_all = out["admit all"][0]
    assert list(out) == [
        "admit all",
        "features",
        "+ size",
        "+ phase",
        "oracle",
        "inclusive",
        "incl. oracle",
    ]
    assert len(out["features"]) == len(HORIZONS) * len(THRESHOLDS)
    assert len(out["oracle"]) == len(out["incl. oracle"]) == len(HORIZONS)
    # Inclusive: admit all, then the features predictor's every choice.
    assert len(out["inclusive"]) == 1 + len(out["features"])
    inclusive = [
        two_tier_lru_traffic(r.seq, r.device, r.host, inclusive=True) for r in runs
    ]
    assert out["inclusive"][0].demoted == sum(t.demoted for t in inclusive)
    assert out["inclusive"][0].wasted == sum(t.wasted for t in inclusive)
    # A shared fitted rate of at least 0 admits everything.
    at_zero = [c for c in out["features"] if c.label.endswith(">= 0.0")]
    assert {(c.hit_ratio, c.demoted, c.wasted) for c in at_zero} == {
        (admit_all.hit_ratio, admit_all.demoted, admit_all.wasted)
    }
    # The oracle that knows what ever comes back wastes no demotion of an
    # item that is not accessed again, and here keeps every reuse.
    ever = out["oracle"][HORIZONS.index(None)]
    assert ever.wasted <= admit_all.wasted
    assert ever.hit_ratio >= admit_all.hit_ratio


def test_report_names_the_best_pair_and_admit_all_over_the_target():
    low = {"admit all": [_c("all", 0.40, 100, 60)], "k": [_c("k1", 0.41, 10, 1)]}
    high = {"admit all": [_c("all", 0.70, 100, 10)], "k": [_c("k2", 0.69, 10, 1)]}
    lines = report(low, high)
    assert lines[1].startswith("admit all    no choice meets wasted share <= 0.25")
    assert lines[2].split()[:5] == ["k", "0.410", "0.690", "0.10", "-0.010"]
    assert lines[2].endswith("k1 / k2")
    assert "wasted share 0.35, over the target" in lines[3]
    assert len(lines) == 4
    # Inclusive tiers' admit-all, whatever the target, and its copy traffic.
    low["inclusive"] = [_c("all", 0.39, 40, 20)]
    high["inclusive"] = [_c("all", 0.69, 60, 5)]
    lines = report(low, high)
    assert lines[3].split()[0] == "inclusive"
    assert lines[-1] == (
        "(admit all, inclusive: 0.390 / 0.690, wasted share 0.25, copies 0.50 "
        "of exclusive admit-all's)"
    )


def test_served_sequences_are_the_manager_runs_at_both_capacities(tree_child):
    from bench.runner import TREE_DIR

    runs = served_sequences(
        tree_child, "multi_turn", "pc_off", [0], (0.25, 0.5), TREE_DIR
    )
    r25, r50 = runs[0.25][0], runs[0.5][0]
    (seq25, dev25, host25), (seq50, dev50, host50) = (
        (r.seq, r.device, r.host) for r in (r25, r50)
    )
    # Each access with its request, for the request context.
    assert len(r25.requests) == len(seq25)
    assert len(set(r25.requests)) > 1
    # The harness's split of a larger total at 50%; the device holds the
    # largest item.
    assert dev25 + host25 < dev50 + host50
    assert host25 > dev25 and host50 > dev50
    # The same trace: the same items accessed, the same sizes.
    assert seq25 and dict(seq25) == dict(seq50)
    assert max(s for _, s in seq25) <= dev25
