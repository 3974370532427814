# SPDX-License-Identifier: Apache-2.0
"""Scheduler overhead, base vs series, at light load and at >= 256 running.

Design (robust to a shared 2-core machine):

* **Same work, interleaved.** Each setup (base default, series default,
  series two-tier) replays the same trace; within a round the setups advance
  ``CHUNK_STEPS`` steps in turn (the children keep their runs paused between
  slices), so a load change on the machine hits every setup alike. Only one
  child computes at any time. The order rotates every round. Slices of 10
  steps (tens of ms at heavy load) cancel load changes much better than 50:
  in an A/A test on a loaded 2-core machine the per-round ratios spread
  0.89-1.02 with 50-step slices and 0.995-1.03 with 10.
* **A/A control** (full mode): base default replayed by a second base child
  is measured like the others; its ratio to base default is the method's
  noise floor (process layout, machine load) and is reported beside the
  targets.
* **CPU time, not wall time.** The yardstick is the thread CPU time of
  ``schedule()`` + ``update_from_output()`` per step: time the thread spends
  descheduled by other processes does not count. Wall time is reported too.
  Hardware instruction counts would be a steadier yardstick for "does the
  code do more work" (they ignore frequency and cache effects), but this
  machine exposes no PMU to ``perf_event_open`` (``PERF_COUNT_HW_INSTRUCTIONS``
  fails with ENOENT) and valgrind slows a replay ~50x; see bench/README.md.
* **Many repetitions, a CI.** Per round, the statistic of a setup is its
  median CPU time per measured step; the ratio to base default is taken
  within the round, and the rounds' ratios give a mean with a Student-t 95%
  confidence interval. The target is judged on the mean.
* **Heavy load** counts only the steps that start with >= 256 running
  requests (``len(scheduler.running)``); the trace is a burst of single-image
  requests with long answers, so a few hundred steps per run qualify.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

from bench import workloads as W
from bench.runner import TreeProcess
from bench.stats import mean_ci

CHUNK_STEPS = 10  #: steps per slice of an interleaved round
HEAVY_RUNNING = 256  #: "loaded server": steps starting with this many running


def _bar(total: int, desc: str) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is in the venv
        return None
    return tqdm(total=total, desc=desc, unit="round", file=sys.stderr, leave=False)


def heavy_trace(seed: int, quick: bool) -> W.Trace:
    """A burst of single-image requests with long answers (>= 256 running)."""
    p = W.ZipfParams(
        requests=320 if quick else 400,
        rate_per_s=800.0,
        catalogue=400,
        images=(1, 1),
        output_tokens=(160, 200) if quick else (200, 256),
    )
    return W.zipf_shared(seed, p, name="overhead_heavy")


def light_trace(seed: int) -> W.Trace:
    """A short multi-turn chat (a few requests running at a time)."""
    return W.multi_turn(
        seed, W.MultiTurnParams(conversations=16), name="overhead_light"
    )


def measure_overhead(b: Any, traces: dict) -> dict[str, Any]:
    """Both loads; ``b`` is the running :class:`bench.run.Bench`."""
    seed = b.args.seed
    via = b.twotier_via()
    _, default_policy = b.policies()
    host = 8192 * 8
    setups: list[tuple[str, str, dict[str, Any], int]] = [
        ("base/default", "base", {"kind": "default"}, 0),
        ("series/default", "series", {"kind": "default"}, 0),
    ]
    if via and default_policy:
        setups.append(
            (
                "series/two-tier",
                "series",
                {"kind": "twotier", "policy": default_policy, "via": via},
                host,
            )
        )
    aa = None
    if not b.quick:
        aa = TreeProcess("base-aa", b.procs["base"][0].tree, b.out / "logs")
        aa.wait_ready()
        b.procs["base_aa"] = [aa]
        setups.append(("base/default A/A", "base_aa", {"kind": "default"}, 0))
    out: dict[str, Any] = {
        "design": f"interleaved {CHUNK_STEPS}-step slices, rotating order, thread "
        "CPU time per step, per-round ratio of medians, Student-t 95% CI over "
        "rounds" + ("; A/A control: base default in a second base child" if aa else ""),
        "two_tier_policy": default_policy,
    }
    loads = (
        ("light", light_trace(seed), 0),
        ("heavy", heavy_trace(seed, b.quick), HEAVY_RUNNING),
    )
    bar = _bar(2 * (b.args.overhead_rounds + 1), "overhead")
    try:
        for name, trace, min_running in loads:
            path = trace.save(b.out / "traces" / f"{trace.name}.jsonl")
            out[name] = _measure(
                b, path, setups, min_running, b.args.overhead_rounds, bar
            )
            out[name]["trace"] = str(path)
            out[name]["min_running"] = min_running
    finally:
        if bar is not None:
            bar.close()
        if aa is not None:
            b.procs.pop("base_aa", None)
            aa.close()
    return out


def _measure(
    b: Any,
    path: Path,
    setups: list[tuple[str, str, dict[str, Any], int]],
    min_running: int,
    rounds: int,
    bar: Any = None,
) -> dict[str, Any]:
    per_round: dict[str, list[dict[str, float]]] = {s[0]: [] for s in setups}
    steps: dict[str, int] = {s[0]: 0 for s in setups}
    errors: list[str] = []

    def spec(mgr: dict[str, Any], host: int) -> dict[str, Any]:
        return b.spec(
            path,
            "default",
            mgr,
            8192,
            host,
            record_accesses=False,
            record_wall=True,
            chunk_steps=CHUNK_STEPS,
        )

    # Warm-up: one untimed run per setup (imports, caches, allocator).
    for label, tree, mgr, host in setups:
        b.procs[tree][0].run(spec(mgr, host))
    if bar is not None:
        bar.update(1)
    for k in range(rounds):
        order = setups[k % len(setups) :] + setups[: k % len(setups)]
        results = _interleaved(b, order, spec)
        for label, res in results.items():
            if res.get("status") != "ok":
                errors.append(f"{label}: {res.get('kind')}: {res.get('message')}")
                continue
            keep = [j for j, r in enumerate(res["running_at"]) if r >= min_running]
            if not keep:
                errors.append(f"{label}: no step with >= {min_running} running")
                continue
            cpu = [res["cpu_ns"][j] / 1e3 for j in keep]
            wall = [res["wall_ns"][j] / 1e3 for j in keep]
            steps[label] += len(keep)
            per_round[label].append(
                {
                    "cpu_median_us": statistics.median(cpu),
                    "cpu_mean_us": statistics.fmean(cpu),
                    "wall_median_us": statistics.median(wall),
                    "steps": len(keep),
                    "max_running": res["max_running"],
                }
            )
        if bar is not None:
            bar.update(1)
    o: dict[str, Any] = {"rounds": rounds, "setups": {}, "errors": errors}
    base = per_round.get("base/default", [])
    for label, rows in per_round.items():
        if not rows:
            continue
        s: dict[str, Any] = {
            "steps": steps[label],
            "cpu_median_us": statistics.median(r["cpu_median_us"] for r in rows),
            "wall_median_us": statistics.median(r["wall_median_us"] for r in rows),
            "cpu_mean_us": statistics.fmean(r["cpu_mean_us"] for r in rows),
            "max_running": max(r["max_running"] for r in rows),
            "rounds": rows,
        }
        if label != "base/default" and len(base) == len(rows):
            ratios = [
                a["cpu_median_us"] / c["cpu_median_us"] for a, c in zip(rows, base)
            ]
            wratios = [
                a["wall_median_us"] / c["wall_median_us"] for a, c in zip(rows, base)
            ]
            s["cpu_ratio"] = mean_ci(ratios)
            s["wall_ratio"] = mean_ci(wratios)
        o["setups"][label] = s
    return o


def _interleaved(
    b: Any, order: list[tuple[str, str, dict[str, Any], int]], spec: Any
) -> dict[str, dict[str, Any]]:
    """Run the setups in slices of CHUNK_STEPS steps, one slice of each in
    turn; only one child computes at any time."""
    active: dict[str, str] = {}
    done: dict[str, dict[str, Any]] = {}
    for label, tree, mgr, host in order:
        res = b.procs[tree][0].request("start", spec(mgr, host), key=label)
        if res.get("status") == "running":
            active[label] = tree
        else:
            done[label] = res
    while active:
        for label, *_ in order:
            tree = active.get(label)
            if tree is None:
                continue
            res = b.procs[tree][0].request("resume", key=label)
            if res.get("status") != "running":
                done[label] = res
                del active[label]
    return done
