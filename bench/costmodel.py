# SPDX-License-Identifier: Apache-2.0
"""The simulated executor's cost model (documented in bench/README.md).

One forward step takes::

    step_overhead_s
    + prefill_tokens * prefill_s_per_token
    + decode_tokens  * decode_s_per_token
    + sum(encoder_flops(item) for items encoded) / encoder_flops_per_s
    + bytes copied between tiers / copy_bytes_per_s + copies * copy_latency_s

and, in the blocking connector mode, the step cannot start before every EC
connector load it consumes has been delivered.

``encoder_flops(item)`` comes from ``estimate_encoder_cost(hf_config,
num_embeddings)`` in ``vllm/v1/core/ec_cost_model.py`` of build/tree, loaded
*by path* so that base and tree runs use the same estimate (base has no such
file). When the tree lacks it, :func:`fallback_encoder_cost` (the same idea:
a ViT FLOP count from the vision config) is used and the report says so.
The defaults describe a Qwen2-VL-2B-class model on one modern GPU; only
ratios between runs matter for the report's conclusions.
"""

from __future__ import annotations

import importlib.util
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

EncoderCostFn = Callable[[Any, int], float]


@dataclass
class CostModel:
    """Constants of the simulated clock."""

    step_overhead_s: float = (
        3e-3  #: fixed cost of a forward step (weights read, launch)
    )
    prefill_s_per_token: float = (
        15e-6  #: per prompt token (~3 GFLOP/token at 200 TFLOP/s)
    )
    decode_s_per_token: float = 20e-6  #: per decode token (KV reads)
    encoder_flops_per_s: float = 2e14  #: effective vision-encoder throughput
    copy_bytes_per_s: float = 2.5e10  #: host<->device copies (pinned, PCIe Gen4)
    copy_latency_s: float = 1e-5  #: fixed cost per copy
    bytes_per_embed: int = 0  #: 0 = from the model: hidden size x dtype bytes
    encoder_cost_is_flops: bool = True  #: estimate_encoder_cost returns FLOPs
    encoder_s_per_cost_unit: float = 0.0  #: used when the estimate is not FLOPs

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def encoder_seconds(self, cost: float) -> float:
        if self.encoder_cost_is_flops:
            return cost / self.encoder_flops_per_s
        return cost * self.encoder_s_per_cost_unit


def _get(cfg: Any, *names: str, default: Any = None) -> Any:
    for n in names:
        v = getattr(cfg, n, None)
        if v is not None:
            return v
    return default


def fallback_encoder_cost(hf_config: Any, num_embeddings: int) -> float:
    """FLOPs of a ViT pass producing ``num_embeddings`` embeddings.

    From the vision config: ``depth``/``num_hidden_layers`` layers of width
    ``embed_dim``/``hidden_size`` with an MLP of ``intermediate_size`` (or
    ``mlp_ratio`` x width) over ``patches = embeddings x spatial_merge_size^2``
    tokens: ``2*P*(4d^2 + 2*d*m) + 4*P^2*d`` per layer (projections, MLP,
    full attention). No per-model constants. Without a vision config the cost
    is proportional to the embeddings (1 GFLOP each)."""
    vc = getattr(hf_config, "vision_config", None)
    if vc is None:
        return 1e9 * num_embeddings
    layers = _get(vc, "depth", "num_hidden_layers", default=24)
    d = _get(vc, "embed_dim", "hidden_size", default=1024)
    m = _get(vc, "intermediate_size", default=None)
    if m is None:
        m = int(_get(vc, "mlp_ratio", default=4) * d)
    merge = _get(vc, "spatial_merge_size", default=1)
    p = num_embeddings * merge * merge
    per_layer = 2.0 * p * (4 * d * d + 2 * d * m) + 4.0 * p * p * d
    return float(layers * per_layer)


def load_encoder_cost(path: str | None) -> tuple[EncoderCostFn, str]:
    """Load ``estimate_encoder_cost`` from a file path (stdlib-only module).

    Returns the function and a label for the report."""
    if path and Path(path).is_file():
        spec = importlib.util.spec_from_file_location("_bench_ec_cost_model", path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        fn = getattr(mod, "estimate_encoder_cost", None)
        if callable(fn):
            return fn, f"estimate_encoder_cost from {path}"
    return (
        fallback_encoder_cost,
        "bench.costmodel.fallback_encoder_cost (tree has no ec_cost_model.py)",
    )
