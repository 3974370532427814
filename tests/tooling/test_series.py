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


def make_sdist(path: Path, version: str = "0.22.1") -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, text in FILES.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-{version}/{name}")
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


def _commit_a_change(build: Path, message: str, *args: str) -> Path:
    """Commit a one-line change to the materialised tree, signed off, with
    `message` (and `args` for `git commit`); return the tree."""
    tree = build / "tree"
    p = tree / "vllm" / "core.py"
    p.write_text(p.read_text().replace("LINE_1 = 1", "LINE_1 = 11"))
    git(tree, "commit", "-q", "-a", "-s", *args, "-m", message)
    return tree


def test_check_wants_the_authors_own_sign_off(ws):
    """vLLM's DCO check: a patch signed off by someone else than its author
    is reported, naming the author."""
    build, patches, run = ws
    run("tree")
    tree = _commit_a_change(
        build,
        "[Core] Change one\n\nBecause a test needs it.",
        "--author=Someone Else <else@example.com>",
    )
    run("export")
    proc = run("check", ok=False)
    assert "no Signed-off-by: line of its author" in proc.stderr
    assert "Someone Else <else@example.com>" in proc.stderr
    git(tree, "commit", "-q", "--amend", "--reset-author", "--no-edit")
    run("export")
    run("check")


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


def _core_test(name: str, line: str) -> str:
    """A test file for a fake tree's tests/: passes iff core.py has ``line``."""
    return (
        "from pathlib import Path\n\n\n"
        f"def {name}():\n"
        '    text = (Path(__file__).parent.parent / "vllm" / "core.py").read_text()\n'
        f'    assert "{line}" in text\n'
    )


POSITION_TEST = _core_test("test_line_1_was_changed", "LINE_1 = 11")


def test_check_each_from_tests_only_the_later_positions(ws):
    # Patch 1 adds a test that only patch 2 makes pass: the series is not
    # bisectable at 1, which --each reports and --each --from 2 skips.
    build, patches, run = ws
    run("tree")
    tree = build / "tree"
    (tree / "tests").mkdir()
    (tree / "tests" / "test_position.py").write_text(POSITION_TEST)
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-s", "-m", "[Core] Add a test\n\nAhead of its fix.")
    commit_change(tree, "vllm/core.py", "LINE_1 = 1\n", "LINE_1 = 11\n", "[Core] Fix")
    run("export")
    proc = run("check", "--each", ok=False)
    assert "0001-Core-Add-a-test.patch: fast tests fail at this position" in proc.stderr
    out = run("check", "--each", "--from", "2").stdout
    assert "EACH: 0002-Core-Fix.patch: 1 test file(s)" in out
    assert "EACH: 0001" not in out
    assert "make check: OK" in out
    proc = run("check", "--each", "--from", "3", ok=False)
    assert "check --from 3: the series has 2 patch(es)" in proc.stderr
    # --from alone would test nothing: refused, not ignored.
    proc = run("check", "--from", "2", ok=False)
    assert "check --from 2 needs --each" in proc.stderr


# ------------------------------------------------- make pytest on a work tree
FAKE_TEST = _core_test("test_sees_the_tree_as_it_stands", "LINE_2 = 222")


def test_tree_as_is_keeps_work_and_warns(ws):
    build, patches, run = ws
    run("tree")
    tree = build / "tree"
    head = git(tree, "rev-parse", "HEAD")
    p = tree / "vllm" / "core.py"
    p.write_text(p.read_text().replace("LINE_2 = 2", "LINE_2 = 222"))
    (tree / "vllm" / "new.py").write_text("X = 1\n")
    proc = run("tree", "--as-is")
    assert "warning: build/tree differs from patches/" in proc.stderr
    assert "uncommitted changes" in proc.stderr and "untracked" in proc.stderr
    assert "LINE_2 = 222" in p.read_text() and (tree / "vllm" / "new.py").exists()
    # Committed but not exported: kept too, with the reason.
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-s", "-m", "[Core] Two\n\nWork in progress.")
    proc = run("tree", "--as-is")
    assert "not exported" in proc.stderr
    assert git(tree, "rev-parse", "HEAD") != head
    # `make tree` (and `make test`, which runs it) still refuses.
    proc = run("tree", ok=False)
    assert "refusing to overwrite build/tree" in proc.stderr
    # An up-to-date tree gives no warning.
    run("export")
    assert "warning" not in run("tree", "--as-is").stderr


