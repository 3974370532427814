#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""CUDA check of the two-tier encoder cache's worker side (issue 10, item 2).

Builds the real ``TwoTierEncoderCacheWorker`` of a tree (its pinned, paged
host region and its copy stream) on one GPU and measures, with CUDA events:

* **bandwidth**: the worker's demotions (device -> host) and promotions
  (host -> device) of a batch of LLaVA-sized outputs (576 x 4096 bf16,
  4.5 MiB), with contiguous and with scattered host blocks, against the
  pinned-copy peak of the same machine (one large copy between a pinned
  ``cudaHostAlloc`` buffer and device memory);
* **overlap**: a GEMM loop on the compute stream alone, the copies of one
  step alone, and both together in the order the runner issues them (the
  metadata of a step is applied, then the step computes);
  ``fraction = (t_compute + t_copy - t_both) / min(t_compute, t_copy)``;
* **memory**: the allocator's peak while steps demote, promote and compute
  new outputs under a device budget the way the scheduler counts it, against
  the documented bound (the budget plus the bytes demoted in one step, whose
  memory is reused only after their copies);
* **bit-exactness** of every round trip.

It prints one JSON line on stdout (vLLM's log lines go to stderr) and runs in well under 5 minutes. Without CUDA it
refuses (exit 2) unless ``--dry-run`` is given, which runs the same code on
CPU tensors with small sizes (no timing or memory figures) to check the
script itself.

Usage::

    python tools/device_check_two_tier.py [--tree build/tree] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", default="build/tree", help="vLLM tree with the series")
    p.add_argument("--dry-run", action="store_true", help="CPU, small, no timings")
    p.add_argument("--entries", type=int, default=64, help="outputs per batch")
    p.add_argument("--host-gib", type=float, default=2.0, help="host tier size")
    return p.parse_args()


class Bench:
    """One worker, its layout, and the scheduler-side bookkeeping this
    script does by hand: host blocks (FIFO, as the manager) and steps."""

    ROWS, WIDTH = 576, 4096  # LLaVA-1.5: 576 embeddings of 4096 bf16
    BLOCK_EMBEDDINGS = 32

    def __init__(self, device: str, host_gib: float, rows: int, width: int) -> None:
        import torch

        from vllm.config import VllmConfig
        from vllm.v1.core.two_tier_encoder_cache_manager import TwoTierHostLayout
        from vllm.v1.worker.two_tier_encoder_cache_worker import (
            TwoTierEncoderCacheWorker,
        )

        self.torch = torch
        self.device = torch.device(device)
        self.rows, self.width = rows, width
        bytes_per_embedding = width * 2
        num_blocks = int(host_gib * (1 << 30)) // (
            self.BLOCK_EMBEDDINGS * bytes_per_embedding
        )
        self.layout = TwoTierHostLayout(
            num_blocks=num_blocks,
            block_embeddings=self.BLOCK_EMBEDDINGS,
            bytes_per_embedding=bytes_per_embedding,
            size_setting=f"ec_manager_config.manager_config.host_cache_gib={host_gib}",
        )
        self.device_cache: dict[str, Any] = {}
        self.worker = TwoTierEncoderCacheWorker(
            VllmConfig(), self.device, self.device_cache, host_layout=self.layout
        )
        self.free_blocks: deque[int] = deque(range(num_blocks))
        self.host_blocks: dict[str, list[int]] = {}
        self.step = 0
        self.blocks_per_entry = -(-rows // self.BLOCK_EMBEDDINGS)
        self.entry_bytes = rows * bytes_per_embedding
        self.pending_free: list[list[int]] = []

    # ------------------------------------------------------------- steps
    def output(self, seed: int):
        """An encoder output, made on the compute stream."""
        torch = self.torch
        gen = torch.Generator(device=self.device).manual_seed(seed)
        return torch.randn(
            self.rows,
            self.width,
            generator=gen,
            device=self.device,
            dtype=torch.bfloat16,
        )

    def apply(
        self,
        demote: list[str] = (),
        promote: list[str] = (),
        scattered: bool = False,
    ) -> None:
        """One scheduler step's metadata, applied by the worker."""
        # Blocks read by the last step's promotions are free from now on.
        for blocks in self.pending_free:
            self.free_blocks.extend(blocks)
        self.pending_free = []
        host_blocks = {}
        for h in demote:
            if scattered:
                # Every other free block: runs of one block, the worst case.
                free = list(self.free_blocks)
                take = free[::2][: self.blocks_per_entry]
                for b in take:
                    self.free_blocks.remove(b)
            else:
                take = [
                    self.free_blocks.popleft() for _ in range(self.blocks_per_entry)
                ]
            host_blocks[h] = take
            self.host_blocks[h] = take
        for h in promote:
            self.pending_free.append(self.host_blocks.pop(h))
        self.send(demote=list(demote), promote=list(promote), host_blocks=host_blocks)

    def send(self, **ops: Any) -> None:
        """Hand the worker a step with no requests and this step's metadata
        (`TwoTierEncoderCacheMetadata` fields), as the runner does."""
        from vllm.v1.core.sched.output import CachedRequestData, SchedulerOutput
        from vllm.v1.core.two_tier_encoder_cache_manager import (
            TwoTierEncoderCacheMetadata,
        )

        meta = TwoTierEncoderCacheMetadata(step=self.step, **ops)
        self.step += 1
        self.worker.process_scheduler_output(
            SchedulerOutput(
                scheduled_new_reqs=[],
                scheduled_cached_reqs=CachedRequestData.make_empty(),
                num_scheduled_tokens={},
                total_num_scheduled_tokens=0,
                scheduled_spec_decode_tokens={},
                scheduled_encoder_inputs={},
                num_common_prefix_blocks=[],
                finished_req_ids=set(),
                free_encoder_mm_hashes=[],
                ec_manager_metadata=meta,
            )
        )


def _pinned_peak(torch, nbytes: int) -> dict[str, float]:
    """GB/s of one large copy each way between pinned host memory and the
    device, best of 5."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    best = {"d2h": 0.0, "h2d": 0.0}
    for _ in range(5):
        for direction, (dst, src) in (("d2h", (host, dev)), ("h2d", (dev, host))):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src, non_blocking=True)
            end.record()
            end.synchronize()
            gbps = nbytes / (start.elapsed_time(end) * 1e-3) / 1e9
            best[direction] = max(best[direction], gbps)
    return best


def _timed_on_side(bench: Bench, fn) -> float:
    """Milliseconds the worker's copy stream spends on what `fn` issues."""
    torch = bench.torch
    side = bench.worker._stream
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record(side)
    fn()
    end.record(side)
    end.synchronize()
    return start.elapsed_time(end)


def _bandwidth(bench: Bench, n: int, scattered: bool, seed: int) -> dict[str, Any]:
    """Demote `n` fresh outputs in one step, promote them back in the next;
    GB/s each way and whether every output came back bit-identical."""
    torch = bench.torch
    names = [f"bw{seed}-{i}" for i in range(n)]
    refs = {}
    for i, h in enumerate(names):
        out = bench.output(seed * 1000 + i)
        refs[h] = out.clone()
        bench.worker.cache_encoder_output(h, out, None, [])
    del out
    nbytes = n * bench.entry_bytes
    d2h_ms = _timed_on_side(
        bench, lambda: bench.apply(demote=names, scattered=scattered)
    )
    h2d_ms = _timed_on_side(bench, lambda: bench.apply(promote=names))
    exact = True
    for h in names:
        got = bench.worker.get_encoder_output(h)
        exact &= bool(torch.equal(got.view(torch.int16), refs[h].view(torch.int16)))
        bench.device_cache.pop(h)
    torch.cuda.synchronize()
    return {
        "d2h_gbps": nbytes / (d2h_ms * 1e-3) / 1e9,
        "h2d_gbps": nbytes / (h2d_ms * 1e-3) / 1e9,
        "bit_exact": exact,
    }


def _overlap(bench: Bench, n: int) -> dict[str, float]:
    """Copies of one step (n demotions, then n promotions of other entries)
    against a GEMM loop that takes longer than the copies."""
    torch = bench.torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    compute = torch.cuda.current_stream()

    def gemms(k: int) -> None:
        for _ in range(k):
            torch.matmul(a, b, out=c)

    def timed(fn) -> float:
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        start.record(compute)
        fn()
        ends = []
        for stream in (compute, bench.worker._stream):
            end = torch.cuda.Event(enable_timing=True)
            end.record(stream)
            ends.append(end)
        torch.cuda.synchronize()
        return max(start.elapsed_time(e) for e in ends)

    def stage(tag: str) -> tuple[list[str], list[str]]:
        """n outputs on the device to demote, n on the host to promote."""
        up = [f"ov{tag}-up-{i}" for i in range(n)]
        for i, h in enumerate(up):
            bench.worker.cache_encoder_output(h, bench.output(7000 + i), None, [])
        bench.apply(demote=up)
        bench.worker.synchronize()
        down = [f"ov{tag}-down-{i}" for i in range(n)]
        for i, h in enumerate(down):
            bench.worker.cache_encoder_output(h, bench.output(8000 + i), None, [])
        torch.cuda.synchronize()
        return down, up

    def cleanup(promoted: list[str], demoted: list[str]) -> None:
        bench.worker.synchronize()
        for h in promoted:
            bench.worker.get_encoder_output(h)
            bench.device_cache.pop(h)
        # Next step drops the host copies (and frees their blocks here).
        for h in demoted:
            bench.free_blocks.extend(bench.host_blocks.pop(h))
        bench.send(drop_host=list(demoted))

    gemms(3)  # warm up
    down, up = stage("copy")
    copy_ms = timed(lambda: bench.apply(demote=down, promote=up))
    cleanup(up, down)
    # Enough GEMMs to outlast the copies.
    one = timed(lambda: gemms(1))
    k = max(3, int(2 * copy_ms / max(one, 1e-3)) + 1)
    compute_ms = timed(lambda: gemms(k))
    down, up = stage("both")

    def both() -> None:
        bench.apply(demote=down, promote=up)  # the runner's _update_states
        gemms(k)  # the step's forward

    both_ms = timed(both)
    cleanup(up, down)
    fraction = (compute_ms + copy_ms - both_ms) / min(compute_ms, copy_ms)
    return {
        "compute_ms": compute_ms,
        "copy_ms": copy_ms,
        "both_ms": both_ms,
        "fraction": max(0.0, min(1.0, fraction)),
        "gemms": k,
    }


def _memory(bench: Bench, budget_entries: int, steps: int, per_step: int) -> dict:
    """Steps that each compute `per_step` new outputs, demote as many and
    promote as many, with at most `budget_entries` outputs on the device as
    the scheduler counts them; the allocator's peak against the bound."""
    torch = bench.torch
    resident: deque[str] = deque()
    on_host: deque[str] = deque()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    for i in range(budget_entries - 2 * per_step):
        h = f"m-init-{i}"
        bench.worker.cache_encoder_output(h, bench.output(20000 + i), None, [])
        resident.append(h)
    torch.matmul(a, a, out=c)  # cuBLAS workspace, before the baseline
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated() - len(resident) * bench.entry_bytes
    torch.cuda.reset_peak_memory_stats()
    n = 0
    for _ in range(steps):
        # Room for this step's new outputs and promotions: demote the oldest.
        demote = [resident.popleft() for _ in range(min(per_step * 2, len(resident)))]
        promote = [on_host.popleft() for _ in range(min(per_step, len(on_host)))]
        bench.apply(demote=demote, promote=promote)
        on_host.extend(demote)
        for h in promote:
            bench.worker.get_encoder_output(h)  # the gather
            resident.append(h)
        for _ in range(per_step):
            h = f"m-{n}"
            n += 1
            bench.worker.cache_encoder_output(h, bench.output(30000 + n), None, [])
            resident.append(h)
        for _ in range(4):
            torch.matmul(a, a, out=c)  # the step's compute
        assert len(resident) <= budget_entries
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    budget = budget_entries * bench.entry_bytes
    # The demotions of one step are reused only after their copies.
    bound = budget + 2 * per_step * bench.entry_bytes
    return {
        "budget_bytes": budget,
        "bound_bytes": bound,
        "peak_bytes": peak,
        "within_bound": peak <= bound,
        "peak_over_budget": peak / budget,
    }


def main() -> int:
    args = _args()
    tree = Path(args.tree)
    if not tree.is_absolute():
        tree = ROOT / tree
    sys.path.insert(0, str(tree))
    # vLLM logs to stdout by default: send its lines to stderr so that
    # stdout is the one JSON line.
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    t0 = time.monotonic()
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.dry_run:
        print(
            json.dumps(
                {
                    "ok": False,
                    "error": "CUDA is not available; this check needs a GPU "
                    "(use --dry-run to check the script on CPU)",
                }
            )
        )
        return 2
    result: dict[str, Any] = {"tree": str(tree), "dry_run": not cuda}
    if not cuda:
        # The same worker code paths on CPU tensors, small sizes, no timing.
        bench = Bench("cpu", host_gib=0.01, rows=50, width=64)
        names = [f"dry-{i}" for i in range(8)]
        refs = {}
        for i, h in enumerate(names):
            refs[h] = bench.output(i)
            bench.worker.cache_encoder_output(h, refs[h].clone(), None, [])
        bench.apply(demote=names[:4])
        bench.apply(demote=names[4:], promote=names[:4], scattered=True)
        bench.apply(promote=names[4:])
        exact = all(
            torch.equal(
                bench.worker.get_encoder_output(h).view(torch.int16),
                refs[h].view(torch.int16),
            )
            for h in names
        )
        result.update(ok=exact, bit_exact=exact, region_pinned=False)
        bench.worker.close()
    else:
        bench = Bench("cuda", args.host_gib, Bench.ROWS, Bench.WIDTH)
        region = bench.worker.region
        assert region is not None
        peak = _pinned_peak(torch, 512 << 20)
        contiguous = _bandwidth(bench, args.entries, scattered=False, seed=1)
        scattered = _bandwidth(bench, args.entries, scattered=True, seed=2)
        overlap = _overlap(bench, args.entries // 2)
        memory = _memory(bench, budget_entries=32, steps=40, per_step=2)
        exact = contiguous["bit_exact"] and scattered["bit_exact"]
        result.update(
            device=torch.cuda.get_device_name(),
            region_pinned=region.is_pinned,
            host_tier_bytes=region.total_bytes,
            entry_bytes=bench.entry_bytes,
            entries_per_batch=args.entries,
            pinned_peak_gbps=peak,
            worker_gbps={
                "d2h": contiguous["d2h_gbps"],
                "h2d": contiguous["h2d_gbps"],
                "d2h_scattered": scattered["d2h_gbps"],
                "h2d_scattered": scattered["h2d_gbps"],
            },
            fraction_of_peak={
                "d2h": contiguous["d2h_gbps"] / peak["d2h"],
                "h2d": contiguous["h2d_gbps"] / peak["h2d"],
            },
            overlap=overlap,
            memory=memory,
            bit_exact=exact,
            ok=bool(exact and region.is_pinned and memory["within_bound"]),
        )
        bench.worker.close()
    result["seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
