# SPDX-License-Identifier: Apache-2.0
"""Replay a trace through a tree's real ``Scheduler`` (runs in the child).

The scheduler is built the way ``tests/v1/core/utils.py::create_scheduler``
builds it (offline ``ModelConfig``, ``SchedulerConfig``, ``CacheConfig``, a
``KVCacheConfig`` with one full-attention group), plus the encoder-cache
manager and EC connector the run asks for. Requests carry
``MultiModalFeatureSpec``s with ``PlaceholderRange``s built directly (no
processor). A simulated executor turns each ``SchedulerOutput`` into a
``ModelRunnerOutput``, drives :class:`bench.worker_model.WorkerModel` and
advances the simulated clock with :class:`bench.costmodel.CostModel`.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import statistics
import time
import zlib
from collections.abc import Generator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from bench.costmodel import CostModel, load_encoder_cost
from bench.trace import Trace
from bench.worker_model import (
    OPS,
    Feature,
    StepInput,
    StepStats,
    WorkerModel,
)

TWO_TIER_MODULE = "vllm.v1.core.two_tier_encoder_cache_manager"
TWO_TIER_CLS = f"{TWO_TIER_MODULE}.TwoTierEncoderCacheManager"
DEFAULT_MODEL = "Qwen/Qwen2-VL-2B-Instruct"
#: Scheduler settings of every run unless a spec overrides them.
DEFAULT_SCHED: dict[str, Any] = {
    "max_num_seqs": 32,
    "max_num_batched_tokens": 8192,
    "max_model_len": 32768,
    "block_size": 16,
    "num_blocks": 40000,
    "enable_prefix_caching": False,
}


class NotAvailable(Exception):
    """The tree lacks a feature this run needs (reported as n/a)."""


# ------------------------------------------------------------------ probing
def probe() -> dict[str, Any]:
    """Which of the series' features this tree has."""
    import vllm.config as vc
    from vllm.distributed.ec_transfer.ec_connector.base import ECConnectorBase
    from vllm.v1.core.encoder_cache_manager import EncoderCacheManager

    has_cfg = hasattr(vc, "EncoderCacheManagerConfig") and (
        "ec_manager_config" in getattr(vc.VllmConfig, "__dataclass_fields__", {})
    )
    two_tier = importlib.util.find_spec(TWO_TIER_MODULE) is not None
    from vllm.v1.core.sched.output import SchedulerOutput

    policies: list[str] = []
    default_policy = None
    adaptive_rules = 0
    if two_tier:
        try:
            mod = importlib.import_module(TWO_TIER_MODULE)
            cfg_cls = getattr(mod, "TwoTierEncoderCacheConfig", None)
            default_policy = getattr(cfg_cls, "policy", None)
            pol = importlib.import_module("vllm.v1.core.ec_cache_policy")
            policies = sorted(getattr(pol, "POLICIES", {}))
            adaptive_rules = len(getattr(getattr(pol, "_Duel", None), "RULES", ()))
        except Exception as e:  # reported, the runs that need it fail loudly
            default_policy = f"error: {e!r}"
    return {
        "two_tier_policies": policies,
        "two_tier_default_policy": default_policy,
        "adaptive_rules": adaptive_rules,
        "ec_manager_config": bool(has_cfg),
        "ec_manager_metadata": "ec_manager_metadata"
        in getattr(SchedulerOutput, "__dataclass_fields__", {}),
        "create_manager": hasattr(EncoderCacheManager, "create_manager"),
        "two_tier_module": bool(two_tier),
        "two_tier": bool(two_tier and has_cfg),
        "ensure_cache_available": hasattr(ECConnectorBase, "ensure_cache_available"),
        "vllm_file": vc.__file__,
    }


# ------------------------------------------------------------- construction
@dataclass
class Built:
    scheduler: Any
    vllm_config: Any
    manager_desc: str
    capacity_note: str
    drain_metadata: bool = False