def _make(
    env: dict[str, str], *args: str, ok: bool = True
) -> subprocess.CompletedProcess:
    """Run this repository's Makefile with a hermetic series workspace."""
    env = {
        k: v for k, v in env.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")
    }
    proc = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), *args],
        env=env,
        text=True,
        capture_output=True,
    )
    if ok:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_make_pytest_runs_on_the_tree_as_it_stands(ws, tmp_path):
    build, patches, run = ws
    run("tree")
    tree = build / "tree"
    p = tree / "vllm" / "core.py"
    p.write_text(p.read_text().replace("LINE_2 = 2", "LINE_2 = 222"))
    (tree / "tests").mkdir()
    (tree / "tests" / "test_fake.py").write_text(FAKE_TEST)
    env = dict(
        os.environ,
        SERIES_BUILD=str(build),
        SERIES_PATCHES=str(patches),
        SERIES_SDIST_SHA256=hashlib.sha256(
            (build / "dl" / "vllm-0.22.1.tar.gz").read_bytes()
        ).hexdigest(),
        GIT_CONFIG_GLOBAL=os.devnull,
    )
    # The venv and the HF cache are the real ones' business, not this test's.
    proc = _make(
        env,
        "-o",
        ".venv/.stamp",
        "-o",
        "hf-cache",
        "pytest",
        "ARGS=-q tests/test_fake.py",
    )
    assert "1 passed" in proc.stdout
    assert "warning: build/tree differs from patches/" in proc.stderr
    assert "LINE_2 = 222" in p.read_text()
    # Against the work: the test fails when the edit is not there.
    p.write_text(p.read_text().replace("LINE_2 = 222", "LINE_2 = 2"))
    proc = _make(
        env,
        "-o",
        ".venv/.stamp",
        "-o",
        "hf-cache",
        "pytest",
        "ARGS=-q tests/test_fake.py",
        ok=False,
    )
    assert "1 failed" in proc.stdout


# ------------------------------------------------------------ second base
def _base_env(ws_env: dict[str, str], tmp_path: Path, version: str) -> dict[str, str]:
    build = Path(ws_env["SERIES_BUILD"])
    digest = make_sdist(build / "dl" / f"vllm-{version}.tar.gz", version)
    patches = tmp_path / f"patches-{version}"
    patches.mkdir(exist_ok=True)
    if not (patches / "series").exists():
        (patches / "series").write_text("")
    return dict(
        ws_env,
        SERIES_BASE=version,
        SERIES_PATCHES=str(patches),
        SERIES_SDIST_SHA256=digest,
    )


def _runner(env: dict[str, str]):
    def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [sys.executable, str(TOOL), *args], env=env, text=True, capture_output=True
        )
        if ok:
            assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    return run


@pytest.fixture
def ws_env(ws, tmp_path):
    build, patches, _ = ws
    return dict(
        os.environ,
        SERIES_BUILD=str(build),
        SERIES_PATCHES=str(patches),
        SERIES_SDIST_SHA256=hashlib.sha256(
            (build / "dl" / "vllm-0.22.1.tar.gz").read_bytes()
        ).hexdigest(),
        GIT_CONFIG_GLOBAL=os.devnull,
    )


