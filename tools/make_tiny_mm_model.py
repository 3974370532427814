#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Generate a tiny random-weight Qwen2-VL-style model for CPU engine tests.

Output (default ``build/models/tiny-qwen2-vl``; ``SERIES_BASE=0.32.0``:
``build/models-0.32.0/tiny-qwen2-vl``), about 1.5 MB:

* ``config.json``: a Qwen2-VL config in the hub's flat format with tiny sizes
  (text: hidden 64, 2 layers, 2 heads of 32 -- the CPU attention backend's
  smallest head size -- mrope sections [4, 6, 6]; vision: depth 2, embed 64,
  patch 14, spatial merge 2);
* ``model.safetensors``: random weights (seeded), created by instantiating
  transformers' ``Qwen2VLForConditionalGeneration`` from that config, so
  names and shapes are exactly those of a real checkpoint;
* a locally built byte-level BPE tokenizer (vocab 2048) whose last 14 ids are
  the Qwen2 special tokens (``<|vision_start|>``, ``<|image_pad|>``, ...),
  plus the Qwen2-VL chat template;
* ``preprocessor_config.json`` with small ``min_pixels``/``max_pixels`` so an
  image is 4..64 embeddings (one per 28x28 pixels).

The output is deterministic (fixed seed; same bytes on every run).

Usage: ``python tools/make_tiny_mm_model.py [--out DIR] [--force]``
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_hf_cache as hfc  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# Per base (build/models, build/models-0.32.0): the weights come from the
# base venv's torch/transformers (see generator_id).
DEFAULT_OUT = ROOT / "build" / f"models{hfc.series.SUFFIX}" / "tiny-qwen2-vl"
GENERATOR_VERSION = "1"
SEED = 1234

VOCAB_SIZE = 2048
FIRST_SPECIAL = VOCAB_SIZE - len(hfc.QWEN2_SPECIALS_FROM)  # 2034
# One merged token covers 28x28 pixels (patch 14, spatial merge 2).
MIN_PIXELS = 28 * 28 * 4
MAX_PIXELS = 28 * 28 * 64


def tiny_config() -> dict:
    """The model's ``config.json`` (flat hub format, like Qwen2-VL-2B)."""
    sp = hfc.qwen2_specials(FIRST_SPECIAL)
    return {
        "architectures": ["Qwen2VLForConditionalGeneration"],
        "attention_dropout": 0.0,
        "bos_token_id": sp["<|endoftext|>"],
        "eos_token_id": sp["<|im_end|>"],
        "pad_token_id": sp["<|endoftext|>"],
        "vision_start_token_id": sp["<|vision_start|>"],
        "vision_end_token_id": sp["<|vision_end|>"],
        "vision_token_id": sp["<|vision_pad|>"],
        "image_token_id": sp["<|image_pad|>"],
        "video_token_id": sp["<|video_pad|>"],
        "hidden_act": "silu",
        "hidden_size": 64,
        # Larger than usual (0.02) so that greedy outputs depend on the input.
        "initializer_range": 0.1,
        "intermediate_size": 128,
        "max_position_embeddings": 4096,
        "max_window_layers": 2,
        "model_type": "qwen2_vl",
        "num_attention_heads": 2,
        "num_hidden_layers": 2,
        "num_key_value_heads": 1,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": 4096,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "use_cache": True,
        "use_sliding_window": False,
        "vision_config": {
            "depth": 2,
            "embed_dim": 64,
            "mlp_ratio": 2,
            "num_heads": 2,
            "in_chans": 3,
            "hidden_size": 64,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "spatial_patch_size": 14,
            "temporal_patch_size": 2,
        },
        # head_dim 32 -> 16 rotary frequency pairs = 4 (t) + 6 (h) + 6 (w).
        "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]},
        "vocab_size": VOCAB_SIZE,
    }


def tiny_weights(config: dict) -> bytes:
    """Random weights for ``config`` as safetensors bytes (seeded)."""
    import torch
    from safetensors.torch import save
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    torch.manual_seed(SEED)
    cfg = Qwen2VLConfig(**{k: v for k, v in config.items() if k != "architectures"})
    with torch.device("cpu"):
        model = Qwen2VLForConditionalGeneration(cfg).to(torch.float32).eval()
    # Store under the original (pre-transformers-4.52) checkpoint names, which
    # vLLM's Qwen2-VL weight mapper handles; tied lm_head is not stored.
    tensors: dict[str, torch.Tensor] = {}
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and config["tie_word_embeddings"]:
            continue
        if name.startswith("model.language_model."):
            name = "model." + name[len("model.language_model.") :]
        elif name.startswith("model.visual."):
            name = name[len("model.") :]
        tensors[name] = t.detach().contiguous().clone()
    return save(dict(sorted(tensors.items())), metadata={"format": "pt"})


def model_files() -> dict[str, bytes]:
    """Every file of the tiny model, by name."""
    config = tiny_config()
    sp = hfc.qwen2_specials(FIRST_SPECIAL)
    files = {
        "config.json": hfc._json(config),
        "generation_config.json": hfc._json(
            {
                "bos_token_id": sp["<|endoftext|>"],
                "eos_token_id": [sp["<|im_end|>"], sp["<|endoftext|>"]],
                "pad_token_id": sp["<|endoftext|>"],
            }
        ),
        "preprocessor_config.json": hfc._json(
            hfc.qwen2_vl_preprocessor(MIN_PIXELS, MAX_PIXELS)
        ),
        "model.safetensors": tiny_weights(config),
    }
    files.update(
        hfc.qwen2_tokenizer_files(VOCAB_SIZE, FIRST_SPECIAL, model_max_length=4096)
    )
    return files


def generator_id() -> str:
    """Identifies what produced the files: the generator sources and the
    torch/transformers versions (random init comes from them)."""
    import importlib.metadata as md

    h = hashlib.sha256(GENERATOR_VERSION.encode())
    for src in (Path(__file__), Path(hfc.__file__)):
        h.update(src.read_bytes())
    for dist in ("torch", "transformers", "safetensors", "tokenizers"):
        h.update(f"{dist}=={md.version(dist)}".encode())
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = ap.parse_args(argv)
    out: Path = args.out
    stamp = out / ".generator"
    if not args.force and stamp.exists() and stamp.read_text() == generator_id():
        print(f"make_tiny_mm_model: {out} is up to date")
        return 0
    t0 = time.monotonic()
    files = model_files()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    for name, data in files.items():
        (tmp / name).write_bytes(data)
    (tmp / ".generator").write_text(generator_id())
    tmp.chmod(0o755)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    size = sum(len(d) for d in files.values())
    digest = hashlib.sha256(
        b"".join(hashlib.sha256(files[n]).digest() for n in sorted(files))
    ).hexdigest()[:12]
    print(
        f"make_tiny_mm_model: {out} ({size / 1e6:.2f} MB, {len(files)} files, "
        f"digest {digest}, {time.monotonic() - t0:.1f}s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
