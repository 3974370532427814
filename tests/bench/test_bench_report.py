# SPDX-License-Identifier: Apache-2.0
"""Where the report judges each family, and how targets read the summary."""

from __future__ import annotations

import pytest

from bench import report as R


def _caps(inf: float) -> dict:
    return {"25%": {"bound": {"infinite": {"mean": inf}}}}


def test_family_without_reuse_is_judged_where_it_has_some():
    r = {
        "summary": {
            "default": {"chat": _caps(0.004), "zipf": _caps(0.6), "text": _caps(0.0)},
            "pc_off": {"chat": _caps(0.7), "zipf": _caps(0.6), "text": _caps(0.0)},
        }
    }
    assert R._family_scenarios(r) == {
        "chat": "pc_off",  # the prefix cache holds its history by default
        "zipf": "default",
        "text": "default",  # no reuse anywhere: stays, its targets are n/a
    }
    only = {"summary": {"pc_off": {"chat": _caps(0.7)}}}
    assert R._family_scenarios(only) == {"chat": "pc_off"}
    assert R._family_scenarios({"summary": {}}) == {}


def test_targets_without_runs_are_all_na():
    t = R.targets({"meta": {}, "summary": {}})
    assert t and all(x["status"] == "n/a" for x in t)
    assert {x["group"] for x in t} == {"kept", "deferral", "overhead"}


def test_base_comparison_names_the_base_it_was_measured_on():
    run = {"status": "ok", "hit_ratio": 0.5, "encoded_embeds": 10}
    r = {
        "meta": {"base_version": "0.32.0"},
        "base_check": {"chat": {"total": 20, "base": run}},
        "scenarios": {
            "default": {
                "families": {
                    "chat": {
                        "seeds": {"0": {"caps": {"25%": {"runs": {"default": run}}}}}
                    }
                }
            }
        },
    }
    assert "pristine v0.32.0" in R._base_lines(r)[0]
    # Reports written before the field existed were all measured on v0.22.1.
    del r["meta"]["base_version"]
    assert "pristine v0.22.1" in R._base_lines(r)[0]


def test_paired_difference_pairs_seeds_and_ignores_the_unpaired():
    ours = {"by_seed": {"0": 0.5, "1": 0.6, "2": None, "4": 0.3}}
    peer = {"by_seed": {"0": 0.4, "1": 0.7, "3": 0.9, "4": None}}
    d = R._paired(ours, peer)
    assert d["n"] == 2
    assert abs(d["mean"]) < 1e-12
    assert sorted(round(x, 9) for x in d["values"]) == [-0.1, 0.1]
    assert R._paired({"by_seed": {}}, peer)["mean"] is None


def test_paired_difference_is_tighter_than_the_means_when_seeds_differ():
    # Seeds differ a lot from each other, ours is 0.01 below the peer on each.
    peer_hits = [0.30, 0.41, 0.42, 0.39, 0.38]
    peer = {"by_seed": {str(i): h for i, h in enumerate(peer_hits)}}
    ours = {"by_seed": {str(i): h - 0.01 for i, h in enumerate(peer_hits)}}
    d = R._paired(ours, peer)
    assert d["mean"] == pytest.approx(-0.01)
    assert d["ci95"] == pytest.approx(0.0, abs=1e-9)
    unpaired = R.mean_ci(peer_hits)["ci95"]
    assert unpaired > 0.04
    assert R._fmt_diff(d) == "-0.010 ± 0.000 (n=5)"
    assert R._fmt_diff(R._paired({"by_seed": {"0": 0.2}}, peer)) == "-0.100 (n=1)"


def _overhead(mean: float, ci95: float) -> dict:
    setup = {
        "cpu_ratio": {"mean": mean, "ci95": ci95, "values": [mean] * 3},
        "wall_ratio": {"mean": mean, "ci95": ci95, "values": [mean] * 3},
        "steps": 300,
        "cpu_median_us": 40.0,
        "max_running": 16,
    }
    return {"light": {"setups": {"series/default": setup}}}


def test_overhead_target_whose_ci_straddles_the_threshold_says_so():
    # 1.02 +- 0.03 against 1.01: judged on the mean (fail), but unresolved.
    (t,) = [
        x
        for x in R._overhead_targets({"overhead": _overhead(1.02, 0.03)})
        if x["value"] is not None
    ]
    assert t["status"] == "fail" and t["resolved"] is False
    line = R.target_line(t)
    assert "1.02" in line and "± 0.030" in line and "not resolved" in line


