#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""CUDA check of Model Runner V2 with a custom encoder cache manager (issue 12).

Runs the tiny Qwen2-VL model (``tools/make_tiny_mm_model.py``) end to end on
the v0.32.0 tree with ``VLLM_USE_V2_MODEL_RUNNER=1``, twice: with the default
encoder cache manager, and with a custom manager whose worker companion
(``CheckWorker`` below) keeps every encoder output in its own store, outside
V2's ``EncoderCache.encoder_outputs``, so that any V2 access not routed
through the companion fails ("Encoder cache miss") instead of passing. Each
engine generates the same 4 image prompts twice (greedy). It checks:

* both engines run V2's ``GPUModelRunner`` (``vllm.v1.worker.gpu``), the
  custom one with ``CheckWorker`` built by V2's ``EncoderCache``;
* call 1 encodes the 4 images, call 2 encodes none and reads the 4 from the
  cache (hits counted in the worker, on ``EncoderCache.get_encoder_output``);
* token-identical outputs: default vs custom manager, call 1 vs call 2;
* with the companion, nothing in ``encoder_outputs``: it held every output.

It prints one JSON line (``"ok": true`` when all hold) and finishes in well
under 5 minutes on one GPU (two engine starts of a 1.5 MB model, eager).

The tree is pure Python on top of v0.32.0's compiled extensions. On this
repo's CPU machines they are the CPU kernels; on a GPU machine pass
``--cuda-vllm DIR``, the ``vllm`` package directory of an installed CUDA
build of vLLM 0.32.0 (``pip install vllm==0.32.0``): the script then runs
an overlay (``build_overlay``: the tree's files, that install's ``*.so``).

Without CUDA it refuses (exit 2) unless ``--self-check`` is given, which
checks on CPU, with the tree's environment (``.venv-0.32.0``), that the tree
resolves the custom manager, that V2's ``EncoderCache`` builds ``CheckWorker``
and routes every operation through it, and that forcing V2 accepts the
manager.

``--cpu-v1`` runs the same two engines on CPU, where v0.32.0 always picks the
V1 runner (no Triton): it checks this script's engine path and the
companion on the V1 runner (about 1.5 minutes here).

Usage (the engines and the self-check run with the interpreter that runs
this script: ``.venv-0.32.0/bin/python`` here, the CUDA build's on a GPU)::

    python tools/device_check_v2.py [--tree build/tree-0.32.0]
        [--model build/models-0.32.0/tiny-qwen2-vl] [--cuda-vllm DIR]
        [--self-check | --cpu-v1]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent
MANAGER = "device_check_v2.CheckManager"
WORKER = "device_check_v2.CheckWorker"
NUM_IMAGES = 4
PROBE_ATTR = "_device_check_v2_probe"


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Prints one JSON line; exit 0 ok, 1 a check failed, 2 no CUDA.",
    )
    p.add_argument(
        "--tree", default="build/tree-0.32.0", help="v0.32.0 tree with the series"
    )
    p.add_argument(
        "--model",
        default="build/models-0.32.0/tiny-qwen2-vl",
        help="the tiny model (make tiny-model BASE=0.32.0)",
    )
    p.add_argument(
        "--cuda-vllm",
        default=None,
        help="vllm package dir of an installed CUDA build of vLLM 0.32.0",
    )
    p.add_argument(
        "--self-check", action="store_true", help="CPU: check the script and tree"
    )
    p.add_argument(
        "--cpu-v1",
        action="store_true",
        help="run the same engine check on CPU, on the V1 runner (no V2 "
        "without Triton): checks the script's engine path here",
    )
    p.add_argument(
        "--timeout", type=float, default=240.0, help="seconds per engine child"
    )
    return p.parse_args(argv)


