# SPDX-License-Identifier: Apache-2.0
"""bench/run.py end to end on tiny traces (the session's child processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import run as R
from bench.trace import MMItem, Trace, TraceRequest


@pytest.fixture(scope="module")
def procs(base_child, tree_child):
    return {"base": [base_child], "series": [tree_child]}


def _run(tmp_path, trace: Trace, procs, *extra: str) -> tuple[int, dict]:
    path = trace.save(tmp_path / f"{trace.name}.jsonl")
    out = tmp_path / "out"
    rc = R.main(
        [
            "--trace",
            str(path),
            "--out",
            str(out),
            "--skip",
            "overhead",
            "--skip",
            "deferral",
            *extra,
        ],
        procs=procs,
    )
    return rc, json.loads((out / "report.json").read_text())


def test_trace_without_multimodal_items_gives_a_clean_report(tmp_path, procs):
    reqs = [TraceRequest(f"r{i}", float(i), 50 + i, 4) for i in range(6)]
    rc, r = _run(tmp_path, Trace("text_only", reqs), procs)
    assert rc == 0, r["errors"]
    se = r["scenarios"]["default"]["families"]["text_only"]["seeds"]["-"]
    assert se["pilot"]["status"] == "ok" and se["pilot"]["hit_ratio"] is None
    assert se["footprint"] == 0 and "nothing to cache" in se["note"]
    assert se["caps"] == {}
    assert all(t["status"] == "n/a" for t in r["targets"])
    md = (tmp_path / "out" / "report.md").read_text()
    assert "nothing to cache" in md


def test_small_trace_end_to_end(tmp_path, procs):
    """Every run ok and within the bound; peers replay the judged run's own
    sequence; targets carry value, threshold and status."""
    reqs = []
    for k in range(24):  # a loop over 6 images, two per request
        a, b = f"img{k % 6}", f"img{(k + 1) % 6}"
        reqs.append(
            TraceRequest(
                f"r{k}", 0.5 * k, 900, 4, (MMItem(a, 10, 300), MMItem(b, 400, 300))
            )
        )
    rc, r = _run(
        tmp_path,
        Trace("loop", reqs),
        procs,
        "--scenarios",
        "default",
        "--policies",
        "lru",
    )
    assert rc == 0, r["errors"]
    judged = r["meta"]["judged"]
    assert judged == f"two-tier {r['meta']['default_policy']}"
    se = r["scenarios"]["default"]["families"]["loop"]["seeds"]["-"]
    assert se["footprint"] == 6 * 300
    for key in ("25%", "50%"):
        ce = se["caps"][key]
        assert ce["device"] + ce["host"] == ce["total"]
        assert set(ce["runs"]) == {
            "default",
            "two-tier lru",
            judged,
            f"{judged} host 0",
        }
        assert all(x["status"] == "ok" for x in ce["runs"].values())
        assert ce["bound"]["sequence"] == judged
        assert ce["bound"]["accesses"] == ce["runs"][judged]["accesses"]
        assert set(ce["peers"]) >= {
            "LRU",
            "GDSF",
            "LHD",
            "S3FIFO",
            "WTinyLFU",
            "ARC",
            "Sieve",
        }
        for res in ce["runs"].values():
            if "bound_ok" in res:
                assert res["bound_ok"]
        assert ce["runs"][judged]["hit_ratio"] <= ce["bound"]["foo"] + 1e-9
    names = {t["group"] for t in r["targets"]}
    assert {"peers", "overhead", "deferral", "kept"} <= names
    for t in r["targets"]:
        assert t["status"] in ("pass", "fail", "n/a")
        assert {"name", "value", "threshold", "detail"} <= set(t)
    s = r["summary"]["default"]["loop"]["25%"]
    assert s["runs"][judged]["hit_ratio"]["n"] == 1
    # Wasted demotions after the item's last use are a part of the waste.
    for m in s["runs"].values():
        if m.get("wasted_share") is not None:
            assert 0 <= m["wasted_after_last_use_share"] <= m["wasted_share"]
    for t in r["targets"]:
        if t["group"] == "wasted" and t["status"] != "n/a":
            assert "after the item's last use" in t["detail"]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "wasted (share; after last use)" in md


def test_user_trace_report_names_the_trace_and_honours_skip_kept(tmp_path, procs):
    """A user trace is one replay, not a seed: the report says so, and a
    trace named like the kept target's family runs no kept target when
    --skip kept is given."""
    reqs = [
        TraceRequest(f"r{k}", 0.5 * k, 900, 4, (MMItem(f"img{k % 5}", 10, 300),))
        for k in range(15)
    ]
    rc, r = _run(
        tmp_path,
        Trace("multi_turn", reqs),
        procs,
        "--scenarios",
        "default",
        "--policies",
        "lru",
        "--skip",
        "curves",
        "--skip",
        "kept",
    )
    assert rc == 0, r["errors"]
    assert r["kept"] == {}
    (kept,) = (t for t in r["targets"] if t["group"] == "kept")
    assert kept["status"] == "n/a"
    assert r["meta"]["seeds"] == [] and len(r["meta"]["traces"]) == 1
    peers = [t for t in r["targets"] if t["group"] == "peers"]
    assert peers and all("worst seed" not in t["detail"] for t in peers)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "1 user trace(s), one replay each" in md
    assert "worst seed -" not in md and "seeds []" not in md


def test_judge_policy_judges_a_non_default_policy(tmp_path, procs):
    """--judge-policy makes the targets judge another registered policy,
    without editing the tree; the report says so."""
    reqs = [
        TraceRequest(f"r{k}", 0.5 * k, 600, 4, (MMItem(f"img{k % 5}", 10, 300),))
        for k in range(15)
    ]
    rc, r = _run(
        tmp_path,
        Trace("loop5", reqs),
        procs,
        "--scenarios",
        "default",
        "--policies",
        "lru",
        "--judge-policy",
        "lru",
    )
    assert rc == 0, r["errors"]
    meta = r["meta"]
    assert meta["judged"] == "two-tier lru" and meta["default_policy"] == "lru"
    assert meta["judge_policy_override"] is True
    assert meta["tree_default_policy"] != "lru"
    ce = r["scenarios"]["default"]["families"]["loop5"]["seeds"]["-"]["caps"]["25%"]
    assert ce["bound"]["sequence"] == "two-tier lru"
    md = (tmp_path / "out" / "report.md").read_text()
    assert "judged policy (--judge-policy): **lru**" in md


def test_judge_policy_must_be_registered(tmp_path, procs):
    reqs = [TraceRequest("r0", 0.0, 600, 4, (MMItem("img0", 10, 300),))]
    with pytest.raises(SystemExit, match="no_such_policy"):
        _run(tmp_path, Trace("one", reqs), procs, "--judge-policy", "no_such_policy")


def test_split_leaves_out_a_host_share_under_one_block():
    """The two-tier manager rejects a host size above 0 that holds no whole
    block, so the harness gives such a split no host tier."""
    assert R.split(9 * 1000, 500) == (1000, 8000)
    # The device must hold a 1500-embedding item: 25 embeddings are left.
    assert R.split(1525, 1500) == (1500, 0)
    assert R.split(1500 + R.HOST_BLOCK_EMBEDDINGS, 1500) == (1500, 32)


def _one_request_trace(tmp_path, name: str, prompt: int = 900) -> str:
    reqs = [TraceRequest("r0", 0.0, prompt, 4, (MMItem("img", 10, 300),))]
    return str(Trace(name, reqs).save(tmp_path / name / "t.jsonl"))


@pytest.mark.parametrize("case", ["same_name", "long_prompt", "bad_line"])
def test_a_trace_the_harness_cannot_replay_exits_with_the_reason(tmp_path, case):
    out = ["--out", str(tmp_path / "out")]
    if case == "same_name":
        # Two files called t.jsonl, no header: both would be trace "t".
        a = Path(_one_request_trace(tmp_path, "a"))
        b = Path(_one_request_trace(tmp_path, "b"))
        for p in (a, b):
            p.write_text("\n".join(p.read_text().splitlines()[1:]) + "\n")
        args, msg = ["--trace", str(a), "--trace", str(b)], "also named 't'"
    elif case == "long_prompt":
        path = _one_request_trace(tmp_path, "long", prompt=40000)
        args, msg = ["--trace", path], "'r0' has 40000 prompt tokens.*32768"
    else:
        path = tmp_path / "bad.jsonl"
        path.write_text('{"id": "r0", "arrival_s": "soon"}\n')
        args, msg = ["--trace", str(path)], r"bad.jsonl:1: request 'r0'.*arrival_s"
    with pytest.raises(SystemExit, match=msg):
        R.main([*args, *out, "--skip", "overhead"], procs={})
