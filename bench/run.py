#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Replay benchmark of vLLM's encoder cache: policies vs peers vs bound, base vs series.

    .venv/bin/python bench/run.py --quick     # make demo: a short run, < 3 min
    .venv/bin/python bench/run.py             # make bench: everything, < 20 min

Writes build/bench/report.md, report.json, *.png and the traces (JSONL).
See bench/README.md for the workloads, the scenarios, the capacities, the
peers, the bound and the targets.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import queue
import resource
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import bound as B  # noqa: E402
from bench import deployment as D  # noqa: E402
from bench import peers as P  # noqa: E402
from bench import workloads as W  # noqa: E402
from bench.costmodel import load_encoder_cost  # noqa: E402
from bench.overhead import measure_overhead  # noqa: E402
from bench.report import (  # noqa: E402
    print_quick_table,
    scorecard,
    summarise,
    targets,
    write_report,
)
from bench.runner import (  # noqa: E402
    BASE_DIR,
    BASE_VERSION,
    BENCH_DIR,
    TREE_DIR,
    TreeProcess,
    cost_model_path,
    default_spec,
)
from bench.tiers import seed_range  # noqa: E402
from bench.trace import Trace, TraceError  # noqa: E402

log = logging.getLogger("bench")

MODEL = "Qwen/Qwen2-VL-2B-Instruct"
#: Total capacities of the main table, as fractions of the distinct footprint.
MAIN_FRACS = (0.25, 0.5)
#: Total capacities of the miss-ratio curves (>= 8 points, 5%..100%).
CURVE_FRACS = (0.05, 0.10, 0.15, 0.25, 0.35, 0.5, 0.75, 1.0)
HOST_PER_DEVICE = 8  #: device:host = 1:8 in the two-tier split
#: The two-tier manager's default host block
#: (``TwoTierEncoderCacheConfig.DEFAULT_HOST_BLOCK_EMBEDDINGS``).
HOST_BLOCK_EMBEDDINGS = 32
#: The kept multi-turn target of issue 6: device 8192 (vLLM's default
#: encoder_cache_size), host 8x, prefix caching off.
KEPT_DEVICE = 8192


def frac_label(f: float) -> str:
    return f"{round(f * 100):d}%"


def total_capacity(frac: float, footprint: int, max_item: int) -> int:
    """Total capacity at ``frac`` of a workload's footprint, raised to the
    largest item so that any item fits."""
    return max(round(frac * footprint), max_item)


def split(total: int, max_item: int) -> tuple[int, int]:
    """Device and host tiers of a two-tier cache of ``total`` embeddings at
    device:host = 1:8; the device holds at least the largest item. A host
    share smaller than one host block is left out (host 0): the manager
    rejects a host size above 0 that holds no whole block."""
    dev = max(round(total / (1 + HOST_PER_DEVICE)), max_item)
    host = max(0, total - dev)
    return dev, (host if host >= HOST_BLOCK_EMBEDDINGS else 0)


def _ns(d: Any) -> Any:
    """A dict tree as attributes (config.json for the cost functions)."""
    if isinstance(d, dict):
        return SimpleNamespace(**{k: _ns(v) for k, v in d.items()})
    return d


def _progress(total: int, desc: str) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is in the venv
        return None
    return tqdm(total=total, desc=desc, unit="run", file=sys.stderr, leave=False)


