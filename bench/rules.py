# SPDX-License-Identifier: Apache-2.0
"""What following the duel costs: ``adaptive`` with each admission rule held
fixed, beside the duel that chooses among them.

``adaptive`` picks its host admission rule by feedback: one key-only shadow
cache per rule (``_Duel.RULES``, admit-all first) replays every access, and
the host follows the most selective rule whose shadow hits about as much as
the best one (the light rules' hits credited ``_Duel.LIGHT_CREDIT``). This
tool replays each seed of a family at the harness's capacity (``--frac`` of
the footprint, device:host = 1:8) once per rule held fixed for the whole run
(:func:`bench.replay.hold_adaptive_rule`) and once with the duel, and prints
the real hit ratios, the wasted demotion shares and, for each fixed rule,
what its own shadow predicted. A rule held fixed that beats the duel
measures the cost of switching: a rule's loss shows only when the entries it
dropped come back, so the host's contents lag the rule in force. A second
table gives every shadow's prediction while each rule is held: the filters'
shadows read the reuse rates the real host learns, so the duel's view of the
rules moves with the rule in force.

    python -m bench.rules --family heavy_chat --scenario pc_off --seeds 5
    python -m bench.rules --family mixed_sizes --scenario default --seed 5  # held out
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ADAPTIVE = {"kind": "twotier", "policy": "adaptive", "via": "config"}


def rule_rows(runs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per run kind (``rule 0``, ..., ``duel``) from the seeds'
    results: mean hit ratio, mean prediction of the rule's own shadow and of
    every shadow (fixed rules only), wasted demotion share (bytes over all
    seeds) and the per-seed hit ratios."""
    rows = []
    for name, results in runs.items():
        hits = [r.get("hit_ratio") or 0.0 for r in results]
        demoted = sum(r.get("bytes_demoted") or 0 for r in results)
        wasted = sum(r.get("bytes_wasted_demotion") or 0 for r in results)
        predicted = None
        shadows = None
        if name.startswith("rule "):
            i = int(name.split()[1])
            seen = [
                r["shadow_hit_ratios"] for r in results if r.get("shadow_hit_ratios")
            ]
            if seen:
                shadows = [statistics.fmean(col) for col in zip(*seen)]
                predicted = shadows[i]
        rows.append(
            {
                "run": name,
                "hit_ratio": statistics.fmean(hits) if hits else None,
                "shadow": predicted,
                "shadows": shadows,
                "wasted_share": wasted / demoted if demoted else None,
                "seeds": hits,
            }
        )
    return rows


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def main(argv: list[str] | None = None) -> int:
    from bench.runner import TreeProcess
    from bench.tiers import binding_args, binding_setup, seed_range

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    binding_args(p)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmpd, TreeProcess("rules", a.tree) as child:
        n_rules = child.wait_ready().get("adaptive_rules", 0)
        if not n_rules:
            print(f"{a.tree}: no adaptive policy with a duel of rules", file=sys.stderr)
            return 2
        runs: dict[str, list[dict[str, Any]]] = {
            **{f"rule {i}": [] for i in range(n_rules)},
            "duel": [],
        }
        for seed in seed_range(a):
            spec, _, _ = binding_setup(
                child, a.family, a.scenario, seed, a.frac, Path(tmpd), a.tree
            )
            for i in range(n_rules):
                runs[f"rule {i}"].append(child.run(spec(ADAPTIVE, adaptive_rule=i)))
            runs["duel"].append(child.run(spec(ADAPTIVE)))
    print(
        f"{a.family} [{a.scenario}] @{a.frac:.0%}, seeds {a.seed}-{a.seed + a.seeds - 1} "
        "(rule 0 admits everything; higher rules are more selective)"
    )
    print(f"{'run':8s} {'hit ratio':>9s} {'shadow':>7s} {'wasted':>7s}  per seed")
    rows = rule_rows(runs)
    for row in rows:
        print(
            f"{row['run']:8s} {_fmt(row['hit_ratio']):>9s} {_fmt(row['shadow']):>7s} "
            f"{_fmt(row['wasted_share']):>7s}  "
            + " ".join(f"{h:.3f}" for h in row["seeds"])
        )
    held = [row for row in rows if row["shadows"]]
    if held:
        print("\nevery shadow's prediction while the rule is held (* the best):")
        for row in held:
            best = max(row["shadows"])
            print(
                f"{row['run']:8s} "
                + " ".join(
                    f"{x:.3f}{'*' if x == best else ' '}" for x in row["shadows"]
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
