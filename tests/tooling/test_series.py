# SPDX-License-Identifier: Apache-2.0
"""Tests of tools/series.py on a small fake sdist (hermetic and fast).

Each test gets its own build/ and patches/ directories through the
SERIES_BUILD / SERIES_PATCHES / SERIES_SDIST_SHA256 environment variables, so
the real build/ is never touched.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "series.py"

FILES = {
    "vllm/__init__.py": "# SPDX-License-Identifier: Apache-2.0\nVALUE = 1\n",
    "vllm/core.py": "".join(f"LINE_{i} = {i}\n" for i in range(20)),
    "vllm.egg-info/PKG-INFO": "Name: vllm\nVersion: 0.22.1\n",
    "pyproject.toml": "[tool.ruff]\nline-length = 88\n",
}


def make_sdist(path: Path) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, text in FILES.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-0.22.1/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())
    return hashlib.sha256(buf.getvalue()).hexdigest()


@pytest.fixture
def ws(tmp_path: Path):
    build, patches = tmp_path / "build", tmp_path / "patches"
    patches.mkdir()
    (patches / "series").write_text("")
    digest = make_sdist(build / "dl" / "vllm-0.22.1.tar.gz")
    env = dict(
        os.environ,
        SERIES_BUILD=str(build),
        SERIES_PATCHES=str(patches),
        SERIES_SDIST_SHA256=digest,
        GIT_CONFIG_GLOBAL=os.devnull,
    )

    def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [sys.executable, str(TOOL), *args], env=env, text=True, capture_output=True
        )
        if ok:
            assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    return build, patches, run


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, text=True, capture_output=True
    ).stdout


def commit_change(tree: Path, rel: str, old: str, new: str, title: str) -> None:
    p = tree / rel
    p.write_text(p.read_text().replace(old, new))
    git(tree, "commit", "-q", "-a", "-s", "-m", f"{title}\n\nBecause a test needs it.")


def test_fetch_bad_hash_extracts_nothing(ws, tmp_path):
    build, _, run = ws
    bad = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, str(TOOL), "tree"],
        text=True,
        capture_output=True,
        env=dict(
            bad,
            SERIES_BUILD=str(build),
            SERIES_PATCHES=str(tmp_path / "patches"),
            SERIES_SDIST_SHA256="0" * 64,
        ),
    )
    assert proc.returncode == 1
    assert "sha256 mismatch" in proc.stderr and "Nothing was extracted" in proc.stderr
    assert not (build / "base").exists() and not (build / "tree").exists()
    # The bad file is moved aside so the next run downloads again.
    assert not (build / "dl" / "vllm-0.22.1.tar.gz").exists()
    assert (build / "dl" / "vllm-0.22.1.tar.bad").exists()


def test_tree_layout_and_egg_info_excluded(ws):
    build, _, run = ws
    run("tree")
    for name in ("base", "tree"):
        repo = build / name
        assert (repo / "vllm" / "core.py").exists()
        assert not (repo / "vllm.egg-info").exists()
        assert (
            git(repo, "rev-parse", "upstream").strip()
            == git(build / "base", "rev-parse", "upstream").strip()
        )
    # Idempotent: a second run keeps the tree.
    head = git(build / "tree", "rev-parse", "HEAD")
    run("tree")
    assert git(build / "tree", "rev-parse", "HEAD") == head


def test_export_round_trip_is_canonical(ws):
    build, patches, run = ws
    run("tree")
    tree = build / "tree"
    commit_change(
        tree, "vllm/core.py", "LINE_3 = 3", "LINE_3 = 33", "[Core] Change three"
    )
    commit_change(
        tree, "vllm/core.py", "LINE_9 = 9", "LINE_9 = 99", "[Core] Change nine"
    )
    run("export")
    series = (patches / "series").read_text().split()
    assert series == ["0001-Core-Change-three.patch", "0002-Core-Change-nine.patch"]
    before = {p.name: p.read_bytes() for p in patches.iterdir()}
    text = before[series[0]].decode()
    assert text.startswith("From 0000000000000000000000000000000000000000 ")
    assert "Subject: [PATCH] [Core] Change three" in text
    assert not text.rstrip().endswith(git(tree, "version").split()[-1])  # no trailer
    # Re-exporting an unchanged tree changes no byte.
    run("export")
    assert {p.name: p.read_bytes() for p in patches.iterdir()} == before
    # A fresh tree from patches/ has the same content, and check passes.
    run("tree", "--force")
    assert "LINE_9 = 99" in (build / "tree" / "vllm" / "core.py").read_text()
    proc = run("check")
    assert "byte-identical" in proc.stdout


def test_dirty_tree_refused(ws):
    build, patches, run = ws
    run("tree")
    tree = build / "tree"
    (tree / "vllm" / "core.py").write_text("edited\n")
    proc = run("tree", ok=False)
    assert proc.returncode == 1
    assert "refusing to overwrite build/tree" in proc.stderr
    assert "uncommitted changes" in proc.stderr
    assert (tree / "vllm" / "core.py").read_text() == "edited\n"
    # Committed but not exported is refused too.
    git(tree, "commit", "-q", "-a", "-s", "-m", "[Core] Edit\n\nWhy not.")
    proc = run("tree", ok=False)
    assert "not exported" in proc.stderr
    # FORCE rebuilds anyway.
    run("tree", "--force")
    assert "LINE_0" in (tree / "vllm" / "core.py").read_text()


def test_patch_that_does_not_apply_is_named(ws):
    build, patches, run = ws
    run("tree")
    tree = build / "tree"
    commit_change(tree, "vllm/core.py", "LINE_5 = 5", "LINE_5 = 55", "[Core] Five")
    run("export")
    name = (patches / "series").read_text().split()[0]
    # Break the patch's context so it cannot apply without fuzz.
    p = patches / name
    p.write_text(p.read_text().replace(" LINE_4 = 4", " LINE_4 = 444"))
    proc = run("tree", "--force", ok=False)
    assert proc.returncode == 1
    assert f"patch {name} does not apply" in proc.stderr
    assert "vllm/core.py" in proc.stderr
    proc = run("check", ok=False)
    assert name in proc.stderr and "vllm/core.py" in proc.stderr


def test_check_rejects_bad_messages(ws):
    build, patches, run = ws
    run("tree")
    tree = build / "tree"
    p = tree / "vllm" / "core.py"
    p.write_text(p.read_text().replace("LINE_1 = 1", "LINE_1 = 11"))
    git(tree, "commit", "-q", "-a", "-m", "change one")
    run("export")
    proc = run("check", ok=False)
    assert "lacks a vLLM-style prefix" in proc.stderr
    assert "no body" in proc.stderr
    assert "no Signed-off-by" in proc.stderr


def test_check_runs_ruff_on_touched_files(ws):
    build, patches, run = ws
    run("tree")
    tree = build / "tree"
    p = tree / "vllm" / "core.py"
    p.write_text(p.read_text() + "import os\n")  # unused import: F401
    git(tree, "commit", "-q", "-a", "-s", "-m", "[Core] Add import\n\nTo trip ruff.")
    run("export")
    proc = run("check", ok=False)
    assert "F401" in proc.stderr