# --------------------------------------------------------------- the manager
# Built lazily (module __getattr__), so that importing this script, and
# --help, need no vLLM; vLLM resolves "device_check_v2.CheckManager" by
# qualname in each process, which lands here.
@functools.cache
def _check_manager() -> type:
    from vllm.v1.core.encoder_cache_manager import EncoderCacheManager

    class CheckManager(EncoderCacheManager):
        """The default scheduling, with the companion below."""

        @classmethod
        def get_worker_cls_name(cls) -> str | None:
            return WORKER

    CheckManager.__module__ = __name__
    CheckManager.__qualname__ = CheckManager.__name__
    return CheckManager


@functools.cache
def _check_worker() -> type:
    from vllm.v1.worker.ec_manager_worker import EncoderCacheManagerWorker

    class CheckWorker(EncoderCacheManagerWorker):
        """Keeps every output in its own store (never in the runner's dict)
        and counts its operations."""

        def __init__(self, vllm_config: Any, device: Any, encoder_cache: Any) -> None:
            super().__init__(vllm_config, device, encoder_cache)
            self.store: dict[str, Any] = {}
            self.counts = {"process": 0, "cache": 0, "get": 0, "removed": 0}

        def on_request_state_removed(self, req_id: str, req_state: Any) -> None:
            self.counts["removed"] += 1

        def process_scheduler_output(self, scheduler_output: Any) -> None:
            self.counts["process"] += 1
            for mm_hash in scheduler_output.free_encoder_mm_hashes:
                self.store.pop(mm_hash, None)

        def cache_encoder_output(
            self,
            mm_hash: str,
            output: Any,
            ec_manager_metadata: Any,
            free_encoder_mm_hashes: list[str],
        ) -> None:
            self.counts["cache"] += 1
            self.store[mm_hash] = output

        def get_encoder_output(self, mm_hash: str) -> Any:
            self.counts["get"] += 1
            # An EC connector loads into the runner's dict: look there too.
            output = self.store.get(mm_hash)
            return output if output is not None else self.encoder_cache.get(mm_hash)

        def reset(self) -> None:
            self.store.clear()

    CheckWorker.__module__ = __name__
    CheckWorker.__qualname__ = CheckWorker.__name__
    return CheckWorker


def __getattr__(name: str) -> Any:
    if name == "CheckManager":
        return _check_manager()
    if name == "CheckWorker":
        return _check_worker()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------- the overlay
def _is_extension(path: Path) -> bool:
    return path.suffix == ".so" or ".so." in path.name


def build_overlay(tree_vllm: Path, cuda_vllm: Path, dest: Path) -> Path:
    """A ``vllm`` package in ``dest``: symlinks to every file of the tree's
    ``vllm`` except its compiled extensions (``*.so``), which come from the
    CUDA install ``cuda_vllm``, as does every file the tree lacks. Returns
    the directory to put on ``PYTHONPATH``."""
    pkg = dest / "vllm"
    if pkg.exists():
        shutil.rmtree(pkg)

    def files(root: Path) -> list[Path]:
        return sorted(
            p
            for p in root.rglob("*")
            if not p.is_dir() and "__pycache__" not in p.relative_to(root).parts
        )

    for path in files(tree_vllm):
        if not _is_extension(path):
            target = pkg / path.relative_to(tree_vllm)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(path.resolve())
    for path in files(cuda_vllm):
        target = pkg / path.relative_to(cuda_vllm)
        if _is_extension(path) or not (target.exists() or target.is_symlink()):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(path.resolve())
    return dest


# ------------------------------------------------------- in-worker functions
def _runner(worker: Any) -> Any:
    # tools/ is on the engine's path (the manager is imported from here).
    from engine_probe import _runner_of

    return _runner_of(worker)


def _is_v2(runner: Any) -> bool:
    return hasattr(runner, "model_state")


def _cache_and_companion(runner: Any) -> tuple[dict[str, Any], Any]:
    """The runner's own dict of encoder outputs, and its companion."""
    if _is_v2(runner):
        cache = runner.encoder_cache
        return cache.encoder_outputs, cache.ec_manager_worker
    return runner.encoder_cache, getattr(runner, "ec_manager_worker", None)


