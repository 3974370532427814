# SPDX-License-Identifier: Apache-2.0
"""Worker-side probe for the scale-out checks: a vLLM worker extension.

Loaded by name into every worker process with vLLM's own mechanism,
``worker_extension_cls="scaleout.probe.ScaleoutWorkerExtension"`` (engine
argument ``--worker-extension-cls``); its methods become methods of the
worker and are called through ``collective_rpc`` by name, so they work from
``LLM.collective_rpc`` and from an OpenAI server's ``/collective_rpc``
(``VLLM_SERVER_DEV_MODE=1``). Nothing in vLLM is edited.

``scaleout_install()`` wraps two methods of the worker's model runner (on the
instance, not the class):

* ``execute_model``: before the step, a digest of what the scheduler sent
  this rank for the encoder cache (``ec_manager_metadata``,
  ``free_encoder_mm_hashes``, ``scheduled_encoder_inputs``); after the step,
  the tier contents the rank ends it with (sorted hashes per tier) and their
  digest. One record per step.
* ``_execute_mm_encoder``: the identifiers (``mm_hash``) of the items the
  encoder runs on in this step, taken from the step's
  ``scheduled_encoder_inputs`` (items an EC connector loads are not there).

It also counts forward passes of the vision tower (a forward pre-hook).
The runner's ``encoder_cache`` dict is never replaced: a manager's worker
companion and the EC connector hold references to it.

``scaleout_read(reset)`` returns the records, the encoded identifiers, the
current tier contents and :func:`host_tier_memory`.

This module runs inside vLLM worker processes; it imports only torch and the
standard library at import time.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import mmap
import os
import struct
from typing import Any

import torch

STATE_ATTR = "_scaleout_probe_state"
VISION_TOWER_ATTRS = ("visual", "vision_tower", "vision_model", "vision_encoder")
# Methods a worker companion may offer for its tier contents (issue 10 item 6
# adds one); the first that exists wins over reading its dicts.
TIER_CONTENTS_METHODS = ("tier_contents", "get_tier_contents")


# --------------------------------------------------------------- digests
def canonical(obj: Any) -> Any:
    """A JSON-able, process-independent form of ``obj``: dataclasses and
    objects become dicts of their fields, sets are sorted, dict keys are
    strings in sorted order, tensors are described by shape and dtype."""
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, torch.Tensor):
        return {"tensor": list(obj.shape), "dtype": str(obj.dtype)}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        return {"__type__": type(obj).__name__, **canonical(fields)}
    if isinstance(obj, dict):
        return {str(k): canonical(v) for k, v in sorted(obj.items(), key=str)}
    if isinstance(obj, set | frozenset):
        return sorted((canonical(v) for v in obj), key=repr)
    if isinstance(obj, list | tuple):
        return [canonical(v) for v in obj]
    if hasattr(obj, "__dict__"):
        return {"__type__": type(obj).__name__, **canonical(vars(obj))}
    return repr(obj)


def digest(obj: Any) -> str:
    """Short sha256 of :func:`canonical` ``obj``."""
    text = json.dumps(canonical(obj), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def is_nonempty(obj: Any) -> bool:
    """Whether a metadata object carries any operation (a truthy field)."""
    if obj is None:
        return False
    c = canonical(obj)
    if isinstance(c, dict):
        return any(bool(v) for k, v in c.items() if k != "__type__")
    return bool(c)


# ---------------------------------------------------------- tier contents
def companion_of(runner: Any) -> Any:
    """The runner's encoder-cache worker companion (series), or None."""
    return getattr(runner, "ec_manager_worker", None)


