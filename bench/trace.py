# SPDX-License-Identifier: Apache-2.0
"""The JSONL trace format: one request per line, plus an optional header.

Format (version 1), documented in bench/README.md::

    {"trace": {"version": 1, "name": "...", "generator": "...", "seed": 0, "params": {...}}}
    {"id": "c0-t0", "arrival_s": 0.0, "prompt_tokens": 700, "output_tokens": 32,
     "session": "c0", "mm": [{"id": "img-c0-0", "offset": 40, "embeds": 576}]}

* ``arrival_s``: arrival time in simulated seconds (non-decreasing).
* ``prompt_tokens``: prompt length in tokens, *including* the placeholder
  tokens of every multimodal item.
* ``mm``: the request's multimodal items in prompt order. ``id`` is the
  content identifier (vLLM's ``mm_hash``: equal ids mean identical encoder
  outputs, so equal ids must have equal ``embeds``). ``offset`` is the
  position of the item's first placeholder token and ``embeds`` its size in
  encoder embeddings (= placeholder tokens; no break tokens are modelled).
  Optional ``modality`` (default ``"image"``) and ``remote`` (default false:
  the item is available through the EC connector in connector scenarios).
* ``output_tokens``: tokens to generate (``ignore_eos``).
* ``session``: optional; requests of one session share prompt token ids at
  equal positions (multi-turn history), which only matters with prefix caching.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

TRACE_VERSION = 1


class TraceError(ValueError):
    """A trace violates the format's invariants."""


