# SPDX-License-Identifier: Apache-2.0
"""Scale-out on vLLM's real engine, on CPU, reduced form for ``make test``
(``make scaleout`` runs the full form and writes build/scaleout/summary.json).

* TP=2 through the multiproc executor (two worker processes, gloo + the CPU
  shared-memory all-reduce) with the two-tier cache and a 64-embedding
  device tier: greedy outputs token-identical to TP=1 with the default
  manager in every round; after round 1 no encoder runs, host hits;
  both ranks received the same encoder-cache metadata and ended every step
  with the same tier contents; the host tier's resident memory is measured.
* E -> PD happy path: an encoder-only producer, a prefill+decode consumer
  (async prefetch, deferral, two-tier) and the in-tree example proxy, as
  real OpenAI servers on 127.0.0.1: same prompt tokens and token-identical
  outputs as the single TP=1 default-manager instance above; the consumer
  ran its encoder on no item the producer stored.

The tree is ``build/tree`` unless ``SCALEOUT_TREE`` names another checkout.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import make_tiny_mm_model  # noqa: E402
from series import tree_dir  # noqa: E402

from scaleout import cli, epd, tp  # noqa: E402

TREE = os.environ.get("SCALEOUT_TREE", "tree")


@pytest.fixture(scope="module")
def model() -> Path:
    if not (tree_dir(TREE) / "vllm" / "__init__.py").exists():
        pytest.fail(f"{tree_dir(TREE)} is missing: run `make tree` first")
    assert make_tiny_mm_model.main([]) == 0
    return make_tiny_mm_model.DEFAULT_OUT


@pytest.fixture(scope="module")
def tp_run(model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """TP=1 default (the single-instance reference) and TP=2 two-tier."""
    return tp.run_tp(TREE, model, tmp_path_factory.mktemp("tp"), cli.REDUCED_TP_CASES)


def test_tp2_two_tier_matches_tp1_default(tp_run: dict) -> None:
    res = tp_run
    ref, two = res["cases"]["tp1_default"], res["cases"]["tp2_two_tier"]
    assert two["tp"] == 2 and len(two["worker_pids"]) == 2
    assert two["companion"] == "TwoTierEncoderCacheWorker"
    assert two["identical_to_tp1_default"], two["first_mismatch"]
    # The default manager re-encodes after round 1 (64-embedding device
    # tier, 108 embeddings of images); the two-tier cache never does.
    assert ref["encoder_items_per_round"][0] == tp.NUM_IMAGES
    assert sum(ref["encoder_items_per_round"][1:]) > 0
    assert two["encoder_items_per_round"] == [tp.NUM_IMAGES] + [0] * (tp.ROUNDS - 1)
    # Every rank saw the same metadata and tiers at every step, and the
    # check was not vacuous: entries moved between the tiers.
    assert two["ranks_consistent"], two["rank_problems"]
    assert two["steps"] > 0 and two["steps_with_metadata_ops"] > 0
    assert two["max_host_entries"] > 0
    assert two["host_hits"] and two["host_hits"] > 0
    # Measured (the bytes allocated to the files backing the host tier,
    # each counted once over both ranks, and their private pages): one
    # shared region per instance holds exactly its budget, one copy per
    # rank would hold twice that.
    budget = two["host_budget_bytes"]
    assert budget > 0
    assert budget <= two["host_bytes"] < budget + budget // 10
    summary = res["summary"]
    assert summary["identical_outputs"] and summary["ranks_consistent"]
    print(f"\nTP: {res['summary']}")


def test_epd_happy_path(model: Path, tmp_path: Path, tp_run: dict) -> None:
    # The single instance: TP=1, default manager (LLM.generate, same prompts
    # and images), so no third server has to start.
    res = epd.run_epd(TREE, model, tmp_path, full=False, reference=tp_run["reference"])
    details, summary = res["details"], res["summary"]
    a = details["phases"]["A"]
    assert details["leftover_groups"] == []
    assert "ref" not in details["startup_s"]
    assert a["store_items"] >= 4, a
    assert a["encoder_items"] >= 4, a  # the producer encoded them
    assert all(r["status"] == 200 for rnd in a["results"] for r in rnd), a
    assert summary["identical_outputs"], a
    assert summary["consumer_encoder_runs_for_remote_items"] == 0, a
    assert details["pd_worker"][0]["companion_class"] == "TwoTierEncoderCacheWorker"
    print(f"\nE->PD: {summary}, startup {details['startup_s']}")
