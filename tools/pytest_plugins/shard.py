# SPDX-License-Identifier: Apache-2.0
"""pytest plugin: run one shard of the collected test files.

Loaded with ``-p shard`` by ``tools/series.py`` when it runs one pytest
process per core. ``PYTEST_SHARD=i/n`` (0 <= i < n) keeps the tests of the
files assigned to shard ``i``; without it the plugin does nothing.

Whole files go to one shard, so module- and class-scoped fixtures are set up
once, and tests that read another test's results in the same module still
run after it. Every shard collects the same files and computes the same
assignment: files by decreasing weight (ties by path), each to the shard
with the least weight so far. A file's weight is the sum of its selected
tests' weights: 1, or ``n`` for a test marked ``shard_weight(n)`` (the
repository's engine tests mark themselves with about their run time in
seconds, since one of them costs as much as dozens of unit tests).
``--deselect`` and ``-k`` are applied before the split (``trylast``).
"""

from __future__ import annotations

import os

import pytest

_ENV = "PYTEST_SHARD"


def parse(value: str) -> tuple[int, int]:
    index, _, count = value.partition("/")
    i, n = int(index), int(count)
    if not 0 <= i < n:
        raise ValueError(f"{_ENV}={value!r}: want i/n with 0 <= i < n")
    return i, n


def assign(files: dict[str, float], n: int) -> dict[str, int]:
    """file -> shard, balancing the weights (heaviest first)."""
    load = [0.0] * n
    out: dict[str, int] = {}
    for path, count in sorted(files.items(), key=lambda kv: (-kv[1], kv[0])):
        shard = min(range(n), key=lambda s: (load[s], s))
        out[path] = shard
        load[shard] += count
    return out


def weight(item: pytest.Item) -> float:
    marker = item.get_closest_marker("shard_weight")
    return float(marker.args[0]) if marker is not None else 1.0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "shard_weight(n): the test costs about n ordinary tests"
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    value = os.environ.get(_ENV)
    if not value:
        return
    i, n = parse(value)
    files: dict[str, float] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        files[path] = files.get(path, 0.0) + weight(item)
    shards = assign(files, n)
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        mine = shards[item.nodeid.split("::", 1)[0]] == i
        (keep if mine else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep
