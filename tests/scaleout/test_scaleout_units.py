# SPDX-License-Identifier: Apache-2.0
"""The scale-out harness's own parts, without an engine: the host-memory
measurement (shared pages counted once across processes, private pages per
process), the slow storage entry, the per-rank consistency check, the
summary schema and the CPU binding for TP ranks."""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from scaleout import cli, epd, probe, tp  # noqa: E402

PAGE = mmap.PAGESIZE

# A second process maps the same file and allocates private memory, and
# prints the resident page keys of both, as a TP rank would.
_OTHER_RANK = r"""
import json, mmap, sys
sys.path.insert(0, sys.argv[1])
import torch
from scaleout import probe
path, n = sys.argv[2], int(sys.argv[3])
with open(path, "r+b") as f:
    region = mmap.mmap(f.fileno(), n * mmap.PAGESIZE)
shared = torch.frombuffer(region, dtype=torch.uint8)
shared[:: mmap.PAGESIZE] += 1  # touch every page
private = torch.ones(n * mmap.PAGESIZE, dtype=torch.uint8)
keys = {}
for name, t in (("shared", shared), ("private", private)):
    start = t.untyped_storage().data_ptr()
    keys[name] = probe.resident_page_keys([(start, start + t.numel())])[0]
print(json.dumps(keys))
"""


def _keys(t: torch.Tensor) -> list[str]:
    start = t.untyped_storage().data_ptr()
    return probe.resident_page_keys([(start, start + t.numel())])[0]


