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
    "screen": 1196,  # 1280 x 720 screenshot (resized to 1288 x 728: 46 x 26)
}


def _pick_size(rng: random.Random, weights: dict[str, float]) -> int:
    names = sorted(weights)
    return SIZE_CLASSES[rng.choices(names, weights=[weights[n] for n in names])[0]]


def _u(rng: random.Random, lo_hi: tuple[int, int]) -> int:
    return rng.randint(lo_hi[0], lo_hi[1])


def _lognormal(
    rng: random.Random, mean: float, sigma: float, lo_hi: tuple[int, int]
) -> int:
    """A log-normal draw with the given *mean* (not median), clipped."""
    mu = math.log(mean) - sigma * sigma / 2
    return min(lo_hi[1], max(lo_hi[0], int(round(rng.lognormvariate(mu, sigma)))))


def _tokens(
    rng: random.Random, lo_hi: tuple[int, int], mean: float, sigma: float
) -> int:
    """Uniform on ``lo_hi``, or log-normal with ``mean`` clipped to it."""
    return _lognormal(rng, mean, sigma, lo_hi) if mean > 0 else _u(rng, lo_hi)


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
    #: > 0: user text ~ log-normal with this mean (clipped to ``user_text``)
    user_text_mean: float = 0.0
    user_text_sigma: float = 1.0  #: log-normal shape of the user text
    #: > 0: answers ~ log-normal with this mean (clipped to ``output_tokens``)
    output_mean: float = 0.0
    output_sigma: float = 1.0  #: log-normal shape of the answers


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
            history_len += _tokens(
                rng, p.user_text, p.user_text_mean, p.user_text_sigma
            )
            if rng.random() < p.p_image:
                size = _pick_size(rng, p.size_weights)
                items.append(
                    MMItem(
                        id=f"{name}-c{c}-i{len(items)}", offset=history_len, embeds=size
                    )
                )
                history_len += size
            history_len += 8  # assistant header / separators
            out = _tokens(rng, p.output_tokens, p.output_mean, p.output_sigma)
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
    #: > 1: the trace is cut into this many equal phases (by request count)
    #: and each phase ranks the catalogue by a fresh shuffle, so the popular
    #: set changes at every phase boundary (sizes stay per image)
    phases: int = 1