def _metadata_ops(meta: Any) -> list[tuple[Any, ...]]:
    """Translate manager metadata into worker-model operations.

    A metadata object may provide ``bench_ops()`` (a list of (op, mm_hash)
    in execution order, op in ``worker_model.OPS``). Otherwise the two-tier
    metadata (``TwoTierEncoderCacheMetadata``) is read by its field names,
    in the order its docstring gives the workers: ``clear_host``,
    ``drop_host``, ``drop_device``, ``promote``, ``demote`` (``demote_split``
    with its size when the entry keeps a tail on the device, ``device_tail``),
    then ``move_tail`` (with its number of blocks) for ``tail_blocks``."""
    if meta is None:
        return []
    if hasattr(meta, "bench_ops"):
        ops = list(meta.bench_ops())
        for op, *_ in ops:
            if op not in OPS:
                raise ValueError(f"unknown metadata op {op!r}")
        return ops
    ops: list[tuple[Any, ...]] = []
    if getattr(meta, "clear_host", False):
        ops.append(("clear_host", ""))
    for op in ("drop_host", "drop_device", "promote"):
        for h in getattr(meta, op, None) or ():
            ops.append((op, h))
    tails = getattr(meta, "device_tail", None) or {}
    for h in getattr(meta, "demote", None) or ():
        ops.append(("demote_split", h, tails[h]) if h in tails else ("demote", h))
    for h, blocks in (getattr(meta, "tail_blocks", None) or {}).items():
        ops.append(("move_tail", h, len(blocks)))
    return ops


class _ConfigProxy:
    """``vllm_config`` plus an ``ec_manager_config`` for trees without one.

    Lets ``create_manager`` of a manager written for the series run on a
    tree that lacks issue 3's config field (harness injection only)."""

    def __init__(self, vllm_config: Any, manager_config: dict[str, Any]) -> None:
        from types import SimpleNamespace

        self._vllm_config = vllm_config
        self.ec_manager_config = SimpleNamespace(
            encoder_cache_manager_cls=None, manager_config=manager_config
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._vllm_config, name)


def _connector_loads(meta: Any) -> list[tuple[str, float]]:
    """(mm_hash, delivery time) loads described by EC connector metadata."""
    if meta is None:
        return []
    if hasattr(meta, "loads"):
        return [(h, float(t)) for h, t in meta.loads]
    if hasattr(meta, "mm_datas"):  # the in-tree example connector's shape
        return [(d.mm_hash, 0.0) for d in meta.mm_datas]
    return []


