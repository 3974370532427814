# SPDX-License-Identifier: Apache-2.0
"""tools/pytest_plugins/{shard,outcomes}.py: the sharded pytest runs that
`make test` uses for the series tests and the upstream regression.

Each test runs a real pytest process on a small generated test directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PLUGINS = Path(__file__).resolve().parents[2] / "tools" / "pytest_plugins"
sys.path.insert(0, str(PLUGINS))
import shard  # noqa: E402

FILES = {
    "test_a.py": "def test_1():\n    pass\n\ndef test_2():\n    assert False\n",
    "test_b.py": (
        "import pytest\n\n"
        "@pytest.mark.parametrize('x', [1, 2, 3])\n"
        "def test_p(x):\n    pass\n\n"
        "@pytest.mark.skip(reason='no')\n"
        "def test_s():\n    pass\n"
    ),
    "test_c.py": (
        "import pytest\n\n"
        "@pytest.fixture\n"
        "def broken():\n    raise RuntimeError('setup')\n\n"
        "def test_setup_error(broken):\n    pass\n\n"
        "@pytest.fixture\n"
        "def bad_teardown():\n    yield\n    raise RuntimeError('teardown')\n\n"
        "def test_teardown_error(bad_teardown):\n    pass\n"
    ),
}
EXPECTED = {
    "test_a.py::test_1": "passed",
    "test_a.py::test_2": "failed",
    "test_b.py::test_p[1]": "passed",
    "test_b.py::test_p[2]": "passed",
    "test_b.py::test_p[3]": "passed",
    "test_b.py::test_s": "skipped",
    "test_c.py::test_setup_error": "failed",
    "test_c.py::test_teardown_error": "failed",
}


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def run(suite: Path, out: Path, *args: str, shard_spec: str | None = None) -> int:
    env = dict(os.environ)
    env.pop("PYTEST_SHARD", None)
    env["PYTHONPATH"] = str(PLUGINS)
    env["PYTEST_OUTCOMES"] = str(out)
    if shard_spec:
        env["PYTEST_SHARD"] = shard_spec
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    cmd += ["-p", "shard", "-p", "outcomes", *args]
    proc = subprocess.run(
        cmd, cwd=suite, env=env, capture_output=True, text=True, check=False
    )
    return proc.returncode


def test_outcomes_of_every_phase(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    assert run(suite, out, "--rootdir=.", ".") == 1
    data = json.loads(out.read_text())
    assert data["outcomes"] == EXPECTED
    assert sorted(data["collected"]) == sorted(EXPECTED)


def test_collect_only_lists_ids_without_outcomes(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    assert run(suite, out, "--rootdir=.", "--collect-only", ".") == 0
    data = json.loads(out.read_text())
    assert sorted(data["collected"]) == sorted(EXPECTED)
    assert data["outcomes"] == {}


def test_ids_run_again_by_node_id(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    ids = ["test_b.py::test_p[2]", "test_a.py::test_2"]
    run(suite, out, "--rootdir=.", *ids)
    assert json.loads(out.read_text())["outcomes"] == {i: EXPECTED[i] for i in ids}


@pytest.mark.parametrize("n", [2, 3])
def test_shards_partition_whole_files(suite: Path, tmp_path: Path, n: int) -> None:
    seen: dict[str, str] = {}
    files_per_shard = []
    for i in range(n):
        out = tmp_path / f"out{i}.json"
        run(suite, out, "--rootdir=.", ".", shard_spec=f"{i}/{n}")
        outcomes = json.loads(out.read_text())["outcomes"]
        assert not set(outcomes) & set(seen), "a test ran in two shards"
        seen.update(outcomes)
        files_per_shard.append({t.split("::")[0] for t in outcomes})
    assert seen == EXPECTED
    for i, files in enumerate(files_per_shard):
        for j, other in enumerate(files_per_shard):
            assert i == j or not files & other, "a file was split across shards"


def test_deselect_applies_before_the_split(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    run(
        suite,
        out,
        "--rootdir=.",
        "--deselect",
        "test_a.py::test_2",
        ".",
        shard_spec="0/1",
    )
    outcomes = json.loads(out.read_text())["outcomes"]
    assert "test_a.py::test_2" not in outcomes
    assert len(outcomes) == len(EXPECTED) - 1


def test_assign_balances_tests_longest_first() -> None:
    files = {"a": 10, "b": 6, "c": 5, "d": 1}
    got = shard.assign(files, 2)
    load = [0, 0]
    for f, s in got.items():
        load[s] += files[f]
    assert sorted(load) == [11, 11]
    assert shard.assign(files, 1) == dict.fromkeys(files, 0)


@pytest.mark.parametrize("bad", ["2/2", "-1/2", "x/2", "1"])
def test_bad_shard_spec_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        shard.parse(bad)


def test_shard_weight_marker_balances_by_cost(tmp_path: Path) -> None:
    # One heavy test against six light ones in three files: the heavy file
    # gets a shard of its own, the light files share the other.
    (tmp_path / "test_heavy.py").write_text(
        "import pytest\n\n"
        "pytestmark = pytest.mark.shard_weight(10)\n\n"
        "def test_engine():\n    pass\n"
    )
    for name in ("test_l1.py", "test_l2.py"):
        (tmp_path / name).write_text(
            "".join(f"def test_{i}():\n    pass\n\n" for i in range(3))
        )
    shards = []
    for i in range(2):
        out = tmp_path / f"out{i}.json"
        run(tmp_path, out, "--rootdir=.", ".", shard_spec=f"{i}/2")
        shards.append(
            {t.split("::")[0] for t in json.loads(out.read_text())["outcomes"]}
        )
    assert sorted(shards, key=len) == [
        {"test_heavy.py"},
        {"test_l1.py", "test_l2.py"},
    ]
