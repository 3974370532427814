# SPDX-License-Identifier: Apache-2.0
"""Tests of tools/regression.py on a fake base and tree (hermetic).

Each test writes small test modules into its own ``build/base`` and
``build/tree`` (``SERIES_BUILD``) and runs the tool as ``make test-upstream``
does, so the verdict (which base tests the tree lost) is checked on real
pytest runs without vLLM.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "regression.py"

MODULE_A = """\
import pytest


def test_same():
    assert True


def test_fails_on_both():
    assert False


def test_regressed():
    assert True


@pytest.mark.parametrize("x", [1, 2])
def test_param(x):
    assert x > 0
"""

MODULE_B = """\
def test_kept():
    assert True


def test_dropped_by_tree():
    assert True
"""


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


@pytest.fixture
def fake(tmp_path: Path):
    build = tmp_path / "build"
    base_files = {"tests/test_a.py": MODULE_A, "tests/test_b.py": MODULE_B}
    write(build / "base", base_files)
    env = dict(os.environ, SERIES_BUILD=str(build), PYTEST_JOBS="2")
    env.pop("SERIES_BASE", None)

    def run(tree_files: dict[str, str]) -> subprocess.CompletedProcess:
        write(build / "tree", tree_files)
        return subprocess.run(
            [
                sys.executable,
                str(TOOL),
                "--modules",
                "tests/test_a.py",
                "tests/test_b.py",
            ],
            env=env,
            text=True,
            capture_output=True,
        )

    return run, base_files


def lost_tests(out: str) -> set[str]:
    """The node ids the tool names as passing on base but not on tree."""
    lines = out.split("pass on base but not on tree:", 1)[1].splitlines()[1:]
    return {ln.strip().split(": ")[0] for ln in lines if ln.startswith("  ")}


def test_same_tests_pass(fake):
    run, base_files = fake
    proc = run(base_files)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # 7 collected on base; only the test failing on both is rerun there.
    assert "every test collected on base (7)" in proc.stdout
    assert "(1 rerun there)" in proc.stdout


def test_failed_and_dropped_tests_are_named(fake):
    run, base_files = fake
    tree_a = base_files["tests/test_a.py"].replace(
        "def test_regressed():\n    assert True",
        "def test_regressed():\n    assert False",
    )
    tree_b = base_files["tests/test_b.py"].split("\n\n\ndef test_dropped")[0] + "\n"
    proc = run({"tests/test_a.py": tree_a, "tests/test_b.py": tree_b})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert lost_tests(proc.stdout) == {
        "tests/test_a.py::test_regressed",
        "tests/test_b.py::test_dropped_by_tree",
    }
    assert "tests/test_b.py::test_dropped_by_tree: missing" in proc.stdout
    # A test that fails on base as well is rerun there, but not lost.
    assert "rerunning the other 3 on base" in proc.stdout


def test_tree_module_that_does_not_import_loses_its_tests(fake):
    run, base_files = fake
    broken = "import no_such_module_anywhere\n" + base_files["tests/test_b.py"]
    proc = run(
        {"tests/test_a.py": base_files["tests/test_a.py"], "tests/test_b.py": broken}
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert lost_tests(proc.stdout) == {
        "tests/test_b.py::test_kept",
        "tests/test_b.py::test_dropped_by_tree",
    }


def test_parametrized_regression_names_the_case(fake):
    run, base_files = fake
    tree_a = base_files["tests/test_a.py"].replace("assert x > 0", "assert x > 1")
    proc = run(
        {"tests/test_a.py": tree_a, "tests/test_b.py": base_files["tests/test_b.py"]}
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert lost_tests(proc.stdout) == {"tests/test_a.py::test_param[1]"}