def zipf_shared(
    seed: int = 0, p: ZipfParams | None = None, name: str = "zipf_shared"
) -> Trace:
    p = p or ZipfParams()
    rng = random.Random(seed)
    sizes = [_pick_size(rng, p.size_weights) for _ in range(p.catalogue)]
    ranks = list(range(p.catalogue))
    rng.shuffle(ranks)
    weights = [1.0 / math.pow(r + 1, p.alpha) for r in range(p.catalogue)]
    # Later phases rank the catalogue anew, from their own seeded stream so
    # that phases=1 draws exactly what it always drew.
    phase_ranks = [ranks]
    for ph in range(1, max(1, p.phases)):
        again = list(range(p.catalogue))
        random.Random(seed * 1009 + ph).shuffle(again)
        phase_ranks.append(again)
    reqs: list[TraceRequest] = []
    t = 0.0
    for i in range(p.requests):
        t += rng.expovariate(p.rate_per_s)
        k = _u(rng, p.images)
        ranks = phase_ranks[i * len(phase_ranks) // p.requests]
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


# ------------------------------------------------------ (e) batch eval
@dataclass
class BatchEvalParams:
    """(e) Batch evaluation: a catalogue scanned several times, in order.

    An evaluation harness submits one request per (question, pass) at a high
    rate; each pass walks the same ``catalogue`` images in dataset order, so
    the access sequence is cyclic (MMBench's CircularEval asks every question
    once per rotation of its options). Each request is the question and its
    options, then the image, then a short instruction; the answer is a few
    tokens. The text differs per pass, so the prefix cache never covers the
    image."""

    catalogue: int = 96  #: distinct images
    passes: int = 4  #: times the catalogue is scanned (options rotations)
    rate_per_s: float = 20.0  #: submission rate (Poisson)
    size_weights: dict[str, float] = field(
        default_factory=lambda: {"medium": 0.3, "large": 0.5, "xl": 0.2}
    )  #: size class mix of the images
    question_tokens: tuple[int, int] = (40, 200)  #: question + options text
    output_tokens: tuple[int, int] = (1, 8)  #: answer (an option letter)


def batch_eval(
    seed: int = 0, p: BatchEvalParams | None = None, name: str = "batch_eval"
) -> Trace:
    p = p or BatchEvalParams()
    rng = random.Random(seed)
    sizes = [_pick_size(rng, p.size_weights) for _ in range(p.catalogue)]
    reqs: list[TraceRequest] = []
    t = 0.0
    for ps in range(p.passes):
        for img in range(p.catalogue):
            t += rng.expovariate(p.rate_per_s)
            pos = 8 + _u(rng, p.question_tokens)
            item = MMItem(id=f"{name}-img{img}", offset=pos, embeds=sizes[img])
            reqs.append(
                TraceRequest(
                    id=f"{name}-p{ps}-q{img}",
                    arrival_s=round(t, 6),
                    prompt_tokens=pos + sizes[img] + 12,
                    output_tokens=_u(rng, p.output_tokens),
                    mm=(item,),
                )
            )
    return _finish(name, reqs, "batch_eval", seed, p)


# ------------------------------------------------------ (f) agent loop
@dataclass
class AgentParams:
    """(f) GUI agent episodes re-sending a sliding window of screenshots.

    Episodes start as a Poisson process. At every step the agent sends the
    task, its action history and its last ``window`` screenshots (the newest
    taken after the previous action), and answers with one action. The
    window slides, so the first screenshot of the prompt changes every step
    and the prefix cache covers only the task and history text before it.
    The next step arrives ``Exp(step_gap_s)`` later (action, page load,
    screenshot; open loop)."""

    episodes: int = 24  #: agent episodes (tasks)
    rate_per_s: float = 0.2  #: episode start rate (Poisson)
    steps: tuple[int, int] = (5, 15)  #: steps per episode, uniform
    window: int = 3  #: screenshots re-sent per step (sliding window)
    step_gap_s: float = 4.0  #: mean time between steps (exponential)
    screenshot: str = "screen"  #: size class of a screenshot
    task_tokens: tuple[int, int] = (200, 600)  #: system prompt + task text
    action_tokens: tuple[int, int] = (20, 60)  #: history text added per step
    output_tokens: tuple[int, int] = (30, 120)  #: one action (tool call)


def agent_loop(
    seed: int = 0, p: AgentParams | None = None, name: str = "agent_loop"
) -> Trace:
    p = p or AgentParams()
    rng = random.Random(seed)
    size = SIZE_CLASSES[p.screenshot]
    reqs: list[TraceRequest] = []
    t = 0.0
    for e in range(p.episodes):
        t += rng.expovariate(p.rate_per_s)
        arrival = t
        history = _u(rng, p.task_tokens)
        for j in range(_u(rng, p.steps)):
            pos = history
            items = []
            for k in range(max(0, j - p.window + 1), j + 1):
                items.append(MMItem(id=f"{name}-e{e}-s{k}", offset=pos, embeds=size))
                pos += size + 4
            out = _u(rng, p.output_tokens)
            reqs.append(
                TraceRequest(
                    id=f"{name}-e{e}-t{j}",
                    arrival_s=round(arrival, 6),
                    prompt_tokens=pos + 16,
                    output_tokens=out,
                    mm=tuple(items),
                    session=f"{name}-e{e}",
                )
            )
            history += _u(rng, p.action_tokens)
            arrival += rng.expovariate(1.0 / p.step_gap_s)
    reqs.sort(key=lambda r: r.arrival_s)
    return _finish(name, reqs, "agent_loop", seed, p)


# ---------------------------------------------------- (g) video window
@dataclass
class VideoParams:
    """(g) Video streams analysed in overlapping sliding windows.

    Each stream yields one encoder item per ``item_s`` seconds of video (a
    Qwen2-VL temporal patch: 2 frames at 2 fps), sent by the client as
    separate frames. Every ``stride`` items the stream sends the last
    ``window`` items with a fixed question, so consecutive requests share
    ``window - stride`` items. Streams start at uniform random offsets."""

    streams: int = 6  #: concurrent video streams
    duration_s: tuple[int, int] = (80, 140)  #: stream length, uniform
    start_spread_s: float = 30.0  #: streams start uniformly in [0, this)
    item_s: float = 1.0  #: seconds of video per encoder item
    item_embeds: int = 256  #: embeddings per item (448 x 448, 2 frames)
    window: int = 16  #: items per request
    stride: int = 4  #: new items between consecutive requests of a stream
    text_tokens: tuple[int, int] = (30, 80)  #: instruction before the frames
    output_tokens: tuple[int, int] = (16, 64)  #: answer tokens


def video_window(
    seed: int = 0, p: VideoParams | None = None, name: str = "video_window"
) -> Trace:
    p = p or VideoParams()
    rng = random.Random(seed)
    reqs: list[TraceRequest] = []
    for v in range(p.streams):
        start = rng.uniform(0, p.start_spread_s)
        n_items = int(_u(rng, p.duration_s) / p.item_s)
        head = _u(rng, p.text_tokens)
        for end in range(p.window, n_items + 1, p.stride):
            items, pos = [], head
            for k in range(end - p.window, end):
                items.append(
                    MMItem(id=f"{name}-v{v}-f{k}", offset=pos, embeds=p.item_embeds)
                )
                pos += p.item_embeds + 2
            reqs.append(
                TraceRequest(
                    id=f"{name}-v{v}-w{end}",
                    arrival_s=round(start + end * p.item_s, 6),
                    prompt_tokens=pos + 12,
                    output_tokens=_u(rng, p.output_tokens),
                    mm=tuple(items),
                    session=f"{name}-v{v}",
                )
            )
    reqs.sort(key=lambda r: (r.arrival_s, r.id))
    return _finish(name, reqs, "video_window", seed, p)


# ----------------------------------------------------- (h) heavy chat
def heavy_chat_params() -> MultiTurnParams:
    """(h) Heavy multi-turn image chat: long think times, long answers.

    The multi-turn generator with think time Exp(60 s), 2-10 turns, half the
    turns adding an image, and log-normal user texts and answers whose means
    follow LMSYS-Chat-1M's averages (see bench/README.md)."""
    return MultiTurnParams(
        conversations=16,
        conv_rate_per_s=0.05,
        turns=(2, 10),
        think_s=60.0,
        p_image=0.5,
        size_weights={"medium": 0.3, "large": 0.4, "xl": 0.3},
        system_tokens=64,
        user_text=(4, 1024),
        user_text_mean=70.0,
        user_text_sigma=1.0,
        output_tokens=(8, 1024),
        output_mean=215.0,
        output_sigma=0.8,
    )


def heavy_chat(
    seed: int = 0, p: MultiTurnParams | None = None, name: str = "heavy_chat"
) -> Trace:
    tr = multi_turn(seed, p or heavy_chat_params(), name=name)
    tr.generator = "heavy_chat"
    return tr


# --------------------------------------------------- (i) phase change
def phase_change_params() -> ZipfParams:
    """(i) Phase change: shared images whose popular set changes mid-trace.

    The Zipf workload (alpha 1.0) in two phases; the second ranks the
    catalogue by a fresh shuffle, so yesterday's hot images go cold and
    others heat up. Frequency counts that never decay keep the old set."""
    return ZipfParams(requests=400, rate_per_s=4.0, catalogue=300, alpha=1.0, phases=2)


def phase_change(
    seed: int = 0, p: ZipfParams | None = None, name: str = "phase_change"
) -> Trace:
    tr = zipf_shared(seed, p or phase_change_params(), name=name)
    tr.generator = "phase_change"
    return tr


def _finish(
    name: str, reqs: list[TraceRequest], gen: str, seed: int, p: object
) -> Trace:
    tr = Trace(name=name, requests=reqs, generator=gen, seed=seed, params=_params(p))
    tr.validate()
    return tr


def _params(p: object) -> dict:
    d = asdict(p)  # type: ignore[call-overload]
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}