class Bench:
    """Runs everything; results collected in ``self.r`` (report.json)."""

    def __init__(
        self,
        args: argparse.Namespace,
        procs: dict[str, list[TreeProcess]] | None = None,
    ) -> None:
        self.args = args
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.quick = args.quick
        self.r: dict[str, Any] = {
            "meta": {},
            "workloads": {},
            "scenarios": {},
            "kept": {},
            "base_check": {},
            "overhead": {},
            "deferral": {},
            "errors": [],
        }
        self.cost_path = args.cost_model or cost_model_path(Path(args.tree))
        self.own_procs = procs is None
        self.procs: dict[str, list[TreeProcess]] = procs or {}
        self.bar: Any = None
        self.lock = threading.Lock()
        self._side: queue.Queue[Callable[[], None]] = queue.Queue()
        #: the run whose access sequence peers and bounds replay
        self.judged = "default"
        self._policies: tuple[list[str], str | None] | None = None
        cfg = D.hf_config(MODEL)
        self.kv = D.kv_capacity(cfg, block_size=D.SERVER_DEFAULTS["block_size"])
        self.sched = {s: D.scenario_sched(s, MODEL, self.kv) for s in D.SCENARIOS}
        fn, label = load_encoder_cost(self.cost_path)
        cfg_ns = _ns(cfg)
        flops: dict[int, float] = {}

        def cost(n: int) -> float:
            if n not in flops:
                flops[n] = float(fn(cfg_ns, n))
            return flops[n]

        self.cost = cost
        self.cost_label = label

    # ------------------------------------------------------------ children
    def start(self) -> None:
        t0 = time.perf_counter()
        if self.own_procs:
            log.info(
                "starting scheduler processes: base (%s), %d x series (%s)",
                self.args.base,
                self.args.jobs,
                self.args.tree,
            )
            logs = self.out / "logs"
            self.procs["base"] = [TreeProcess("base", Path(self.args.base), logs)]
            self.procs["series"] = [
                TreeProcess(f"series{k}", Path(self.args.tree), logs)
                for k in range(self.args.jobs)
            ]
        feats = {k: ps[0].wait_ready() for k, ps in self.procs.items()}
        for ps in self.procs.values():
            for p in ps:
                p.wait_ready()
        self.feats = feats
        self.r["meta"]["features"] = feats
        self.r["meta"]["startup_s"] = time.perf_counter() - t0
        log.info(
            "children ready in %.1fs; series features: %s",
            time.perf_counter() - t0,
            {k: v for k, v in feats["series"].items() if k != "vllm_file"},
        )

    def close(self) -> None:
        if not self.own_procs:
            return
        for ps in self.procs.values():
            for p in ps:
                p.close()

    def twotier_via(self) -> str | None:
        f = self.feats["series"]
        if f["two_tier"] and f["ec_manager_metadata"]:
            return "config"
        if f["two_tier_module"]:
            return "inject"
        return None

    def policies(self) -> tuple[list[str], str | None]:
        """(two-tier policies to run, the tree's default policy), from the
        series child's probe; a requested policy the tree lacks is an error."""
        if self._policies is not None:
            return self._policies
        f = self.feats["series"]
        if not self.twotier_via():
            self._policies = ([], None)
            return self._policies
        have = f.get("two_tier_policies") or ["lru", "score"]
        default: str | None = f.get("two_tier_default_policy") or "score"
        if default not in have:
            self.r["errors"].append(
                {
                    "run": f"the tree's default two-tier policy is {default!r}; it has {have}"
                }
            )
            default = None
        judge = getattr(self.args, "judge_policy", None)
        if judge:
            # Judge another registered policy as if it were the default
            # (validating a candidate default without editing the tree).
            if judge not in have:
                raise SystemExit(
                    f"bench: --judge-policy {judge!r}: the tree's policies are {have}"
                )
            default = judge
        # The judged policy is always run: the targets judge it.
        want = (self.args.policies or ["lru", "score"]) + ([default] if default else [])
        out: list[str] = []
        for p in want:
            if p not in have:
                self.r["errors"].append(
                    {"run": f"policy {p!r} requested but the tree has {have}"}
                )
            elif p not in out:
                out.append(p)
        self._policies = (out, default)
        return self._policies

    # ---------------------------------------------------------------- jobs
    def spec(
        self,
        trace: Path,
        scenario: str,
        manager: dict[str, Any],
        device: int,
        host: int = 0,
        **over: Any,
    ) -> dict[str, Any]:
        return default_spec(
            trace,
            cost_model_path=self.cost_path,
            manager=manager,
            device_embeds=int(device),
            host_embeds=int(host),
            sched=self.sched[scenario],
            **over,
        )

    def _internal_error(self, what: str, e: Exception) -> None:
        """A harness bug: reported as an error (non-zero exit), not hidden."""
        import traceback

        log.error("%s failed: %r", what, e)
        self.r["errors"].append(
            {"run": f"harness: {what}: {e!r}", "traceback": traceback.format_exc()}
        )

    def later(self, task: Callable[[], None]) -> None:
        """Queue a parent-side computation (bounds, peers) to run in the main
        thread while the children keep replaying."""
        self._side.put(task)

    def run_jobs(
        self, jobs: list[tuple[str, dict[str, Any], Callable[[dict[str, Any]], None]]]
    ) -> None:
        """Run ``(tree, spec, done)`` jobs on the children of each tree in
        parallel. ``done(result)`` is called under a lock and may queue
        parent-side work with :meth:`later`; this thread runs that work
        meanwhile."""
        free: dict[str, queue.Queue[TreeProcess]] = {}
        pools: dict[str, ThreadPoolExecutor] = {}
        for tree, ps in self.procs.items():
            free[tree] = queue.Queue()
            for p in ps:
                free[tree].put(p)
            pools[tree] = ThreadPoolExecutor(max_workers=len(ps))

        def work(tree: str, spec: dict[str, Any], done: Callable) -> None:
            child = free[tree].get()
            t0 = time.perf_counter()
            try:
                res = child.run(spec)
            except Exception as e:  # noqa: BLE001 - a dead child fails its runs
                res = {"status": "error", "kind": type(e).__name__, "message": str(e)}
            finally:
                free[tree].put(child)
            res["wall_s"] = time.perf_counter() - t0
            res["tree"] = tree
            with self.lock:
                if res.get("status") == "error":
                    msg = (
                        f"{tree} {Path(spec['trace']).name} {spec['manager']} "
                        f"dev={spec['device_embeds']} host={spec['host_embeds']}: "
                        f"{res.get('kind')}: {res.get('message')}"
                    )
                    log.error("%s", msg)
                    self.r["errors"].append(
                        {"run": msg, "traceback": res.get("traceback")}
                    )
                try:
                    done(res)
                except Exception as e:  # noqa: BLE001 - reported, run goes on
                    self._internal_error("collecting a result", e)
                if self.bar is not None:
                    self.bar.update(1)

        futs: list[Future] = []
        try:
            for tree, spec, done in jobs:
                futs.append(pools[tree].submit(work, tree, spec, done))
            pending = set(futs)
            while pending or not self._side.empty():
                try:
                    task = self._side.get(timeout=0.05)
                except queue.Empty:
                    pending = {f for f in pending if not f.done()}
                    continue
                try:
                    task()
                except Exception as e:  # noqa: BLE001 - reported, run goes on
                    with self.lock:
                        self._internal_error("bounds/peers", e)
            for f in futs:
                f.result()
        finally:
            for ex in pools.values():
                ex.shutdown(wait=True)

    # ----------------------------------------------------------- workloads
    def make_workloads(self) -> dict[str, dict[int | None, Path]]:
        """family -> seed -> trace path (seed None for --trace files)."""
        out: dict[str, dict[int | None, Path]] = {}
        if self.args.trace:
            max_len = int(D.SERVER_DEFAULTS["max_model_len"])
            for path in self.args.trace:
                try:
                    t = Trace.load(path)
                except (OSError, TraceError) as e:  # both name the file
                    raise SystemExit(f"--trace: {e}") from None
                if t.name in out:
                    raise SystemExit(
                        f"--trace {path}: another trace is also named {t.name!r} "
                        "(its file name, or its header's name); give each trace "
                        "its own"
                    )
                long = next((r for r in t.requests if r.prompt_tokens >= max_len), None)
                if long is not None:
                    raise SystemExit(
                        f"--trace {path}: request {long.id!r} has "
                        f"{long.prompt_tokens} prompt tokens; the harness serves "
                        f"the model with max_model_len {max_len}, and vLLM "
                        "rejects a prompt that leaves no room to generate"
                    )
                out[t.name] = {None: Path(path).resolve()}
                self.r["workloads"][t.name] = {
                    "generator": t.generator,
                    "params": t.params,
                    "seeds": {
                        "-": {
                            "trace": str(Path(path).resolve()),
                            "summary": t.summary(),
                        }
                    },
                }
            return out
        fams = W.families(scale=0.35 if self.quick else 1.0)
        names = self.args.families or (
            ["multi_turn", "agent_loop", "batch_eval"]
            if self.quick
            else list(W.FAMILIES)
        )
        seeds = seed_range(self.args)
        for name in names:
            if name not in fams:
                raise SystemExit(f"unknown family {name!r}; known: {', '.join(fams)}")
            out[name] = {}
            entry: dict[str, Any] = {"seeds": {}}
            for s in seeds:
                t = fams[name](s)
                p = t.save(self.out / "traces" / f"{_slug(name)}-s{s}.jsonl")
                out[name][s] = p
                entry["generator"] = t.generator
                entry["params"] = t.params
                entry["seeds"][str(s)] = {"trace": str(p), "summary": t.summary()}
            self.r["workloads"][name] = entry
        return out

    # -------------------------------------------------------------- phases
    def pilots(self, traces: dict[str, dict[int | None, Path]]) -> None:
        """Per scenario, family and seed: the default manager with room for
        everything. Its access sequence is the demand the encoder cache sees
        (the *canonical* sequence peers and bounds replay) and gives the
        distinct footprint the capacities are fractions of."""
        jobs = []
        for scen in self.args.scenarios:
            sc = self.r["scenarios"].setdefault(
                scen, {"doc": D.SCENARIOS[scen]["doc"], "families": {}}
            )
            for fam, seeds in traces.items():
                fe = sc["families"].setdefault(fam, {"seeds": {}})
                for seed, path in seeds.items():
                    summ = self.r["workloads"][fam]["seeds"][_sk(seed)]["summary"]
                    se = fe["seeds"].setdefault(_sk(seed), {"caps": {}})
                    room = max(summ["distinct_embeds"], summ["max_item_embeds"], 1)

                    def done(
                        res: dict[str, Any], se: dict = se, summ: dict = summ
                    ) -> None:
                        se["pilot"] = res
                        seq = [(h, s) for h, s in res.pop("access_seq", [])]
                        distinct: dict[str, int] = dict(seq)
                        se["footprint"] = sum(distinct.values())
                        se["max_item"] = summ["max_item_embeds"]
                        se["accesses"] = len(seq)
                        tot = B.total_value(seq, "embeds")
                        se["infinite_hit_ratio"] = (
                            B.infinite_cache_hits(seq, "embeds") / tot if tot else None
                        )

                    jobs.append(
                        (
                            "series",
                            self.spec(path, scen, {"kind": "default"}, room),
                            done,
                        )
                    )
        self.run_jobs(jobs)

    def capacity_runs(self, traces: dict[str, dict[int | None, Path]]) -> None:
        """Main table (every seed, 25%/50%), curves (first seed, 8 points),
        the kept multi-turn target and the base cross-check, in parallel.
        As the judged two-tier run of a point finishes, peers and bounds
        replay its access sequence here, meanwhile."""
        policies, default_policy = self.policies()
        via = self.twotier_via()
        if via and default_policy:
            self.judged = f"two-tier {default_policy}"
        self.r["meta"]["policies"] = policies
        self.r["meta"]["default_policy"] = default_policy
        self.r["meta"]["judge_policy_override"] = bool(
            getattr(self.args, "judge_policy", None)
        )
        self.r["meta"]["tree_default_policy"] = self.feats.get("series", {}).get(
            "two_tier_default_policy"
        )
        self.r["meta"]["judged"] = self.judged
        self.r["meta"]["foo_solver"] = B.foo_solver()
        jobs: list = []
        first_seed = {fam: next(iter(seeds)) for fam, seeds in traces.items()}
        curve_scen = {fam: self._curve_scenario(fam, first_seed[fam]) for fam in traces}
        self.r["meta"]["curve_scenarios"] = curve_scen
        for scen in self.args.scenarios:
            for fam, seeds in traces.items():
                for seed, path in seeds.items():
                    se = self.r["scenarios"][scen]["families"][fam]["seeds"][_sk(seed)]
                    if se.get("pilot", {}).get("status") != "ok":
                        continue
                    fracs = set(MAIN_FRACS)
                    if scen == curve_scen[fam] and seed == first_seed[fam]:
                        fracs |= set(CURVE_FRACS)
                    if not se["footprint"]:
                        se["note"] = "no multimodal item accessed: nothing to cache"
                        continue
                    for frac in sorted(fracs):
                        ce = self._cap_entry(se, frac, frac in MAIN_FRACS)
                        jobs += self._cap_jobs(
                            path, scen, ce, policies, default_policy, via
                        )
                    if scen == "default" and seed == first_seed[fam]:
                        jobs += self._base_check(path, scen, fam, se)
        jobs += self._kept_jobs(traces, via, default_policy)
        log.info("%d replays; peers and bounds follow the judged runs", len(jobs))
        self.bar = _progress(len(jobs), "replay")
        try:
            self.run_jobs(jobs)
        finally:
            if self.bar is not None:
                self.bar.close()
                self.bar = None

    def _curve_scenario(self, fam: str, seed: int | None) -> str | None:
        """Where a family's miss-ratio curve is drawn: the first curve
        scenario, unless the family has no reuse there (its pilot's
        infinite-cache hit ratio is below 0.01, e.g. chat whose history the
        prefix cache keeps) and another scenario that ran has some."""
        if not self.args.curve_scenarios:
            return None

        def reuse(scen: str) -> bool:
            fe = self.r["scenarios"].get(scen, {}).get("families", {}).get(fam, {})
            se = fe.get("seeds", {}).get(_sk(seed), {})
            return (se.get("infinite_hit_ratio") or 0.0) >= 0.01

        first = self.args.curve_scenarios[0]
        if first not in self.args.scenarios:
            return None
        if reuse(first):
            return first
        return next(
            (sc for sc in self.args.scenarios if sc != first and reuse(sc)), first
        )

    def _cap_entry(self, se: dict, frac: float, main: bool) -> dict[str, Any]:
        total = total_capacity(frac, se["footprint"], se["max_item"])
        dev, host = split(total, se["max_item"])
        ce = se["caps"].setdefault(
            frac_label(frac),
            {
                "frac": frac,
                "total": total,
                "device": dev,
                "host": host,
                "main": main,
                "runs": {},
            },
        )
        if total > round(frac * se["footprint"]):
            ce["note"] = f"raised to the largest item ({se['max_item']} embeds)"
        return ce

    def _cap_jobs(
        self,
        path: Path,
        scen: str,
        ce: dict,
        policies: list[str],
        default_policy: str | None,
        via: str | None,
    ) -> list:
        jobs = []

        def store(label: str) -> Callable[[dict[str, Any]], None]:
            def done(res: dict[str, Any]) -> None:
                seq = [(h, s) for h, s in res.pop("access_seq", None) or []]
                ce["runs"][label] = res
                if res.get("status") != "ok":
                    return
                if label == self.judged:
                    self.later(lambda: self._bounds(ce, res, seq))
                elif ce["main"]:
                    self.later(lambda: self._own_bound(res, seq, ce["total"]))

            return done

        total = ce["total"]
        jobs.append(
            (
                "series",
                self.spec(path, scen, {"kind": "default"}, total),
                store("default"),
            )
        )
        if via is None:
            return jobs
        for pol in policies:
            mgr = {"kind": "twotier", "policy": pol, "via": via}
            jobs.append(
                (
                    "series",
                    self.spec(path, scen, mgr, ce["device"], ce["host"]),
                    store(f"two-tier {pol}"),
                )
            )
        if ce["main"] and default_policy:
            mgr = {"kind": "twotier", "policy": default_policy, "via": via}
            jobs.append(
                (
                    "series",
                    self.spec(path, scen, mgr, total, 0),
                    store(f"two-tier {default_policy} host 0"),
                )
            )
        return jobs

    def _base_check(self, path: Path, scen: str, fam: str, se: dict) -> list:
        """base/default vs series/default at 25%: the same hits expected."""
        ce = se["caps"].get(frac_label(MAIN_FRACS[0]))
        if ce is None:
            return []

        def done(res: dict[str, Any]) -> None:
            res.pop("access_seq", None)
            self.r["base_check"][fam] = {"total": ce["total"], "base": res}

        return [
            (
                "base",
                self.spec(
                    path, scen, {"kind": "default"}, ce["total"], record_accesses=False
                ),
                done,
            )
        ]

    def _kept_jobs(
        self,
        traces: dict[str, dict[int | None, Path]],
        via: str | None,
        default_policy: str | None,
    ) -> list:
        """Issue 6's kept target: multi-turn chat, prefix caching off,
        device 8192 (+ host 8x for the two-tier) vs the default manager."""
        if (
            "kept" in self.args.skip
            or "multi_turn" not in traces
            or via is None
            or not default_policy
        ):
            return []
        jobs = []
        kept = self.r["kept"] = {
            "family": "multi_turn",
            "scenario": "pc_off",
            "device": KEPT_DEVICE,
            "host": KEPT_DEVICE * HOST_PER_DEVICE,
            "policy": default_policy,
            "seeds": {},
        }
        for seed, path in traces["multi_turn"].items():
            ke = kept["seeds"].setdefault(_sk(seed), {})
            for label, mgr, host in (
                ("default", {"kind": "default"}, 0),
                (
                    "two-tier",
                    {"kind": "twotier", "policy": default_policy, "via": via},
                    KEPT_DEVICE * HOST_PER_DEVICE,
                ),
            ):

                def done(
                    res: dict[str, Any], ke: dict = ke, label: str = label
                ) -> None:
                    res.pop("access_seq", None)
                    ke[label] = res

                jobs.append(
                    (
                        "series",
                        self.spec(
                            path,
                            "pc_off",
                            mgr,
                            KEPT_DEVICE,
                            host,
                            record_accesses=False,
                        ),
                        done,
                    )
                )
        return jobs

    def _own_bound(self, res: dict[str, Any], seq: list, capacity: int) -> None:
        """Per-run proof obligation: hits <= FOO bound of the sequence the run
        really served, at its total capacity."""
        ub = B.foo_upper_bound(seq, capacity)
        hits = res["hit_embeds"]["device"] + res["hit_embeds"]["host"]
        with self.lock:
            res["own_bound_embeds"] = ub
            res["bound_ok"] = hits <= ub + 1e-6
            if not res["bound_ok"]:
                self.r["errors"].append(
                    {"run": f"{res.get('manager')}: hits {hits} > FOO bound {ub}"}
                )

    def _bounds(self, ce: dict, res: dict[str, Any], seq: list) -> None:
        """Bounds and libcachesim peers on the judged run's access sequence."""
        cap = ce["total"]
        t0 = time.process_time()
        tot_e = B.total_value(seq, "embeds")
        tot_c = B.total_value(seq, "cost", self.cost)
        foo = B.foo_upper_bound(seq, cap)
        bd = {
            "sequence": self.judged,
            "accesses": len(seq),
            "foo": foo / tot_e,
            "foo_cost": B.foo_upper_bound(seq, cap, "cost", self.cost) / tot_c,
            "belady_size": B.belady_size_hits(seq, cap) / tot_e,
            "belady_size_cost": B.belady_size_hits(seq, cap, "cost", self.cost) / tot_c,
            "infinite": B.infinite_cache_hits(seq, "embeds") / tot_e,
        }
        try:
            peers = P.run_peers(seq, cap, self.cost)
        except P.PeersUnavailable as e:
            peers = {}
            with self.lock:
                if not any("libcachesim" in x["run"] for x in self.r["errors"]):
                    self.r["errors"].append({"run": f"peers: {e}"})
        bd["cpu_s"] = time.process_time() - t0
        hits = res["hit_embeds"]["device"] + res["hit_embeds"]["host"]
        with self.lock:
            res["own_bound_embeds"] = foo
            res["bound_ok"] = hits <= foo + 1e-6
            for name, ok in [("ours", res["bound_ok"])] + [
                (f"libcachesim {o}", peers[o]["embeds"] <= bd["foo"] + 1e-9)
                for o in P.OFFLINE
                if o in peers and peers[o]["embeds"] is not None
            ]:
                if not ok:
                    self.r["errors"].append(
                        {"run": f"{name} above the FOO bound {bd['foo']:.4f} at {cap}"}
                    )
            ce["bound"] = bd
            ce["peers"] = peers

    # ------------------------------------------------------------ deferral
    def deferral(self) -> None:
        p = W.ZipfParams(requests=120 if self.quick else 300, rate_per_s=12.0)
        base = W.zipf_shared(self.args.seed, p, name="deferral")
        t = W.with_remote(
            base, self.args.seed, W.RemoteParams(p_remote=0.3), name="deferral"
        )
        path = t.save(self.out / "traces" / "deferral.jsonl")
        self.r["workloads"]["deferral"] = {
            "generator": t.generator,
            "params": t.params,
            "seeds": {
                _sk(self.args.seed): {"trace": str(path), "summary": t.summary()}
            },
        }
        latency = 0.25
        d: dict[str, Any] = {"latency_s": latency, "scenario": "default", "runs": {}}
        jobs = []
        for tree in ("base", "series"):
            for mode in ("ideal", "blocking", "deferral"):

                def done(res: dict[str, Any], key: str = f"{tree}/{mode}") -> None:
                    d["runs"][key] = res

                spec = self.spec(
                    path,
                    "default",
                    {"kind": "default"},
                    8192,
                    connector={"latency_s": latency, "mode": mode},
                    record_accesses=False,
                )
                jobs.append((tree, spec, done))
        self.run_jobs(jobs)
        d["runs"] = {
            k: d["runs"][k]
            for k in (
                f"{t}/{m}"
                for t in ("base", "series")
                for m in ("ideal", "blocking", "deferral")
            )
            if k in d["runs"]
        }
        for tree in ("base", "series"):
            ideal = d["runs"].get(f"{tree}/ideal", {})
            if ideal.get("status") != "ok":
                continue
            for mode in ("blocking", "deferral"):
                res = d["runs"][f"{tree}/{mode}"]
                if res.get("status") == "ok":
                    res["makespan_ratio"] = res["makespan_s"] / ideal["makespan_s"]
                    res["ttft_p50_ratio"] = res["ttft_p50_s"] / ideal["ttft_p50_s"]
                    res["ttft_p99_ratio"] = res["ttft_p99_s"] / ideal["ttft_p99_s"]
        self.r["deferral"] = d