def build_scheduler(
    spec: dict[str, Any], feats: dict[str, Any], remote_ids: set[str]
) -> Built:
    """Build the tree's Scheduler for one run (see module doc)."""
    import torch
    from vllm.config import (
        CacheConfig,
        ECTransferConfig,
        SchedulerConfig,
        VllmConfig,
    )
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
    )
    from vllm.v1.structured_output import StructuredOutputManager

    s = spec["sched"]
    model_config = _model_config(spec["model"], s["max_model_len"])
    scheduler_config = SchedulerConfig(
        max_num_seqs=s["max_num_seqs"],
        max_num_batched_tokens=s["max_num_batched_tokens"],
        max_model_len=s["max_model_len"],
        enable_chunked_prefill=True,
        is_encoder_decoder=model_config.is_encoder_decoder,
    )
    cache_config = CacheConfig(
        block_size=s["block_size"],
        gpu_memory_utilization=0.9,
        cache_dtype="auto",
        enable_prefix_caching=s["enable_prefix_caching"],
    )
    ec_transfer_config = None
    if spec.get("connector"):
        ec_transfer_config = ECTransferConfig(
            ec_connector="SimDelayECConnector",
            ec_connector_module_path="bench.sim_connector",
            ec_role="ec_consumer",
            ec_connector_extra_config={
                "latency_s": spec["connector"]["latency_s"],
                "defer": spec["connector"]["mode"] == "deferral",
            },
        )
    kwargs: dict[str, Any] = {}
    mgr = spec["manager"]
    desc = "default"
    inject = None
    if mgr["kind"] in ("twotier", "class"):
        if mgr["kind"] == "twotier":
            if not feats["two_tier_module"]:
                raise NotAvailable("tree has no two-tier encoder cache manager")
            cls = TWO_TIER_CLS
            mcfg = dict(mgr.get("manager_config", {}))
            mcfg.setdefault("host_cache_embeddings", spec["host_embeds"])
            mcfg.setdefault("policy", mgr.get("policy", "score"))
        else:
            cls, mcfg = mgr["cls"], dict(mgr.get("manager_config", {}))
        desc = f"{cls.rsplit('.', 1)[-1]}({mcfg})"
        if mgr.get("via", "config") == "config":
            if not feats["ec_manager_config"]:
                raise NotAvailable("tree has no ec_manager_config")
            from vllm.config import EncoderCacheManagerConfig  # type: ignore[attr-defined]

            kwargs["ec_manager_config"] = EncoderCacheManagerConfig(
                encoder_cache_manager_cls=cls, manager_config=mcfg
            )
        else:
            inject = (cls, mcfg)
    vllm_config = VllmConfig(
        scheduler_config=scheduler_config,
        model_config=model_config,
        cache_config=cache_config,
        ec_transfer_config=ec_transfer_config,
        **kwargs,
    )
    # The device tier's size: the scheduler derives it from
    # SchedulerConfig.encoder_cache_size (and the model's largest item).
    # The encoder compute budget does not depend on the capacity: every
    # manager at every capacity gets the same one (the scheduler's own
    # max(max_num_encoder_input_tokens, largest item), or the spec's).
    dev = int(spec["device_embeds"])
    vllm_config.scheduler_config.encoder_cache_size = dev
    vllm_config.scheduler_config.max_num_encoder_input_tokens = int(
        spec.get("encoder_budget") or s["max_num_batched_tokens"]
    )
    num_blocks = s["num_blocks"]
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer"],
                FullAttentionSpec(
                    block_size=s["block_size"],
                    num_kv_heads=1,
                    head_size=1,
                    dtype=torch.float32,
                ),
            )
        ],
    )
    cache_config.num_gpu_blocks = num_blocks
    sched = Scheduler(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        block_size=s["block_size"],
        log_stats=True,
        structured_output_manager=StructuredOutputManager(vllm_config),
    )
    if spec.get("encoder_budget"):
        sched.max_num_encoder_input_tokens = int(spec["encoder_budget"])
    note = ""
    m = sched.encoder_cache_manager
    if inject is not None or getattr(m, "cache_size", dev) != dev:
        # Test hook / capacity fix-up: rebuild the manager the way the
        # scheduler does (create_manager where the tree has it).
        if inject is not None:
            mod, _, name = inject[0].rpartition(".")
            cls_obj = getattr(importlib.import_module(mod), name)
        else:
            cls_obj = type(m)
            note = (
                f"encoder_cache_size {getattr(m, 'cache_size', '?')} -> {dev} (rebuilt)"
            )
        if hasattr(cls_obj, "create_manager"):
            cfg = vllm_config
            if inject is not None and not hasattr(vllm_config, "ec_manager_config"):
                cfg = _ConfigProxy(vllm_config, inject[1])
            sched.encoder_cache_manager = cls_obj.create_manager(
                cache_size=dev, vllm_config=cfg
            )
        else:
            sched.encoder_cache_manager = cls_obj(cache_size=dev)
    if sched.ec_connector is not None:
        sched.ec_connector.remote = set(remote_ids)
    drain = inject is not None and "ec_manager_metadata" not in getattr(
        _scheduler_output_cls(), "__dataclass_fields__", {}
    )
    if drain:
        note = (note + "; " if note else "") + (
            "manager injected by the harness; tree has no ec_manager_metadata, "
            "so the harness drains get_manager_metadata() after schedule()"
        )
    return Built(sched, vllm_config, desc, note, drain)