def install_probe(worker: Any) -> dict[str, Any]:
    """(Worker side, via collective_rpc.) Count the encoder's runs and the
    encoder cache reads (V2: EncoderCache.get_encoder_output; V1, for
    --cpu-v1: the runner's _get_encoder_output_from_cache); return facts
    about the runner."""
    runner = _runner(worker)
    _, companion = _cache_and_companion(runner)
    facts: dict[str, Any] = {
        "runner_class": f"{type(runner).__module__}.{type(runner).__qualname__}",
        "v2": _is_v2(runner),
        "companion": None if companion is None else type(companion).__qualname__,
    }
    if PROBE_ATTR in runner.__dict__:
        return facts
    counters = {"encoder_items": 0, "hits": 0, "misses": 0}
    runner.__dict__[PROBE_ATTR] = counters
    if _is_v2(runner):
        reader, read_name = runner.encoder_cache, "get_encoder_output"
        encoder, encode_name = runner.model_state.encoder_runner, "execute_mm_encoder"
    else:
        reader, read_name = runner, "_get_encoder_output_from_cache"
        encoder, encode_name = runner, "_execute_mm_encoder"
    read = getattr(reader, read_name)
    encode = getattr(encoder, encode_name)

    def counted_read(mm_hash: str) -> Any:
        out = read(mm_hash)
        counters["hits" if out is not None else "misses"] += 1
        return out

    def counted_encode(*args: Any, **kwargs: Any) -> Any:
        out = encode(*args, **kwargs)
        counters["encoder_items"] += len(out)
        return out

    setattr(reader, read_name, counted_read)
    setattr(encoder, encode_name, counted_encode)
    return facts


def read_probe(worker: Any) -> dict[str, Any]:
    """(Worker side, via collective_rpc.) The counters so far."""
    runner = _runner(worker)
    outputs, companion = _cache_and_companion(runner)
    return {
        "counters": dict(runner.__dict__[PROBE_ATTR]),
        "encoder_outputs": len(outputs),
        "companion_counts": None if companion is None else dict(companion.counts),
        "companion_entries": None if companion is None else len(companion.store),
    }


# ------------------------------------------------------------ child processes
def _engine_child(spec_path: str, out_path: str) -> int:
    """Build the LLM on V2, generate twice, write what the worker saw."""
    spec = json.loads(Path(spec_path).read_text())
    import device_check_v2 as me
    from engine_probe import TINY_MM_QUESTIONS, make_images, qwen2_vl_prompt
    from vllm import LLM, SamplingParams

    t0 = time.monotonic()
    llm = LLM(**spec["llm_kwargs"])
    startup_s = time.monotonic() - t0
    facts = llm.collective_rpc(me.install_probe)[0]
    requests = [
        {"prompt": qwen2_vl_prompt(q), "multi_modal_data": {"image": image}}
        for q, image in zip(TINY_MM_QUESTIONS, make_images(NUM_IMAGES))
    ]
    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True, seed=0)
    calls = []
    for _ in range(2):
        before = llm.collective_rpc(me.read_probe)[0]
        outs = llm.generate(requests, params, use_tqdm=False)
        after = llm.collective_rpc(me.read_probe)[0]
        calls.append(
            {
                "token_ids": [list(o.outputs[0].token_ids) for o in outs],
                "counters": {
                    k: after["counters"][k] - before["counters"][k]
                    for k in after["counters"]
                },
                "encoder_outputs": after["encoder_outputs"],
                "companion_counts": after["companion_counts"],
                "companion_entries": after["companion_entries"],
            }
        )
    result = {"startup_s": startup_s, "facts": facts, "calls": calls}
    Path(out_path).write_text(json.dumps(result))
    del llm
    return 0