def tier_contents(runner: Any) -> dict[str, Any]:
    """Encoder-cache contents per tier on this worker: ``{"device": [...],
    "host": [...] or {hash: placement}, ...}``, sorted.

    A companion method from :data:`TIER_CONTENTS_METHODS` wins (it must
    return a dict with ``device`` and ``host``; other keys, e.g. the last
    step applied or host block ids, are kept and compared too, except a
    ``digest`` of the rest). Otherwise the device tier is the runner's
    ``encoder_cache`` dict and the host tier the companion's ``host_cache``
    dict. A two-tier companion that offers neither raises: the check must
    never pass on an empty host tier it could not read.
    """
    comp = companion_of(runner)
    if comp is not None:
        for name in TIER_CONTENTS_METHODS:
            method = getattr(comp, name, None)
            if callable(method):
                got = method()
                if not (isinstance(got, dict) and {"device", "host"} <= set(got)):
                    raise TypeError(
                        f"{type(comp).__name__}.{name}() returned {got!r}, "
                        "not a dict with 'device' and 'host'"
                    )
                out = canonical({k: v for k, v in got.items() if k != "digest"})
                for tier in ("device", "host"):
                    if isinstance(out[tier], list):
                        out[tier] = sorted(out[tier], key=repr)
                return out
    tiers = {"device": sorted(runner.encoder_cache)}
    host = getattr(comp, "host_cache", None) if comp is not None else None
    if isinstance(host, dict):
        tiers["host"] = sorted(host)
    elif comp is not None and "TwoTier" in type(comp).__name__:
        raise RuntimeError(
            f"cannot read the host tier of {type(comp).__qualname__}: no "
            f"{' / '.join(TIER_CONTENTS_METHODS)} method and no host_cache dict "
            "(update tools/scaleout/probe.py:tier_contents)"
        )
    else:
        tiers["host"] = []
    return tiers


# ------------------------------------------------------ host tier memory
def _host_tensors(comp: Any) -> list[torch.Tensor]:
    """CPU tensors the companion's host tier holds: the values of its
    ``host_cache`` dict and any CPU tensor attribute of the companion or of
    an object it holds directly (e.g. a preallocated region)."""
    found: list[torch.Tensor] = []

    def take(value: Any) -> None:
        if isinstance(value, torch.Tensor) and value.device.type == "cpu":
            found.append(value)

    host = getattr(comp, "host_cache", None)
    if isinstance(host, dict):
        for value in host.values():
            take(value)
    for value in vars(comp).values():
        take(value)
        if hasattr(value, "__dict__") and not isinstance(value, type | torch.Tensor):
            for inner in vars(value).values():
                take(inner)
    return found