def test_resolved_overhead_target_prints_plainly():
    (t,) = [
        x
        for x in R._overhead_targets({"overhead": _overhead(0.95, 0.01)})
        if x["value"] is not None
    ]
    assert t["status"] == "pass" and t["resolved"] is True
    assert "not resolved" not in R.target_line(t)
    na = R._overhead_targets({})[0]
    assert na["status"] == "n/a" and "not resolved" not in R.target_line(na)


def _cell(runs: dict, peers: dict, inf: float = 0.8, main: bool = True) -> dict:
    return {
        "main": main,
        "bound": {"infinite": {"mean": inf}},
        "runs": {
            k: {"status": "ok", "hit_ratio": {"mean": v}} for k, v in runs.items()
        },
        "peers": {k: {"embeds": {"mean": v}} for k, v in peers.items()},
        "best_peer": max(peers, key=peers.get),
    }


def test_scorecard_judges_every_setup_by_the_peer_target():
    peers_a = {"LRU": 0.40, "ARC": 0.50, "S3FIFO": 0.495}
    peers_b = {"LRU": 0.60, "ARC": 0.55, "S3FIFO": 0.30}
    r = {
        "summary": {
            "default": {
                # Threshold max(0.50 - 0.01, 0.40) = 0.49.
                "zipf": {
                    "25%": _cell({"two-tier x": 0.485, "default": 0.39}, peers_a),
                    # Not a main-table capacity: not judged.
                    "10%": _cell({"two-tier x": 0.0}, peers_a, main=False),
                },
                "chat": {"25%": _cell({"two-tier x": 0.0}, peers_b, inf=0.004)},
            },
            # chat has no reuse by default, so it is judged here; threshold
            # max(0.60 - 0.01, 0.60) = 0.60: LRU's.
            "pc_off": {
                "chat": {"25%": _cell({"two-tier x": 0.61, "default": 0.60}, peers_b)}
            },
        }
    }
    rows = {x["setup"]: x for x in R.scorecard(r)}
    assert set(rows) == {
        "two-tier x",
        "default",
        "peer: LRU",
        "peer: ARC",
        "peer: S3FIFO",
    }
    assert all(x["judged"] == 2 for x in rows.values())
    x = rows["two-tier x"]
    assert x["met"] == 1
    assert list(x["missed"]) == ["zipf @25%"]
    assert x["worst"] == pytest.approx(-0.005)
    assert rows["default"]["missed"] == {"zipf @25%": pytest.approx(-0.10)}
    # The best peer meets its own capacity, one within the margin too; the
    # LRU floor fails a peer that is not within it.
    assert rows["peer: ARC"]["missed"] == {"chat [pc_off] @25%": pytest.approx(-0.05)}
    assert list(rows["peer: S3FIFO"]["missed"]) == ["chat [pc_off] @25%"]
    assert rows["peer: LRU"]["met"] == 1
    assert rows["peer: LRU"]["total"] == pytest.approx(-0.09)
    # Sorted by capacities met, then by the sum of the misses.
    order = [x["setup"] for x in R.scorecard(r)]
    assert order.index("two-tier x") < order.index("peer: LRU") < order.index("default")
    lines = R._scorecard_lines({"scorecard": R.scorecard(r)})
    row = next(ln for ln in lines if ln.startswith("| two-tier x |"))
    assert "1 / 2" in row and "zipf @25% -0.005" in row
    assert R._scorecard_lines({}) == []


def test_scorecard_judges_a_capacity_without_infinite_bound_as_targets_does():
    # No infinite-cache figure: `targets` judges the capacity, so the
    # scorecard must too (only a figure under NO_REUSE makes it n/a).
    peers = {"LRU": 0.40, "ARC": 0.50}
    r = {
        "summary": {
            "default": {"scan": {"50%": _cell({"two-tier x": 0.20}, peers, inf=None)}}
        }
    }
    rows = {x["setup"]: x for x in R.scorecard(r)}
    assert rows["two-tier x"]["judged"] == 1
    assert rows["two-tier x"]["missed"] == {"scan @50%": pytest.approx(-0.29)}
    assert rows["peer: ARC"]["met"] == 1


def test_targets_say_what_they_average_over():
    """The report names the seeds the run really had, not the full bench's
    five (the demo runs two), and a user trace's single replay."""

    def report(*seed_sets: list[str]) -> dict:
        return {
            "workloads": {
                f"w{k}": {"seeds": {s: {} for s in seeds}}
                for k, seeds in enumerate(seed_sets)
            }
        }

    assert R._judged_over(report(["0", "1", "2", "3", "4"])) == "the 5-seed mean"
    assert R._judged_over(report(["0", "1"], ["0", "1"])) == "the 2-seed mean"
    assert R._judged_over(report(["0"], ["0", "1"])) == "the 1- to 2-seed mean"
    assert R._judged_over(report(["-"], ["-"])) == "one replay of each trace"
