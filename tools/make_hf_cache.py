#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Generate an offline Hugging Face hub cache for the model ids that vLLM's
upstream tests (and our harness) hard-code: ``facebook/opt-125m``,
``llava-hf/llava-1.5-7b-hf``, ``ibm-granite/granite-4.0-tiny-preview``,
``Qwen/Qwen3-0.6B`` (vLLM's default ``--model``, used by
tests/engine/test_arg_utils.py) and ``Qwen/Qwen2-VL-2B-Instruct`` (benchmark
harness: realistic vision-config cost estimates).

No hub is reachable, so every file is written here:

* ``config.json`` / ``generation_config.json`` / processor configs carry the
  values of the models' published configurations;
* tokenizers are built locally with the ``tokenizers`` library: a small BPE
  learned from a generated corpus, padded with unreachable filler entries so
  that the vocabulary size and every special-token id match the real model
  (e.g. llava's ``<image>`` is id 32000);
* no weights (config-only), which is all the upstream unit tests need.

The output is a real hub cache (``hub/models--org--name/{blobs,snapshots,
refs}``), so ``transformers``/``huggingface_hub`` resolve the ids with
``HF_HUB_OFFLINE=1``. Output is deterministic: the same bytes and the same
snapshot revision on every run.

Usage: ``python tools/make_hf_cache.py [--out build/hf] [--force] [ids...]``
(``SERIES_BASE=0.32.0``: ``build/hf-0.32.0``)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import series  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# Per base (build/hf, build/hf-0.32.0): each base's venv has its own
# tokenizers/transformers, which read and write these files.
DEFAULT_OUT = ROOT / "build" / f"hf{series.SUFFIX}"

# Bump when the generated content changes, so that stale caches are rebuilt.
GENERATOR_VERSION = "1"

# ----------------------------------------------------------------- tokenizers
_WORDS = (
    "the a an of to and in on for with at by from as is are was were be been "
    "this that these those it its they them their we our you your he she his "
    "her i me my not no yes all any some many much more most few less one two "
    "three four five six seven eight nine ten first last next new old good bad "
    "big small large little long short high low left right up down over under "
    "image picture photo video frame color red green blue yellow black white "
    "gray orange purple pink brown light dark bright square circle line shape "
    "cat dog bird fish tree flower house car road river sky sun moon star cloud "
    "water fire stone wood paper book table chair door window wall floor room "
    "city street park garden field mountain sea beach forest snow rain wind "
    "man woman child people person group team family friend teacher student "
    "what which who where when why how can could would should will may might "
    "do does did have has had make made take took see saw look looks show shows "
    "describe describes tell give find use used run runs go goes come think "
    "know want like work call try ask need feel become leave put mean keep let "
    "begin seem help talk turn start might shows hear play move live believe "
    "there here then now only also very just than too well even back still "
    "model engine token tokens cache encoder vision text language answer "
    "question prompt output input test tests value values number numbers"
).split()


def corpus(num_lines: int = 4000, seed: int = 0) -> list[str]:
    """A deterministic English-like corpus to learn BPE merges from."""
    rng = random.Random(seed)
    lines = []
    for _ in range(num_lines):
        n = rng.randint(4, 14)
        words = [rng.choice(_WORDS) for _ in range(n)]
        words[0] = words[0].capitalize()
        line = " ".join(words) + rng.choice([".", ".", "?", "!", ","])
        if rng.random() < 0.2:
            line += f" {rng.randint(0, 2025)}"
        lines.append(line)
    return lines


def _trained_bpe(
    style: str, merge_budget: int
) -> tuple[list[str], list[tuple[str, str]]]:
    """Learn a BPE on :func:`corpus`; return (tokens in id order, merges).

    ``style`` is ``"bytelevel"`` (GPT-2/Qwen2) or ``"metaspace"`` (Llama)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    if style == "bytelevel":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    elif style == "metaspace":
        tok.pre_tokenizer = pre_tokenizers.Metaspace(
            replacement="▁", prepend_scheme="first"
        )
        alphabet = []
    else:
        raise ValueError(style)
    trainer = trainers.BpeTrainer(
        vocab_size=len(alphabet) + merge_budget + 100,
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    data = json.loads(tok.to_str())
    vocab: dict[str, int] = data["model"]["vocab"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = [
        tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
        for m in data["model"]["merges"]
    ]
    if style == "bytelevel":
        # Keep every byte first, in a stable order.
        rest = [t for t in tokens if t not in set(alphabet)]
        tokens = sorted(alphabet) + rest
    return tokens, merges  # type: ignore[return-value]


def build_tokenizer(
    style: str,
    vocab_size: int,
    specials: dict[str, int],
    merge_budget: int = 2000,
    bos: str | None = None,
) -> str:
    """Return a ``tokenizer.json`` string.

    The model vocabulary has exactly ``vocab_size`` entries. ``specials``
    (token -> id) are placed at their ids and also registered as special added
    tokens; the learned BPE tokens fill the lowest free ids and unreachable
    ``<|filler_N|>`` entries pad the rest, so ids match the real model.
    ``bos``, if given, is prepended to every encoded sequence (post-processor)."""
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
    )

    if any(i >= vocab_size for i in specials.values()):
        raise ValueError("special token id outside the vocabulary")
    learned, merges = _trained_bpe(style, merge_budget)
    if style == "metaspace":
        learned = [f"<0x{b:02X}>" for b in range(256)] + learned
    taken = {i: t for t, i in specials.items()}
    vocab: dict[str, int] = dict(specials)
    it = iter(t for t in learned if t not in specials)
    filler = 0
    for i in range(vocab_size):
        if i in taken:
            continue
        tok = next(it, None)
        if tok is None:
            tok = f"<|filler_{filler}|>"
            filler += 1
        vocab[tok] = i
    left = next(it, None)
    if left is not None:
        raise ValueError(f"vocab_size {vocab_size} too small for the learned BPE")
    known = set(vocab)
    merges = [
        m for m in merges if m[0] in known and m[1] in known and m[0] + m[1] in known
    ]

    if style == "bytelevel":
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
    else:
        unk = "<unk>" if "<unk>" in vocab else None
        tok = Tokenizer(
            models.BPE(
                vocab=vocab,
                merges=merges,
                unk_token=unk,
                fuse_unk=True,
                byte_fallback=True,
            )
        )
        tok.pre_tokenizer = pre_tokenizers.Metaspace(
            replacement="▁", prepend_scheme="first", split=False
        )
        tok.decoder = decoders.Sequence(
            [
                decoders.Replace("▁", " "),
                decoders.ByteFallback(),
                decoders.Fuse(),
                decoders.Strip(content=" ", left=1),
            ]
        )
    tok.add_special_tokens(
        [
            AddedToken(t, special=True, normalized=False)
            for t, _ in sorted(specials.items(), key=lambda kv: kv[1])
        ]
    )
    if bos is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A",
            pair=f"{bos} $A {bos} $B",
            special_tokens=[(bos, vocab[bos])],
        )
    # Stable, pretty JSON (the Rust serializer's key order is already fixed).
    return json.dumps(json.loads(tok.to_str()), ensure_ascii=False, indent=1) + "\n"


def added_tokens_decoder(specials: dict[str, int]) -> dict[str, dict]:
    """``tokenizer_config.json``'s ``added_tokens_decoder`` for ``specials``."""
    return {
        str(i): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for t, i in sorted(specials.items(), key=lambda kv: kv[1])
    }


def _json(obj: object) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode()


# --------------------------------------------------------------------- models
def opt_125m() -> dict[str, bytes]:
    """facebook/opt-125m: OPTForCausalLM, GPT-2 byte-level BPE (50265)."""
    specials = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    config = {
        "_name_or_path": "facebook/opt-125m",
        "_remove_final_layer_norm": False,
        "activation_dropout": 0.0,
        "activation_function": "relu",
        "architectures": ["OPTForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 2,
        "do_layer_norm_before": True,
        "dropout": 0.1,
        "eos_token_id": 2,
        "ffn_dim": 3072,
        "hidden_size": 768,
        "init_std": 0.02,
        "layerdrop": 0.0,
        "max_position_embeddings": 2048,
        "model_type": "opt",
        "num_attention_heads": 12,
        "num_hidden_layers": 12,
        "pad_token_id": 1,
        "prefix": "</s>",
        "torch_dtype": "float16",
        "transformers_version": "4.21.0.dev0",
        "use_cache": True,
        "vocab_size": 50272,
        "word_embed_proj_dim": 768,
    }
    tok_cfg = {
        "add_bos_token": True,
        "add_prefix_space": False,
        "added_tokens_decoder": added_tokens_decoder(specials),
        "bos_token": "</s>",
        "clean_up_tokenization_spaces": False,
        "eos_token": "</s>",
        "errors": "replace",
        "model_max_length": 1000000000000000019884624838656,
        "pad_token": "<pad>",
        "tokenizer_class": "GPT2Tokenizer",
        "unk_token": "</s>",
    }
    return {
        "config.json": _json(config),
        "generation_config.json": _json(
            {
                "_from_model_config": True,
                "bos_token_id": 2,
                "eos_token_id": 2,
                "pad_token_id": 1,
                "transformers_version": "4.27.0.dev0",
            }
        ),
        "special_tokens_map.json": _json(
            {
                "bos_token": "</s>",
                "eos_token": "</s>",
                "pad_token": "<pad>",
                "unk_token": "</s>",
            }
        ),
        "tokenizer_config.json": _json(tok_cfg),
        "tokenizer.json": build_tokenizer(
            "bytelevel", 50265, specials, bos="</s>"
        ).encode(),
    }


LLAVA_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}"
    "{{ message['role'].upper() + ': '}}{% endif %}"
    "{# Render all images first #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\n' }}{% endfor %}"
    "{# Render all text next #}{% if message['role'] != 'assistant' %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] + ' '}}{% endfor %}{% else %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{% generation %}{{ content['text'] + ' '}}{% endgeneration %}{% endfor %}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def llava_15_7b() -> dict[str, bytes]:
    """llava-hf/llava-1.5-7b-hf: CLIP ViT-L/14-336 + Vicuna-7B, Llama BPE.

    ``<image>`` is id 32000 and ``<pad>`` 32001 (added tokens); the text
    model's vocabulary is 32064 (padded)."""
    specials = {"<unk>": 0, "<s>": 1, "</s>": 2, "<image>": 32000, "<pad>": 32001}
    config = {
        "architectures": ["LlavaForConditionalGeneration"],
        "ignore_index": -100,
        "image_token_index": 32000,
        "model_type": "llava",
        "pad_token_id": 32001,
        "projector_hidden_act": "gelu",
        "text_config": {
            "_name_or_path": "lmsys/vicuna-7b-v1.5",
            "architectures": ["LlamaForCausalLM"],
            "max_position_embeddings": 4096,
            "model_type": "llama",
            "rms_norm_eps": 1e-05,
            "torch_dtype": "float16",
            "vocab_size": 32064,
        },
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "transformers_version": "4.36.0.dev0",
        "vision_config": {
            "hidden_size": 1024,
            "image_size": 336,
            "intermediate_size": 4096,
            "model_type": "clip_vision_model",
            "num_attention_heads": 16,
            "num_hidden_layers": 24,
            "patch_size": 14,
            "projection_dim": 768,
            "vocab_size": 32000,
        },
        "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default",
        "vocab_size": 32064,
    }
    # Tokens 32000/32001 are added tokens; the model vocabulary is 32000.
    base_specials = {k: v for k, v in specials.items() if v < 32000}
    tj = json.loads(build_tokenizer("metaspace", 32000, base_specials, bos="<s>"))
    tj["added_tokens"] += [
        {
            "id": i,
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for t, i in (("<image>", 32000), ("<pad>", 32001))
    ]
    tok_cfg = {
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": added_tokens_decoder(specials),
        "bos_token": "<s>",
        "clean_up_tokenization_spaces": False,
        "eos_token": "</s>",
        "legacy": False,
        "model_max_length": 1000000000000000019884624838656,
        "pad_token": "<pad>",
        "padding_side": "left",
        "processor_class": "LlavaProcessor",
        "sp_model_kwargs": {},
        "tokenizer_class": "LlamaTokenizer",
        "unk_token": "<unk>",
        "use_default_system_prompt": False,
    }
    return {
        "config.json": _json(config),
        "generation_config.json": _json(
            {
                "_from_model_config": True,
                "bos_token_id": 1,
                "eos_token_id": 2,
                "pad_token_id": 32001,
                "transformers_version": "4.36.0.dev0",
            }
        ),
        "preprocessor_config.json": _json(
            {
                "crop_size": {"height": 336, "width": 336},
                "do_center_crop": True,
                "do_convert_rgb": True,
                "do_normalize": True,
                "do_rescale": True,
                "do_resize": True,
                "image_mean": CLIP_MEAN,
                "image_processor_type": "CLIPImageProcessor",
                "image_std": CLIP_STD,
                "processor_class": "LlavaProcessor",
                "resample": 3,
                "rescale_factor": 0.00392156862745098,
                "size": {"shortest_edge": 336},
            }
        ),
        "processor_config.json": _json(
            {
                "image_token": "<image>",
                "num_additional_image_tokens": 1,
                "patch_size": 14,
                "processor_class": "LlavaProcessor",
                "vision_feature_select_strategy": "default",
            }
        ),
        "chat_template.json": _json({"chat_template": LLAVA_CHAT_TEMPLATE}),
        "special_tokens_map.json": _json(
            {
                "bos_token": "<s>",
                "eos_token": "</s>",
                "pad_token": "<pad>",
                "unk_token": "<unk>",
            }
        ),
        "tokenizer_config.json": _json(tok_cfg),
        "tokenizer.json": (
            json.dumps(tj, ensure_ascii=False, indent=1) + "\n"
        ).encode(),
    }


GRANITE_ATTENTION_LAYERS = (5, 15, 25, 35)


def granite_40_tiny_preview() -> dict[str, bytes]:
    """ibm-granite/granite-4.0-tiny-preview: hybrid Mamba2/attention MoE
    (GraniteMoeHybridForCausalLM), 40 layers, GPT-2-style BPE (49160)."""
    specials = {
        "<|end_of_text|>": 0,
        "<fim_prefix>": 1,
        "<fim_middle>": 2,
        "<fim_suffix>": 3,
        "<fim_pad>": 4,
        "<filename>": 5,
        "<gh_stars>": 6,
        "<issue_start>": 7,
        "<issue_comment>": 8,
        "<issue_closed>": 9,
        "<jupyter_start>": 10,
        "<jupyter_text>": 11,
        "<jupyter_code>": 12,
        "<jupyter_output>": 13,
        "<empty_output>": 14,
        "<commit_before>": 15,
        "<commit_msg>": 16,
        "<commit_after>": 17,
        "<reponame>": 18,
        "<|start_of_role|>": 49152,
        "<|end_of_role|>": 49153,
        "<|tool_call|>": 49154,
        "<|start_of_cite|>": 49155,
        "<|end_of_cite|>": 49156,
        "<|start_of_plugin|>": 49157,
        "<|end_of_plugin|>": 49158,
        "<|pad|>": 49159,
    }
    config = {
        "architectures": ["GraniteMoeHybridForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attention_multiplier": 0.0078125,
        "bos_token_id": 0,
        "embedding_multiplier": 12,
        "eos_token_id": 0,
        "hidden_act": "silu",
        "hidden_size": 1536,
        "init_method": "mup",
        "initializer_range": 0.1,
        "intermediate_size": 512,
        "layer_types": [
            "attention" if i in GRANITE_ATTENTION_LAYERS else "mamba" for i in range(40)
        ],
        "logits_scaling": 6,
        "mamba_chunk_size": 256,
        "mamba_conv_bias": True,
        "mamba_d_conv": 4,
        "mamba_d_head": 64,
        "mamba_d_state": 128,
        "mamba_expand": 2,
        "mamba_n_groups": 1,
        "mamba_n_heads": 48,
        "mamba_proj_bias": False,
        "max_position_embeddings": 131072,
        "model_type": "granitemoehybrid",
        "normalization_function": "rmsnorm",
        "num_attention_heads": 12,
        "num_experts_per_tok": 6,
        "num_hidden_layers": 40,
        "num_key_value_heads": 4,
        "num_local_experts": 64,
        "output_router_logits": False,
        "pad_token_id": 0,
        "position_embedding_type": "nope",
        "residual_multiplier": 0.22,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": 10000,
        "router_aux_loss_coef": 0.0,
        "shared_intermediate_size": 1024,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.52.0.dev0",
        "use_cache": True,
        "vocab_size": 49160,
    }
    tok_cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added_tokens_decoder(specials),
        "bos_token": "<|end_of_text|>",
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|end_of_text|>",
        "errors": "replace",
        "model_max_length": 9223372036854775807,
        "pad_token": "<|pad|>",
        "padding_side": "left",
        "tokenizer_class": "GPT2Tokenizer",
        "unk_token": "<|end_of_text|>",
        "chat_template": (
            "{%- for message in messages %}{{- '<|start_of_role|>' + message['role'] + "
            "'<|end_of_role|>' + message['content'] + '<|end_of_text|>\n' }}{%- endfor %}"
            "{%- if add_generation_prompt %}{{- '<|start_of_role|>assistant<|end_of_role|>' }}"
            "{%- endif %}"
        ),
    }
    return {
        "config.json": _json(config),
        "generation_config.json": _json(
            {
                "_from_model_config": True,
                "bos_token_id": 0,
                "eos_token_id": 0,
                "pad_token_id": 0,
                "transformers_version": "4.52.0.dev0",
            }
        ),
        "tokenizer_config.json": _json(tok_cfg),
        "tokenizer.json": build_tokenizer("bytelevel", 49160, specials).encode(),
    }


QWEN2_SPECIALS_FROM = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

QWEN2_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}"
    "Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}"
    "Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}"
    "<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# The "additional_special_tokens" of Qwen2 / Qwen2-VL / Qwen3 tokenizers:
# every special token but <|endoftext|>.
QWEN2_ADDITIONAL_SPECIALS = QWEN2_SPECIALS_FROM[1:]


def qwen2_specials(first_id: int) -> dict[str, int]:
    """Qwen2 special tokens, consecutive from ``first_id`` (151643 upstream)."""
    return {t: first_id + i for i, t in enumerate(QWEN2_SPECIALS_FROM)}


def qwen2_tokenizer_files(
    vocab_size: int, first_special: int, model_max_length: int = 32768
) -> dict[str, bytes]:
    """tokenizer.json + tokenizer_config.json + chat_template.json of a
    Qwen2(-VL) tokenizer whose special tokens start at ``first_special``."""
    specials = qwen2_specials(first_special)
    tok_cfg = {
        "add_prefix_space": False,
        "added_tokens_decoder": added_tokens_decoder(specials),
        "additional_special_tokens": list(QWEN2_ADDITIONAL_SPECIALS),
        "bos_token": None,
        "chat_template": QWEN2_VL_CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": model_max_length,
        "pad_token": "<|endoftext|>",
        "padding_side": "left",
        "processor_class": "Qwen2VLProcessor",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    return {
        "tokenizer_config.json": _json(tok_cfg),
        "tokenizer.json": build_tokenizer("bytelevel", vocab_size, specials).encode(),
        "chat_template.json": _json({"chat_template": QWEN2_VL_CHAT_TEMPLATE}),
    }


def qwen2_vl_preprocessor(min_pixels: int, max_pixels: int) -> dict:
    """``preprocessor_config.json`` of a Qwen2-VL image processor."""
    return {
        "min_pixels": min_pixels,
        "max_pixels": max_pixels,
        "patch_size": 14,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "image_mean": CLIP_MEAN,
        "image_std": CLIP_STD,
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen2VLProcessor",
    }


def qwen2_vl_2b_instruct() -> dict[str, bytes]:
    """Qwen/Qwen2-VL-2B-Instruct: config, processor files and tokenizer
    (151643 BPE entries + specials from 151643; config vocab 151936)."""
    config = {
        "architectures": ["Qwen2VLForConditionalGeneration"],
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "vision_start_token_id": 151652,
        "vision_end_token_id": 151653,
        "vision_token_id": 151654,
        "image_token_id": 151655,
        "video_token_id": 151656,
        "hidden_act": "silu",
        "hidden_size": 1536,
        "initializer_range": 0.02,
        "intermediate_size": 8960,
        "max_position_embeddings": 32768,
        "max_window_layers": 28,
        "model_type": "qwen2_vl",
        "num_attention_heads": 12,
        "num_hidden_layers": 28,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": 32768,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.41.2",
        "use_cache": True,
        "use_sliding_window": False,
        "vision_config": {
            "depth": 32,
            "embed_dim": 1280,
            "mlp_ratio": 4,
            "num_heads": 16,
            "in_chans": 3,
            "hidden_size": 1536,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "spatial_patch_size": 14,
            "temporal_patch_size": 2,
        },
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "vocab_size": 151936,
    }
    files = {
        "config.json": _json(config),
        "generation_config.json": _json(
            {
                "bos_token_id": 151643,
                "pad_token_id": 151643,
                "do_sample": True,
                "eos_token_id": [151645, 151643],
                "repetition_penalty": 1.0,
                "temperature": 0.01,
                "top_p": 0.001,
                "top_k": 1,
                "transformers_version": "4.37.0",
            }
        ),
        "preprocessor_config.json": _json(qwen2_vl_preprocessor(3136, 12845056)),
    }
    files.update(qwen2_tokenizer_files(151643 + len(QWEN2_SPECIALS_FROM), 151643))
    return files


QWEN3_EXTRA_SPECIALS = (
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)

# A simplified Qwen3 chat template (system/user/assistant turns, optional
# thinking switch); enough for chat-formatting code paths.
QWEN3_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\n\n</think>\n\n' }}{%- endif %}{%- endif %}"
)


def qwen3_06b() -> dict[str, bytes]:
    """Qwen/Qwen3-0.6B (vLLM's default ``--model``): config and tokenizer
    (151643 BPE entries, 26 specials from 151643; config vocab 151936)."""
    specials = qwen2_specials(151643)
    for i, t in enumerate(QWEN3_EXTRA_SPECIALS):
        specials[t] = 151643 + len(QWEN2_SPECIALS_FROM) + i
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 1024,
        "initializer_range": 0.02,
        "intermediate_size": 3072,
        "max_position_embeddings": 40960,
        "max_window_layers": 28,
        "model_type": "qwen3",
        "num_attention_heads": 16,
        "num_hidden_layers": 28,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    }
    tok_cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added_tokens_decoder(specials),
        "additional_special_tokens": list(QWEN2_ADDITIONAL_SPECIALS),
        "bos_token": None,
        "chat_template": QWEN3_CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    return {
        "config.json": _json(config),
        "generation_config.json": _json(
            {
                "bos_token_id": 151643,
                "do_sample": True,
                "eos_token_id": [151645, 151643],
                "pad_token_id": 151643,
                "temperature": 0.6,
                "top_k": 20,
                "top_p": 0.95,
                "transformers_version": "4.51.0",
            }
        ),
        "tokenizer_config.json": _json(tok_cfg),
        "tokenizer.json": build_tokenizer(
            "bytelevel", 151643 + len(specials), specials
        ).encode(),
    }