def _slug(s: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in s)


def _sk(seed: int | None) -> str:
    return "-" if seed is None else str(seed)


def _cpu_totals() -> dict[str, float]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "parent_cpu_s": me.ru_utime + me.ru_stime,
        "children_cpu_s": ch.ru_utime + ch.ru_stime,
    }


def _csv(value: str) -> list[str]:
    """A comma-separated command-line list (empty items dropped)."""
    return [x for x in value.split(",") if x]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
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
    ap.add_argument("--seed", type=int, default=0, help="first seed")
    ap.add_argument(
        "--seeds", type=int, default=None, help="seeds per family (default 5, quick 2)"
    )
    ap.add_argument(
        "--families",
        type=_csv,
        default=None,
        help=f"comma-separated subset of: {', '.join(W.FAMILIES)} (the default), "
        f"or of the variants outside the suite: {', '.join(W.VARIANTS)}",
    )
    ap.add_argument(
        "--policies",
        type=_csv,
        default=None,
        help="two-tier policies to run (default: lru, score); the tree's default "
        "policy always runs too",
    )
    ap.add_argument(
        "--judge-policy",
        default=None,
        help="judge this two-tier policy (one the tree registers) against the "
        "targets instead of the tree's default policy",
    )
    ap.add_argument(
        "--scenarios",
        type=_csv,
        default=None,
        help=f"scenarios of the main table (default: all of {', '.join(D.SCENARIOS)})",
    )
    ap.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="series child processes replaying in parallel (default: CPUs, max 2)",
    )
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
        choices=["curves", "overhead", "deferral", "kept"],
    )
    ap.add_argument(
        "--overhead-rounds", type=int, default=None, help="default 10 (quick 3)"
    )
    ap.add_argument(
        "--render",
        action="store_true",
        help="only rewrite report.md and the plots from OUT/report.json",
    )
    args = ap.parse_args(argv)
    if args.seeds is None:
        args.seeds = 2 if args.quick else 5
    if args.scenarios is None:
        args.scenarios = ["default"] if args.quick else list(D.SCENARIOS)
    for s in args.scenarios:
        if s not in D.SCENARIOS:
            ap.error(f"unknown scenario {s!r}; known: {', '.join(D.SCENARIOS)}")
    args.curve_scenarios = [] if "curves" in args.skip or args.quick else ["default"]
    if args.jobs is None:
        args.jobs = max(1, min(2, len(os.sched_getaffinity(0))))
    if args.overhead_rounds is None:
        args.overhead_rounds = 3 if args.quick else 10
    return args


