#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Upstream regression: every upstream test that passes on build/base must
pass on build/tree.

The base is selected like everywhere else (``SERIES_BASE``, ``make
test-upstream BASE=0.32.0``): the same module list runs where the modules
exist in that release, and the known CUDA-only list is the base's own
(``tools/known_cuda_only[-<version>].txt``).

Runs the upstream test modules on the tree (one pytest process per core, each
on a share of the files), collects the same modules on base, and reruns on
base every base test that did not pass on the tree. Fails if any of those
passes on base. A test that passes on the tree needs no base run, so base
costs a collection plus the handful of tests that fail on both (tests that
need the Hugging Face hub, for instance).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import series  # noqa: E402

# The modules the issue names; upstream test modules touched by a patch are
# added at run time.
MODULES = [
    "tests/v1/core/test_scheduler.py",
    "tests/v1/core/test_encoder_cache_manager.py",
    "tests/v1/core/test_output.py",
    "tests/v1/core/test_async_scheduler.py",
    "tests/v1/ec_connector/unit",
    "tests/v1/worker/test_gpu_model_runner.py",
    "tests/v1/worker/test_gpu_input_batch.py",
    "tests/engine/test_arg_utils.py",
    # Upstream tests of upstream modules the series changes
    # (kv_cache_manager.py: prefix-cache stats; metrics/stats.py).
    "tests/v1/core/test_prefix_caching.py",
    "tests/v1/metrics/test_stats.py",
]


def touched_upstream_tests() -> list[str]:
    """Upstream test modules (present in build/base) that a patch changes,
    and the upstream test module mirroring each upstream module a patch
    changes (vllm/a/b.py -> tests/a/test_b.py)."""
    tree = series.TREE_DIR
    base = series.BASE_DIR
    out = series.git(tree, "diff", "--name-only", "upstream..HEAD").stdout.split()
    found = set()
    for f in out:
        if not f.endswith(".py"):
            continue
        if f.startswith("vllm/"):
            rel = Path("tests") / Path(f).relative_to("vllm")
            f = str(rel.parent / f"test_{rel.name}")
        if (
            f.startswith("tests/")
            and Path(f).name.startswith("test_")
            and (base / f).exists()
        ):
            found.add(f)
    return sorted(found)


def run_base(args: list[str], name: str) -> dict[str, object]:
    """One pytest process on build/base; its collected ids and outcomes."""
    _, out = series.run_pytest_sharded(
        series.tree_dir("base"), args, name, jobs=1, show_failures=False
    )
    return out


def _counts(outcomes: dict[str, str]) -> str:
    counts = Counter(outcomes.values())
    return ", ".join(f"{counts[k]} {k}" for k in ("passed", "failed", "skipped"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--modules", nargs="*", help="override the module list")
    args = ap.parse_args()
    modules = args.modules or sorted(set(MODULES) | set(touched_upstream_tests()))
    # pytest collects a directory's other files only if a file inside it is
    # not also named on the command line: drop files covered by a directory.
    dirs = [m for m in modules if not m.endswith(".py")]
    modules = [
        m
        for m in modules
        if not (
            m.endswith(".py") and any(m.startswith(d.rstrip("/") + "/") for d in dirs)
        )
    ]
    # --continue-on-collection-errors: a module that fails to import loses
    # its own tests, not every module's.
    common = ["-p", "no:cacheprovider", "-q", "-rfE", "--timeout=900"]
    common += ["--continue-on-collection-errors", *series.known_cuda_only_deselects()]
    logs = series.BUILD / f"pytest{series.SUFFIX}"
    tree_mods = [m for m in modules if (series.tree_dir("tree") / m).exists()]
    base_mods = [m for m in modules if (series.tree_dir("base") / m).exists()]

    print(f"[regression] tree: pytest {' '.join(tree_mods)}", flush=True)
    _, tree = series.run_pytest_sharded(
        series.tree_dir("tree"),
        [*common, *tree_mods],
        "regression-tree",
        show_failures=False,
    )
    tree_out: dict[str, str] = tree["outcomes"]  # type: ignore[assignment]
    print(f"[regression] tree: {_counts(tree_out)}", flush=True)

    print(f"[regression] base: pytest --collect-only {' '.join(base_mods)}")
    collected = run_base([*common, "--collect-only", *base_mods], "base-collect")
    base_ids: list[str] = collected["collected"]  # type: ignore[assignment]
    if not base_ids:
        print(
            f"[regression] nothing collected on build/base{series.SUFFIX}; see "
            f"{logs / 'base-collect.0.log'}",
            file=sys.stderr,
        )
        return 1
    recheck = [t for t in base_ids if tree_out.get(t) != "passed"]
    print(
        f"[regression] base: {len(base_ids)} collected, "
        f"{len(base_ids) - len(recheck)} of them pass on the tree; "
        f"rerunning the other {len(recheck)} on base",
        flush=True,
    )
    base_out: dict[str, str] = {}
    if recheck:
        base_out = run_base([*common, *recheck], "base-recheck")["outcomes"]  # type: ignore[assignment]
        # A node id pytest could not select again: run its whole file.
        missing = sorted({t.split("::", 1)[0] for t in recheck if t not in base_out})
        if missing:
            more = run_base([*common, *missing], "base-recheck-files")
            base_out.update(more["outcomes"])  # type: ignore[arg-type]
        print(f"[regression] base, rerun: {_counts(base_out)}")
    lost = sorted(t for t in recheck if base_out.get(t) == "passed")
    unknown = sorted(t for t in recheck if t not in base_out)
    if unknown:
        print(f"[regression] {len(unknown)} test(s) could not be rerun on base:")
        for t in unknown:
            print(f"  {t}")
        return 1
    if lost:
        print(f"[regression] {len(lost)} test(s) pass on base but not on tree:")
        for t in lost:
            print(f"  {t}: {tree_out.get(t, 'missing')}")
        print(f"[regression] tree logs: {logs / 'regression-tree.*.log'}")
        return 1
    print(
        f"[regression] OK: every test collected on base ({len(base_ids)}) "
        f"passes on the tree or does not pass on base either "
        f"({len(recheck)} rerun there)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
