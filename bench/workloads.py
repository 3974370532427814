# SPDX-License-Identifier: Apache-2.0
"""Seeded workload generators. Every parameter is documented in its dataclass.

Sizes are in encoder embeddings. The size classes follow Qwen2-VL's vision
tower: one embedding per 28x28 pixels after the 2x2 patch merge, so an
``H x W`` image has ``(H/28) * (W/28)`` embeddings. Only stdlib ``random`` is
used, so a seed gives the same trace on every machine and Python >= 3.10.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from typing import Callable

from bench.trace import MMItem, Trace, TraceRequest, merge

#: Embeddings per image size class (Qwen2-VL: (side/28)^2).
SIZE_CLASSES: dict[str, int] = {
    "thumb": 64,  # 224 x 224
    "small": 256,  # 448 x 448
    "medium": 576,  # 672 x 672
    "large": 1024,  # 896 x 896
    "xl": 2304,  # 1344 x 1344
    "4k": 6400,  # 2240 x 2240 (100x the thumbnail)
}


def _pick_size(rng: random.Random, weights: dict[str, float]) -> int:
    names = sorted(weights)
    return SIZE_CLASSES[rng.choices(names, weights=[weights[n] for n in names])[0]]


def _u(rng: random.Random, lo_hi: tuple[int, int]) -> int:
    return rng.randint(lo_hi[0], lo_hi[1])


# --------------------------------------------------------------- (a) chat
@dataclass
class MultiTurnParams:
    """(a) Multi-turn image chat.

    Conversations start as a Poisson process. Each turn's prompt is the whole
    history (system prompt, every earlier user text, image and answer) plus
    the new user text and, with probability ``p_image``, a new image, so every
    turn re-sends all earlier images at unchanged offsets. Turn ``k+1`` arrives
    ``think`` seconds after turn ``k`` (open loop: the think time includes the
    answer's latency), ``think ~ Exp(mean=think_s)``.
    """

    conversations: int = 48  #: number of conversations
    conv_rate_per_s: float = 0.25  #: conversation start rate (Poisson)
    turns: tuple[int, int] = (3, 8)  #: turns per conversation, uniform
    think_s: float = 15.0  #: mean think time between turns (exponential)
    p_image: float = 0.8  #: probability that a turn adds an image
    size_weights: dict[str, float] = field(
        default_factory=lambda: {"medium": 0.4, "large": 0.4, "xl": 0.2}
    )  #: image size class mix
    system_tokens: int = 64  #: system prompt length
    user_text: tuple[int, int] = (20, 120)  #: user text tokens per turn
    output_tokens: tuple[int, int] = (8, 32)  #: answer tokens per turn


def multi_turn(
    seed: int = 0, p: MultiTurnParams | None = None, name: str = "multi_turn"
) -> Trace:
    p = p or MultiTurnParams()
    rng = random.Random(seed)
    reqs: list[TraceRequest] = []
    t = 0.0
    for c in range(p.conversations):
        t += rng.expovariate(p.conv_rate_per_s)
        arrival = t
        history_len = p.system_tokens
        items: list[MMItem] = []
        n_turns = _u(rng, p.turns)
        for k in range(n_turns):
            history_len += _u(rng, p.user_text)
            if rng.random() < p.p_image:
                size = _pick_size(rng, p.size_weights)
                items.append(
                    MMItem(
                        id=f"{name}-c{c}-i{len(items)}", offset=history_len, embeds=size
                    )
                )
                history_len += size
            history_len += 8  # assistant header / separators
            out = _u(rng, p.output_tokens)
            reqs.append(
                TraceRequest(
                    id=f"{name}-c{c}-t{k}",
                    arrival_s=round(arrival, 6),
                    prompt_tokens=history_len,
                    output_tokens=out,
                    mm=tuple(items),
                    session=f"{name}-c{c}",
                )
            )
            history_len += out
            arrival += rng.expovariate(1.0 / p.think_s)
    reqs.sort(key=lambda r: r.arrival_s)
    tr = Trace(
        name=name, requests=reqs, generator="multi_turn", seed=seed, params=_params(p)
    )
    tr.validate()
    return tr


# ------------------------------------------------------------ (b) shared
@dataclass
class ZipfParams:
    """(b) Shared popular images (catalogue, RAG, agents).

    Requests arrive as a Poisson process. Each carries ``images`` distinct
    images drawn from a catalogue of ``catalogue`` images with Zipf(``alpha``)
    popularity (rank r has weight 1/r^alpha; the rank order is a seeded
    shuffle of the catalogue). Item sizes are drawn once per catalogue entry.
    """

    requests: int = 400  #: number of requests
    rate_per_s: float = 4.0  #: arrival rate (Poisson)
    catalogue: int = 400  #: number of distinct images
    alpha: float = 0.9  #: Zipf exponent (0.6-1.2 is typical)
    images: tuple[int, int] = (1, 2)  #: images per request, uniform
    size_weights: dict[str, float] = field(
        default_factory=lambda: {"small": 0.3, "medium": 0.4, "large": 0.3}
    )  #: size class mix of the catalogue
    text_tokens: tuple[int, int] = (30, 200)  #: text tokens around the images
    output_tokens: tuple[int, int] = (8, 32)  #: answer tokens


def zipf_shared(
    seed: int = 0, p: ZipfParams | None = None, name: str = "zipf_shared"
) -> Trace:
    p = p or ZipfParams()
    rng = random.Random(seed)
    sizes = [_pick_size(rng, p.size_weights) for _ in range(p.catalogue)]
    ranks = list(range(p.catalogue))
    rng.shuffle(ranks)
    weights = [1.0 / math.pow(r + 1, p.alpha) for r in range(p.catalogue)]
    reqs: list[TraceRequest] = []
    t = 0.0
    for i in range(p.requests):
        t += rng.expovariate(p.rate_per_s)
        k = _u(rng, p.images)
        chosen: list[int] = []
        while len(chosen) < k:
            r = rng.choices(range(p.catalogue), weights=weights)[0]
            if ranks[r] not in chosen:  # distinct within a request
                chosen.append(ranks[r])
        pos = 16
        items = []
        for img in chosen:
            items.append(MMItem(id=f"{name}-img{img}", offset=pos, embeds=sizes[img]))
            pos += sizes[img] + 4
        pos += _u(rng, p.text_tokens)
        reqs.append(
            TraceRequest(
                id=f"{name}-r{i}",
                arrival_s=round(t, 6),
                prompt_tokens=pos,
                output_tokens=_u(rng, p.output_tokens),
                mm=tuple(items),
            )
        )
    tr = Trace(
        name=name, requests=reqs, generator="zipf_shared", seed=seed, params=_params(p)
    )
    tr.validate()
    return tr


# ------------------------------------------------------------- (c) sizes
def mixed_sizes_params() -> ZipfParams:
    """(c) Mixed sizes: the Zipf workload with thumbnails to 4K images (100x).

    Small images are the most common; a few very large ones carry most of
    the embeddings. Popularity is independent of size."""
    return ZipfParams(
        requests=400,
        rate_per_s=4.0,
        catalogue=400,
        alpha=0.8,
        images=(1, 3),
        size_weights={
            "thumb": 0.3,
            "small": 0.25,
            "medium": 0.2,
            "large": 0.12,
            "xl": 0.08,
            "4k": 0.05,
        },
    )


def mixed_sizes(
    seed: int = 0, p: ZipfParams | None = None, name: str = "mixed_sizes"
) -> Trace:
    tr = zipf_shared(seed, p or mixed_sizes_params(), name=name)
    tr.generator = "mixed_sizes"
    return tr


# -------------------------------------------------------------- (d) scan
@dataclass
class ScanParams:
    """(d) A scan of one-shot images mixed into another workload.

    Single-image requests whose image is never seen again, arriving as a
    Poisson process at ``rate_per_s`` over the base trace's duration. A good
    policy does not let them flush the hot set."""

    rate_per_s: float = 0.6  #: one-shot request rate (Poisson)
    size_weights: dict[str, float] = field(
        default_factory=lambda: {"large": 0.5, "xl": 0.5}
    )  #: size class mix of the scan images
    text_tokens: tuple[int, int] = (20, 80)  #: text tokens per scan request
    output_tokens: tuple[int, int] = (8, 16)  #: answer tokens


def with_scan(
    base: Trace, seed: int = 0, p: ScanParams | None = None, name: str | None = None
) -> Trace:
    p = p or ScanParams()
    rng = random.Random(seed + 7919)
    end = base.requests[-1].arrival_s if base.requests else 0.0
    reqs: list[TraceRequest] = []
    t, i = 0.0, 0
    name = name or f"{base.name}+scan"
    while True:
        t += rng.expovariate(p.rate_per_s)
        if t > end:
            break
        size = _pick_size(rng, p.size_weights)
        reqs.append(
            TraceRequest(
                id=f"{name}-s{i}",
                arrival_s=round(t, 6),
                prompt_tokens=16 + size + _u(rng, p.text_tokens),
                output_tokens=_u(rng, p.output_tokens),
                mm=(MMItem(id=f"{name}-scan{i}", offset=16, embeds=size),),
            )
        )
        i += 1
    scan = Trace(name="scan", requests=reqs)
    out = merge(
        name,
        [base, scan],
        params={"base": base.name, "base_params": base.params, "scan": _params(p)},
    )
    out.generator = "with_scan"
    out.seed = seed
    return out


# ------------------------------------------------------ connector scenario
@dataclass
class RemoteParams:
    """Deferral scenario: some images are encoded elsewhere (E/P split).

    The Zipf workload where a fraction ``p_remote`` of requests also carry one
    one-shot image marked ``remote``; it is delivered by the EC connector after
    a latency instead of being encoded locally."""

    p_remote: float = 0.3  #: fraction of requests with a remote image
    remote_size_weights: dict[str, float] = field(
        default_factory=lambda: {"large": 0.5, "xl": 0.5}
    )  #: size class mix of remote images


def with_remote(
    base: Trace, seed: int = 0, p: RemoteParams | None = None, name: str | None = None
) -> Trace:
    p = p or RemoteParams()
    rng = random.Random(seed + 104729)
    name = name or f"{base.name}+remote"
    reqs = []
    for r in base.requests:
        if rng.random() < p.p_remote:
            size = _pick_size(rng, p.remote_size_weights)
            last_end = max((it.offset + it.embeds for it in r.mm), default=0)
            item = MMItem(
                id=f"{r.id}-remote", offset=last_end + 4, embeds=size, remote=True
            )
            r = TraceRequest(
                id=r.id,
                arrival_s=r.arrival_s,
                prompt_tokens=r.prompt_tokens + size + 4,
                output_tokens=r.output_tokens,
                mm=r.mm + (item,),
                session=r.session,
            )
        reqs.append(r)
    out = Trace(
        name=name,
        requests=reqs,
        generator="with_remote",
        seed=seed,
        params={"base": base.name, "base_params": base.params, "remote": _params(p)},
    )
    out.validate()
    return out


def _params(p: object) -> dict:
    d = asdict(p)  # type: ignore[call-overload]
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}


#: name -> (generator(seed) -> Trace); the full-mode workload set.
def standard_workloads(scale: float = 1.0) -> dict[str, Callable[[int], Trace]]:
    """The four documented workloads; ``scale`` shrinks request counts."""

    def n(x: int) -> int:
        return max(4, int(round(x * scale)))

    mt = MultiTurnParams(conversations=n(48))
    zp = ZipfParams(requests=n(400))
    ms = mixed_sizes_params()
    ms.requests = n(ms.requests)
    return {
        "multi_turn": lambda s: multi_turn(s, mt),
        "zipf_shared": lambda s: zipf_shared(s, zp),
        "mixed_sizes": lambda s: mixed_sizes(s, ms),
        "multi_turn+scan": lambda s: with_scan(
            multi_turn(s, mt, name="mts"), s, name="multi_turn+scan"
        ),
    }