def _maps() -> list[tuple[int, int, str, int, str, int, str]]:
    """``/proc/self/maps`` as (start, end, perms, offset, dev, inode, path)."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in parts[0].split("-"))
            path = parts[5].strip() if len(parts) > 5 else ""
            out.append(
                (start, end, parts[1], int(parts[2], 16), parts[3], int(parts[4]), path)
            )
    return out


def resident_page_keys(ranges: list[tuple[int, int]]) -> tuple[list[str], str]:
    """Identify the resident physical pages backing the byte ``ranges`` of
    this process's address space.

    Each resident page (``/proc/self/pagemap`` present bit) is keyed by its
    page frame number when the kernel reveals it (root), which identifies
    the physical page across processes whatever the sharing mechanism.
    Otherwise a page of a shared file mapping (an mmap region in /dev/shm,
    a memfd) is keyed by (device, inode, file offset), which is the same in
    every process mapping the file, and a private page by (pid, address),
    which is never shared. The union of the keys of all ranks of an instance
    counts each physical page once. Returns (keys, method).
    """
    page = mmap.PAGESIZE
    pages: set[int] = set()
    for start, end in ranges:
        first = start - start % page
        pages.update(range(first, end, page))
    if not pages:
        return [], "none"
    maps = _maps()
    keys: list[str] = []
    method = "pagemap-pfn"
    pid = os.getpid()
    with open("/proc/self/pagemap", "rb") as pm:
        for addr in sorted(pages):
            pm.seek((addr // page) * 8)
            (entry,) = struct.unpack("<Q", pm.read(8))
            if not (entry >> 63) & 1:
                continue  # not resident (never touched, or swapped out)
            pfn = entry & ((1 << 55) - 1)
            if pfn:
                keys.append(f"pfn:{pfn}")
                continue
            method = "pagemap-mapping"
            where = next((m for m in maps if m[0] <= addr < m[1]), None)
            if where is not None and where[2][3] == "s" and where[5] != 0:
                m_start, _, _, m_off, dev, inode, _ = where
                keys.append(f"file:{dev}:{inode}:{m_off + addr - m_start}")
            else:
                keys.append(f"anon:{pid}:{addr}")
    return keys, method


def _smaps_rollup() -> dict[str, int]:
    """Rss and Pss of this process in bytes (``/proc/self/smaps_rollup``)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in ("Rss", "Pss", "Pss_Shmem", "Shared_Clean", "Shared_Dirty"):
                    out[name.lower()] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def host_tier_memory(runner: Any) -> dict[str, Any]:
    """The host tier's memory on this worker.

    ``logical_bytes``: the bytes of the host entries' tensors (a ``host_cache``
    dict of tensors; 0 for a companion that keeps entries in a region).
    ``backing``: for each shared file mapping holding the host tier (a
    region in /dev/shm or a memfd, shared by the TP ranks), the file's
    identity and the bytes allocated to it (``st_blocks``): the region's
    pages are reserved at startup, so this is the tier's memory whether or
    not an entry has touched a page of it, which the page table would not
    show. ``page_keys``: :func:`resident_page_keys` of the private storages
    (they count the pages they span; small tensors share their first and
    last page with other heap data, so this over-counts by at most two
    pages per entry), and of a shared mapping whose file cannot be stat'ed.
    The harness unions both over all ranks.
    """
    comp = companion_of(runner)
    result: dict[str, Any] = {
        "pid": os.getpid(),
        "page_size": mmap.PAGESIZE,
        "process": _smaps_rollup(),
        "logical_bytes": 0,
        "num_entries": 0,
        "page_keys": [],
        "method": "none",
        "shared_mappings": [],
        "backing": [],
        "budget_bytes": 0,
    }
    if comp is None:
        return result
    result["num_entries"] = len(tier_contents(runner)["host"])
    # A paged host tier's region: its size, the tier's budget.
    result["budget_bytes"] = int(
        getattr(getattr(comp, "region", None), "total_bytes", 0)
    )
    host = getattr(comp, "host_cache", None)
    if isinstance(host, dict):
        result["logical_bytes"] = sum(
            t.numel() * t.element_size()
            for t in host.values()
            if isinstance(t, torch.Tensor)
        )
    storages: dict[int, int] = {}
    for t in _host_tensors(comp):
        s = t.untyped_storage()
        if s.nbytes():
            storages[s.data_ptr()] = max(storages.get(s.data_ptr(), 0), s.nbytes())
    maps = _maps()
    ranges: list[tuple[int, int]] = []
    shared: set[tuple[int, int, str]] = set()
    for ptr, nbytes in storages.items():
        where = next((m for m in maps if m[0] <= ptr < m[1]), None)
        if where is not None and where[2][3] == "s" and where[5] != 0:
            shared.add((where[0], where[1], where[6]))
        else:
            ranges.append((ptr, ptr + nbytes))
    backing: dict[str, int] = {}
    for start, end, _ in shared:
        try:
            st = os.stat(f"/proc/self/map_files/{start:x}-{end:x}")
        except OSError:
            ranges.append((start, end))
            continue
        backing[f"{st.st_dev}:{st.st_ino}"] = st.st_blocks * 512
    result["backing"] = [{"file": k, "bytes": v} for k, v in sorted(backing.items())]
    result["shared_mappings"] = [
        {"path": path, "bytes": end - start} for start, end, path in sorted(shared)
    ]
    result["page_keys"], result["method"] = resident_page_keys(ranges)
    return result


# ------------------------------------------------------------- the probe
def _runner(worker: Any) -> Any:
    runner = getattr(worker, "model_runner", None)
    if runner is None:
        raise RuntimeError(f"no model_runner on {type(worker).__name__}")
    return runner