def _self_check_child() -> int:
    """(CPU, the tree's environment.) The tree resolves the manager, V2's
    EncoderCache builds CheckWorker and routes every operation through it,
    and forcing V2 accepts the manager."""
    # vLLM resolves the qualname to the module device_check_v2, not to this
    # __main__.
    import device_check_v2 as me
    import torch
    import vllm.config.vllm as vllm_config_module
    from vllm.config import EncoderCacheManagerConfig, VllmConfig
    from vllm.v1.core.sched.output import CachedRequestData, SchedulerOutput
    from vllm.v1.worker.gpu.mm.encoder_cache import EncoderCache

    ec_config = EncoderCacheManagerConfig(encoder_cache_manager_cls=MANAGER)
    assert ec_config.get_encoder_cache_manager_obj() is me.CheckManager
    vllm_config = VllmConfig(ec_manager_config=ec_config)
    cache = EncoderCache(vllm_config, torch.device("cpu"))
    worker = cache.ec_manager_worker
    assert type(worker) is me.CheckWorker, type(worker)

    def step(free: list[str]) -> SchedulerOutput:
        return SchedulerOutput(
            scheduled_new_reqs=[],
            scheduled_cached_reqs=CachedRequestData.make_empty(),
            num_scheduled_tokens={},
            total_num_scheduled_tokens=0,
            scheduled_spec_decode_tokens={},
            scheduled_encoder_inputs={},
            finished_req_ids=set(),
            free_encoder_mm_hashes=free,
        )

    cache.process_scheduler_output(step([]))
    cache.cache_encoder_output("h", torch.ones(2, 2))
    assert cache.encoder_outputs == {}
    assert torch.equal(cache.get_encoder_output("h"), torch.ones(2, 2))
    cache.process_scheduler_output(step(["h"]))
    assert cache.get_encoder_output("h") is None
    cache.on_request_removed("r")
    assert worker.counts == {"process": 2, "cache": 1, "get": 2, "removed": 1}

    # What a CUDA host has: Triton. Then V2 runs a manager with a companion.
    vllm_config_module.HAS_TRITON = True
    unsupported = vllm_config._get_v2_model_runner_unsupported_features()
    assert not any("encoder cache manager" in f for f in unsupported), unsupported
    print(json.dumps({"ok": True, "companion": type(worker).__qualname__}))
    return 0


