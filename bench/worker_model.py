# SPDX-License-Identifier: Apache-2.0
"""A model of the worker's encoder-cache dicts, driven only by SchedulerOutput.

It does what ``GPUModelRunner`` does with the scheduler's instructions, on
sizes instead of tensors, in the runner's order:

1. drop finished requests' state;
2. free ``free_encoder_mm_hashes`` from the device dict;
3. apply the manager metadata's operations in order (two-tier: drop from
   host/device, promote, demote), see :data:`OPS`;
4. register new requests / update computed-token counts;
5. insert EC connector loads, then run the encoder for
   ``scheduled_encoder_inputs`` (store on the device);
6. gather: every item overlapping a scheduled token range must be on the
   device now, else :class:`WorkerModelError` (the real runner would crash
   with "Encoder cache miss", or silently read stale data with a custom hook);
7. check the tiers' sizes against the capacities the manager was given.

It also accounts for copy traffic: every demotion's embeddings stay
*pending* until the entry is promoted (the copy paid off) or dropped from
the host (``drop_host`` / ``clear_host``: a *wasted* demotion);
:meth:`WorkerModel.wasted_after_last_use` tells the wasted demotions of items
never accessed again from those of items that come back.

Nothing here imports vLLM; bench.replay converts vLLM objects into
:class:`StepInput`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, fields
from typing import Any, Callable

#: Metadata operations the model understands, applied in list order.
#: ``promote`` moves host -> device; ``promote_copy`` copies (host keeps it);
#: ``demote`` moves device -> host; ``demote_copy`` copies (device keeps it);
#: ``("demote_split", h, tail)`` moves all but ``tail`` embeddings, which stay
#: in device memory (in the device budget) until ``("move_tail", h, blocks)``
#: moves them (or as much of their front as ``blocks`` host blocks hold) to
#: the host; a promotion takes both parts; ``clear_host`` empties the host
#: tier (cache reset).
OPS = (
    "demote",
    "demote_copy",
    "demote_split",
    "move_tail",
    "promote",
    "promote_copy",
    "drop_device",
    "drop_host",
    "clear_host",
)


class WorkerModelError(AssertionError):
    """The scheduler asked the worker for something it would not have."""


@dataclass(frozen=True)
class Feature:
    """What the worker knows about one multimodal item of a request."""

    hash: str
    offset: int
    length: int
    embeds: int


@dataclass
class StepInput:
    """The parts of one SchedulerOutput the encoder cache depends on."""

    step: int
    finished: set[str] = field(default_factory=set)
    preempted: set[str] = field(default_factory=set)
    #: (req_id, features, num_computed_tokens, prompt_len) for new requests
    new_reqs: list[tuple[str, list[Feature], int, int]] = field(default_factory=list)
    #: (req_id, num_computed_tokens) for running/resumed requests
    cached_reqs: list[tuple[str, int]] = field(default_factory=list)
    num_scheduled: dict[str, int] = field(default_factory=dict)
    encoder_inputs: dict[str, list[int]] = field(default_factory=dict)
    free_hashes: list[str] = field(default_factory=list)
    manager_ops: list[tuple[Any, ...]] = field(default_factory=list)
    connector_loads: list[str] = field(default_factory=list)


@dataclass
class StepStats:
    """What one step cost, for the simulated clock."""

    prefill_tokens: int = 0
    decode_tokens: int = 0
    encoded_items: int = 0
    encoded_embeds: int = 0
    encoder_seconds: float = 0.0
    d2h_embeds: int = 0
    h2d_embeds: int = 0
    copies: int = 0
    loaded_embeds: int = 0

    def add(self, other: StepStats) -> None:
        """Accumulate another step's costs (run totals)."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass
class _Req:
    features: list[Feature]
    num_computed: int
    prompt_len: int
    seen: set[str] = field(default_factory=set)


