#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Run vLLM's real engine from one tree and observe what ran in the worker.

The model runs in a separate worker process (even on CPU), so counters are
installed *there*: :func:`install_probe` is sent with ``LLM.collective_rpc``
and wraps, on the worker's model runner (``CPUModelRunner`` inherits
``GPUModelRunner``), the methods that run the vision encoder and use the
encoder cache; :func:`read_probe` reads the counters back the same way.
Nothing in vLLM is edited.

Entry point for tests and demos::

    run_generate(tree, llm_kwargs, prompts, images) -> dict

It starts a child process with the tree's environment (``series.tree_env``),
builds ``LLM(**llm_kwargs)``, calls ``generate`` ``rounds`` times with the
same prompts/images and returns, per round, the outputs and the counter
deltas (see :data:`COUNTERS`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent
PROBE_ATTR = "_engine_probe_state"

# Counter name -> meaning (all observed in the worker process).
COUNTERS: dict[str, str] = {
    "execute_mm_encoder_calls": "calls of GPUModelRunner._execute_mm_encoder",
    "encoder_items": "multimodal items encoded (outputs of _execute_mm_encoder)",
    "embed_multimodal_calls": "calls of model.embed_multimodal (encoder batches)",
    "vision_forward_calls": "forward passes of the model's vision tower",
    "vision_input_rows": "rows (patches) fed to the vision tower",
    "gather_mm_embeddings_calls": "calls of GPUModelRunner._gather_mm_embeddings",
    "gathered_mm_embeds": "embedding slices returned by _gather_mm_embeddings",
    "cache_puts": "encoder_cache[mm_hash] = output",
    "cache_hits": "encoder_cache.get(mm_hash) that found an entry",
    "cache_misses": "encoder_cache.get(mm_hash) that found nothing",
    "cache_pops": "encoder_cache.pop(mm_hash) (entries freed by the scheduler)",
}
VISION_TOWER_ATTRS = ("visual", "vision_tower", "vision_model", "vision_encoder")


# ------------------------------------------------------ in-worker functions
class _CountingDict(dict):
    """A ``dict`` that counts the accesses GPUModelRunner makes to its
    ``encoder_cache`` (``get``/``__setitem__``/``pop``)."""

    counters: dict[str, int]

    def get(self, key: Any, default: Any = None) -> Any:
        if key in self:
            self.counters["cache_hits"] += 1
            return dict.__getitem__(self, key)
        self.counters["cache_misses"] += 1
        return default

    def __setitem__(self, key: Any, value: Any) -> None:
        self.counters["cache_puts"] += 1
        dict.__setitem__(self, key, value)

    def pop(self, key: Any, *default: Any) -> Any:
        if key in self:
            self.counters["cache_pops"] += 1
        return dict.pop(self, key, *default)


def _runner_of(worker: Any) -> Any:
    runner = getattr(worker, "model_runner", None)
    if runner is None and hasattr(worker, "worker"):
        runner = getattr(worker.worker, "model_runner", None)
    if runner is None:
        raise RuntimeError(f"no model_runner on {type(worker).__name__}")
    return runner


def install_probe(worker: Any) -> dict[str, Any]:
    """(Worker side, via collective_rpc.) Install the counters on the
    worker's model runner, idempotently, and zero them. Returns facts about
    the runner: class, MRO names, pid, encoder-cache type, vision tower."""
    import functools

    runner = _runner_of(worker)
    state = runner.__dict__.get(PROBE_ATTR)
    if state is None:
        counters = {k: 0 for k in COUNTERS}
        state = {"counters": counters, "vision_tower": None}

        orig_exec = runner._execute_mm_encoder

        @functools.wraps(orig_exec)
        def _execute_mm_encoder(*args: Any, **kwargs: Any) -> Any:
            counters["execute_mm_encoder_calls"] += 1
            out = orig_exec(*args, **kwargs)
            counters["encoder_items"] += len(out) if out is not None else 0
            return out

        runner._execute_mm_encoder = _execute_mm_encoder

        orig_gather = runner._gather_mm_embeddings

        @functools.wraps(orig_gather)
        def _gather_mm_embeddings(*args: Any, **kwargs: Any) -> Any:
            counters["gather_mm_embeddings_calls"] += 1
            out = orig_gather(*args, **kwargs)
            try:
                counters["gathered_mm_embeds"] += len(out[0])
            except (TypeError, IndexError):
                pass
            return out

        runner._gather_mm_embeddings = _gather_mm_embeddings

        model = runner.get_model() if hasattr(runner, "get_model") else runner.model
        if hasattr(model, "embed_multimodal"):
            orig_embed = model.embed_multimodal

            @functools.wraps(orig_embed)
            def embed_multimodal(*args: Any, **kwargs: Any) -> Any:
                counters["embed_multimodal_calls"] += 1
                return orig_embed(*args, **kwargs)

            model.embed_multimodal = embed_multimodal
        for attr in VISION_TOWER_ATTRS:
            tower = getattr(model, attr, None)
            if tower is not None and hasattr(tower, "register_forward_pre_hook"):

                def _pre_hook(_mod: Any, inputs: tuple) -> None:
                    counters["vision_forward_calls"] += 1
                    if inputs and hasattr(inputs[0], "shape"):
                        counters["vision_input_rows"] += int(inputs[0].shape[0])

                tower.register_forward_pre_hook(_pre_hook)
                state["vision_tower"] = f"{attr}: {type(tower).__name__}"
                break

        if type(runner.encoder_cache) is dict:
            cache = _CountingDict(runner.encoder_cache)
            cache.counters = counters
            runner.encoder_cache = cache
        runner.__dict__[PROBE_ATTR] = state
    for k in state["counters"]:
        state["counters"][k] = 0
    import vllm

    return {
        "pid": os.getpid(),
        "vllm_path": str(Path(vllm.__file__).resolve().parent),
        "runner_class": type(runner).__name__,
        "runner_mro": [c.__name__ for c in type(runner).__mro__],
        "encoder_cache_type": type(runner.encoder_cache).__name__,
        "encoder_cache_counted": isinstance(runner.encoder_cache, _CountingDict),
        "vision_tower": state["vision_tower"],
    }


def read_probe(worker: Any) -> dict[str, Any]:
    """(Worker side, via collective_rpc.) Return the counters, the pid and
    the current number of encoder-cache entries."""
    runner = _runner_of(worker)
    state = runner.__dict__.get(PROBE_ATTR)
    if state is None:
        raise RuntimeError("install_probe was not run on this worker")
    cache = runner.encoder_cache
    return {
        "pid": os.getpid(),
        "counters": dict(state["counters"]),
        "encoder_cache_entries": len(cache) if hasattr(cache, "__len__") else None,
    }


# ------------------------------------------------------------- child process
def _child(spec_path: str, out_path: str) -> int:
    """Child-process body: build the LLM, probe, generate, write JSON."""
    spec = json.loads(Path(spec_path).read_text())
    # Import ourselves by module name so that the probe functions are pickled
    # by reference (tools/ is on every process's PYTHONPATH).
    import engine_probe as ep
    import vllm
    from PIL import Image
    from vllm import LLM, SamplingParams

    t0 = time.monotonic()
    llm = LLM(**spec["llm_kwargs"])
    startup_s = time.monotonic() - t0
    info = llm.collective_rpc(ep.install_probe)
    images = [Image.open(p).convert("RGB") for p in spec["images"]]
    requests: list[Any] = []
    for i, prompt in enumerate(spec["prompts"]):
        if i < len(images):
            requests.append(
                {"prompt": prompt, "multi_modal_data": {"image": images[i]}}
            )
        else:
            requests.append({"prompt": prompt})
    params = SamplingParams(**spec["sampling"])
    rounds = []
    for _ in range(spec["rounds"]):
        before = llm.collective_rpc(ep.read_probe)
        t1 = time.monotonic()
        outs = llm.generate(requests, params, use_tqdm=False)
        gen_s = time.monotonic() - t1
        after = llm.collective_rpc(ep.read_probe)
        deltas = [
            {k: a["counters"][k] - b["counters"][k] for k in a["counters"]}
            for a, b in zip(after, before, strict=False)
        ]
        rounds.append(
            {
                "generate_s": gen_s,
                "outputs": [
                    {
                        "text": o.outputs[0].text,
                        "token_ids": list(o.outputs[0].token_ids),
                        "num_prompt_tokens": len(o.prompt_token_ids or []),
                    }
                    for o in outs
                ],
                "counters": deltas[0],
                "per_worker": deltas,
                "encoder_cache_entries": after[0]["encoder_cache_entries"],
            }
        )
    result = {
        "driver_pid": os.getpid(),
        "vllm_path": str(Path(vllm.__file__).resolve().parent),
        "startup_s": startup_s,
        "workers": info,
        "rounds": rounds,
    }
    Path(out_path).write_text(json.dumps(result, indent=1))
    del llm
    return 0


def child_env(
    tree: str | Path, extra_env: dict[str, str] | None = None
) -> dict[str, str]:
    """The tree's environment (``series.tree_env``) plus what the probe
    needs: ``tools/`` importable in every process (the probe functions are
    pickled by reference) and cloudpickled callables allowed over RPC."""
    if str(TOOLS) not in sys.path:
        sys.path.insert(0, str(TOOLS))
    from series import tree_dir, tree_env

    repo = tree_dir(str(tree))
    env = tree_env(repo)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(TOOLS)])
    env["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    if extra_env:
        env.update(extra_env)
    return env


def run_generate(
    tree: str | Path,
    llm_kwargs: dict[str, Any],
    prompts: Sequence[str],
    images: Sequence[Any] = (),
    *,
    max_tokens: int = 16,
    rounds: int = 2,
    sampling: dict[str, Any] | None = None,
    extra_env: dict[str, str] | None = None,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Run ``LLM(**llm_kwargs).generate`` ``rounds`` times from ``tree``
    (``"base"``, ``"tree"`` or a checkout path) in a child process.

    ``images[i]`` (PIL images) goes with ``prompts[i]``. Sampling is greedy,
    ``max_tokens`` tokens, EOS ignored, unless ``sampling`` overrides it.
    Returns ``{"tree", "vllm_path", "startup_s", "wall_s", "log", "workers",
    "rounds": [{
    "generate_s", "outputs", "counters", "encoder_cache_entries"}]}`` where
    ``counters`` are per-round deltas of :data:`COUNTERS` in the (first)
    worker. Raises ``RuntimeError`` with the child's output tail on failure.
    """
    env = child_env(tree, extra_env)
    sp = {"max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True, "seed": 0}
    sp.update(sampling or {})
    build = ROOT / "build"
    build.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="engine-probe-", dir=build) as tmp:
        paths = []
        for i, img in enumerate(images):
            p = Path(tmp) / f"image{i}.png"
            img.save(p)
            paths.append(str(p))
        spec = {
            "llm_kwargs": llm_kwargs,
            "prompts": list(prompts),
            "images": paths,
            "sampling": sp,
            "rounds": rounds,
        }
        spec_path = Path(tmp) / "spec.json"
        out_path = Path(tmp) / "result.json"
        spec_path.write_text(json.dumps(spec))
        t0 = time.monotonic()
        proc = run_child_script(
            Path(__file__), spec_path, out_path, env, Path(tmp), timeout
        )
        wall = time.monotonic() - t0
        if proc.returncode != 0 or not out_path.exists():
            raise RuntimeError(
                f"engine child for tree {tree!s} failed (rc={proc.returncode}):\n"
                + proc.stdout[-6000:]
            )
        result = json.loads(out_path.read_text())
    result["tree"] = str(tree)
    result["wall_s"] = wall
    result["log"] = proc.stdout
    return result


def run_child_script(
    script: Path,
    spec_path: Path,
    out_path: Path,
    env: dict[str, str],
    cwd: Path,
    timeout: float,
) -> subprocess.CompletedProcess[str]:
    """Run ``script --child SPEC OUT`` in a fresh interpreter, with stdout
    and stderr together in ``stdout``; the child writes its JSON to OUT."""
    return subprocess.run(
        [
            sys.executable,
            str(script.resolve()),
            "--child",
            str(spec_path),
            str(out_path),
        ],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )


def make_images(n: int = 4, seed: int = 0) -> list[Any]:
    """``n`` distinct deterministic RGB images (gradients, stripes and a
    coloured square; sizes vary so each yields a different token count)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    sizes = [(112, 112), (168, 112), (112, 196), (224, 140)]
    out = []
    for i in range(n):
        w, h = sizes[i % len(sizes)]
        y, x = np.mgrid[0:h, 0:w]
        base = rng.integers(0, 256, size=3)
        arr = np.stack(
            [
                (x * (i + 1) + base[0]) % 256,
                (y * (i + 2) + base[1]) % 256,
                ((x // 8 + y // 8) % 2) * 200 + base[2] % 56,
            ],
            axis=-1,
        )
        x0, y0 = rng.integers(0, w // 2), rng.integers(0, h // 2)
        arr[y0 : y0 + h // 3, x0 : x0 + w // 3] = rng.integers(0, 256, size=3)
        out.append(Image.fromarray(arr.astype(np.uint8), "RGB"))
    return out


TINY_MM_QUESTIONS = (
    "Describe the image.",
    "What colour is the square?",
    "How many stripes are there?",
    "Is there a cat in this picture?",
)


def tiny_mm_llm_kwargs(model: str | Path, **overrides: Any) -> dict[str, Any]:
    """``LLM`` kwargs for the tiny Qwen2-VL model on CPU: eager, one image
    per prompt, small KV cache, prefix caching off (so that repeating a
    prompt needs its cached encoder outputs again). ``overrides`` win."""
    kwargs: dict[str, Any] = {
        "model": str(model),
        "enforce_eager": True,
        "max_model_len": 1024,
        "max_num_seqs": 8,
        # Small: the startup profile/warm-up runs a batch of this many tokens.
        "max_num_batched_tokens": 512,
        # No video: vLLM would otherwise profile the encoder with videos.
        "limit_mm_per_prompt": {"image": 1, "video": 0},
        "enable_prefix_caching": False,
        "kv_cache_memory_bytes": 64 << 20,
        "seed": 0,
    }
    kwargs.update(overrides)
    return kwargs


def qwen2_vl_prompt(question: str) -> str:
    """A Qwen2-VL chat prompt with one image placeholder."""
    return (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
        f"{question}<|im_end|>\n<|im_start|>assistant\n"
    )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        sys.exit(_child(sys.argv[2], sys.argv[3]))
    print(
        "usage: engine_probe.py --child SPEC OUT (use run_generate())", file=sys.stderr
    )
    sys.exit(2)
