# SPDX-License-Identifier: Apache-2.0
"""The offline hierarchies bench/tiers.py compares with one LRU."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.tiers import (
    binding_args,
    replay_hierarchies,
    seed_range,
    single_lru_hits,
    two_tier_lru_hits,
)


def test_held_promotion_blocks_evict_one_entry_more_on_a_swap():
    # Device and host hold one item each; A and B alternate.
    seq = [("A", 1), ("B", 1), ("A", 1), ("B", 1)]
    assert single_lru_hits(seq, 2) == 2
    assert two_tier_lru_hits(seq, 1, 1) == 2
    # Making device room for A puts B on the host while A still holds its
    # host space, so the host evicts B: B misses.
    assert two_tier_lru_hits(seq, 1, 1, swap_first=False) == 1


def test_fixed_split_loses_the_device_free_room():
    # Device 2, host 1. Z leaves one device embedding free, which the host
    # cannot use, so X (demoted for Z) is dropped; one LRU of 3 keeps it.
    seq = [("Y", 1), ("X", 2), ("Z", 1), ("X", 2)]
    assert single_lru_hits(seq, 3) == 2
    assert two_tier_lru_hits(seq, 2, 1) == 0
    assert two_tier_lru_hits(seq, 2, 1, shared_free=True) == 2
    r = replay_hierarchies(seq, 2, 1)
    assert r["single"] == r["shared_free"] == pytest.approx(2 / 6)
    assert r["swap_first"] == r["held"] == 0.0
    # Whole items cannot straddle the two memories: X fits neither the host
    # (1) nor the device's free embedding, so parking cannot keep it.
    assert r["parked"] == 0.0


def test_parking_keeps_a_host_victim_in_the_device_spare_room():
    # Device 2, host 1. Z's demotion of X leaves one device embedding free;
    # the host evicts Y (its oldest) to take X, then X itself, which does
    # not fit there. Y is parked in the device's free embedding and hits.
    seq = [("Y", 1), ("X", 2), ("Z", 1), ("Y", 1)]
    assert two_tier_lru_hits(seq, 2, 1) == 0
    assert two_tier_lru_hits(seq, 2, 1, park=True) == 1
    # One LRU of 3 keeps X and Z instead, and misses Y.
    assert single_lru_hits(seq, 3) == 0


def test_parked_items_go_first_when_the_device_needs_room():
    # As above, but W (1) needs the device's free embedding before Y comes
    # back: the parked Y is dropped (it is older than everything cached), so
    # Y misses; Z, demoted to make room for Y, hits on the host. Had Z been
    # demoted for W instead, Y would hit too.
    seq = [("Y", 1), ("X", 2), ("Z", 1), ("W", 1), ("Y", 1), ("Z", 1)]
    assert two_tier_lru_hits(seq, 2, 1, park=True) == 1


def test_device_must_hold_the_largest_item():
    with pytest.raises(ValueError, match="largest item"):
        two_tier_lru_hits([("A", 3)], 2, 10)


def test_parking_needs_the_swap_order():
    with pytest.raises(ValueError, match="swap_first"):
        two_tier_lru_hits([("A", 1)], 2, 1, swap_first=False, park=True)
    with pytest.raises(ValueError, match="shared_free"):
        two_tier_lru_hits([("A", 1)], 2, 1, shared_free=True, park=True)


def test_empty_sequence_hits_nothing():
    assert replay_hierarchies([], 1, 1) == {
        "single": 0.0,
        "shared_free": 0.0,
        "parked": 0.0,
        "swap_first": 0.0,
        "held": 0.0,
    }


accesses = st.lists(
    st.tuples(st.sampled_from("ABCDEFGH"), st.integers(1, 4)), max_size=60
).map(lambda xs: [(k, 1 + "ABCDEFGH".index(k) % 4) for k, _ in xs])


@settings(max_examples=300, deadline=None)
@given(seq=accesses, device=st.integers(4, 8), host=st.integers(0, 12))
def test_two_tiers_sharing_free_room_are_one_lru(seq, device, host):
    # Every device item is more recent than every host item, so two LRU
    # tiers without a hard split hold exactly what one LRU holds.
    assert two_tier_lru_hits(seq, device, host, shared_free=True) == (
        single_lru_hits(seq, device + host)
    )


@settings(max_examples=300, deadline=None)
@given(seq=accesses, device=st.integers(4, 8), spare=st.integers(0, 3))
def test_hierarchies_agree_when_the_host_holds_everything(seq, device, spare):
    # A host that holds the whole footprint never evicts: every hierarchy
    # hits every reuse.
    host = sum(dict(seq).values()) + spare
    r = replay_hierarchies(seq, device, host)
    reuse = len(seq) and sum(s for s in _reuses(seq)) / sum(s for _, s in seq)
    assert r == pytest.approx(dict.fromkeys(r, reuse))


def _reuses(seq):
    seen = set()
    for key, size in seq:
        if key in seen:
            yield size
        seen.add(key)


def test_binding_args_pick_held_out_seeds():
    p = argparse.ArgumentParser()
    binding_args(p)
    assert list(seed_range(p.parse_args([]))) == [0, 1, 2, 3, 4]
    assert list(seed_range(p.parse_args(["--seed", "5"]))) == [5, 6, 7, 8, 9]
    assert list(seed_range(p.parse_args(["--seed", "3", "--seeds", "2"]))) == [3, 4]
