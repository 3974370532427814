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
    def from_json(d: dict[str, Any]) -> "TraceRequest":
        try:
            mm = tuple(
                MMItem(
                    id=str(m["id"]),
                    offset=int(m["offset"]),
                    embeds=int(m["embeds"]),
                    modality=str(m.get("modality", "image")),
                    remote=bool(m.get("remote", False)),
                )
                for m in d.get("mm", [])
            )
            return TraceRequest(
                id=str(d["id"]),
                arrival_s=float(d["arrival_s"]),
                prompt_tokens=int(d["prompt_tokens"]),
                output_tokens=int(d["output_tokens"]),
                mm=mm,
                session=d.get("session"),
            )
        except KeyError as e:
            raise TraceError(f"request {d.get('id', '?')!r} lacks field {e}") from None


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
        sizes: dict[str, int] = {}
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
                if sizes.setdefault(it.id, it.embeds) != it.embeds:
                    raise TraceError(
                        f"item {it.id!r} has sizes {sizes[it.id]} and {it.embeds}"
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
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                try:
                    d = json.loads(line)
                except json.JSONDecodeError as e:
                    raise TraceError(f"{path}:{lineno}: {e}") from None
                if "trace" in d:
                    h = d["trace"]
                    if h.get("version", TRACE_VERSION) != TRACE_VERSION:
                        raise TraceError(
                            f"{path}: unsupported version {h.get('version')}"
                        )
                    name = h.get("name", name)
                    generator = h.get("generator", generator)
                    seed = h.get("seed")
                    params = h.get("params", {})
                    continue
                requests.append(TraceRequest.from_json(d))
        t = Trace(
            name=name, requests=requests, generator=generator, seed=seed, params=params
        )
        t.validate()
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
