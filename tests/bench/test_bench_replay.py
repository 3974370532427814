# SPDX-License-Identifier: Apache-2.0
"""Replay through the real scheduler (in a child process per tree)."""

from __future__ import annotations

import pytest

from bench import bound as B
from bench import workloads as W
from bench.runner import default_spec
from bench.trace import MMItem, Trace, TraceRequest

TIMING = {
    "wall_us_per_step_median",
    "wall_us_per_step_p90",
    "wall_us_per_step_mean",
    "cpu_us_per_step_median",
    "build_s",
    "wall_s",
    "child_cpu_s",
    "id",
}


def _pressure_trace(tmp_path) -> str:
    """A 600-embedding cache: X, then X+Y (Y needs X's space), Z evicts, X again."""
    reqs = [
        TraceRequest("r0", 0.0, 400, 2, (MMItem("X", 10, 300),)),
        TraceRequest("r1", 1.0, 800, 2, (MMItem("X", 10, 300), MMItem("Y", 320, 400))),
        TraceRequest("r2", 2.0, 600, 2, (MMItem("Z", 10, 500),)),
        TraceRequest("r3", 3.0, 400, 2, (MMItem("X", 10, 300),)),
    ]
    return str(Trace("pressure", reqs).save(tmp_path / "pressure.jsonl"))


def test_default_manager_passes_pressure_trace(base_child, tmp_path):
    res = base_child.run(default_spec(_pressure_trace(tmp_path), device_embeds=600))
    assert res["status"] == "ok", res
    # X is computed twice (evicted by Z), Y and Z once; r1's X is a hit.
    assert res["encoded_embeds"] == 300 + 400 + 500 + 300
    assert res["hits"]["device"] == 1
    assert res["max_device_embeds"] <= 600


@pytest.mark.parametrize("cls", ["ForgetsRefManager", "StaleHitManager"])
def test_broken_manager_fails_loudly(base_child, tmp_path, cls):
    spec = default_spec(
        _pressure_trace(tmp_path),
        device_embeds=600,
        manager={
            "kind": "class",
            "cls": f"bench.broken_managers.{cls}",
            "via": "inject",
        },
    )
    res = base_child.run(spec)
    assert res["status"] == "error", res
    assert res["kind"] == "WorkerModelError"
    assert "needs encoder output 'X'" in res["message"]


def test_two_tier_skipping_promotions_fails_loudly(tree_child, tmp_path):
    f = tree_child.features
    via = "config" if f["two_tier"] and f["ec_manager_metadata"] else "inject"
    mcfg = {"host_cache_embeddings": 1000, "policy": "lru"}
    trace = _pressure_trace(tmp_path)
    good = tree_child.run(
        default_spec(
            trace,
            device_embeds=600,
            host_embeds=1000,
            manager={"kind": "twotier", "policy": "lru", "via": via},
        )
    )
    assert good["status"] == "ok", good
    assert good["hits"]["host"] >= 1  # X comes back from the host for r3
    bad = tree_child.run(
        default_spec(
            trace,
            device_embeds=600,
            host_embeds=1000,
            manager={
                "kind": "class",
                "cls": "bench.broken_managers.SkipsPromotionsManager",
                "manager_config": mcfg,
                "via": via,
            },
        )
    )
    assert bad["status"] == "error" and bad["kind"] == "WorkerModelError", bad
    assert "on the host only" in bad["message"]


def _small_multi_turn(tmp_path, seed: int, name: str) -> str:
    t = W.multi_turn(
        seed, W.MultiTurnParams(conversations=5, conv_rate_per_s=1.0, think_s=3.0)
    )
    return str(t.save(tmp_path / name))


def test_determinism(base_child, tmp_path):
    a = _small_multi_turn(tmp_path, 7, "a.jsonl")
    b = _small_multi_turn(tmp_path, 7, "b.jsonl")
    assert open(a, "rb").read() == open(b, "rb").read()
    r1 = base_child.run(default_spec(a, device_embeds=4096))
    r2 = base_child.run(default_spec(b, device_embeds=4096))
    assert r1["status"] == r2["status"] == "ok"
    k1 = {k: v for k, v in r1.items() if k not in TIMING and k != "trace"}
    k2 = {k: v for k, v in r2.items() if k not in TIMING and k != "trace"}
    assert k1 == k2
    r3 = base_child.run(
        default_spec(_small_multi_turn(tmp_path, 8, "c.jsonl"), device_embeds=4096)
    )
    assert r3["access_seq"] != r1["access_seq"]  # the seed matters


