#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Replay benchmark of vLLM's encoder cache: base vs series, policies vs bound.

    .venv/bin/python bench/run.py --quick     # make demo: short multi-turn, < 3 min
    .venv/bin/python bench/run.py             # make bench: everything, < 15 min

Writes build/bench/report.md, report.json, *.png and the traces (JSONL).
See bench/README.md for the workloads, the trace format, the cost model
and the bound.
"""

from __future__ import annotations

import argparse
import logging
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import bound as B  # noqa: E402
from bench import workloads as W  # noqa: E402
from bench.report import targets, write_report  # noqa: E402
from bench.runner import (  # noqa: E402
    BASE_DIR,
    BENCH_DIR,
    TREE_DIR,
    TreeProcess,
    cost_model_path,
    default_spec,
)
from bench.trace import Trace  # noqa: E402

log = logging.getLogger("bench")

DEVICE = (
    8192  #: device tier (vLLM's default encoder_cache_size = max_num_batched_tokens)
)
HOST_FACTOR = 8  #: host tier = 8 x device
CHUNK_STEPS = 50  #: overhead runs alternate between trees every this many steps


def _progress(total: int, desc: str) -> Any:
    try:
        from tqdm import tqdm

        return tqdm(total=None, desc=desc, unit="run", file=sys.stderr, leave=False)
    except ImportError:  # pragma: no cover
        return None


class Bench:
    """Runs everything; one child per tree, results collected in ``self.r``."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.quick = args.quick
        self.r: dict[str, Any] = {
            "meta": {},
            "workloads": {},
            "main": {},
            "curves": {},
            "overhead": {},
            "deferral": {},
            "errors": [],
        }
        self.cost_path = args.cost_model or cost_model_path(Path(args.tree))
        self.procs: dict[str, TreeProcess] = {}
        self.bar: Any = None

    # ------------------------------------------------------------ children
    def start(self) -> None:
        t0 = time.perf_counter()
        log.info(
            "starting scheduler processes for base (%s) and series (%s)",
            self.args.base,
            self.args.tree,
        )
        self.procs["base"] = TreeProcess(
            "base", Path(self.args.base), self.out / "logs"
        )
        self.procs["series"] = TreeProcess(
            "series", Path(self.args.tree), self.out / "logs"
        )
        feats = {k: p.wait_ready() for k, p in self.procs.items()}
        self.r["meta"]["features"] = feats
        self.r["meta"]["startup_s"] = time.perf_counter() - t0
        log.info(
            "children ready in %.1fs; series features: %s",
            time.perf_counter() - t0,
            {k: v for k, v in feats["series"].items() if k != "vllm_file"},
        )

    def close(self) -> None:
        for p in self.procs.values():
            p.close()

    def twotier_via(self) -> str | None:
        f = self.r["meta"]["features"]["series"]
        if f["two_tier"] and f["ec_manager_metadata"]:
            return "config"
        if f["two_tier_module"]:
            return "inject"
        return None

    def run(self, tree: str, trace: Path, **over: Any) -> dict[str, Any]:
        spec = default_spec(trace, cost_model_path=self.cost_path, **over)
        t0 = time.perf_counter()
        res = self.procs[tree].run(spec)
        res["wall_s"] = time.perf_counter() - t0
        res["tree"] = tree
        if res.get("status") == "error":
            msg = f"{tree} {trace.name} {over.get('manager')}: {res.get('kind')}: {res.get('message')}"
            log.error("%s", msg)
            self.r["errors"].append({"run": msg, "traceback": res.get("traceback")})
        if self.bar is not None:
            self.bar.update(1)
        return res

    def managers(self) -> list[tuple[str, str, dict[str, Any], int]]:
        """(label, tree, manager spec, host embeds) of the compared setups."""
        via = self.twotier_via() or "config"
        host = DEVICE * HOST_FACTOR
        return [
            ("base/default", "base", {"kind": "default"}, 0),
            ("series/default", "series", {"kind": "default"}, 0),
            (
                "series/two-tier LRU",
                "series",
                {"kind": "twotier", "policy": "lru", "via": via},
                host,
            ),
            (
                "series/two-tier score",
                "series",
                {"kind": "twotier", "policy": "score", "via": via},
                host,
            ),
        ]

    # ----------------------------------------------------------- workloads
    def workloads(self) -> dict[str, Trace]:
        seed = self.args.seed
        if self.args.trace:
            out_: dict[str, Trace] = {}
            for path in self.args.trace:
                t = Trace.load(path)
                out_[t.name] = t
                self.r["workloads"][t.name] = {
                    "trace": str(Path(path).resolve()),
                    "generator": t.generator,
                    "seed": t.seed,
                    "params": t.params,
                    "summary": t.summary(),
                }
            return out_
        if self.quick:
            gens = {
                "multi_turn": lambda s: W.multi_turn(
                    s, W.MultiTurnParams(conversations=16, conv_rate_per_s=0.25)
                )
            }
        else:
            gens = W.standard_workloads()
        out: dict[str, Trace] = {}
        for name, g in gens.items():
            t = g(seed)
            path = t.save(self.out / "traces" / f"{name}.jsonl")
            out[name] = t
            self.r["workloads"][name] = {
                "trace": str(path),
                "generator": t.generator,
                "seed": t.seed,
                "params": t.params,
                "summary": t.summary(),
            }
        return out

    # ---------------------------------------------------------------- main
    def main_table(self, traces: dict[str, Trace]) -> None:
        host = DEVICE * HOST_FACTOR
        for name, t in traces.items():
            path = Path(self.r["workloads"][name]["trace"])
            seq = t.access_sequence()
            tot = B.total_value(seq, "embeds")
            entry: dict[str, Any] = {
                "bound": {
                    "device": {
                        "capacity": DEVICE,
                        "foo": B.foo_upper_bound(seq, DEVICE) / tot,
                        "belady_size": B.belady_size_hits(seq, DEVICE) / tot,
                    },
                    "total": {
                        "capacity": DEVICE + host,
                        "foo": B.foo_upper_bound(seq, DEVICE + host) / tot,
                        "belady_size": B.belady_size_hits(seq, DEVICE + host) / tot,
                    },
                    "infinite": B.infinite_cache_hits(seq, "embeds") / tot,
                },
                "runs": {},
            }
            for label, tree, mgr, h in self.managers():
                res = self.run(
                    tree, path, manager=mgr, host_embeds=h, device_embeds=DEVICE
                )
                self._check_bound(res, DEVICE + (h if mgr["kind"] != "default" else 0))
                entry["runs"][label] = res
            self.r["main"][name] = entry

    def _check_bound(self, res: dict[str, Any], capacity: int) -> None:
        """Per-run proof obligation: hits <= FOO bound of the run's own sequence."""
        seq = res.pop("access_seq", None)
        if res.get("status") != "ok" or not seq:
            return
        seq = [(h, s) for h, s in seq]
        ub = B.foo_upper_bound(seq, capacity)
        hits = res["hit_embeds"]["device"] + res["hit_embeds"]["host"]
        res["observed_bound_embeds"] = ub
        res["bound_ok"] = hits <= ub + 1e-6
        if not res["bound_ok"]:
            self.r["errors"].append(
                {"run": f"{res.get('manager')}: hits {hits} > bound {ub}"}
            )

    # -------------------------------------------------------------- curves
    def curves(self, traces: dict[str, Trace]) -> None:
        caps = (
            [DEVICE, 4 * DEVICE, 9 * DEVICE]
            if self.quick
            else [DEVICE, 2 * DEVICE, 4 * DEVICE, 9 * DEVICE, 16 * DEVICE]
        )
        names = list(traces) if not self.quick else ["multi_turn"]
        for name in names:
            t = traces[name]
            path = Path(self.r["workloads"][name]["trace"])
            seq = t.access_sequence()
            tot = B.total_value(seq, "embeds")
            c: dict[str, Any] = {
                "capacities": caps,
                "bound": [],
                "belady_size": [],
                "default": [],
                "two-tier LRU": [],
                "two-tier score": [],
            }
            main = self.r["main"].get(name, {}).get("runs", {})
            for cap in caps:
                c["bound"].append(1 - B.foo_upper_bound(seq, cap) / tot)
                c["belady_size"].append(1 - B.belady_size_hits(seq, cap) / tot)
                for label, tree, mgr, _ in self.managers()[1:]:
                    key = label.split("/", 1)[1]
                    if mgr["kind"] == "default":
                        reuse = main.get(label) if cap == DEVICE else None
                        res = reuse or self.run(
                            tree, path, manager=mgr, device_embeds=cap
                        )
                    else:
                        reuse = (
                            main.get(label)
                            if cap == DEVICE * (1 + HOST_FACTOR)
                            else None
                        )
                        res = reuse or self.run(
                            tree,
                            path,
                            manager=mgr,
                            device_embeds=DEVICE,
                            host_embeds=cap - DEVICE,
                        )
                    res.pop("access_seq", None)
                    c[key].append(
                        1 - res["hit_ratio"] if res.get("status") == "ok" else None
                    )
            self.r["curves"][name] = c

    # ------------------------------------------------------------ overhead
    def overhead(self, traces: dict[str, Trace]) -> None:
        name = "multi_turn" if "multi_turn" in traces else next(iter(traces))
        path = Path(self.r["workloads"][name]["trace"])
        rounds = 3 if self.quick else 8
        via = self.twotier_via()
        setups = [
            ("base/default", "base", {"kind": "default"}, 0),
            ("series/default", "series", {"kind": "default"}, 0),
        ]
        if via:
            setups.append(
                (
                    "series/two-tier score",
                    "series",
                    {"kind": "twotier", "policy": "score", "via": via},
                    DEVICE * HOST_FACTOR,
                )
            )
        walls: dict[str, list[float]] = {s[0]: [] for s in setups}
        cpus: dict[str, list[float]] = {s[0]: [] for s in setups}
        per_round: dict[str, list[float]] = {s[0]: [] for s in setups}
        # Optionally pin every timed run to one CPU (--pin-cpu), so base and
        # series see the same core; runs never overlap. Off by default: on a
        # shared machine a fixed core can be the busier one.
        pin = self.args.pin_cpu
        # Warm both children on this trace, then alternate, rotating the order.
        for label, tree, mgr, h in setups:
            self.run(tree, path, manager=mgr, host_embeds=h, record_accesses=False)
        for k in range(rounds):
            order = setups[k % len(setups) :] + setups[: k % len(setups)]
            results = self._interleaved(path, order, pin)
            for label, res in results.items():
                if res.get("status") != "ok":
                    continue
                w = [x / 1e3 for x in res.pop("wall_ns")]
                walls[label].extend(w)
                cpus[label].extend(x / 1e3 for x in res.pop("cpu_ns"))
                per_round[label].append(statistics.median(w))
        o: dict[str, Any] = {
            "workload": name,
            "rounds": rounds,
            "pinned_cpu": pin,
            "setups": {},
        }
        for label, w in walls.items():
            if w:
                o["setups"][label] = {
                    "median_us": statistics.median(w),
                    "p90_us": B_pct(w, 0.9),
                    "steps": len(w),
                    "cpu_median_us": statistics.median(cpus[label]),
                    "round_medians_us": per_round[label],
                }
        base = o["setups"].get("base/default")
        for label in ("series/default", "series/two-tier score"):
            s = o["setups"].get(label)
            if base and s:
                ratios = [
                    a / b for a, b in zip(per_round[label], per_round["base/default"])
                ]
                s["ratio_to_base_default"] = s["median_us"] / base["median_us"]
                s["cpu_ratio_to_base_default"] = (
                    s["cpu_median_us"] / base["cpu_median_us"]
                )
                s["round_ratios"] = ratios
        self.r["overhead"] = o

    def _interleaved(
        self,
        path: Path,
        order: list[tuple[str, str, dict[str, Any], int]],
        pin: int | None,
    ) -> dict[str, dict[str, Any]]:
        """Run the setups concurrently in slices of CHUNK_STEPS steps, one
        slice of each in turn, so load changes on a shared machine hit all of
        them alike. Only one child computes at any time."""
        active: dict[str, str] = {}
        done: dict[str, dict[str, Any]] = {}
        for label, tree, mgr, h in order:
            spec = default_spec(
                path,
                cost_model_path=self.cost_path,
                manager=mgr,
                host_embeds=h,
                record_accesses=False,
                record_wall=True,
                pin_cpu=pin,
                chunk_steps=CHUNK_STEPS,
            )
            res = self.procs[tree].request("start", spec, key=label)
            if res.get("status") == "running":
                active[label] = tree
            else:
                done[label] = res
        while active:
            for label, *_ in order:
                tree = active.get(label)
                if tree is None:
                    continue
                res = self.procs[tree].request("resume", key=label)
                if res.get("status") != "running":
                    done[label] = res
                    del active[label]
        for label, res in done.items():
            if res.get("status") == "error":
                self.r["errors"].append(
                    {
                        "run": f"overhead {label}: {res.get('kind')}: "
                        f"{res.get('message')}"
                    }
                )
            if self.bar is not None:
                self.bar.update(1)
        return done

    # ------------------------------------------------------------ deferral
    def deferral(self) -> None:
        p = W.ZipfParams(requests=120 if self.quick else 300, rate_per_s=12.0)
        base = W.zipf_shared(self.args.seed, p, name="deferral")
        t = W.with_remote(
            base, self.args.seed, W.RemoteParams(p_remote=0.3), name="deferral"
        )
        path = t.save(self.out / "traces" / "deferral.jsonl")
        self.r["workloads"]["deferral"] = {
            "trace": str(path),
            "generator": t.generator,
            "seed": t.seed,
            "params": t.params,
            "summary": t.summary(),
        }
        latency = 0.25
        d: dict[str, Any] = {"latency_s": latency, "runs": {}}
        for tree in ("base", "series"):
            for mode in ("ideal", "blocking", "deferral"):
                res = self.run(
                    tree,
                    path,
                    connector={"latency_s": latency, "mode": mode},
                    record_accesses=False,
                )
                d["runs"][f"{tree}/{mode}"] = res
        for tree in ("base", "series"):
            ideal = d["runs"][f"{tree}/ideal"]
            if ideal.get("status") != "ok":
                continue
            for mode in ("blocking", "deferral"):
                res = d["runs"][f"{tree}/{mode}"]
                if res.get("status") == "ok":
                    res["makespan_ratio"] = res["makespan_s"] / ideal["makespan_s"]
                    res["ttft_p50_ratio"] = res["ttft_p50_s"] / ideal["ttft_p50_s"]
                    res["ttft_p99_ratio"] = res["ttft_p99_s"] / ideal["ttft_p99_s"]
        self.r["deferral"] = d