def test_second_base_has_its_own_series_and_trees(ws, ws_env, tmp_path):
    build, patches, run = ws
    env32 = _base_env(ws_env, tmp_path, "0.32.0")
    run32 = _runner(env32)
    patches32 = Path(env32["SERIES_PATCHES"])
    # One patch on each base, different content.
    run("tree")
    commit_change(
        build / "tree", "vllm/core.py", "LINE_3 = 3", "LINE_3 = 33", "[Core] A"
    )
    run("export")
    run32("tree")
    tree32 = build / "tree-0.32.0"
    commit_change(tree32, "vllm/core.py", "LINE_4 = 4", "LINE_4 = 44", "[Core] B")
    run32("export")
    assert (patches / "series").read_text() == "0001-Core-A.patch\n"
    assert (patches32 / "series").read_text() == "0001-Core-B.patch\n"
    assert sorted(p.name for p in patches.iterdir()) == ["0001-Core-A.patch", "series"]
    # Rebuild both from their series: each tree has its own patch only.
    run("tree", "--force")
    run32("tree", "--force")
    core, core32 = (
        (build / "tree" / "vllm" / "core.py").read_text(),
        (tree32 / "vllm" / "core.py").read_text(),
    )
    assert "LINE_3 = 33" in core and "LINE_4 = 44" not in core
    assert "LINE_4 = 44" in core32 and "LINE_3 = 33" not in core32
    assert "vLLM 0.32.0 (pristine sdist)" in git(build / "base-0.32.0", "log", "-1")
    assert "vLLM 0.22.1 (pristine sdist)" in git(build / "base", "log", "-1")
    assert not (build / "base-0.32.0" / "vllm.egg-info").exists()
    # check is per base too.
    assert "make check: OK" in run32("check").stdout
    assert "make check: OK" in run("check").stdout
    # A dirty second tree is refused with its own name and make command.
    (tree32 / "vllm" / "core.py").write_text("edited\n")
    proc = run32("tree", ok=False)
    assert "refusing to overwrite build/tree-0.32.0" in proc.stderr
    assert "make tree BASE=0.32.0 FORCE=1" in proc.stderr
    run("tree")  # the primary tree is untouched by the second's state


def test_second_base_empty_series_tree_is_base(ws, ws_env, tmp_path):
    build, _, _ = ws
    run32 = _runner(_base_env(ws_env, tmp_path, "0.32.0"))
    run32("tree")
    tree32 = build / "tree-0.32.0"
    assert git(tree32, "rev-parse", "HEAD") == git(tree32, "rev-parse", "upstream")
    assert "(a) 0 patch(es) apply" in run32("check").stdout
    assert not (build / "tree").exists()  # nothing of the primary base built


def test_second_base_bad_hash_extracts_nothing(ws, ws_env, tmp_path):
    build, _, _ = ws
    env32 = dict(_base_env(ws_env, tmp_path, "0.32.0"), SERIES_SDIST_SHA256="0" * 64)
    proc = _runner(env32)("tree", ok=False)
    assert "sha256 mismatch for vllm-0.32.0.tar.gz" in proc.stderr
    assert not (build / "base-0.32.0").exists()
    assert (build / "dl" / "vllm-0.32.0.tar.bad").exists()
    assert (build / "dl" / "vllm-0.22.1.tar.gz").exists()


def test_unknown_base_is_an_error(ws, ws_env):
    build, _, _ = ws
    proc = _runner(dict(ws_env, SERIES_BASE="0.99.0"))("tree", ok=False)
    assert proc.returncode == 1
    assert "unknown base SERIES_BASE (make BASE=) '0.99.0'" in proc.stderr
    assert "0.32.0" in proc.stderr  # names the known ones
    assert not (build / "base").exists() and not (build / "base-0.99.0").exists()