def _scheduler_output_cls() -> Any:
    from vllm.v1.core.sched.output import SchedulerOutput

    return SchedulerOutput


@lru_cache(maxsize=4)
def _model_config_cached(model: str, max_model_len: int) -> Any:
    from vllm.config import ModelConfig

    return ModelConfig(
        model=model,
        trust_remote_code=True,
        dtype="float16",
        seed=42,
        max_model_len=max_model_len,
        mm_processor_kwargs={"max_pixels": 2240 * 2240},
    )


def _model_config(model: str, max_model_len: int) -> Any:
    import copy

    return copy.deepcopy(_model_config_cached(model, max_model_len))


def warm(model: str = DEFAULT_MODEL) -> float:
    """Build the model config and one scheduler (caches the processor)."""
    t0 = time.perf_counter()
    spec = {
        "model": model,
        "sched": dict(DEFAULT_SCHED),
        "manager": {"kind": "default"},
        "device_embeds": 8192,
    }
    build_scheduler(spec, probe(), set())
    return time.perf_counter() - t0


# ------------------------------------------------------------------ replay
def _token_id(key: str, pos: int) -> int:
    """The prompt token at ``pos`` of a session (or request) ``key``."""
    return 100 + (zlib.crc32(key.encode()) + pos * 2654435761) % 50000


def _prompt_ids(req_id: str, session: str | None, n: int) -> list[int]:
    base = zlib.crc32((session or req_id).encode())
    return [100 + (base + p * 2654435761) % 50000 for p in range(n)]


def _make_request(tr: Any, arrival: float, block_hasher: Any) -> Any:
    from vllm.multimodal.inputs import (
        MultiModalFeatureSpec,
        MultiModalKwargsItem,
        PlaceholderRange,
    )
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    sp = SamplingParams(max_tokens=tr.output_tokens, ignore_eos=True)
    feats = [
        MultiModalFeatureSpec(
            data=MultiModalKwargsItem.dummy(),
            mm_position=PlaceholderRange(offset=it.offset, length=it.embeds),
            identifier=it.id,
            modality=it.modality,
        )
        for it in tr.mm
    ]
    return Request(
        request_id=tr.id,
        prompt_token_ids=_prompt_ids(tr.id, tr.session, tr.prompt_tokens),
        sampling_params=sp,
        pooling_params=None,
        arrival_time=arrival,
        mm_features=feats or None,
        block_hasher=block_hasher,
    )


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def hold_adaptive_rule(manager: Any, rule: int) -> None:
    """Hold the admission rule of a two-tier manager with policy
    ``adaptive`` at ``_Duel.RULES[rule]`` (0: admit-all) for the whole run,
    instead of following its duel: the duel's shadows still replay every
    access, but their verdict is overridden on this manager only (other runs
    in the same child are untouched). See :mod:`bench.rules`."""
    duels = {
        id(d): d
        for d in (
            getattr(p, "duel", None) for p in getattr(manager, "policies", {}).values()
        )
        if d is not None
    }
    if not duels:
        raise NotAvailable(
            "adaptive_rule needs a two-tier manager with policy adaptive"
        )
    for duel in duels.values():
        if not 0 <= rule < len(duel.RULES):
            raise ValueError(
                f"adaptive_rule {rule}: the duel has {len(duel.RULES)} rules"
            )
        follow = duel.access
        duel.bench_shadow_hits = [0.0] * len(duel.shadows)
        duel.bench_accessed = 0.0

        def access(
            key: str, usage: Any, model: Any, _follow: Any = follow, _duel: Any = duel
        ) -> None:
            before = [shadow.hits for shadow in _duel.shadows]
            accessed = _duel.accessed
            _follow(key, usage, model)
            # The duel halves its counts now and then; undo that here.
            scale = 2.0 if _duel.accessed < accessed else 1.0
            for i, shadow in enumerate(_duel.shadows):
                _duel.bench_shadow_hits[i] += shadow.hits * scale - before[i]
            _duel.bench_accessed += usage.num_embeds
            _duel.choice = rule

        duel.access = access
        duel.choice = rule


