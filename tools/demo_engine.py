#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Demo: run vLLM's real engine on CPU from one tree with the tiny Qwen2-VL
model and 4 images, twice, and print what ran in the worker process.

Usage: ``python tools/demo_engine.py [--tree tree|base|PATH] [--rounds N]``
(generates the tiny model first if needed). Used by ``make demo``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_probe  # noqa: E402
import make_tiny_mm_model  # noqa: E402


def summarize(res: dict[str, Any], model: Path) -> str:
    """A short human-readable account of a :func:`run_generate` result."""
    w = res["workers"][0]
    lines = [
        f"tree        : {res['tree']} (vllm from {w['vllm_path']})",
        f"model       : {model} (tiny random-weight Qwen2-VL)",
        f"worker      : {w['runner_class']} (a GPUModelRunner: "
        f"{'GPUModelRunner' in w['runner_mro']}), pid {w['pid']} "
        f"(driver pid {res['driver_pid']}), vision tower {w['vision_tower']}",
        f"engine start: {res['startup_s']:.1f}s (eager)",
    ]
    for i, rnd in enumerate(res["rounds"], 1):
        c = rnd["counters"]
        lines.append(
            f"generate #{i}: {rnd['generate_s']:.2f}s | encoder ran on {c['encoder_items']} "
            f"image(s) in {c['embed_multimodal_calls']} batch(es), "
            f"{c['vision_input_rows']} patches | encoder cache: {c['cache_puts']} stored, "
            f"{c['cache_hits']} hits, {c['cache_misses']} misses | "
            f"{rnd['encoder_cache_entries']} entries now"
        )
    lines.append("outputs (call 1; random weights, so the text is noise):")
    for i, out in enumerate(res["rounds"][0]["outputs"]):
        lines.append(
            f"  [{i}] {out['num_prompt_tokens']:3d} prompt tokens -> "
            f"{len(out['token_ids'])} tokens: {out['text'][:48]!r}"
        )
    if len(res["rounds"]) > 1:
        same = all(
            r["outputs"] == res["rounds"][0]["outputs"] for r in res["rounds"][1:]
        )
        lines.append(f"repeat calls gave identical outputs: {same}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tree", default="tree", help="base, tree, or a checkout path")
    ap.add_argument(
        "--rounds", type=int, default=2, help="generate calls (same images)"
    )
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--log", action="store_true", help="print the engine's log")
    args = ap.parse_args(argv)
    make_tiny_mm_model.main([])
    model = make_tiny_mm_model.DEFAULT_OUT
    prompts = [engine_probe.qwen2_vl_prompt(q) for q in engine_probe.TINY_MM_QUESTIONS]
    images = engine_probe.make_images(len(prompts), seed=0)
    print(f"demo: starting the engine from {args.tree} ...", flush=True)
    t0 = time.monotonic()
    res = engine_probe.run_generate(
        args.tree,
        engine_probe.tiny_mm_llm_kwargs(model),
        prompts,
        images,
        max_tokens=args.max_tokens,
        rounds=args.rounds,
    )
    if args.log:
        print(res["log"])
    print(summarize(res, model))
    print(f"demo: done in {time.monotonic() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
