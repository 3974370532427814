# SPDX-License-Identifier: Apache-2.0
"""End-to-end smoke test: vLLM's real engine on CPU, from build/base and
from build/tree, with the tiny Qwen2-VL model and images.

Each case starts ``LLM(...)`` in a child process with the tree's environment
(``tools/engine_probe.py`` -> ``series.tree_env``), generates 16 tokens for
4 prompts with 4 distinct images, then repeats the same call. Counters
installed in the *worker* process (via ``LLM.collective_rpc``) prove that:

* the model runner is vLLM's ``CPUModelRunner``, a ``GPUModelRunner``
  subclass, in a process other than the driver's;
* call 1 ran the vision encoder on exactly the 4 images (every patch the
  image processor produced went through the vision tower) and stored 4
  entries in ``GPUModelRunner.encoder_cache``;
* call 2 ran no encoder at all and read the 4 embeddings back from the
  encoder cache (prefix caching is off, so the prompts are recomputed and
  do need the embeddings), producing the same tokens.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import engine_probe  # noqa: E402
from series import tree_dir  # noqa: E402

NUM_IMAGES = 4
MAX_TOKENS = 16
QUESTIONS = engine_probe.TINY_MM_QUESTIONS

_results: dict[str, dict[str, Any]] = {}

# An engine start per tree: about 60 s each on 2 cores.
pytestmark = pytest.mark.shard_weight(40)


@pytest.fixture(scope="module")
def images() -> list[Any]:
    return engine_probe.make_images(NUM_IMAGES, seed=0)


def expected_patches(model_dir: Path, images: list[Any]) -> int:
    """Patches the HF image processor makes of ``images`` (vision-tower rows)."""
    from transformers import AutoImageProcessor

    proc = AutoImageProcessor.from_pretrained(str(model_dir))
    grid = proc(images=images, return_tensors="pt")["image_grid_thw"]
    return int(grid.prod(dim=-1).sum())


@pytest.mark.parametrize("tree", ["base", "tree"])
def test_engine_smoke(tree: str, tiny_model: Path, images: list[Any]) -> None:
    if not (tree_dir(tree) / "vllm" / "__init__.py").exists():
        pytest.fail(f"build/{tree} is missing: run `make tree` first")
    prompts = [engine_probe.qwen2_vl_prompt(q) for q in QUESTIONS]
    res = engine_probe.run_generate(
        tree,
        # Prefix caching is off there, so that call 2 recomputes the prompts
        # and needs the cached encoder outputs (else the KV cache covers them).
        engine_probe.tiny_mm_llm_kwargs(tiny_model),
        prompts,
        images,
        max_tokens=MAX_TOKENS,
        rounds=2,
    )
    _results[tree] = res

    # The worker: vLLM's CPU runner (a GPUModelRunner) in another process,
    # both processes running the selected tree's vllm package.
    assert len(res["workers"]) == 1
    worker = res["workers"][0]
    tree_pkg = str((tree_dir(tree) / "vllm").resolve())
    assert res["vllm_path"] == tree_pkg
    assert worker["vllm_path"] == tree_pkg
    assert worker["runner_class"] == "CPUModelRunner"
    assert "GPUModelRunner" in worker["runner_mro"]
    assert worker["pid"] != res["driver_pid"]
    assert worker["encoder_cache_counted"], worker
    assert worker["vision_tower"] == "visual: Qwen2VisionTransformer"

    first, second = res["rounds"]
    c1, c2 = first["counters"], second["counters"]

    # Call 1: the encoder ran on exactly the 4 images, all their patches.
    assert c1["encoder_items"] == NUM_IMAGES, c1
    assert c1["embed_multimodal_calls"] >= 1, c1
    assert c1["vision_forward_calls"] == c1["embed_multimodal_calls"], c1
    assert c1["vision_input_rows"] == expected_patches(tiny_model, images), c1
    assert c1["cache_puts"] == NUM_IMAGES, c1
    assert c1["cache_hits"] >= NUM_IMAGES and c1["cache_misses"] == 0, c1
    assert c1["gathered_mm_embeds"] >= NUM_IMAGES, c1
    assert first["encoder_cache_entries"] == NUM_IMAGES

    # Call 2, same images: no encoder run, every embedding from the cache.
    assert c2["execute_mm_encoder_calls"] >= 1, c2
    assert c2["encoder_items"] == 0, c2
    assert c2["embed_multimodal_calls"] == 0, c2
    assert c2["vision_forward_calls"] == 0, c2
    assert c2["cache_puts"] == 0, c2
    assert c2["cache_hits"] >= NUM_IMAGES and c2["cache_misses"] == 0, c2
    assert c2["gathered_mm_embeds"] >= NUM_IMAGES, c2

    # Outputs: 16 tokens each, and the cached embeddings give the same tokens.
    for rnd in (first, second):
        assert len(rnd["outputs"]) == len(prompts)
        assert all(len(o["token_ids"]) == MAX_TOKENS for o in rnd["outputs"])
    assert [o["token_ids"] for o in second["outputs"]] == [
        o["token_ids"] for o in first["outputs"]
    ]
    print(
        f"\n[{tree}] startup {res['startup_s']:.1f}s, generate "
        f"{first['generate_s']:.2f}s / {second['generate_s']:.2f}s, "
        f"encoder items {c1['encoder_items']} -> {c2['encoder_items']}, "
        f"cache hits {c1['cache_hits']} -> {c2['cache_hits']}"
    )


def test_trees_agree() -> None:
    """build/base and build/tree generate the same tokens (greedy)."""
    if set(_results) != {"base", "tree"}:
        pytest.skip("needs both test_engine_smoke cases in this session")
    base, tree = (
        [o["token_ids"] for o in _results[t]["rounds"][0]["outputs"]]
        for t in ("base", "tree")
    )
    assert base == tree