def adaptive_shadow_hit_ratios(manager: Any) -> list[float] | None:
    """Each duel shadow's hit ratio (embeddings, undecayed) over a run that
    :func:`hold_adaptive_rule` set up; None for any other run."""
    for policy in getattr(manager, "policies", {}).values():
        duel = getattr(policy, "duel", None)
        if duel is not None and getattr(duel, "bench_accessed", 0.0) > 0:
            return [h / duel.bench_accessed for h in duel.bench_shadow_hits]
    return None


def run(spec: dict[str, Any], feats: dict[str, Any]) -> dict[str, Any]:
    """Replay ``spec["trace"]`` and return the run's metrics (JSON-able)."""
    g = run_iter(spec, feats)
    while True:
        try:
            next(g)
        except StopIteration as stop:
            return stop.value


def run_iter(
    spec: dict[str, Any], feats: dict[str, Any]
) -> Generator[None, None, dict]:
    """:func:`run` as a generator that pauses every ``spec["chunk_steps"]``
    steps (never when unset), so the parent can interleave runs of two trees
    at a fine grain; the result is the generator's return value."""
    from vllm.v1.outputs import ModelRunnerOutput

    chunk = spec.get("chunk_steps")

    trace = Trace.load(spec["trace"])
    cost = CostModel(**spec.get("cost", {}))
    enc_fn, enc_label = load_encoder_cost(spec.get("cost_model_path"))
    conn = spec.get("connector")
    remote_ids = (
        {it.id for r in trace.requests for it in r.mm if it.remote} if conn else set()
    )
    if conn and conn["mode"] == "deferral" and not feats["ensure_cache_available"]:
        raise NotAvailable("tree has no ECConnectorBase.ensure_cache_available")
    t_build = time.perf_counter()
    built = build_scheduler(spec, feats, remote_ids)
    t_build = time.perf_counter() - t_build
    sched = built.scheduler
    hf_config = built.vllm_config.model_config.hf_config
    bpe = cost.bytes_per_embed or (
        built.vllm_config.model_config.get_hidden_size()
        * built.vllm_config.model_config.dtype.itemsize
    )

    @lru_cache(maxsize=None)
    def enc_flops(n: int) -> float:
        return float(enc_fn(hf_config, n))

    def enc_seconds(n: int) -> float:
        return cost.encoder_seconds(enc_flops(n))

    mgr = sched.encoder_cache_manager
    if spec.get("adaptive_rule") is not None:
        hold_adaptive_rule(mgr, int(spec["adaptive_rule"]))
    worker = WorkerModel(
        device_capacity=int(getattr(mgr, "cache_size", spec["device_embeds"])),
        host_capacity=int(spec.get("host_embeds", 0))
        if spec["manager"]["kind"] != "default"
        else 0,
        encoder_seconds=enc_seconds,
        strict_budget=spec.get("strict_budget", True),
        host_block_embeddings=int(getattr(mgr, "host_block_embeddings", 1)),
    )
    block_hasher = None
    if spec["sched"]["enable_prefix_caching"]:
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

        init_none_hash(sha256)
        block_hasher = get_request_block_hasher(spec["sched"]["block_size"], sha256)

    clock = 0.0
    if sched.ec_connector is not None:
        sched.ec_connector.clock = lambda: clock
        if conn["mode"] == "ideal":
            sched.ec_connector.latency_s = 0.0
    reqs = trace.requests
    arrival = {r.id: r.arrival_s for r in reqs}
    #: the token a request generates at a position is the one its session's
    #: next turn carries there, so the prefix cache can reuse answers
    token_key = {r.id: r.session or r.id for r in reqs}
    first_token: dict[str, float] = {}
    finish: dict[str, float] = {}
    failed: dict[str, Any] = {}
    wall_ns: list[int] = []
    cpu_ns: list[int] = []
    running_at: list[int] = []
    sched_tokens: list[int] = []
    steps = idle_steps = 0
    stall_s = 0.0
    max_running = 0
    running_sum = 0
    pc_totals = {"requests": 0, "queries": 0, "hits": 0}
    kv_usage_max = 0.0
    total = StepStats()
    i = 0
    n = len(reqs)
    gc.collect()
    last_progress = 0
    while i < n or sched.get_num_unfinished_requests() > 0:
        if chunk and steps and steps % chunk == 0:
            yield  # paused; the timed sections are all inside one step
        while i < n and reqs[i].arrival_s <= clock + 1e-12:
            sched.add_request(_make_request(reqs[i], reqs[i].arrival_s, block_hasher))
            i += 1
        if sched.get_num_unfinished_requests() == 0:
            clock = reqs[i].arrival_s
            continue
        n_running = len(sched.running)
        c0 = time.thread_time_ns()
        t0 = time.perf_counter_ns()
        out = sched.schedule()
        t1 = time.perf_counter_ns()
        c1 = time.thread_time_ns()
        meta = getattr(out, "ec_manager_metadata", None)
        if built.drain_metadata and hasattr(
            sched.encoder_cache_manager, "get_manager_metadata"
        ):
            meta = sched.encoder_cache_manager.get_manager_metadata()
        si = _step_input(steps, out, meta)
        st = worker.step(si)
        loads = _connector_loads(getattr(out, "ec_connector_metadata", None))
        start = clock
        if loads:
            ready = max(t for _, t in loads)
            if ready > clock:
                stall_s += ready - clock
                start = ready
        if out.total_num_scheduled_tokens > 0:
            dur = (
                cost.step_overhead_s
                + st.prefill_tokens * cost.prefill_s_per_token
                + st.decode_tokens * cost.decode_s_per_token
                + st.encoder_seconds
                + (st.d2h_embeds + st.h2d_embeds) * bpe / cost.copy_bytes_per_s
                + st.copies * cost.copy_latency_s
            )
            clock = start + dur
            last_progress = steps
        total.add(st)
        rids = list(out.num_scheduled_tokens)
        sampled = []
        for rid in rids:
            r = sched.requests[rid]
            sampled.append(
                [_token_id(token_key[rid], r.num_tokens)]
                if r.num_computed_tokens >= r.num_tokens
                else []
            )
        max_running = max(max_running, len(rids))
        running_sum += len(rids)
        mro = ModelRunnerOutput(
            req_ids=rids,
            req_id_to_index={rid: k for k, rid in enumerate(rids)},
            sampled_token_ids=sampled,
            logprobs=None,
            prompt_logprobs_dict={},
            pooler_output=[],
        )
        c2 = time.thread_time_ns()
        t2 = time.perf_counter_ns()
        eco = sched.update_from_output(out, mro)
        t3 = time.perf_counter_ns()
        c3 = time.thread_time_ns()
        if out.total_num_scheduled_tokens > 0:
            wall_ns.append((t1 - t0) + (t3 - t2))
            cpu_ns.append((c1 - c0) + (c3 - c2))
            running_at.append(n_running)
            sched_tokens.append(out.total_num_scheduled_tokens)
        else:
            idle_steps += 1
            # Nothing could run: jump to the next event.
            nxt = [reqs[i].arrival_s] if i < n else []
            if sched.ec_connector is not None:
                nxt += [t for t in sched.ec_connector.ready.values() if t > clock]
            if not nxt:
                if steps - last_progress > 1000:
                    raise RuntimeError(
                        f"replay stalled at step {steps}: nothing schedulable, "
                        "no event pending"
                    )
                clock += cost.step_overhead_s
            else:
                clock = max(clock + 1e-9, min(nxt))
        for outs in eco.values():
            ss = getattr(outs, "scheduler_stats", None)
            if ss is not None:
                kv_usage_max = max(kv_usage_max, float(ss.kv_cache_usage))
                pcs = ss.prefix_cache_stats
                for k in pc_totals:
                    pc_totals[k] += int(getattr(pcs, k, 0) or 0)
            for o in outs.outputs:
                if o.new_token_ids and o.request_id not in first_token:
                    first_token[o.request_id] = clock
                if o.finish_reason is not None:
                    finish[o.request_id] = clock
                    if str(o.finish_reason) == "error":
                        failed[o.request_id] = o.stop_reason
        steps += 1
    if failed:
        # Not a measurement of serving the trace: say which and why (the
        # series fails e.g. an item larger than the encoder budget).
        rid, why = next(iter(failed.items()))
        raise RuntimeError(
            f"vLLM failed {len(failed)} of {n} requests, e.g. {rid!r}: "
            f"{str(why).rstrip('.')}; "
            "the harness compares runs that serve every request of the trace"
        )
    if len(finish) != n:
        raise RuntimeError(f"only {len(finish)}/{n} requests finished")
    res = _results(spec, built, worker, total, bpe, enc_flops, enc_label)
    if spec.get("adaptive_rule") is not None:
        res["shadow_hit_ratios"] = adaptive_shadow_hit_ratios(mgr)
    ttft = [first_token[r] - arrival[r] for r in first_token]
    out_tokens = sum(r.output_tokens for r in reqs)
    makespan = max(finish.values()) - reqs[0].arrival_s if reqs else 0.0
    res.update(
        {
            "requests": n,
            "steps": steps,
            "idle_steps": idle_steps,
            "max_running": max_running,
            "mean_running": running_sum / max(1, steps - idle_steps),
            "connector_stall_s": stall_s,
            "makespan_s": makespan,
            "throughput_tok_s": out_tokens / makespan if makespan > 0 else 0.0,
            "throughput_req_s": n / makespan if makespan > 0 else 0.0,
            "ttft_p50_s": _pct(ttft, 0.5),
            "ttft_p99_s": _pct(ttft, 0.99),
            "ttft_mean_s": statistics.fmean(ttft) if ttft else float("nan"),
            "wall_us_per_step_median": _pct([w / 1e3 for w in wall_ns], 0.5),
            "wall_us_per_step_p90": _pct([w / 1e3 for w in wall_ns], 0.9),
            "wall_us_per_step_mean": statistics.fmean(wall_ns) / 1e3
            if wall_ns
            else float("nan"),
            "cpu_us_per_step_median": _pct([c / 1e3 for c in cpu_ns], 0.5),
            "build_s": t_build,
            "prefix_cache": pc_totals,
            "kv_usage_max": kv_usage_max,
        }
    )
    if sched.ec_connector is not None:
        res["connector_polls"] = getattr(sched.ec_connector, "polls", None)
        res["connector_not_ready"] = getattr(sched.ec_connector, "not_ready", None)
    if spec.get("record_accesses", True):
        kept = [i for i, a in enumerate(worker.accesses) if a[2] != "external"]
        res["access_seq"] = [list(worker.accesses[i][:2]) for i in kept]
        if spec.get("record_access_requests", False):
            res["access_requests"] = [worker.access_requests[i] for i in kept]
    if spec.get("record_wall", False):
        res["wall_ns"] = wall_ns
        res["cpu_ns"] = cpu_ns
        res["running_at"] = running_at
    return res


