#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Upstream regression: every upstream test that passes on build/base must
pass on build/tree.

The base is selected like everywhere else (``SERIES_BASE``, ``make
test-upstream BASE=0.32.0``): the same module list runs where the modules
exist in that release, and the known CUDA-only list is the base's own
(``tools/known_cuda_only[-<version>].txt``).

Runs the same upstream test modules in both trees (the two runs in parallel,
one per core), reads their JUnit XML and prints both counts. Fails if any test
that passed on base does not pass on the tree.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import xml.etree.ElementTree as ET
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


def results(xml_path: Path) -> dict[str, str]:
    """nodeid-ish key -> outcome (passed/failed/error/skipped)."""
    out: dict[str, str] = {}
    if not xml_path.exists():
        return out
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        key = f"{case.get('classname')}::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        out[key] = outcome
    return out


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
    deselect = series.known_cuda_only_deselects()
    outdir = series.BUILD / f"regression{series.SUFFIX}"
    outdir.mkdir(parents=True, exist_ok=True)
    procs = {}
    for name in ("base", "tree"):
        repo = series.tree_dir(name)
        existing = [m for m in modules if (repo / m).exists()]
        xml = outdir / f"{name}.xml"
        xml.unlink(missing_ok=True)
        log = open(outdir / f"{name}.log", "w")
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "cpu_shims",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rfE",
            "--timeout=900",
            f"--junitxml={xml}",
            *deselect,
            *existing,
        ]
        print(f"[regression] {name}: pytest {' '.join(existing)}", flush=True)
        procs[name] = (
            subprocess.Popen(
                cmd,
                cwd=repo,
                env=series.tree_env(repo),
                stdout=log,
                stderr=subprocess.STDOUT,
            ),
            log,
        )
    for name, (proc, log) in procs.items():
        proc.wait()
        log.close()
    res = {name: results(outdir / f"{name}.xml") for name in procs}
    for name in procs:
        counts: dict[str, int] = {}
        for outcome in res[name].values():
            counts[outcome] = counts.get(outcome, 0) + 1
        print(
            f"[regression] {name}: "
            + ", ".join(
                f"{counts.get(k, 0)} {k}" for k in ("passed", "failed", "skipped")
            )
            + f"  (log: {outdir / (name + '.log')})"
        )
    if not res["base"]:
        print(
            f"[regression] no results from build/base{series.SUFFIX}; see its log",
            file=sys.stderr,
        )
        return 1
    lost = sorted(
        k
        for k, v in res["base"].items()
        if v == "passed" and res["tree"].get(k) != "passed"
    )
    if lost:
        print(f"[regression] {len(lost)} test(s) pass on base but not on tree:")
        for k in lost:
            print(f"  {k}: {res['tree'].get(k, 'missing')}")
        return 1
    base_passed = sum(v == "passed" for v in res["base"].values())
    print(f"[regression] OK: all {base_passed} tests passing on base pass on tree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