def test_base_selects_every_per_base_path(tmp_path):
    """Default paths of each base (no overrides): the primary keeps its
    historic ones, the second gets the suffix everywhere but build/dl."""
    code = (
        "import json, sys; sys.path.insert(0, 'tools'); import series;"
        "env = series.tree_env(series.TREE_DIR);"
        "print(json.dumps({k: str(v) for k, v in dict("
        "patches=series.PATCHES, base=series.BASE_DIR, tree=series.TREE_DIR,"
        "venv=series.VENV, kernels=series.kernels_dir(), hf=env['HF_HOME'],"
        "cache=env['VLLM_CACHE_ROOT'], sdist=series.SDIST_FILE,"
        "known=series.ROOT / 'tools' / f'known_cuda_only{series.SUFFIX}.txt').items()}))"
    )
    out = {}
    for base in ("", "0.32.0"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SERIES_")} | {
            "SERIES_BASE": base,
            "SERIES_BUILD": str(tmp_path / "b"),
        }
        proc = subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env=env,
            text=True,
            capture_output=True,
        )
        assert proc.returncode == 0, proc.stderr
        import json

        out[base] = {
            k: os.path.relpath(v, ROOT) for k, v in json.loads(proc.stdout).items()
        }
    b = os.path.relpath(tmp_path / "b", ROOT)
    assert out[""] == {
        "patches": "patches",
        "base": f"{b}/base",
        "tree": f"{b}/tree",
        "venv": ".venv",
        "kernels": f"{b}/kernels/vllm",
        "hf": f"{b}/hf",
        "cache": f"{b}/vllm-cache",
        "sdist": "vllm-0.22.1.tar.gz",
        "known": "tools/known_cuda_only.txt",
    }
    assert out["0.32.0"] == {
        "patches": "patches-0.32.0",
        "base": f"{b}/base-0.32.0",
        "tree": f"{b}/tree-0.32.0",
        "venv": ".venv-0.32.0",
        "kernels": f"{b}/kernels-0.32.0/vllm",
        "hf": f"{b}/hf-0.32.0",
        "cache": f"{b}/vllm-cache-0.32.0",
        "sdist": "vllm-0.32.0.tar.gz",
        "known": "tools/known_cuda_only-0.32.0.txt",
    }


def test_make_base_selects_the_series(ws, ws_env, tmp_path):
    """`make tree|export BASE=0.32.0` drive the second base; no BASE, the first."""
    build, patches, _ = ws
    env32 = _base_env(ws_env, tmp_path, "0.32.0")
    env32.pop("SERIES_BASE")  # make's BASE= sets it
    _make(env32, "tree", "BASE=0.32.0")
    assert (build / "tree-0.32.0" / ".git").exists() and not (build / "tree").exists()
    tree32 = build / "tree-0.32.0"
    commit_change(tree32, "vllm/core.py", "LINE_5 = 5", "LINE_5 = 55", "[Core] C")
    _make(env32, "export", "BASE=0.32.0")
    assert (
        Path(env32["SERIES_PATCHES"]) / "series"
    ).read_text() == "0001-Core-C.patch\n"
    _make(dict(ws_env, SERIES_BASE="0.32.0"), "tree")  # a stray env var is overridden
    assert (build / "tree" / ".git").exists()
    assert (patches / "series").read_text() == ""
    proc = _make(ws_env, "-n", "test")
    assert "test-base BASE=$b" in proc.stdout and "0.22.1 0.32.0" in proc.stdout


def test_check_wants_short_titles(ws):
    """A title longer than 80 characters is reported; one of 80 is not."""
    build, patches, run = ws
    run("tree")
    at_limit = "[Core] " + "x" * 73
    too_long = at_limit + "y"
    tree = _commit_a_change(build, f"{too_long}\n\nBecause a test needs it.")
    run("export")
    proc = run("check", ok=False)
    assert f"title over 80 characters ({len(too_long)})" in proc.stderr
    git(tree, "commit", "-q", "--amend", "-s", "-m", f"{at_limit}\n\nBecause.")
    run("export")
    run("check")


def test_check_wants_prose_wrapped(ws):
    """A body line of prose wider than 76 columns is reported; an indented
    line (a command, code) may be wider."""
    build, patches, run = ws
    run("tree")
    long_prose = ("Because " + "a test needs it " * 6).strip()
    command = "    vllm serve --ec-manager-config '" + "x" * 80 + "'"
    tree = _commit_a_change(build, f"[Core] Change one\n\n{long_prose}\n\n{command}")
    run("export")
    proc = run("check", ok=False)
    assert f"body line over 76 columns ({len(long_prose)})" in proc.stderr
    assert proc.stderr.count("body line over") == 1
    git(
        tree,
        "commit",
        "-q",
        "--amend",
        "-s",
        "-m",
        f"[Core] Change one\n\nBecause a test needs it.\n\n{command}",
    )
    run("export")
    run("check")