@dataclass(frozen=True)
class MMItem:
    """One multimodal item of a request."""

    id: str
    offset: int
    embeds: int
    modality: str = "image"
    remote: bool = False


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace."""

    id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    mm: tuple[MMItem, ...] = ()
    session: str | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id,
            "arrival_s": self.arrival_s,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
        }
        if self.session is not None:
            d["session"] = self.session
        items = []
        for it in self.mm:
            j: dict[str, Any] = {"id": it.id, "offset": it.offset, "embeds": it.embeds}
            if it.modality != "image":
                j["modality"] = it.modality
            if it.remote:
                j["remote"] = True
            items.append(j)
        d["mm"] = items
        return d

    @staticmethod
    def from_json(d: Any) -> "TraceRequest":
        """A request from its JSON object; TraceError names the field."""
        if not isinstance(d, dict):
            raise TraceError(f"a request must be a JSON object, not {d!r}")
        rid = d.get("id")
        where = f"request {rid!r}" if isinstance(rid, str) else "request"
        mm_json = _field(d, "mm", list, where, [])
        mm = []
        for k, m in enumerate(mm_json):
            at = f"{where}: mm[{k}]"
            if not isinstance(m, dict):
                raise TraceError(f"{at} must be a JSON object, not {m!r}")
            mm.append(
                MMItem(
                    id=_field(m, "id", str, at),
                    offset=_field(m, "offset", int, at),
                    embeds=_field(m, "embeds", int, at),
                    modality=_field(m, "modality", str, at, "image"),
                    remote=_field(m, "remote", bool, at, False),
                )
            )
        arrival = _field(d, "arrival_s", float, where)
        if not math.isfinite(arrival) or arrival < 0:
            raise TraceError(
                f"{where}: arrival_s must be finite and >= 0, not {arrival}"
            )
        return TraceRequest(
            id=_field(d, "id", str, where),
            arrival_s=float(arrival),
            prompt_tokens=_field(d, "prompt_tokens", int, where),
            output_tokens=_field(d, "output_tokens", int, where),
            mm=tuple(mm),
            session=_field(d, "session", str, where, None),
        )


_MISSING: Any = object()
_KINDS = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    list: "a list",
}


def _field(
    d: dict[str, Any], key: str, kind: type, where: str, default: Any = _MISSING
) -> Any:
    """``d[key]`` if it is of ``kind`` (``float`` accepts integers too; a
    bool is neither an int nor a float), else ``default`` when the key is
    absent or null and a default is given; TraceError otherwise."""
    value = d.get(key)
    if value is None:
        if default is _MISSING:
            raise TraceError(f"{where} lacks field {key!r}")
        return default
    kinds = (int, float) if kind is float else (kind,)
    if not isinstance(value, kinds) or (kind is not bool and isinstance(value, bool)):
        raise TraceError(
            f"{where}: field {key!r} must be {_KINDS.get(kind, kind.__name__)}, "
            f"not {value!r}"
        )
    return value


@dataclass
class Trace:
    """A named list of requests with the parameters that generated it."""

    name: str
    requests: list[TraceRequest]
    generator: str = "file"
    seed: int | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        """Raise TraceError unless every invariant of the format holds."""
        sizes: dict[str, tuple[int, str]] = {}
        ids: set[str] = set()
        last = float("-inf")
        for r in self.requests:
            if r.id in ids:
                raise TraceError(f"duplicate request id {r.id!r}")
            ids.add(r.id)
            if r.arrival_s < last:
                raise TraceError(f"request {r.id!r}: arrival_s decreases")
            last = r.arrival_s
            if r.prompt_tokens <= 0 or r.output_tokens <= 0:
                raise TraceError(f"request {r.id!r}: prompt/output tokens must be > 0")
            end = 0
            for it in r.mm:
                if it.embeds <= 0:
                    raise TraceError(f"request {r.id!r}: item {it.id!r} has no embeds")
                if it.offset < 0:
                    raise TraceError(
                        f"request {r.id!r}: item {it.id!r} has a negative offset"
                    )
                if it.offset < end:
                    raise TraceError(
                        f"request {r.id!r}: item {it.id!r} overlaps the previous one "
                        "or is out of order"
                    )
                end = it.offset + it.embeds
                if end > r.prompt_tokens:
                    raise TraceError(
                        f"request {r.id!r}: item {it.id!r} ends after the prompt"
                    )
                first, where = sizes.setdefault(it.id, (it.embeds, r.id))
                if first != it.embeds:
                    raise TraceError(
                        f"item {it.id!r} has {first} embeds in request {where!r} "
                        f"and {it.embeds} in request {r.id!r}: equal ids must "
                        "have equal sizes"
                    )

    # ------------------------------------------------------------------ I/O
    def save(self, path: str | Path) -> Path:
        """Write the trace as JSONL (header line first) and return the path."""
        self.validate()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        header = {
            "trace": {
                "version": TRACE_VERSION,
                "name": self.name,
                "generator": self.generator,
                "seed": self.seed,
                "params": self.params,
            }
        }
        with open(path, "w") as f:
            f.write(json.dumps(header, sort_keys=True) + "\n")
            for r in self.requests:
                f.write(json.dumps(r.to_json(), sort_keys=True) + "\n")
        return path

    @staticmethod
    def load(path: str | Path) -> "Trace":
        """Read a JSONL trace; the header line is optional."""
        path = Path(path)
        name, generator, seed, params = path.stem, "file", None, {}
        requests: list[TraceRequest] = []
        first = True
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                try:
                    d = json.loads(line)
                except json.JSONDecodeError as e:
                    raise TraceError(f"{path}:{lineno}: {e}") from None
                if isinstance(d, dict) and "trace" in d:
                    h = d["trace"]
                    if not first or not isinstance(h, dict):
                        raise TraceError(
                            f"{path}:{lineno}: a header line must be the first "
                            'line, {"trace": {...}}'
                        )
                    if h.get("version", TRACE_VERSION) != TRACE_VERSION:
                        raise TraceError(
                            f"{path}: unsupported version {h.get('version')}"
                        )
                    name = str(h.get("name", name))
                    generator = str(h.get("generator", generator))
                    seed = h.get("seed")
                    params = h.get("params") or {}
                    first = False
                    continue
                first = False
                try:
                    requests.append(TraceRequest.from_json(d))
                except TraceError as e:
                    raise TraceError(f"{path}:{lineno}: {e}") from None
        if not requests:
            raise TraceError(f"{path}: no request")
        t = Trace(
            name=name, requests=requests, generator=generator, seed=seed, params=params
        )
        try:
            t.validate()
        except TraceError as e:
            raise TraceError(f"{path}: {e}") from None
        return t

    # -------------------------------------------------------------- helpers
    def access_sequence(self) -> list[tuple[str, int]]:
        """Item accesses in trace order: per request, each distinct item once.

        This is the canonical sequence the offline bound is computed on; the
        replay also records the sequence in the order the scheduler really
        served it (see bench/README.md, "Offline bound")."""
        seq: list[tuple[str, int]] = []
        for r in self.requests:
            seen: set[str] = set()
            for it in r.mm:
                if it.id not in seen:
                    seen.add(it.id)
                    seq.append((it.id, it.embeds))
        return seq

    def summary(self) -> dict[str, Any]:
        """Counts used in reports."""
        seq = self.access_sequence()
        distinct: dict[str, int] = {}
        for k, s in seq:
            distinct[k] = s
        return {
            "requests": len(self.requests),
            "mm_accesses": len(seq),
            "distinct_items": len(distinct),
            "accessed_embeds": sum(s for _, s in seq),
            "distinct_embeds": sum(distinct.values()),
            "max_item_embeds": max(distinct.values(), default=0),
            "prompt_tokens": sum(r.prompt_tokens for r in self.requests),
            "output_tokens": sum(r.output_tokens for r in self.requests),
            "duration_s": (self.requests[-1].arrival_s if self.requests else 0.0),
        }


def merge(
    name: str, traces: Iterable[Trace], params: dict[str, Any] | None = None
) -> Trace:
    """Interleave several traces by arrival time (stable, ids must be unique)."""
    reqs: list[TraceRequest] = []
    for t in traces:
        reqs.extend(t.requests)
    reqs.sort(key=lambda r: r.arrival_s)
    out = Trace(name=name, requests=reqs, generator="merge", params=params or {})
    out.validate()
    return out