def _ratio(num: float, den: float) -> float | None:
    """num / den, or None when nothing was accessed (no multimodal items)."""
    return num / den if den else None


def _results(
    spec: dict[str, Any],
    built: Built,
    worker: WorkerModel,
    total: StepStats,
    bpe: int,
    enc_flops: Any,
    enc_label: str,
) -> dict[str, Any]:
    """The cache metrics of a finished run (see bench/README.md, Metrics).

    Ratios are None when the trace accessed no multimodal item."""
    mgr = built.scheduler.encoder_cache_manager
    kinds = {"miss": 0, "device": 0, "host": 0, "external": 0}
    kinds_e = dict(kinds)
    kinds_f = {k: 0.0 for k in kinds}
    for _, size, kind in worker.accesses:
        kinds[kind] += 1
        kinds_e[kind] += size
        kinds_f[kind] += enc_flops(size)
    accessed_e = sum(kinds_e.values())
    accessed = sum(kinds.values())
    accessed_f = sum(kinds_f.values())
    stats = None
    if hasattr(mgr, "get_stats"):
        try:
            raw = mgr.get_stats()
            stats = raw if isinstance(raw, dict) else getattr(raw, "__dict__", str(raw))
        except Exception as e:  # report, don't hide
            stats = {"error": repr(e)}
    pending = sum(worker.pending_demotions.values())
    return {
        "status": "ok",
        "manager": built.manager_desc,
        "capacity_note": built.capacity_note,
        "encoder_cost": enc_label,
        "encoder_budget": int(built.scheduler.max_num_encoder_input_tokens),
        "bytes_per_embed": bpe,
        "device_capacity": worker.device_capacity,
        "host_capacity": worker.host_capacity,
        "accesses": accessed,
        "accessed_embeds": accessed_e,
        "accessed_flops": accessed_f,
        "encoded_items": total.encoded_items,
        "encoded_embeds": total.encoded_embeds,
        "hits": {k: kinds[k] for k in ("device", "host")},
        "hit_embeds": {k: kinds_e[k] for k in ("device", "host")},
        "hit_flops": kinds_f["device"] + kinds_f["host"],
        "external_embeds": kinds_e["external"],
        "hit_ratio": _ratio(kinds_e["device"] + kinds_e["host"], accessed_e),
        "hit_ratio_device": _ratio(kinds_e["device"], accessed_e),
        "hit_ratio_host": _ratio(kinds_e["host"], accessed_e),
        "object_hit_ratio": _ratio(kinds["device"] + kinds["host"], accessed),
        "cost_hit_ratio": _ratio(kinds_f["device"] + kinds_f["host"], accessed_f),
        "bytes_d2h": total.d2h_embeds * bpe,
        "bytes_h2d": total.h2d_embeds * bpe,
        "bytes_demoted": total.d2h_embeds * bpe,
        "bytes_promoted": total.h2d_embeds * bpe,
        "bytes_wasted_demotion": worker.wasted_demotion_embeds * bpe,
        "bytes_wasted_after_last_use": worker.wasted_after_last_use() * bpe,
        "bytes_demoted_on_host_at_end": pending * bpe,
        "wasted_demotion_share": _ratio(
            worker.wasted_demotion_embeds, total.d2h_embeds
        ),
        "max_device_embeds": worker.max_device,
        "max_host_embeds": worker.max_host,
        "encoder_seconds": total.encoder_seconds,
        "manager_stats": stats,
    }


def _step_input(step: int, out: Any, meta: Any) -> StepInput:
    new = []
    for nr in out.scheduled_new_reqs:
        feats = [
            Feature(
                hash=f.identifier,
                offset=f.mm_position.offset,
                length=f.mm_position.length,
                embeds=f.mm_position.get_num_embeds(),
            )
            for f in (nr.mm_features or [])
        ]
        plen = len(nr.prompt_token_ids) if nr.prompt_token_ids is not None else 0
        new.append((nr.req_id, feats, nr.num_computed_tokens, plen))
    c = out.scheduled_cached_reqs
    cached = list(zip(c.req_ids, c.num_computed_tokens))
    return StepInput(
        step=step,
        finished=set(out.finished_req_ids),
        preempted=set(out.preempted_req_ids or ()),
        new_reqs=new,
        cached_reqs=cached,
        num_scheduled=dict(out.num_scheduled_tokens),
        encoder_inputs={k: list(v) for k, v in out.scheduled_encoder_inputs.items()},
        free_hashes=list(out.free_encoder_mm_hashes),
        manager_ops=_metadata_ops(meta),
        connector_loads=[
            h for h, _ in _connector_loads(getattr(out, "ec_connector_metadata", None))
        ],
    )
