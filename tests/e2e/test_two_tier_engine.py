# SPDX-License-Identifier: Apache-2.0
"""End-to-end: the two-tier encoder cache on vLLM's real engine, on CPU, with
the tiny Qwen2-VL model, enabled through ``ec_manager_config`` alone.

The same prompts (one image each, prefix caching off) are sent three times,
as a multi-turn chat re-sends its images every turn. The device tier is the
scheduler's ``encoder_cache_size`` = ``max_num_batched_tokens`` = 64
embeddings, smaller than the 108 embeddings of the 4 images, so:

* the default manager evicts and has to run the encoder again in later
  rounds;
* the two-tier manager demotes to its host tier instead and promotes back:
  after round 1 the vision encoder never runs again, the per-tier stats
  (logged by the engine's stat logger) show host hits, promotions and
  demotions;
* greedy outputs are token-identical to the default manager's in every
  round, since encoder outputs survive the device -> host -> device round
  trip bit-exactly.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import engine_probe  # noqa: E402
from series import BASE_VERSION, SUFFIX, tree_dir  # noqa: E402

# Two engine starts (default and two-tier): about 120 s on 2 cores.
pytestmark = pytest.mark.shard_weight(120)

NUM_IMAGES = 4
ROUNDS = 3
MAX_TOKENS = 8
# The series tree by default; any checkout (e.g. a worktree) via the env.
TREE = os.environ.get("TWO_TIER_E2E_TREE", "tree")
QUALNAME = "vllm.v1.core.two_tier_encoder_cache_manager.TwoTierEncoderCacheManager"
# The line LoggingStatLogger prints for a tiered encoder cache (the hit rate
# is windowed, "over the last N lookups", from the [Metrics] patch on; the
# counters are cumulative).
STATS_RE = re.compile(
    r"Encoder cache hit rate: [\d.]+%[^(]*\((?:totals: )?device hits: (\d+), "
    r"host hits: (\d+), misses: (\d+)\), promotions: (\d+), demotions: (\d+), "
    r"evictions device/host: (\d+)/(\d+)"
)
STATS_KEYS = (
    "device_hits",
    "host_hits",
    "misses",
    "promotions",
    "demotions",
    "device_evictions",
    "host_evictions",
)


@pytest.fixture(scope="module")
def images() -> list[Any]:
    return engine_probe.make_images(NUM_IMAGES, seed=0)


def _run(tiny_model: Path, images: list[Any], **overrides: Any) -> dict[str, Any]:
    if not (tree_dir(TREE) / "vllm" / "__init__.py").exists():
        pytest.fail(f"{tree_dir(TREE)} is missing: run `make tree` first")
    kwargs = engine_probe.tiny_mm_llm_kwargs(
        tiny_model,
        # Device tier = encoder_cache_size = max_num_batched_tokens.
        max_num_batched_tokens=64,
        disable_log_stats=False,
        **overrides,
    )
    return engine_probe.run_generate(
        TREE,
        kwargs,
        [engine_probe.qwen2_vl_prompt(q) for q in engine_probe.TINY_MM_QUESTIONS],
        images,
        max_tokens=MAX_TOKENS,
        rounds=ROUNDS,
        # Log the stats after every engine step.
        extra_env={"VLLM_LOG_STATS_INTERVAL": "0.001"},
    )


def _last_stats(log: str) -> dict[str, int]:
    matches = STATS_RE.findall(log)
    assert matches, "no encoder cache stats line in the engine log:\n" + log[-3000:]
    # Cumulative counters: the last line is the latest.
    return dict(zip(STATS_KEYS, map(int, matches[-1])))


def _has_two_tier() -> bool:
    return (
        tree_dir(TREE) / "vllm" / "v1" / "core" / "two_tier_encoder_cache_manager.py"
    ).is_file()


# On the primary base the series has the two-tier cache, so its absence is a
# failure; a second base's series (patches-<version>/) may not have it yet.
@pytest.mark.skipif(
    bool(SUFFIX) and not _has_two_tier(),
    reason=f"the v{BASE_VERSION} series has no two-tier encoder cache manager yet",
)
def test_two_tier_engine_matches_default_and_uses_host_tier(
    tiny_model: Path, images: list[Any]
) -> None:
    default = _run(tiny_model, images)
    two_tier = _run(
        tiny_model,
        images,
        ec_manager_config={
            "encoder_cache_manager_cls": QUALNAME,
            # 10 MiB; the tiny model's embeddings are 64 float32 wide.
            "manager_config": {"host_cache_gib": 0.01},
        },
    )
    assert "Two-tier encoder cache: device tier 64 embeddings" in two_tier["log"]
    assert "TwoTierEncoderCacheWorker" in two_tier["log"]

    # Greedy outputs are identical, token for token, in every round.
    for rnd_default, rnd_two_tier in zip(default["rounds"], two_tier["rounds"]):
        tokens = [o["token_ids"] for o in rnd_two_tier["outputs"]]
        assert tokens == [o["token_ids"] for o in rnd_default["outputs"]]
        assert all(len(t) == MAX_TOKENS for t in tokens)

    # The device tier is too small for the 4 images: the default manager
    # has to encode again after round 1...
    encoded_default = [r["counters"]["encoder_items"] for r in default["rounds"]]
    encoded_two_tier = [r["counters"]["encoder_items"] for r in two_tier["rounds"]]
    assert encoded_default[0] == encoded_two_tier[0] == NUM_IMAGES
    assert sum(encoded_default[1:]) > 0, encoded_default
    # ...the two-tier manager serves every later round from its tiers.
    assert encoded_two_tier[1:] == [0] * (ROUNDS - 1), encoded_two_tier

    stats = _last_stats(two_tier["log"])
    assert stats["misses"] == NUM_IMAGES, stats
    assert stats["host_hits"] > 0, stats
    assert stats["promotions"] > 0, stats
    assert stats["demotions"] > 0, stats
    assert stats["host_evictions"] == 0, stats
    # The default manager reports no tiered stats.
    assert not STATS_RE.search(default["log"])
    print(
        f"\nencoder items per round: default {encoded_default}, "
        f"two-tier {encoded_two_tier}; two-tier stats {stats}"
    )