class WorkerModel:
    """Device/host encoder-cache dicts of one worker, as sizes."""

    def __init__(
        self,
        device_capacity: int,
        host_capacity: int = 0,
        encoder_seconds: Callable[[int], float] | None = None,
        strict_budget: bool = True,
        history: int = 8,
        host_block_embeddings: int = 1,
    ) -> None:
        self.device_capacity = device_capacity
        self.host_capacity = host_capacity
        self.strict_budget = strict_budget
        self.host_block_embeddings = host_block_embeddings
        self.encoder_seconds = encoder_seconds or (lambda n: 0.0)
        self.device: dict[str, int] = {}
        self.host: dict[str, int] = {}
        #: embeds of host entries held in device memory
        self.tails: dict[str, int] = {}
        self.reqs: dict[str, _Req] = {}
        #: (hash, embeds, kind) per access; kind in miss/device/host/external
        self.accesses: list[tuple[str, int, str]] = []
        #: the request of each access (same order as ``accesses``)
        self.access_requests: list[str] = []
        self.max_device = 0
        self.max_host = 0
        self.noop_frees = 0
        self.recent: deque[str] = deque(maxlen=history)
        #: demoted entries not promoted since (hash -> embeds)
        self.pending_demotions: dict[str, int] = {}
        #: embeds demoted, then dropped from the host before any promotion
        self.wasted_demotion_embeds = 0
        #: (hash, embeds, len(accesses) then) per wasted demotion
        self.wasted_drops: list[tuple[str, int, int]] = []

    # ---------------------------------------------------------------- ops
    def _fail(self, step: int, msg: str) -> None:
        hist = "\n    ".join(self.recent) or "(none)"
        raise WorkerModelError(
            f"step {step}: {msg}\n  device: {len(self.device)} entries, "
            f"{sum(self.device.values())}/{self.device_capacity} embeds; host: "
            f"{len(self.host)} entries, {sum(self.host.values())}/{self.host_capacity} embeds"
            f"\n  recent steps:\n    {hist}"
        )

    def _apply_op(
        self, step: int, op: str, h: str, st: StepStats, arg: int = 0
    ) -> str | None:
        if op in ("demote", "demote_copy", "demote_split"):
            if h not in self.device:
                self._fail(step, f"metadata demotes {h!r}, which is not on the device")
            self.host[h] = self.device[h] if op == "demote_copy" else self.device.pop(h)
            if op == "demote_split":
                # `arg` embeddings (its tail) stay in device memory.
                self.host[h] -= arg
                self.tails[h] = arg
            st.d2h_embeds += self.host[h]
            st.copies += 1
            self.pending_demotions[h] = self.host[h]
        elif op == "move_tail":
            if h not in self.tails:
                self._fail(step, f"metadata moves the tail of {h!r}, which has none")
            moved = min(self.tails[h], arg * self.host_block_embeddings)
            self.tails[h] -= moved
            if not self.tails[h]:
                del self.tails[h]
            self.host[h] += moved
            st.d2h_embeds += moved
            st.copies += 1
            if h in self.pending_demotions:
                self.pending_demotions[h] += moved
        elif op in ("promote", "promote_copy"):
            if h not in self.host:
                self._fail(step, f"metadata promotes {h!r}, which is not on the host")
            self.device[h] = self.host[h] if op == "promote_copy" else self.host.pop(h)
            st.h2d_embeds += self.device[h]
            self.device[h] += self.tails.pop(h, 0)
            st.copies += 1
            self.pending_demotions.pop(h, None)
            return h
        elif op == "drop_device":
            if self.device.pop(h, None) is None:
                self.noop_frees += 1
        elif op == "clear_host":
            for gone in self.host:
                self._host_dropped(gone)
            self.host.clear()
            self.tails.clear()
        elif op == "drop_host":
            self.tails.pop(h, None)
            if self.host.pop(h, None) is None:
                self.noop_frees += 1
            else:
                self._host_dropped(h)
        else:
            raise ValueError(f"unknown metadata op {op!r}")
        return None

    def _host_dropped(self, h: str) -> None:
        wasted = self.pending_demotions.pop(h, None)
        if wasted is not None:
            self.wasted_demotion_embeds += wasted
            self.wasted_drops.append((h, wasted, len(self.accesses)))

    def wasted_after_last_use(self) -> int:
        """Embeddings of wasted demotions whose item the run never accessed
        after the host dropped it. A host entry that is accessed is
        promoted, so such a demotion followed the item's last use: no
        eviction order could have turned it into a hit, only not demoting
        the item at all saves it. The rest of the waste are items accessed
        again later, which a host that kept them would have hit."""
        last = {h: i for i, (h, _, _) in enumerate(self.accesses)}
        return sum(
            embeds for h, embeds, seen in self.wasted_drops if last.get(h, -1) < seen
        )

    # --------------------------------------------------------------- step
    def step(self, si: StepInput) -> StepStats:
        st = StepStats()
        s = si.step
        for rid in si.finished:
            self.reqs.pop(rid, None)
        for h in si.free_hashes:
            if self.device.pop(h, None) is None:
                self.noop_frees += 1
        promoted: set[str] = set()
        for op, h, *arg in si.manager_ops:
            p = self._apply_op(s, op, h, st, *arg)
            if p is not None:
                promoted.add(p)
        for rid in si.preempted:
            if rid in self.reqs:
                self.reqs[rid].seen.clear()  # a re-admission accesses again
        for rid, feats, nc, plen in si.new_reqs:
            self.reqs[rid] = _Req(features=feats, num_computed=nc, prompt_len=plen)
        for rid, nc in si.cached_reqs:
            if rid not in self.reqs:
                self._fail(s, f"cached request {rid!r} unknown to the worker")
            self.reqs[rid].num_computed = nc
        loaded: set[str] = set()
        for h in si.connector_loads:
            size = self._size_of(h)
            if size is None:
                self._fail(s, f"connector load of unknown item {h!r}")
            self.device[h] = size  # type: ignore[assignment]
            st.loaded_embeds += size  # type: ignore[operator]
            loaded.add(h)
        computed: dict[str, set[str]] = {}
        for rid, idxs in si.encoder_inputs.items():
            req = self.reqs.get(rid)
            if req is None:
                self._fail(s, f"encoder input for unknown request {rid!r}")
            for i in idxs:
                f = req.features[i]  # type: ignore[union-attr]
                self.device[f.hash] = f.embeds
                computed.setdefault(rid, set()).add(f.hash)
                st.encoded_items += 1
                st.encoded_embeds += f.embeds
                st.encoder_seconds += self.encoder_seconds(f.embeds)
        # Gather.
        attributed: set[str] = set()
        for rid, n in si.num_scheduled.items():
            req = self.reqs.get(rid)
            if req is None:
                self._fail(s, f"scheduled request {rid!r} unknown to the worker")
            nc = req.num_computed  # type: ignore[union-attr]
            if nc >= req.prompt_len:  # type: ignore[union-attr]
                st.decode_tokens += n
            else:
                st.prefill_tokens += n
            for f in req.features:  # type: ignore[union-attr]
                if f.offset >= nc + n:
                    break
                if f.offset + f.length <= nc:
                    continue
                if f.hash not in self.device:
                    where = "on the host only" if f.hash in self.host else "nowhere"
                    self._fail(
                        s,
                        f"request {rid!r} needs encoder output {f.hash!r} "
                        f"(tokens {f.offset}..{f.offset + f.length}, scheduled "
                        f"{nc}..{nc + n}) but the worker has it {where}",
                    )
                if f.hash in req.seen:  # type: ignore[union-attr]
                    continue
                req.seen.add(f.hash)  # type: ignore[union-attr]
                if f.hash in computed.get(rid, ()):
                    kind = "miss"
                elif f.hash in loaded and f.hash not in attributed:
                    kind = "external"
                elif f.hash in promoted and f.hash not in attributed:
                    kind = "host"
                else:
                    kind = "device"
                attributed.add(f.hash)
                self.accesses.append((f.hash, f.embeds, kind))
                self.access_requests.append(rid)
        dev = sum(self.device.values()) + sum(self.tails.values())
        host = sum(self.host.values())
        self.max_device = max(self.max_device, dev)
        self.max_host = max(self.max_host, host)
        if self.strict_budget and dev > self.device_capacity:
            self._fail(
                s, f"device tier holds {dev} embeds > capacity {self.device_capacity}"
            )
        if self.strict_budget and host > self.host_capacity:
            self._fail(
                s, f"host tier holds {host} embeds > capacity {self.host_capacity}"
            )
        self.recent.append(
            f"step {s}: sched={dict(list(si.num_scheduled.items())[:6])} "
            f"enc={si.encoder_inputs} free={si.free_hashes} ops={si.manager_ops[:6]}"
        )
        return st

    def _size_of(self, h: str) -> int | None:
        for req in self.reqs.values():
            for f in req.features:
                if f.hash == h:
                    return f.embeds
        return None