@pytest.mark.parametrize("cap", [2304, 4096, 8192])
def test_replay_hits_never_exceed_bound(base_child, tmp_path, cap):
    path = _small_multi_turn(tmp_path, 3, "m.jsonl")
    res = base_child.run(default_spec(path, device_embeds=cap))
    assert res["status"] == "ok", res
    seq = [(h, s) for h, s in res["access_seq"]]
    hits = res["hit_embeds"]["device"] + res["hit_embeds"]["host"]
    assert res["accessed_embeds"] == sum(s for _, s in seq)
    assert hits <= B.foo_upper_bound(seq, cap) + 1e-6
    assert res["encoded_embeds"] == res["accessed_embeds"] - hits


def test_two_tier_hits_never_exceed_bound(tree_child, tmp_path):
    f = tree_child.features
    via = "config" if f["two_tier"] and f["ec_manager_metadata"] else "inject"
    path = _small_multi_turn(tmp_path, 3, "m.jsonl")
    for policy in ("lru", "score"):
        res = tree_child.run(
            default_spec(
                path,
                device_embeds=2304,
                host_embeds=4096,
                manager={"kind": "twotier", "policy": policy, "via": via},
            )
        )
        assert res["status"] == "ok", res
        seq = [(h, s) for h, s in res["access_seq"]]
        hits = res["hit_embeds"]["device"] + res["hit_embeds"]["host"]
        assert hits <= B.foo_upper_bound(seq, 2304 + 4096) + 1e-6


def _two_turns(tmp_path) -> str:
    """A session: turn 0 sends X; turn 1 re-sends it (same tokens) plus Y."""
    reqs = [
        TraceRequest("t0", 0.0, 400, 8, (MMItem("X", 40, 300),), session="s"),
        TraceRequest(
            "t1", 30.0, 900, 4, (MMItem("X", 40, 300), MMItem("Y", 450, 400)), "s"
        ),
    ]
    return str(Trace("two_turns", reqs).save(tmp_path / "two_turns.jsonl"))


@pytest.mark.parametrize("pc", [False, True])
def test_prefix_caching_covers_earlier_turns(base_child, tmp_path, pc):
    """With prefix caching the second turn's X is in the KV cache (the
    generated answer tokens are the ones the next turn re-sends), so the
    encoder cache is asked for Y only."""
    res = base_child.run(
        default_spec(
            _two_turns(tmp_path),
            device_embeds=1000,
            sched={"enable_prefix_caching": pc},
        )
    )
    assert res["status"] == "ok", res
    seq = [h for h, _ in res["access_seq"]]
    assert seq == (["X", "Y"] if pc else ["X", "X", "Y"])
    assert res["prefix_cache"]["hits"] >= (400 if pc else 0)
    if not pc:
        assert res["prefix_cache"]["hits"] == 0


def test_encoder_budget_is_the_same_for_every_manager(tree_child, tmp_path):
    f = tree_child.features
    via = "config" if f["two_tier"] and f["ec_manager_metadata"] else "inject"
    path = _small_multi_turn(tmp_path, 3, "m.jsonl")
    budgets = set()
    for dev, host, mgr in (
        (2304, 0, {"kind": "default"}),
        (40000, 0, {"kind": "default"}),
        (2304, 20000, {"kind": "twotier", "policy": "lru", "via": via}),
        (40000, 0, {"kind": "twotier", "policy": "score", "via": via}),
    ):
        res = tree_child.run(
            default_spec(path, device_embeds=dev, host_embeds=host, manager=mgr)
        )
        assert res["status"] == "ok", res
        assert res["device_capacity"] == dev
        budgets.add(res["encoder_budget"])
    assert len(budgets) == 1
    # The spec can set it, for every manager alike.
    res = tree_child.run(default_spec(path, device_embeds=2304, encoder_budget=9000))
    assert res["encoder_budget"] == 9000


