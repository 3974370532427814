# SPDX-License-Identifier: Apache-2.0
"""``python tools/scaleout [--tree T] [--only tp|epd] [--reduced] [--nodes]``.

Runs the TP cases (:mod:`scaleout.tp`) and the E -> PD scenario
(:mod:`scaleout.epd`) from the selected tree and writes, under ``--out``
(default ``build/scaleout``):

* ``summary.json``: exactly the schema of issue 13::

    {"tp2": {"identical_outputs": bool, "ranks_consistent": bool,
             "host_hits": int, "host_bytes_tp1": int, "host_bytes_tp2": int},
     "epd": {"identical_outputs": bool,
             "consumer_encoder_runs_for_remote_items": int,
             "deferred_observed": bool,
             "producer_kill_only_affected_failed": bool}}

  (only a full run, neither ``--only`` nor ``--reduced``, writes it);
* ``report.json``: every measured fact behind it (per case, per phase);
* the logs of every engine and server.

``--reduced`` is the CI form: TP=1 default (the reference) and TP=2
two-tier, and the E -> PD happy path. ``--nodes`` adds TP=2 over two nodes
on loopback with vLLM's multi-node launcher (:mod:`scaleout.nodes`; in
``report.json`` only). Exit status 0 when every check holds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parents[1]
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

import make_tiny_mm_model  # noqa: E402
from series import BUILD, tree_dir  # noqa: E402

from scaleout import epd, nodes, tp  # noqa: E402

FULL_TP_CASES = ["tp1_default", "tp1_two_tier", "tp2_default", "tp2_two_tier"]
REDUCED_TP_CASES = ["tp1_default", "tp2_two_tier"]
SUMMARY_KEYS = {
    "tp2": {
        "identical_outputs": bool,
        "ranks_consistent": bool,
        "host_hits": int,
        "host_bytes_tp1": int,
        "host_bytes_tp2": int,
    },
    "epd": {
        "identical_outputs": bool,
        "consumer_encoder_runs_for_remote_items": int,
        "deferred_observed": bool,
        "producer_kill_only_affected_failed": bool,
    },
}


def check_summary(summary: dict[str, Any]) -> None:
    """Raise ValueError unless ``summary`` has exactly the issue's keys and
    types (no None)."""
    if set(summary) != set(SUMMARY_KEYS):
        raise ValueError(f"summary keys {sorted(summary)} != {sorted(SUMMARY_KEYS)}")
    for block, fields in SUMMARY_KEYS.items():
        if set(summary[block]) != set(fields):
            raise ValueError(
                f"summary[{block!r}] keys {sorted(summary[block])} != {sorted(fields)}"
            )
        for key, typ in fields.items():
            value = summary[block][key]
            if type(value) is not typ:
                raise ValueError(
                    f"summary[{block!r}][{key!r}] = {value!r} is not a {typ.__name__}"
                )


def host_tier_shared(tp2: dict[str, Any]) -> bool:
    """Whether TP=2 holds one host tier per instance, not one per rank: its
    host bytes are measured and within 10% of TP=1's."""
    one, two = tp2.get("host_bytes_tp1"), tp2.get("host_bytes_tp2")
    if not one or not two:
        return False
    return bool(two <= one + one // 10)


def passed(summary: dict[str, Any], reduced: bool) -> bool:
    """Whether every check of the (possibly partial) summary holds; the
    reduced form has no slow-storage or producer-kill phase."""
    ok = True
    t = summary.get("tp2")
    if t is not None:
        ok &= bool(t["identical_outputs"]) and bool(t["ranks_consistent"])
        ok &= (t["host_hits"] or 0) > 0
        if t.get("host_bytes_tp1") is not None:  # the reduced form has no TP=1
            ok &= host_tier_shared(t)
    e = summary.get("epd")
    if e is not None:
        ok &= bool(e["identical_outputs"])
        ok &= e["consumer_encoder_runs_for_remote_items"] == 0
        if not reduced:
            ok &= bool(e["deferred_observed"])
            ok &= bool(e["producer_kill_only_affected_failed"])
    return bool(ok)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tree", default="tree", help="base, tree, or a checkout path")
    ap.add_argument("--only", choices=["tp", "epd"], help="run one part only")
    ap.add_argument(
        "--reduced",
        action="store_true",
        help="CI form: TP=2 two-tier (+ TP=1 reference) and the E->PD happy path",
    )
    ap.add_argument(
        "--nodes",
        action="store_true",
        help="also run TP=2 over two nodes on loopback (--nnodes 2, --headless)",
    )
    ap.add_argument("--out", type=Path, default=BUILD / "scaleout")
    args = ap.parse_args(argv)

    if not (tree_dir(args.tree) / "vllm" / "__init__.py").exists():
        print(f"scaleout: {tree_dir(args.tree)} is not a vLLM tree", file=sys.stderr)
        return 2
    make_tiny_mm_model.main([])
    model = make_tiny_mm_model.DEFAULT_OUT
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    full = not args.reduced and args.only is None
    t0 = time.monotonic()
    report: dict[str, Any] = {
        "tree": str(tree_dir(args.tree)),
        "reduced": args.reduced,
        "only": args.only,
    }
    summary: dict[str, Any] = {}
    reference = None
    if args.only in (None, "tp"):
        cases = REDUCED_TP_CASES if args.reduced else FULL_TP_CASES
        t1 = time.monotonic()
        res = tp.run_tp(args.tree, model, out / "tp", cases)
        report["tp"] = res["cases"]
        report["tp_wall_s"] = round(time.monotonic() - t1, 1)
        summary["tp2"] = res["summary"]
        reference = res["reference"]
        if args.nodes:
            t1 = time.monotonic()
            report["tp_nodes"] = nodes.run_nodes(
                args.tree, model, out / "tp", res["reference_tokens"]
            )
            report["tp_nodes_wall_s"] = round(time.monotonic() - t1, 1)
    if args.only in (None, "epd"):
        t1 = time.monotonic()
        res = epd.run_epd(
            args.tree,
            model,
            out,
            full=not args.reduced,
            reference=reference if args.reduced else None,
        )
        report["epd"] = res["details"]
        report["epd_wall_s"] = round(time.monotonic() - t1, 1)
        summary["epd"] = res["summary"]
    report["wall_s"] = round(time.monotonic() - t0, 1)
    report["summary"] = summary
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    if full:
        check_summary(summary)
        (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        print(f"scaleout: wrote {out / 'summary.json'}")
    print(json.dumps(summary, indent=1))
    ok = passed(summary, args.reduced)
    if args.nodes and "tp_nodes" in report:
        n = report["tp_nodes"]
        ok &= bool(
            n.get("identical_to_tp1_default")
            and n.get("ranks_consistent")
            and n["all_ok"]
        )
    print(
        f"scaleout: {'all checks hold' if ok else 'SOME CHECKS FAIL'} "
        f"({report['wall_s']:.0f}s; details in {out / 'report.json'})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