def B_pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1)))]


def print_quick_table(r: dict[str, Any], out: Path) -> None:
    """The demo's one table: default vs two-tier, base vs series."""
    name = next(iter(r["main"]))
    m = r["main"][name]
    ov = r["overhead"].get("setups", {})
    rows = []
    hdr = (
        "setup",
        "encoded embeds",
        "hit ratio (dev/host)",
        "vs bound",
        "TTFT p50 ms",
        "sched us/step",
        "overhead vs base",
    )
    for label, res in m["runs"].items():
        if res.get("status") != "ok":
            rows.append(
                (
                    label,
                    res.get("status"),
                    res.get("reason") or res.get("kind", ""),
                    "",
                    "",
                    "",
                    "",
                )
            )
            continue
        cap_key = "device" if label.endswith("default") else "total"
        bound = m["bound"][cap_key]["foo"]
        o = ov.get(label, {})
        ratio = o.get("ratio_to_base_default")
        rows.append(
            (
                label,
                f"{res['encoded_embeds']:,}",
                f"{res['hit_ratio']:.3f} ({res['hit_ratio_device']:.2f}/{res['hit_ratio_host']:.2f})",
                f"{res['hit_ratio'] / bound:.0%} of {bound:.3f}" if bound else "-",
                f"{res['ttft_p50_s'] * 1e3:.0f}",
                f"{o['median_us']:.0f}"
                if o
                else f"{res['wall_us_per_step_median']:.0f}",
                f"{ratio:.3f}x"
                if ratio
                else ("1 (ref)" if label == "base/default" else "-"),
            )
        )
    widths = [max(len(str(x)) for x in col) for col in zip(hdr, *rows)]
    line = "  ".join(h.ljust(w) for h, w in zip(hdr, widths))
    print()
    print(
        f"Encoder cache, workload {name!r} (device {DEVICE} embeds, host {DEVICE * HOST_FACTOR}):"
    )
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))
    print()
    for t in r.get("targets", []):
        print(f"  [{t['status']:>6}] {t['name']}: {t['detail']}")
    print()
    print(f"Full report: {out / 'report.md'} (+ report.json, plots *.png, traces/)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="short demo run (< 3 min)")
    ap.add_argument("--out", default=str(BENCH_DIR))
    ap.add_argument("--base", default=str(BASE_DIR))
    ap.add_argument(
        "--tree",
        default=str(TREE_DIR),
        help="the series tree (default build/tree)",
    )
    ap.add_argument(
        "--cost-model",
        default=None,
        help="path of ec_cost_model.py (default: the series tree's)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--trace",
        action="append",
        default=[],
        help="replay this JSONL trace instead of the generated workloads "
        "(repeatable; see bench/README.md for the format)",
    )
    ap.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=["curves", "overhead", "deferral"],
    )
    ap.add_argument(
        "--pin-cpu",
        type=int,
        default=None,
        help="pin the timed overhead runs to this CPU",
    )
    ap.add_argument(
        "--render",
        action="store_true",
        help="only rewrite report.md and the plots from OUT/report.json",
    )
    args = ap.parse_args(argv)
    if args.render:
        import json

        r = json.loads((Path(args.out) / "report.json").read_text())
        r["targets"] = targets(r)
        write_report(r, Path(args.out))
        print((Path(args.out) / "report.md").read_text())
        return 0
    logging.basicConfig(
        level=logging.INFO, format="[bench %(asctime)s] %(message)s", datefmt="%H:%M:%S"
    )
    t0 = time.perf_counter()
    b = Bench(args)
    b.r["meta"].update(
        {
            "mode": "quick" if args.quick else "full",
            "seed": args.seed,
            "base": args.base,
            "tree": args.tree,
            "cost_model_path": b.cost_path,
            "device_embeds": DEVICE,
            "host_embeds": DEVICE * HOST_FACTOR,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
    )
    try:
        traces = b.workloads()
        b.start()
        n_main = len(traces) * 4
        b.bar = _progress(n_main, "replay")
        log.info("main table: %d workloads x 4 setups", len(traces))
        b.main_table(traces)
        if "curves" not in args.skip:
            log.info("miss-ratio curves")
            b.curves(traces)
        if "overhead" not in args.skip:
            log.info("scheduler overhead, alternating base/series")
            b.overhead(traces)
        if "deferral" not in args.skip:
            log.info("deferral scenario")
            b.deferral()
    finally:
        if b.bar is not None:
            b.bar.close()
        b.close()
    b.r["meta"]["total_s"] = time.perf_counter() - t0
    b.r["targets"] = targets(b.r)
    write_report(b.r, b.out)
    if args.quick:
        print_quick_table(b.r, b.out)
    else:
        print((b.out / "report.md").read_text())
    log.info("done in %.0fs; report: %s", b.r["meta"]["total_s"], b.out / "report.md")
    return 1 if b.r["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
