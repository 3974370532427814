# SPDX-License-Identifier: Apache-2.0
"""Tensor parallelism on CPU: vLLM's multiproc executor with TP ranks in
separate worker processes (gloo process groups plus the CPU backend's
shared-memory all-reduce), the tiny Qwen2-VL model, the default manager and
the two-tier manager.

Each case runs ``LLM(...)`` in a child process (its own process group) from
the selected tree. The child installs :mod:`scaleout.probe` on every rank,
generates ``rounds`` times with the same prompts and images (one image per
prompt, prefix caching off, so every round needs the encoder outputs again)
and reads every rank's probe after each round.

Binding: vLLM's CPU backend binds each TP rank's OpenMP threads to its own
NUMA node by default (``VLLM_CPU_OMP_THREADS_BIND=auto``) and refuses more
local ranks than NUMA nodes (``vllm/utils/ompmultiprocessing.py``,
``_get_autobind_cpu_ids``: "Not enough allowed NUMA nodes to bind threads of
2 local CPUWorkers"). On a one-node machine the documented alternative is an
explicit list per rank, which :func:`omp_bind` derives from the CPUs this
process may use ("0|1" on two cores).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parents[1]
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

import engine_probe  # noqa: E402

from scaleout import procs  # noqa: E402

EXTENSION = "scaleout.probe.ScaleoutWorkerExtension"
TWO_TIER = "vllm.v1.core.two_tier_encoder_cache_manager.TwoTierEncoderCacheManager"
NUM_IMAGES = 4
ROUNDS = 3
MAX_TOKENS = 8
# Device tier = encoder_cache_size = max_num_batched_tokens: 64 embeddings,
# fewer than the 108 of the 4 images, so the two-tier manager must demote.
DEVICE_TIER_EMBEDS = 64
HOST_CACHE_GIB = 0.01
# Any "host hits: N" in the stats line the engine logs for a tiered cache.
HOST_HITS_RE = re.compile(r"host hits: (\d+)")

CASES: dict[str, dict[str, Any]] = {
    "tp1_default": {"tp": 1, "two_tier": False},
    "tp1_two_tier": {"tp": 1, "two_tier": True},
    "tp2_default": {"tp": 2, "two_tier": False},
    "tp2_two_tier": {"tp": 2, "two_tier": True},
}


def omp_bind(tp: int) -> str | None:
    """``VLLM_CPU_OMP_THREADS_BIND`` for ``tp`` local ranks: the allowed CPUs
    split into ``tp`` contiguous groups ("0|1"); None for one rank (vLLM's
    automatic binding works there); "nobind" with fewer CPUs than ranks."""
    if tp <= 1:
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < tp:
        return "nobind"
    size = len(cpus) // tp
    groups = [cpus[i * size : (i + 1) * size] for i in range(tp)]
    return "|".join(",".join(str(c) for c in g) for g in groups)


def llm_kwargs(model: Path, tp: int, two_tier: bool) -> dict[str, Any]:
    """``LLM`` kwargs of one case."""
    overrides: dict[str, Any] = {
        "tensor_parallel_size": tp,
        "max_num_batched_tokens": DEVICE_TIER_EMBEDS,
        "disable_log_stats": False,
        "worker_extension_cls": EXTENSION,
    }
    if tp > 1:
        overrides["distributed_executor_backend"] = "mp"
    if two_tier:
        overrides["ec_manager_config"] = {
            "encoder_cache_manager_cls": TWO_TIER,
            "manager_config": {"host_cache_gib": HOST_CACHE_GIB},
        }
    return engine_probe.tiny_mm_llm_kwargs(model, **overrides)


# ------------------------------------------------------------ child side
def _child(spec_path: str, out_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    from PIL import Image
    from vllm import LLM, SamplingParams

    t0 = time.monotonic()
    llm = LLM(**spec["llm_kwargs"])
    startup_s = time.monotonic() - t0
    workers = llm.collective_rpc("scaleout_install")
    images = [Image.open(p).convert("RGB") for p in spec["images"]]
    requests = [
        {"prompt": p, "multi_modal_data": {"image": img}}
        for p, img in zip(spec["prompts"], images)
    ]
    params = SamplingParams(**spec["sampling"])
    llm.collective_rpc("scaleout_read", args=("1",))  # drop warm-up records
    rounds = []
    for _ in range(spec["rounds"]):
        t1 = time.monotonic()
        outs = llm.generate(requests, params, use_tqdm=False)
        gen_s = time.monotonic() - t1
        rounds.append(
            {
                "generate_s": gen_s,
                "token_ids": [list(o.outputs[0].token_ids) for o in outs],
                "prompt_token_ids": [list(o.prompt_token_ids or []) for o in outs],
                "ranks": llm.collective_rpc("scaleout_read", args=("1",)),
            }
        )
    Path(out_path).write_text(
        json.dumps({"startup_s": startup_s, "workers": workers, "rounds": rounds})
    )
    del llm
    return 0


# ----------------------------------------------------------- parent side
def run_case(
    name: str,
    tree: str,
    model: Path,
    images: list[Any],
    out_dir: Path,
    timeout: float = 420.0,
) -> dict[str, Any]:
    """Run one case of :data:`CASES` in a child process group; returns the
    child's result plus ``wall_s`` and ``log`` (path). Raises with the log
    tail on failure or timeout (after killing the group)."""
    case = CASES[name]
    extra_env = {"VLLM_LOG_STATS_INTERVAL": "0.001"}
    bind = omp_bind(case["tp"])
    if bind is not None:
        extra_env["VLLM_CPU_OMP_THREADS_BIND"] = bind
    env = engine_probe.child_env(tree, extra_env)
    work = out_dir / name
    work.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, img in enumerate(images):
        p = work / f"image{i}.png"
        img.save(p)
        paths.append(str(p))
    spec = {
        "llm_kwargs": llm_kwargs(model, case["tp"], case["two_tier"]),
        "prompts": [
            engine_probe.qwen2_vl_prompt(q) for q in engine_probe.TINY_MM_QUESTIONS
        ][: len(images)],
        "images": paths,
        "sampling": {
            "max_tokens": MAX_TOKENS,
            "temperature": 0.0,
            "ignore_eos": True,
            "seed": 0,
        },
        "rounds": ROUNDS,
    }
    spec_path, out_path, log_path = (
        work / "spec.json",
        work / "result.json",
        out_dir / f"{name}.log",
    )
    out_path.unlink(missing_ok=True)
    spec_path.write_text(json.dumps(spec))
    t0 = time.monotonic()
    shm: set[str] = set()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "scaleout.tp",
                "--child",
                str(spec_path),
                str(out_path),
            ],
            env=env,
            cwd=work,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        rc = None
        try:
            while time.monotonic() - t0 < timeout:
                shm |= procs.group_shm_files(proc.pid)
                try:
                    rc = proc.wait(timeout=1.0)
                    break
                except subprocess.TimeoutExpired:
                    continue
        finally:
            # The engine core and the TP workers are in the child's group:
            # let them finish their shutdown, then kill what is left.
            procs.wait_group_gone(proc.pid, 10.0)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            procs.wait_group_gone(proc.pid, 10.0)
            leaked = procs.remove_leaked_shm(shm)
    wall = time.monotonic() - t0
    text = log_path.read_text(errors="replace")
    if rc != 0 or not out_path.exists():
        why = "timed out" if rc is None else f"rc={rc}"
        raise RuntimeError(f"TP case {name} failed ({why}); log tail:\n{text[-6000:]}")
    result = json.loads(out_path.read_text())
    result.update(name=name, wall_s=wall, log=str(log_path), leaked_shm=leaked, **case)
    hits = HOST_HITS_RE.findall(text)
    result["host_hits"] = int(hits[-1]) if hits else None
    result["two_tier_logged"] = "Two-tier encoder cache" in text
    return result


# -------------------------------------------------------------- analysis
def host_bytes(result: dict[str, Any]) -> int:
    """Bytes of the instance's host tier: per round, the bytes allocated to
    each distinct file backing it (a region the ranks share counts once),
    plus the union of the ranks' resident private page keys times the page
    size; the maximum over rounds."""
    best = 0
    for rnd in result["rounds"]:
        keys: set[str] = set()
        files: dict[str, int] = {}
        page = 4096
        for rank in rnd["ranks"]:
            mem = rank["host_memory"]
            keys.update(mem["page_keys"])
            page = mem["page_size"]
            files.update((b["file"], b["bytes"]) for b in mem.get("backing", []))
        best = max(best, len(keys) * page + sum(files.values()))
    return best


def host_logical_bytes(result: dict[str, Any]) -> int:
    """Bytes of the host entries summed over ranks (max over rounds)."""
    return max(
        sum(r["host_memory"]["logical_bytes"] for r in rnd["ranks"])
        for rnd in result["rounds"]
    )


def ranks_consistent(result: dict[str, Any]) -> tuple[bool, list[str]]:
    """Every rank received the same encoder-cache inputs and ended every
    step with the same tier contents. Returns (ok, problems)."""
    problems: list[str] = []
    for r, rnd in enumerate(result["rounds"]):
        ranks = rnd["ranks"]
        if len(ranks) != result["tp"]:
            problems.append(f"round {r}: {len(ranks)} ranks answered")
            continue
        ref = ranks[0]
        if not ref["steps"]:
            problems.append(f"round {r}: rank 0 recorded no step")
        for other in ranks[1:]:
            a = [(s["step"], s["received"], s["tiers"]) for s in ref["steps"]]
            b = [(s["step"], s["received"], s["tiers"]) for s in other["steps"]]
            if len(a) != len(b):
                problems.append(
                    f"round {r}: rank 0 ran {len(a)} steps, rank "
                    f"{other['rank']} {len(b)}"
                )
            for x, y in zip(a, b):
                if x != y:
                    what = "metadata" if x[1] != y[1] else "tier contents"
                    problems.append(
                        f"round {r}: step {x[0]}: {what} differ between rank 0 "
                        f"and rank {other['rank']}"
                    )
                    break
            if other["tiers"] != ref["tiers"]:
                problems.append(
                    f"round {r}: final tiers differ on rank {other['rank']}"
                )
    return not problems, problems


def summarize_case(
    result: dict[str, Any], ref: dict[str, Any] | None
) -> dict[str, Any]:
    """Facts of one case, compared with the reference case ``ref``."""
    tokens = [rnd["token_ids"] for rnd in result["rounds"]]
    rank0 = [rnd["ranks"][0] for rnd in result["rounds"]]
    steps = [s for r in rank0 for s in r["steps"]]
    ok, problems = ranks_consistent(result)
    out = {
        "tp": result["tp"],
        "two_tier": result["two_tier"],
        "startup_s": round(result["startup_s"], 1),
        "wall_s": round(result["wall_s"], 1),
        "encoder_items_per_round": [len(r["encoded"]) for r in rank0],
        "vision_forward_calls_per_round": [r["vision_forward_calls"] for r in rank0],
        "steps": len(steps),
        "steps_with_metadata_ops": sum(s["metadata_nonempty"] for s in steps),
        "max_host_entries": max((s["num_host"] for s in steps), default=0),
        "ranks_consistent": ok,
        "rank_problems": problems[:10],
        "host_hits": result["host_hits"],
        "host_bytes": host_bytes(result),
        # One region's bytes (header and blocks), as the ranks report it.
        "host_budget_bytes": max(
            (
                rank["host_memory"].get("budget_bytes", 0)
                for rnd in result["rounds"]
                for rank in rnd["ranks"]
            ),
            default=0,
        ),
        "host_logical_bytes": host_logical_bytes(result),
        "host_memory_method": sorted(
            {
                r["host_memory"]["method"]
                for rnd in result["rounds"]
                for r in rnd["ranks"]
            }
        ),
        # Whole worker processes after the last round (context only: the
        # weights, KV cache and allocator dominate them).
        "worker_rss_pss": [
            {k: r["host_memory"]["process"].get(k) for k in ("rss", "pss")}
            for r in result["rounds"][-1]["ranks"]
        ],
        "worker_pids": sorted({w["pid"] for w in result["workers"]}),
        "leaked_shm_removed": result["leaked_shm"],
        "companion": result["workers"][0]["companion_class"],
        "log": result["log"],
    }
    if ref is not None:
        ref_tokens = [rnd["token_ids"] for rnd in ref["rounds"]]
        out["identical_to_tp1_default"] = tokens == ref_tokens
        out["first_mismatch"] = next(
            (
                {"round": i, "prompt": j, "got": a, "want": b}
                for i, (ra, rb) in enumerate(zip(tokens, ref_tokens))
                for j, (a, b) in enumerate(zip(ra, rb))
                if a != b
            ),
            None,
        )
    return out


def run_tp(
    tree: str,
    model: Path,
    out_dir: Path,
    cases: list[str],
    log: Any = print,
) -> dict[str, Any]:
    """Run ``cases`` (names of :data:`CASES`; ``tp1_default`` first, the
    reference) and return ``{"cases": {name: summary}, "summary": {...}}``
    with the ``tp2`` block of ``summary.json`` (fields whose case did not run
    are None)."""
    images = engine_probe.make_images(NUM_IMAGES, seed=0)
    if cases[0] != "tp1_default":
        raise ValueError("the first TP case must be tp1_default (the reference)")
    results: dict[str, dict[str, Any]] = {}
    summaries: dict[str, dict[str, Any]] = {}
    for name in cases:
        log(f"scaleout: TP case {name} ...")
        res = run_case(name, tree, model, images, out_dir)
        results[name] = res
        summaries[name] = summarize_case(
            res, None if name == "tp1_default" else results["tp1_default"]
        )
        log(f"scaleout:   {name}: {json.dumps(_short(summaries[name]))}")
    tp2 = [n for n in cases if CASES[n]["tp"] == 2]
    two = summaries.get("tp2_two_tier")
    one = summaries.get("tp1_two_tier")
    summary = {
        "identical_outputs": bool(tp2)
        and all(summaries[n]["identical_to_tp1_default"] for n in tp2),
        "ranks_consistent": bool(tp2)
        and all(summaries[n]["ranks_consistent"] for n in tp2)
        # Not vacuous: the two-tier case moved entries between tiers.
        and (
            two is None
            or (two["steps_with_metadata_ops"] > 0 and two["max_host_entries"] > 0)
        ),
        "host_hits": int(two["host_hits"] or 0) if two else None,
        "host_bytes_tp1": one["host_bytes"] if one else None,
        "host_bytes_tp2": two["host_bytes"] if two else None,
    }
    return {
        "cases": summaries,
        "summary": summary,
        "reference_tokens": [
            rnd["token_ids"] for rnd in results["tp1_default"]["rounds"]
        ],
        # Round 1 of the reference, for other single-instance comparisons.
        "reference": {
            k: results["tp1_default"]["rounds"][0][k]
            for k in ("token_ids", "prompt_token_ids")
        },
    }


def _short(s: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "startup_s",
        "wall_s",
        "encoder_items_per_round",
        "identical_to_tp1_default",
        "ranks_consistent",
        "steps",
        "steps_with_metadata_ops",
        "max_host_entries",
        "host_hits",
        "host_bytes",
        "host_logical_bytes",
    )
    return {k: s[k] for k in keys if k in s}


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        sys.exit(_child(sys.argv[2], sys.argv[3]))
    sys.exit("usage: python -m scaleout.tp --child SPEC OUT (see scaleout.cli)")