def standard_workloads(scale: float = 1.0) -> dict[str, Callable[[int], Trace]]:
    """The four workloads of issue 6; ``scale`` shrinks request counts."""
    fams = families(scale)
    return {k: fams[k] for k in FAMILIES[:4]}


#: Stable names of the workload families, in report order. The first four
#: are issue 6's; the rest come from issue 11.
FAMILIES: tuple[str, ...] = (
    "multi_turn",
    "zipf_shared",
    "mixed_sizes",
    "multi_turn+scan",
    "batch_eval",
    "agent_loop",
    "video_window",
    "heavy_chat",
    "phase_change",
)


#: Variants of four families, with the popularity skew or the number of
#: sessions at once changed (see below). ``make bench`` does not run them;
#: ``--families`` names them to check a policy beyond the traces its
#: constants were chosen on (bench/README.md, "Families outside the suite").
VARIANTS: tuple[str, ...] = (
    "zipf_flat",
    "zipf_steep",
    "multi_turn_busy",
    "heavy_chat_busy",
)


def families(scale: float = 1.0) -> dict[str, Callable[[int], Trace]]:
    """name -> generator(seed) for every family in :data:`FAMILIES` and
    :data:`VARIANTS`.

    ``scale`` multiplies the number of conversations, requests, episodes,
    streams and catalogue images (at least 2 of each), for quick runs."""

    def n(x: int) -> int:
        return max(2, int(round(x * scale)))

    mt = MultiTurnParams(conversations=n(48))
    zp = ZipfParams(requests=n(400))
    ms = mixed_sizes_params()
    ms.requests = n(ms.requests)
    be = BatchEvalParams(catalogue=n(96))
    ag = AgentParams(episodes=n(24))
    vi = VideoParams(streams=n(6))
    hc = heavy_chat_params()
    hc.conversations = n(hc.conversations)
    pc = phase_change_params()
    pc.requests = n(pc.requests)
    # Variants: Zipf at the ends of its typical range (0.6-1.2); twice the
    # chat sessions at once (twice as many, starting twice as fast), and
    # heavy chat with twice the conversations and half the think time.
    flat = ZipfParams(requests=n(400), alpha=0.6)
    steep = ZipfParams(requests=n(400), alpha=1.2)
    busy = MultiTurnParams(conversations=n(96), conv_rate_per_s=0.5)
    hcb = heavy_chat_params()
    hcb.conversations = n(2 * hcb.conversations)
    hcb.think_s /= 2
    return {
        "multi_turn": lambda s: multi_turn(s, mt),
        "zipf_shared": lambda s: zipf_shared(s, zp),
        "mixed_sizes": lambda s: mixed_sizes(s, ms),
        "multi_turn+scan": lambda s: with_scan(
            multi_turn(s, mt, name="mts"), s, name="multi_turn+scan"
        ),
        "batch_eval": lambda s: batch_eval(s, be),
        "agent_loop": lambda s: agent_loop(s, ag),
        "video_window": lambda s: video_window(s, vi),
        "heavy_chat": lambda s: heavy_chat(s, hc),
        "phase_change": lambda s: phase_change(s, pc),
        "zipf_flat": lambda s: zipf_shared(s, flat, name="zipf_flat"),
        "zipf_steep": lambda s: zipf_shared(s, steep, name="zipf_steep"),
        "multi_turn_busy": lambda s: multi_turn(s, busy, name="multi_turn_busy"),
        "heavy_chat_busy": lambda s: heavy_chat(s, hcb, name="heavy_chat_busy"),
    }