def test_two_tier_reports_copy_traffic(tree_child, tmp_path):
    """A host tier too small to keep what it is given wastes demotions."""
    f = tree_child.features
    via = "config" if f["two_tier"] and f["ec_manager_metadata"] else "inject"
    path = _small_multi_turn(tmp_path, 3, "m.jsonl")
    res = tree_child.run(
        default_spec(
            path,
            device_embeds=2304,
            host_embeds=2304,
            manager={"kind": "twotier", "policy": "lru", "via": via},
        )
    )
    assert res["status"] == "ok", res
    assert res["bytes_demoted"] == res["bytes_d2h"] > 0
    assert res["bytes_promoted"] == res["bytes_h2d"]
    assert 0 < res["bytes_wasted_demotion"] <= res["bytes_demoted"]
    assert res["wasted_demotion_share"] == pytest.approx(
        res["bytes_wasted_demotion"] / res["bytes_demoted"]
    )
    assert 0 <= res["bytes_wasted_after_last_use"] <= res["bytes_wasted_demotion"]
    # Every demoted byte is promoted, wasted, or still on the host.
    assert (
        res["bytes_promoted"]
        + res["bytes_wasted_demotion"]
        + res["bytes_demoted_on_host_at_end"]
        >= res["bytes_demoted"]
    )


def test_adaptive_rule_held_fixed(tree_child, tmp_path):
    """bench.rules' runs: `adaptive` with one admission rule held for the
    whole run instead of following its duel."""
    n = tree_child.features.get("adaptive_rules", 0)
    if not n:
        pytest.skip("this tree's adaptive policy has no duel of rules")
    path = str(W.families(scale=0.25)["batch_eval"](0).save(tmp_path / "b.jsonl"))

    def run(policy: str, **over):
        return tree_child.run(
            default_spec(
                path,
                device_embeds=2304,
                host_embeds=8 * 2304,
                manager={"kind": "twotier", "policy": policy, "via": "config"},
                **over,
            )
        )

    lru = run("lru")
    admit_all = run("adaptive", adaptive_rule=0)
    strictest = run("adaptive", adaptive_rule=n - 1)
    assert lru["status"] == admit_all["status"] == strictest["status"] == "ok"
    # Admit-all in LRU order on both tiers is the two-tier LRU, decision for
    # decision; its shadow is an LRU of the same total capacity.
    assert admit_all["hit_ratio"] == lru["hit_ratio"]
    assert admit_all["bytes_demoted"] == lru["bytes_demoted"]
    assert len(admit_all["shadow_hit_ratios"]) == n
    assert admit_all["shadow_hit_ratios"][0] == pytest.approx(admit_all["hit_ratio"])
    # The strictest rule keeps most of a cycled catalogue off the host.
    assert strictest["bytes_demoted"] < admit_all["bytes_demoted"]
    assert strictest["hit_ratio"] > admit_all["hit_ratio"]
    assert "shadow_hit_ratios" not in lru
    bad = run("adaptive", adaptive_rule=n)
    assert bad["status"] == "error" and f"the duel has {n} rules" in bad["message"]
    other = run("lru", adaptive_rule=0)
    assert other["status"] == "n/a" and "policy adaptive" in other["reason"]


def test_a_request_vllm_fails_fails_the_run(tree_child, tmp_path):
    """A run in which vLLM fails a request (here the series' mm_item_too_large:
    an item larger than the encoder budget) measured a different workload;
    it is an error that names the request and the reason, not a result."""
    reqs = [
        TraceRequest("ok", 0.0, 400, 2, (MMItem("X", 10, 300),)),
        TraceRequest("huge", 1.0, 900, 2, (MMItem("Y", 10, 800),)),
    ]
    path = str(Trace("huge", reqs).save(tmp_path / "huge.jsonl"))
    res = tree_child.run(default_spec(path, device_embeds=2304, encoder_budget=500))
    assert res["status"] == "error", res
    assert "failed 1 of 2 requests, e.g. 'huge': mm_item_too_large" in res["message"]
    # The same trace within the budget is served.
    res = tree_child.run(default_spec(path, device_embeds=2304))
    assert res["status"] == "ok", res
