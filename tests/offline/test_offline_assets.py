# SPDX-License-Identifier: Apache-2.0
"""Tests of the offline assets: tools/make_hf_cache.py (hub cache for the
model ids upstream tests hard-code) and tools/make_tiny_mm_model.py.

Everything is generated into a temporary directory and resolved the way
vLLM resolves it (``huggingface_hub`` cache lookups, ``transformers`` Auto*
classes with ``local_files_only``), so nothing touches build/ or a network.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import make_hf_cache  # noqa: E402
import make_tiny_mm_model  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _offline() -> object:
    """No hub: lookups must be served from the generated cache."""
    import huggingface_hub.constants

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        yield


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hf")
    assert make_hf_cache.main(["--out", str(out)]) == 0
    return out


def _load(hf_home: Path, cls_name: str, repo_id: str):  # type: ignore[no-untyped-def]
    import transformers

    cls = getattr(transformers, cls_name)
    return cls.from_pretrained(
        repo_id, cache_dir=str(hf_home / "hub"), local_files_only=True
    )


def test_hub_layout_resolves_offline(hf_home: Path) -> None:
    from huggingface_hub import scan_cache_dir, try_to_load_from_cache

    info = scan_cache_dir(hf_home / "hub")
    assert not info.warnings
    assert {r.repo_id for r in info.repos} == set(make_hf_cache.MODELS)
    for repo_id in make_hf_cache.MODELS:
        path = try_to_load_from_cache(repo_id, "config.json", cache_dir=hf_home / "hub")
        assert isinstance(path, str), repo_id
        # Snapshot files are links into blobs/, like a real download.
        assert Path(path).is_symlink()
        rev = (Path(path).parent.parent.parent / "refs" / "main").read_text()
        assert Path(path).parent.name == rev


def test_deterministic_and_idempotent(hf_home: Path, tmp_path: Path) -> None:
    assert make_hf_cache.main(["--out", str(tmp_path), "facebook/opt-125m"]) == 0
    name = "models--facebook--opt-125m"
    a, b = hf_home / "hub" / name, tmp_path / "hub" / name
    assert (a / "refs" / "main").read_text() == (b / "refs" / "main").read_text()
    for blob in (a / "blobs").iterdir():
        assert (b / "blobs" / blob.name).read_bytes() == blob.read_bytes()
    # A second run leaves an unchanged repository alone.
    before = {p: p.stat().st_mtime_ns for p in (b / "blobs").iterdir()}
    assert (
        make_hf_cache.main(["--out", str(tmp_path), "--force", "facebook/opt-125m"])
        == 0
    )
    assert {p: p.stat().st_mtime_ns for p in (b / "blobs").iterdir()} == before


@pytest.mark.parametrize(
    ("repo_id", "config_cls", "vocab_size"),
    [
        ("facebook/opt-125m", "OPTConfig", 50272),
        ("llava-hf/llava-1.5-7b-hf", "LlavaConfig", 32064),
        ("ibm-granite/granite-4.0-tiny-preview", "GraniteMoeHybridConfig", 49160),
        ("Qwen/Qwen2-VL-2B-Instruct", "Qwen2VLConfig", 151936),
        ("Qwen/Qwen3-0.6B", "Qwen3Config", 151936),
    ],
)
def test_configs_and_tokenizers(
    hf_home: Path, repo_id: str, config_cls: str, vocab_size: int
) -> None:
    cfg = _load(hf_home, "AutoConfig", repo_id)
    assert type(cfg).__name__ == config_cls
    assert cfg.get_text_config().vocab_size == vocab_size
    tok = _load(hf_home, "AutoTokenizer", repo_id)
    # Every token id fits the model's embedding table, and text round-trips.
    assert len(tok) <= vocab_size
    text = "Describe the image in two short sentences."
    ids = tok(text, add_special_tokens=False).input_ids
    assert max(ids) < len(tok)
    assert tok.decode(ids) == text


def test_llava_image_token(hf_home: Path) -> None:
    tok = _load(hf_home, "AutoTokenizer", "llava-hf/llava-1.5-7b-hf")
    assert tok.convert_tokens_to_ids("<image>") == 32000
    assert tok.pad_token_id == 32001
    ids = tok("USER: <image>\nWhat is shown? ASSISTANT:").input_ids
    assert ids[0] == 1 and ids.count(32000) == 1
    proc = _load(hf_home, "AutoProcessor", "llava-hf/llava-1.5-7b-hf")
    assert proc.image_token == "<image>"


def test_qwen2_vl_specials(hf_home: Path) -> None:
    cfg = _load(hf_home, "AutoConfig", "Qwen/Qwen2-VL-2B-Instruct")
    tok = _load(hf_home, "AutoTokenizer", "Qwen/Qwen2-VL-2B-Instruct")
    assert tok.convert_tokens_to_ids("<|image_pad|>") == cfg.image_token_id == 151655
    assert tok.convert_tokens_to_ids("<|vision_start|>") == cfg.vision_start_token_id
    assert tok.convert_tokens_to_ids("<|im_end|>") == tok.eos_token_id == 151645
    proc = _load(hf_home, "AutoProcessor", "Qwen/Qwen2-VL-2B-Instruct")
    assert proc.image_processor.size["longest_edge"] == 12845056


def test_tiny_model_consistent(tmp_path: Path) -> None:
    """Config, tokenizer, processor and weights of the tiny model agree."""
    import transformers
    from safetensors import safe_open

    out = tmp_path / "tiny"
    assert make_tiny_mm_model.main(["--out", str(out)]) == 0
    size = sum(p.stat().st_size for p in out.iterdir())
    assert 0.5e6 < size < 2.5e6
    cfg = transformers.AutoConfig.from_pretrained(out)
    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert len(tok) == cfg.get_text_config().vocab_size == make_tiny_mm_model.VOCAB_SIZE
    for name, attr in [
        ("<|image_pad|>", "image_token_id"),
        ("<|vision_start|>", "vision_start_token_id"),
        ("<|vision_end|>", "vision_end_token_id"),
        ("<|video_pad|>", "video_token_id"),
    ]:
        assert tok.convert_tokens_to_ids(name) == getattr(cfg, attr), name
    text_cfg = cfg.get_text_config()
    head_dim = text_cfg.hidden_size // text_cfg.num_attention_heads
    assert sum(text_cfg.rope_parameters["mrope_section"]) * 2 == head_dim
    prompt = tok.apply_chat_template(
        [
            {
                "role": "user",
                "content": [{"type": "image"}, {"type": "text", "text": "Hi"}],
            }
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert "<|vision_start|><|image_pad|><|vision_end|>" in prompt
    proc = transformers.AutoImageProcessor.from_pretrained(out)
    from PIL import Image

    grid = proc(images=[Image.new("RGB", (112, 112))], return_tensors="pt")[
        "image_grid_thw"
    ]
    assert grid.tolist() == [[1, 8, 8]]  # 64 patches -> 16 embeddings
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert f.get_slice("model.embed_tokens.weight").get_shape() == [2048, 64]
    assert "visual.patch_embed.proj.weight" in keys and "lm_head.weight" not in keys
    # Deterministic: a second generation gives the same bytes.
    out2 = tmp_path / "tiny2"
    assert make_tiny_mm_model.main(["--out", str(out2)]) == 0
    for p in out.iterdir():
        assert (out2 / p.name).read_bytes() == p.read_bytes(), p.name
    assert json.loads((out / "config.json").read_text())["vision_config"]["depth"] == 2
