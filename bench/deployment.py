# SPDX-License-Identifier: Apache-2.0
"""The deployment the default scenario models, from the model's config.json.

Parent side only (no vLLM import): the model's Hugging Face ``config.json``
is read from the offline cache (``build/hf``), and

* the **weights** are counted from it (:func:`param_count`: embedding,
  attention with grouped KV heads and biases, gated MLP, norms, untied LM
  head if any; the vision tower's blocks, patch embedding and patch merger),
  times the dtype's bytes;
* the **KV cache** of one GPU of ``gpu_gib`` GiB at ``utilization`` is
  ``utilization x gpu_gib - weights`` bytes (activations, CUDA graphs and
  the encoder cache's own memory are *not* subtracted: a real server has a
  few percent fewer blocks), divided by the KV bytes of a block
  (``2 x layers x kv_heads x head_dim x dtype bytes x block_size``).

:func:`scenario_sched` turns that into the scheduler settings of a named
scenario (see bench/README.md, "Scenarios").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30

#: Scheduler settings of vLLM v0.22.1's OpenAI server on a >= 70 GiB GPU
#: (``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args``).
SERVER_DEFAULTS: dict[str, Any] = {
    "max_num_seqs": 1024,
    "max_num_batched_tokens": 8192,
    "max_model_len": 32768,
    "block_size": 16,
}


def hf_config(model: str, hf_home: Path | None = None) -> dict[str, Any]:
    """config.json of ``model`` from the offline hub cache."""
    hub = (hf_home or ROOT / "build" / "hf") / "hub"
    d = hub / ("models--" + model.replace("/", "--"))
    ref = (d / "refs" / "main").read_text().strip()
    return json.loads((d / "snapshots" / ref / "config.json").read_text())


def _text(cfg: dict[str, Any]) -> dict[str, Any]:
    for k in ("text_config", "language_config", "llm_config"):
        if isinstance(cfg.get(k), dict) and "hidden_size" in cfg[k]:
            return cfg[k]
    return cfg


def param_count(cfg: dict[str, Any]) -> dict[str, int]:
    """Parameters of the language model and the vision tower (see module)."""
    t = _text(cfg)
    h, layers = t["hidden_size"], t["num_hidden_layers"]
    heads = t["num_attention_heads"]
    kv = t.get("num_key_value_heads", heads)
    hd = t.get("head_dim", h // heads)
    inter, vocab = t["intermediate_size"], t["vocab_size"]
    attn = h * heads * hd + heads * hd + 2 * (h * kv * hd + kv * hd) + heads * hd * h
    mlp = 3 * h * inter
    text = vocab * h + layers * (attn + mlp + 2 * h) + h
    if not cfg.get("tie_word_embeddings", t.get("tie_word_embeddings", False)):
        text += vocab * h
    vision = 0
    v = cfg.get("vision_config")
    if isinstance(v, dict):
        d = v.get("embed_dim") or v.get("hidden_size")
        depth = v.get("depth") or v.get("num_hidden_layers")
        m = v.get("intermediate_size") or int(v.get("mlp_ratio", 4) * d)
        block = 4 * d * d + 4 * d + 2 * d * m + m + d + 4 * d
        patch = v.get("patch_size", 14)
        embed = v.get("in_chans", 3) * v.get("temporal_patch_size", 1) * patch**2 * d
        merge = v.get("spatial_merge_size", 1) ** 2
        out = v.get("hidden_size", h)
        merger = 2 * d + (d * merge) ** 2 + d * merge + d * merge * out + out
        vision = depth * block + embed + merger
    return {"text": text, "vision": vision, "total": text + vision}


def kv_bytes_per_token(cfg: dict[str, Any], dtype_bytes: int = 2) -> int:
    """K and V of every layer for one token."""
    t = _text(cfg)
    heads = t["num_attention_heads"]
    kv = t.get("num_key_value_heads", heads)
    hd = t.get("head_dim", t["hidden_size"] // heads)
    return 2 * t["num_hidden_layers"] * kv * hd * dtype_bytes


def kv_capacity(
    cfg: dict[str, Any],
    gpu_gib: float = 80.0,
    utilization: float = 0.9,
    block_size: int = 16,
    dtype_bytes: int = 2,
) -> dict[str, Any]:
    """KV blocks of one GPU, with the numbers that produced them."""
    params = param_count(cfg)
    weights = params["total"] * dtype_bytes
    budget = int(utilization * gpu_gib * GIB)
    per_token = kv_bytes_per_token(cfg, dtype_bytes)
    blocks = (budget - weights) // (per_token * block_size)
    if blocks <= 0:
        raise ValueError(
            f"weights ({weights / GIB:.1f} GiB) exceed {utilization} x {gpu_gib} GiB"
        )
    return {
        "gpu_gib": gpu_gib,
        "utilization": utilization,
        "params": params,
        "weights_bytes": weights,
        "kv_bytes": budget - weights,
        "kv_bytes_per_token": per_token,
        "block_size": block_size,
        "num_blocks": int(blocks),
        "kv_tokens": int(blocks) * block_size,
    }


#: Named scenarios: the default deployment and its secondary variants.
SCENARIOS: dict[str, dict[str, Any]] = {
    "default": {
        "enable_prefix_caching": True,
        "doc": "prefix caching on, KV cache of one 80 GiB GPU at 0.9 utilisation",
    },
    "pc_off": {
        "enable_prefix_caching": False,
        "doc": "prefix caching off (every turn needs its images again), same KV",
    },
}


def scenario_sched(
    name: str, model: str, kv: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Scheduler settings of scenario ``name`` for ``model``."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; known: {sorted(SCENARIOS)}")
    kv = kv or kv_capacity(hf_config(model), block_size=SERVER_DEFAULTS["block_size"])
    sched = dict(SERVER_DEFAULTS)
    sched["num_blocks"] = kv["num_blocks"]
    sched["enable_prefix_caching"] = SCENARIOS[name]["enable_prefix_caching"]
    return sched