def _child_env(
    tree: Path, cuda_vllm: Path | None, workdir: Path, cpu: bool
) -> dict[str, str]:
    if str(TOOLS) not in sys.path:
        sys.path.insert(0, str(TOOLS))
    from series import tree_env

    env = tree_env(tree)
    # The probe's functions go to the workers by collective_rpc.
    env["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    if cpu:
        env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(TOOLS)])
        return env
    # CUDA: the tree's Python over a CUDA build's extensions; no CPU target.
    env.pop("VLLM_TARGET_DEVICE", None)
    path = (
        tree if cuda_vllm is None else build_overlay(tree / "vllm", cuda_vllm, workdir)
    )
    env["PYTHONPATH"] = os.pathsep.join([str(path), str(TOOLS)])
    env["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    return env


def _run_engine(
    env: dict[str, str], model: Path, manager: str | None, workdir: Path, timeout: float
) -> dict[str, Any]:
    from engine_probe import run_child_script, tiny_mm_llm_kwargs

    llm_kwargs = tiny_mm_llm_kwargs(model)
    if manager is not None:
        llm_kwargs["ec_manager_config"] = {"encoder_cache_manager_cls": manager}
    tag = "custom" if manager else "default"
    spec, out = workdir / f"{tag}.json", workdir / f"{tag}-result.json"
    spec.write_text(json.dumps({"llm_kwargs": llm_kwargs}))
    t0 = time.monotonic()
    proc = run_child_script(Path(__file__), spec, out, env, workdir, timeout)
    if proc.returncode != 0 or not out.exists():
        return {"error": f"rc={proc.returncode}", "log_tail": proc.stdout[-3000:]}
    result = json.loads(out.read_text())
    result["wall_s"] = round(time.monotonic() - t0, 1)
    return result


def evaluate(
    default: dict[str, Any], custom: dict[str, Any], expect_v2: bool = True
) -> dict[str, bool]:
    """The checks, from the two engines' results."""
    checks: dict[str, bool] = {}
    for tag, run in (("default", default), ("custom", custom)):
        ok = "error" not in run
        calls = run.get("calls", [{}, {}])
        checks[f"{tag}_ran"] = ok
        checks[f"{tag}_on_v2" if expect_v2 else f"{tag}_on_v1"] = ok and (
            bool(run["facts"]["v2"]) is expect_v2
        )
        checks[f"{tag}_call1_encodes_all"] = (
            ok and calls[0]["counters"]["encoder_items"] == NUM_IMAGES
        )
        checks[f"{tag}_call2_encodes_none"] = (
            ok and calls[1]["counters"]["encoder_items"] == 0
        )
        checks[f"{tag}_call2_hits"] = ok and calls[1]["counters"]["hits"] >= NUM_IMAGES
        checks[f"{tag}_calls_identical"] = (
            ok and calls[0]["token_ids"] == calls[1]["token_ids"]
        )
    both = "error" not in default and "error" not in custom
    checks["default_has_no_companion"] = both and default["facts"]["companion"] is None
    checks["custom_companion_built"] = (
        both and custom["facts"]["companion"] == "CheckWorker"
    )
    checks["custom_companion_holds_outputs"] = both and all(
        c["encoder_outputs"] == 0 and c["companion_counts"]["cache"] > 0
        for c in custom["calls"][:1]
    )
    checks["token_identical"] = both and [c["token_ids"] for c in default["calls"]] == [
        c["token_ids"] for c in custom["calls"]
    ]
    return checks


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    t0 = time.monotonic()
    tree = Path(args.tree)
    tree = tree if tree.is_absolute() else ROOT / tree
    model = Path(args.model)
    model = model if model.is_absolute() else ROOT / model
    result: dict[str, Any] = {
        "tree": str(tree),
        "self_check": args.self_check,
        "cpu_v1": args.cpu_v1,
    }
    if args.self_check:
        with tempfile.TemporaryDirectory() as tmp:
            env = _child_env(tree, None, Path(tmp), cpu=True)
            proc = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--child-self-check"],
                env=env,
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=args.timeout,
            )
        lines = proc.stdout.strip().splitlines()
        ok = proc.returncode == 0 and bool(lines) and json.loads(lines[-1])["ok"]
        result.update(ok=ok, seconds=round(time.monotonic() - t0, 1))
        if not ok:
            result["log_tail"] = (proc.stdout + proc.stderr)[-3000:]
        print(json.dumps(result))
        return 0 if ok else 1

    import torch

    if not torch.cuda.is_available() and not args.cpu_v1:
        result.update(
            ok=False,
            error="CUDA is not available; this check needs a GPU "
            "(use --self-check to check the script and tree on CPU)",
        )
        print(json.dumps(result))
        return 2
    cuda_vllm = Path(args.cuda_vllm).resolve() if args.cuda_vllm else None
    with tempfile.TemporaryDirectory(prefix="device-check-v2-") as tmp:
        workdir = Path(tmp)
        env = _child_env(tree, cuda_vllm, workdir, cpu=args.cpu_v1)
        default = _run_engine(env, model, None, workdir, args.timeout)
        custom = _run_engine(env, model, MANAGER, workdir, args.timeout)
    checks = evaluate(default, custom, expect_v2=not args.cpu_v1)
    result.update(
        ok=all(checks.values()),
        device="cpu (V1 runner)" if args.cpu_v1 else torch.cuda.get_device_name(),
        checks=checks,
        default={k: v for k, v in default.items() if k != "calls"},
        custom={k: v for k, v in custom.items() if k != "calls"},
        counters={
            tag: [c["counters"] for c in run.get("calls", [])]
            for tag, run in (("default", default), ("custom", custom))
        },
        seconds=round(time.monotonic() - t0, 1),
    )
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        sys.exit(_engine_child(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 2 and sys.argv[1] == "--child-self-check":
        sys.exit(_self_check_child())
    sys.exit(main())