MODELS: dict[str, Callable[[], dict[str, bytes]]] = {
    "facebook/opt-125m": opt_125m,
    "llava-hf/llava-1.5-7b-hf": llava_15_7b,
    "ibm-granite/granite-4.0-tiny-preview": granite_40_tiny_preview,
    "Qwen/Qwen2-VL-2B-Instruct": qwen2_vl_2b_instruct,
    "Qwen/Qwen3-0.6B": qwen3_06b,
}


# ---------------------------------------------------------------- hub layout
def _git_blob_sha1(data: bytes) -> str:
    """The id the hub uses for a non-LFS file: git's blob sha1."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def write_repo(hf_home: Path, repo_id: str, files: dict[str, bytes]) -> str:
    """Write ``files`` as the ``main`` snapshot of ``repo_id`` in the hub
    cache under ``hf_home``; return the (deterministic) revision.

    Safe to run while other processes read the cache: blobs and the snapshot
    are created before ``refs/main`` is switched (atomically); an unchanged
    repository is left untouched; stale snapshots and blobs are removed last."""
    repo_dir = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    manifest = "".join(
        f"{name} {_git_blob_sha1(data)}\n" for name, data in sorted(files.items())
    )
    revision = hashlib.sha1(f"{repo_id}\n{manifest}".encode()).hexdigest()
    blobs = repo_dir / "blobs"
    snap = repo_dir / "snapshots" / revision
    ref = repo_dir / "refs" / "main"
    if (
        ref.exists()
        and ref.read_text() == revision
        and all((snap / n).is_file() for n in files)
    ):
        return revision
    blobs.mkdir(parents=True, exist_ok=True)
    for _name, data in sorted(files.items()):
        blob = blobs / _git_blob_sha1(data)
        if not blob.exists():
            tmp = blob.with_name(blob.name + ".tmp")
            tmp.write_bytes(data)
            tmp.replace(blob)
    if not snap.exists():
        tmp_snap = snap.with_name(snap.name + ".tmp")
        if tmp_snap.exists():
            shutil.rmtree(tmp_snap)
        tmp_snap.mkdir(parents=True)
        for name, data in sorted(files.items()):
            link = tmp_snap / name
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blobs / _git_blob_sha1(data), snap))
        tmp_snap.rename(snap)
    ref.parent.mkdir(parents=True, exist_ok=True)
    tmp_ref = ref.with_name("main.tmp")
    tmp_ref.write_text(revision)
    tmp_ref.replace(ref)
    keep = {_git_blob_sha1(d) for d in files.values()}
    for old in (repo_dir / "snapshots").iterdir():
        if old.name != revision:
            shutil.rmtree(old, ignore_errors=True)
    for blob in blobs.iterdir():
        if blob.name not in keep:
            blob.unlink(missing_ok=True)
    return revision


def stamp_path(out: Path) -> Path:
    return out / ".make_hf_cache.stamp"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="HF_HOME to write")
    ap.add_argument("--force", action="store_true", help="rebuild even if up to date")
    ap.add_argument(
        "ids", nargs="*", help=f"model ids (default: all of {list(MODELS)})"
    )
    args = ap.parse_args(argv)
    ids = args.ids or list(MODELS)
    unknown = [i for i in ids if i not in MODELS]
    if unknown:
        print(f"make_hf_cache: unknown model id(s): {unknown}", file=sys.stderr)
        return 2
    stamp = stamp_path(args.out)
    want = json.dumps(
        {
            "version": GENERATOR_VERSION,
            "ids": sorted(ids),
            "source": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        }
    )
    if not args.force and stamp.exists() and stamp.read_text() == want:
        print(f"make_hf_cache: {args.out} is up to date")
        return 0
    for repo_id in ids:
        t0 = time.monotonic()
        rev = write_repo(args.out, repo_id, MODELS[repo_id]())
        print(f"make_hf_cache: {repo_id} @ {rev[:12]} ({time.monotonic() - t0:.1f}s)")
    stamp.write_text(want)
    return 0


if __name__ == "__main__":
    sys.exit(main())