def main(
    argv: list[str] | None = None, procs: dict[str, list[TreeProcess]] | None = None
) -> int:
    args = parse_args(argv)
    if args.render:
        import json

        r = json.loads((Path(args.out) / "report.json").read_text())
        r["summary"] = summarise(r)
        r["targets"] = targets(r)
        r["scorecard"] = scorecard(r)
        write_report(r, Path(args.out))
        print((Path(args.out) / "report.md").read_text())
        return 0
    logging.basicConfig(
        level=logging.INFO, format="[bench %(asctime)s] %(message)s", datefmt="%H:%M:%S"
    )
    t0 = time.perf_counter()
    b = Bench(args, procs)
    b.r["meta"].update(
        {
            "mode": "quick" if args.quick else "full",
            "seeds": [] if args.trace else list(seed_range(args)),
            "traces": [str(Path(t).resolve()) for t in args.trace],
            "base": args.base,
            "base_version": BASE_VERSION,
            "tree": args.tree,
            "model": MODEL,
            "cost_model_path": b.cost_path,
            "encoder_cost": b.cost_label,
            "kv": b.kv,
            "sched": b.sched,
            "scenarios": args.scenarios,
            "main_fracs": list(MAIN_FRACS),
            "curve_fracs": list(CURVE_FRACS),
            "host_per_device": HOST_PER_DEVICE,
            "jobs": args.jobs,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": len(os.sched_getaffinity(0)),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
    )
    try:
        traces = b.make_workloads()
        b.start()
        log.info("pilot runs: demand and footprint per scenario, family and seed")
        b.pilots(traces)
        log.info("capacity runs, peers and bounds")
        b.capacity_runs(traces)
        if "overhead" not in args.skip:
            log.info(
                "scheduler overhead, alternating base/series (light and heavy load)"
            )
            b.r["overhead"] = measure_overhead(b, traces)
        if "deferral" not in args.skip:
            log.info("deferral scenario")
            b.deferral()
    finally:
        b.close()
    b.r["meta"]["total_s"] = time.perf_counter() - t0
    b.r["meta"].update(_cpu_totals())
    b.r["summary"] = summarise(b.r)
    b.r["targets"] = targets(b.r)
    b.r["scorecard"] = scorecard(b.r)
    write_report(b.r, b.out)
    if args.quick:
        print_quick_table(b.r, b.out)
    else:
        print((b.out / "report.md").read_text())
    log.info(
        "done in %.0fs (CPU: parent %.0fs, children %.0fs); report: %s",
        b.r["meta"]["total_s"],
        b.r["meta"]["parent_cpu_s"],
        b.r["meta"]["children_cpu_s"],
        b.out / "report.md",
    )
    return 1 if b.r["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