def _install(worker: Any) -> dict[str, Any]:
    runner = _runner(worker)
    state = runner.__dict__.get(STATE_ATTR)
    if state is None:
        state = {
            "steps": [],
            "encoded": [],
            "vision_forward_calls": 0,
            "vision_input_rows": 0,
            "step_index": 0,
        }

        orig_execute = runner.execute_model

        @functools.wraps(orig_execute)
        def execute_model(scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            meta = getattr(scheduler_output, "ec_manager_metadata", None)
            received = {
                "ec_manager_metadata": meta,
                "free_encoder_mm_hashes": scheduler_output.free_encoder_mm_hashes,
                "scheduled_encoder_inputs": scheduler_output.scheduled_encoder_inputs,
            }
            out = orig_execute(scheduler_output, *args, **kwargs)
            tiers = tier_contents(runner)
            state["steps"].append(
                {
                    "step": state["step_index"],
                    "num_tokens": scheduler_output.total_num_scheduled_tokens,
                    "received": digest(received),
                    "metadata_nonempty": is_nonempty(meta),
                    "metadata_type": type(meta).__name__,
                    "tiers": digest(tiers),
                    "num_device": len(tiers.get("device", [])),
                    "num_host": len(tiers.get("host", [])),
                }
            )
            state["step_index"] += 1
            return out

        runner.execute_model = execute_model

        orig_encoder = runner._execute_mm_encoder

        @functools.wraps(orig_encoder)
        def _execute_mm_encoder(
            scheduler_output: Any, *args: Any, **kwargs: Any
        ) -> Any:
            for req_id, inputs in scheduler_output.scheduled_encoder_inputs.items():
                req = runner.requests.get(req_id)
                for i in inputs:
                    ident = req.mm_features[i].identifier if req is not None else None
                    state["encoded"].append([state["step_index"], req_id, ident])
            return orig_encoder(scheduler_output, *args, **kwargs)

        runner._execute_mm_encoder = _execute_mm_encoder

        model = runner.get_model() if hasattr(runner, "get_model") else runner.model
        for attr in VISION_TOWER_ATTRS:
            tower = getattr(model, attr, None)
            if tower is not None and hasattr(tower, "register_forward_pre_hook"):

                def _pre_hook(_mod: Any, inputs: tuple) -> None:
                    state["vision_forward_calls"] += 1
                    if inputs and hasattr(inputs[0], "shape"):
                        state["vision_input_rows"] += int(inputs[0].shape[0])

                tower.register_forward_pre_hook(_pre_hook)
                break
        runner.__dict__[STATE_ATTR] = state
    comp = companion_of(runner)
    import vllm

    return {
        "pid": os.getpid(),
        "rank": getattr(worker, "rank", None),
        "vllm_path": os.path.dirname(os.path.abspath(vllm.__file__)),
        "runner_class": type(runner).__name__,
        "companion_class": type(comp).__qualname__ if comp is not None else None,
    }


def _read(worker: Any, reset: bool) -> dict[str, Any]:
    runner = _runner(worker)
    state = runner.__dict__.get(STATE_ATTR)
    if state is None:
        raise RuntimeError("scaleout_install was not called on this worker")
    out = {
        "pid": os.getpid(),
        "rank": getattr(worker, "rank", None),
        "steps": list(state["steps"]),
        "encoded": list(state["encoded"]),
        "vision_forward_calls": state["vision_forward_calls"],
        "vision_input_rows": state["vision_input_rows"],
        "tiers": tier_contents(runner),
        "host_memory": host_tier_memory(runner),
    }
    if reset:
        state["steps"].clear()
        state["encoded"].clear()
        state["vision_forward_calls"] = 0
        state["vision_input_rows"] = 0
    return out


class ScaleoutWorkerExtension:
    """Mixed into vLLM's worker class by ``worker_extension_cls``. Methods
    take only string arguments so that the OpenAI server's
    ``/collective_rpc`` can call them."""

    def scaleout_install(self) -> dict[str, Any]:
        """Install the probe on this worker (idempotent)."""
        return _install(self)

    def scaleout_read(self, reset: str = "0") -> dict[str, Any]:
        """Return what the probe recorded; ``reset="1"`` clears it."""
        return _read(self, reset not in ("0", "", "false", "False"))