def test_resident_pages_of_a_shared_region_count_once(tmp_path: Path) -> None:
    n = 16
    path = tmp_path / "region"
    path.write_bytes(b"\0" * n * PAGE)
    with open(path, "r+b") as f:
        region = mmap.mmap(f.fileno(), n * PAGE)
    shared = torch.frombuffer(region, dtype=torch.uint8)
    shared[::PAGE] = 1
    private = torch.ones(n * PAGE, dtype=torch.uint8)
    mine = {"shared": _keys(shared), "private": _keys(private)}
    out = subprocess.run(
        [sys.executable, "-c", _OTHER_RANK, str(ROOT / "tools"), str(path), str(n)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    other = json.loads(out.stdout)
    for name in ("shared", "private"):
        assert len(mine[name]) >= n and len(other[name]) >= n, (name, mine, other)
    # One region mapped by two processes: the same physical pages.
    assert set(mine["shared"]) == set(other["shared"])
    # Private memory: disjoint pages, so the instance holds both.
    assert not set(mine["private"]) & set(other["private"])
    union = set(mine["shared"]) | set(other["shared"])
    assert len(union) * PAGE <= (n + 1) * PAGE


def test_resident_pages_skip_untouched_memory(tmp_path: Path) -> None:
    n = 8
    region = mmap.mmap(-1, n * PAGE)  # anonymous, never touched
    t = torch.frombuffer(region, dtype=torch.uint8)
    assert _keys(t) == []
    t[0] = 1
    assert len(_keys(t)) == 1


class _Runner:
    def __init__(self, companion: object | None) -> None:
        self.encoder_cache = {"b": torch.zeros(2), "a": torch.zeros(2)}
        self.ec_manager_worker = companion


class TwoTierLikeWorker:
    """Named like the two-tier companion, but without a readable host tier."""


class _HostDictWorker:
    def __init__(self) -> None:
        self.host_cache = {"h": torch.zeros(4, 8)}


class _MethodWorker:
    def tier_contents(self) -> dict[str, list[str]]:
        return {"device": ["z", "y"], "host": ["x"]}


class _PlacementWorker:
    """Like the paged host tier: host hashes with their blocks, a step and
    a digest of the rest."""

    def tier_contents(self) -> dict:
        return {
            "step": 3,
            "device": ["d"],
            "host": {"h2": [4, 5], "h1": [0]},
            "digest": "x",
        }


def test_tier_contents_sources() -> None:
    assert probe.tier_contents(_Runner(None)) == {"device": ["a", "b"], "host": []}
    assert probe.tier_contents(_Runner(_HostDictWorker())) == {
        "device": ["a", "b"],
        "host": ["h"],
    }
    # A companion's own method wins over its dicts.
    assert probe.tier_contents(_Runner(_MethodWorker())) == {
        "device": ["y", "z"],
        "host": ["x"],
    }
    placed = probe.tier_contents(_Runner(_PlacementWorker()))
    assert placed == {"step": 3, "device": ["d"], "host": {"h1": [0], "h2": [4, 5]}}
    # Never a vacuous pass on a host tier the probe cannot read.
    with pytest.raises(RuntimeError, match="cannot read the host tier"):
        probe.tier_contents(_Runner(TwoTierLikeWorker()))


def test_host_tier_memory_of_host_dict() -> None:
    mem = probe.host_tier_memory(_Runner(_HostDictWorker()))
    assert mem["num_entries"] == 1
    assert mem["logical_bytes"] == 4 * 8 * 4
    assert 1 <= len(mem["page_keys"]) <= 2
    assert probe.host_tier_memory(_Runner(None))["page_keys"] == []


def test_digest_is_canonical() -> None:
    a = {"x": {3, 1, 2}, "y": [1, 2]}
    b = {"y": [1, 2], "x": {2, 3, 1}}
    assert probe.digest(a) == probe.digest(b)
    assert probe.digest(a) != probe.digest({"x": {1, 2}, "y": [1, 2]})
    assert not probe.is_nonempty(None)


def _rank(rank: int, steps: list[tuple[str, str]], tiers: dict) -> dict:
    return {
        "rank": rank,
        "steps": [
            {"step": i, "received": r, "tiers": t} for i, (r, t) in enumerate(steps)
        ],
        "tiers": tiers,
    }


def test_ranks_consistent_detects_divergence() -> None:
    tiers = {"device": ["a"], "host": ["b"]}
    same = [("m1", "t1"), ("m2", "t2")]
    ok = {
        "tp": 2,
        "rounds": [{"ranks": [_rank(0, same, tiers), _rank(1, same, tiers)]}],
    }
    assert tp.ranks_consistent(ok) == (True, [])
    for other_steps, other_tiers, what in (
        ([("m1", "t1"), ("mX", "t2")], tiers, "metadata differ"),
        ([("m1", "t1"), ("m2", "tX")], tiers, "tier contents differ"),
        ([("m1", "t1")], tiers, "ran 2 steps"),
        (same, {"device": ["a"], "host": []}, "final tiers differ"),
    ):
        bad = {
            "tp": 2,
            "rounds": [
                {"ranks": [_rank(0, same, tiers), _rank(1, other_steps, other_tiers)]}
            ],
        }
        good, problems = tp.ranks_consistent(bad)
        assert not good and any(what in p for p in problems), problems


def test_host_bytes_unions_ranks() -> None:
    def mem(keys: list[str], backing: list[dict] | None = None) -> dict:
        return {
            "host_memory": {
                "page_keys": keys,
                "page_size": 4096,
                "backing": backing or [],
            }
        }

    result = {
        "rounds": [
            {"ranks": [mem(["pfn:1", "pfn:2"]), mem(["pfn:2", "pfn:3"])]},
            {"ranks": [mem(["pfn:1"]), mem([])]},
        ]
    }
    assert tp.host_bytes(result) == 3 * 4096
    # A file both ranks map counts once; another file counts too.
    region = {"file": "1:7", "bytes": 10 * 4096}
    result["rounds"].append(
        {"ranks": [mem(["pfn:9"], [region]), mem([], [region])]},
    )
    assert tp.host_bytes(result) == 11 * 4096
    result["rounds"].append(
        {"ranks": [mem([], [region]), mem([], [{"file": "1:8", "bytes": 4096}])]},
    )
    assert tp.host_bytes(result) == 11 * 4096


class _Region:
    """A host region as the paged tier keeps it: a tensor over a shared
    file whose pages are all reserved, none touched."""

    def __init__(self, path: str, n: int) -> None:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        os.posix_fallocate(fd, 0, n * PAGE)
        self._map = mmap.mmap(fd, n * PAGE)
        os.close(fd)
        self.data = torch.frombuffer(self._map, dtype=torch.uint8)
        self.total_bytes = n * PAGE


class _RegionWorker:
    def __init__(self, region: _Region) -> None:
        self.region = region

    def tier_contents(self) -> dict[str, list[str]]:
        return {"device": [], "host": []}


def test_host_tier_memory_counts_a_reserved_region_whole() -> None:
    # The page table shows no page of an untouched region, but its pages
    # are allocated: the tier's memory is the region's size.
    path = f"/dev/shm/scaleout_test_region_{os.getpid()}"
    try:
        region = _Region(path, 16)
        mem = probe.host_tier_memory(_Runner(_RegionWorker(region)))
    finally:
        os.unlink(path)
    assert mem["budget_bytes"] == 16 * PAGE
    assert [b["bytes"] for b in mem["backing"]] == [16 * PAGE]
    assert mem["page_keys"] == []
    ranks = [{"host_memory": mem}, {"host_memory": mem}]
    assert tp.host_bytes({"rounds": [{"ranks": ranks}]}) == 16 * PAGE


def test_slow_entry_delays_the_first_read_then_restores(tmp_path: Path) -> None:
    path = tmp_path / "encoder_cache.safetensors"
    path.write_bytes(b"x" * 100_000)  # more than a pipe buffer
    entry = epd.SlowEntry(path, delay=0.3)
    assert path.is_fifo()
    t0 = time.monotonic()
    with open(path, "rb") as f:
        data = f.read()
    assert data == b"x" * 100_000
    assert time.monotonic() - t0 >= 0.3
    entry.close()
    assert entry.served == 1
    assert path.is_file() and path.read_bytes() == data


def test_stalled_entry_blocks_until_closed(tmp_path: Path) -> None:
    path = tmp_path / "encoder_cache.safetensors"
    path.write_bytes(b"y" * 10)
    entry = epd.SlowEntry(path, delay=None)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(path.read_bytes()))
    reader.start()
    reader.join(timeout=0.5)
    assert reader.is_alive()  # no writer: the read waits
    entry.close()
    reader.join(timeout=10)
    assert got == [b""]  # end of file, never the data
    assert path.read_bytes() == b"y" * 10


def test_summary_schema() -> None:
    good = {
        "tp2": {
            "identical_outputs": True,
            "ranks_consistent": True,
            "host_hits": 3,
            "host_bytes_tp1": 4096,
            "host_bytes_tp2": 4096,
        },
        "epd": {
            "identical_outputs": True,
            "consumer_encoder_runs_for_remote_items": 0,
            "deferred_observed": True,
            "producer_kill_only_affected_failed": True,
        },
    }
    cli.check_summary(good)
    assert cli.passed(good, reduced=False)
    # One host tier per rank instead of one per instance fails.
    per_rank = json.loads(json.dumps(good))
    per_rank["tp2"]["host_bytes_tp2"] = 2 * 4096
    assert not cli.passed(per_rank, reduced=False)
    per_rank["tp2"]["host_bytes_tp1"] = None  # the reduced form: no TP=1 run
    assert cli.passed(per_rank, reduced=True)
    kill = json.loads(json.dumps(good))
    kill["epd"]["producer_kill_only_affected_failed"] = False
    assert not cli.passed(kill, reduced=False)
    assert cli.passed(kill, reduced=True)
    for block, key, value in (
        ("tp2", "host_hits", None),
        ("tp2", "host_bytes_tp1", True),
        ("epd", "deferred_observed", 1),
    ):
        bad = json.loads(json.dumps(good))
        bad[block][key] = value
        with pytest.raises(ValueError, match=key):
            cli.check_summary(bad)
    extra = json.loads(json.dumps(good))
    extra["epd"]["more"] = 1
    with pytest.raises(ValueError, match="keys"):
        cli.check_summary(extra)


def test_omp_bind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    assert tp.omp_bind(1) is None
    assert tp.omp_bind(2) == "0|1"
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {4, 5, 6, 7})
    assert tp.omp_bind(2) == "4,5|6,7"
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0})
    assert tp.omp_bind(2) == "nobind"
