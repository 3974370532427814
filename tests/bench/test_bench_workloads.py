# SPDX-License-Identifier: Apache-2.0
"""The workload families: seeded, valid, and shaped as documented."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict

import pytest

from bench import workloads as W
from bench.trace import Trace


def _by_session(t: Trace) -> dict[str, list]:
    out: dict[str, list] = defaultdict(list)
    for r in t.requests:
        out[r.session].append(r)
    return out


@pytest.mark.parametrize("name", W.FAMILIES + W.VARIANTS)
def test_every_family_is_seeded_valid_and_named(name):
    gen = W.families(scale=0.3)[name]
    a, b, c = gen(1), gen(1), gen(2)
    a.validate()
    assert a.requests == b.requests
    assert a.requests != c.requests
    assert a.name == name and a.seed == 1
    assert a.summary()["mm_accesses"] > 0
    # The same content id always has the same size, across the whole trace.
    sizes: dict[str, set[int]] = defaultdict(set)
    for r in a.requests:
        for it in r.mm:
            sizes[it.id].add(it.embeds)
    assert all(len(s) == 1 for s in sizes.values())


def test_families_keep_issue_6_workloads_first():
    assert W.FAMILIES[:4] == (
        "multi_turn",
        "zipf_shared",
        "mixed_sizes",
        "multi_turn+scan",
    )
    assert list(W.standard_workloads()) == list(W.FAMILIES[:4])
    small = W.families(scale=0.25)["zipf_shared"](0)
    assert len(small.requests) < len(W.families()["zipf_shared"](0).requests)


def _top_share(t: Trace, k: int = 20) -> float:
    counts = Counter(key for key, _ in t.access_sequence())
    return sum(v for _, v in counts.most_common(k)) / sum(counts.values())


def _mean_think_s(t: Trace) -> float:
    gaps = [
        b.arrival_s - a.arrival_s
        for turns in _by_session(t).values()
        for a, b in zip(turns, turns[1:])
    ]
    return statistics.fmean(gaps)


def test_variants_move_the_parameter_they_name():
    fams = W.families(scale=0.5)
    assert not set(W.VARIANTS) & set(W.FAMILIES)
    for seed in (0, 1):
        flat, mid, steep = (
            fams[f](seed) for f in ("zipf_flat", "zipf_shared", "zipf_steep")
        )
        assert _top_share(flat) < _top_share(mid) < _top_share(steep)
        assert flat.params["alpha"] == 0.6 and steep.params["alpha"] == 1.2
        busy, mt = fams["multi_turn_busy"](seed), fams["multi_turn"](seed)
        assert len(_by_session(busy)) == 2 * len(_by_session(mt))
        # Twice the start rate: the busy variant's sessions overlap more.
        assert busy.params["conv_rate_per_s"] == 2 * mt.params["conv_rate_per_s"]
        hcb, hc = fams["heavy_chat_busy"](seed), fams["heavy_chat"](seed)
        assert len(_by_session(hcb)) == 2 * len(_by_session(hc))
        assert _mean_think_s(hcb) < _mean_think_s(hc)
    # The suite's families are untouched by the variants.
    assert W.families()["zipf_shared"](0).params["alpha"] == 0.9


def test_batch_eval_is_a_cyclic_scan():
    p = W.BatchEvalParams(catalogue=12, passes=3)
    t = W.batch_eval(5, p)
    seq = [k for k, _ in t.access_sequence()]
    first = seq[: p.catalogue]
    assert len(set(first)) == p.catalogue
    assert seq == first * p.passes  # every pass walks the catalogue in order
    # Nothing but the image is shared: no sessions, one item per request.
    assert all(r.session is None and len(r.mm) == 1 for r in t.requests)


def test_agent_loop_slides_a_window_of_screenshots():
    p = W.AgentParams(episodes=6, window=3, steps=(4, 9))
    t = W.agent_loop(3, p)
    for steps in _by_session(t).values():
        steps.sort(key=lambda r: r.arrival_s)
        for j, (prev, cur) in enumerate(zip(steps, steps[1:]), start=1):
            ids_prev = [it.id for it in prev.mm]
            ids_cur = [it.id for it in cur.mm]
            assert len(ids_cur) == min(j + 1, p.window)
            # The window slides by one: all but the oldest come back, plus a
            # new screenshot at the end.
            assert ids_cur[:-1] == ids_prev[-(len(ids_cur) - 1) :]
            assert ids_cur[-1] not in ids_prev
            assert all(it.embeds == W.SIZE_CLASSES["screen"] for it in cur.mm)


def test_video_windows_overlap_by_window_minus_stride():
    p = W.VideoParams(streams=3, window=8, stride=2, duration_s=(30, 40))
    t = W.video_window(2, p)
    for reqs in _by_session(t).values():
        reqs.sort(key=lambda r: r.arrival_s)
        for prev, cur in zip(reqs, reqs[1:]):
            assert len(cur.mm) == p.window
            shared = {it.id for it in prev.mm} & {it.id for it in cur.mm}
            assert len(shared) == p.window - p.stride
            assert cur.arrival_s - prev.arrival_s == pytest.approx(p.stride * p.item_s)
    counts = Counter(k for k, _ in t.access_sequence())
    assert max(counts.values()) == p.window // p.stride


def test_heavy_chat_think_times_turns_and_answer_lengths():
    p = W.heavy_chat_params()
    p.conversations = 400
    t = W.heavy_chat(0, p)
    gaps, turns = [], []
    for reqs in _by_session(t).values():
        reqs.sort(key=lambda r: r.arrival_s)
        turns.append(len(reqs))
        gaps += [b.arrival_s - a.arrival_s for a, b in zip(reqs, reqs[1:])]
    assert min(turns) >= p.turns[0] and max(turns) <= p.turns[1]
    assert statistics.fmean(gaps) == pytest.approx(p.think_s, rel=0.1)
    outs = [r.output_tokens for r in t.requests]
    assert statistics.fmean(outs) == pytest.approx(p.output_mean, rel=0.1)
    assert max(outs) <= p.output_tokens[1] and min(outs) >= p.output_tokens[0]
    # Answers are part of the next turn's prompt (history re-sent).
    for reqs in _by_session(t).values():
        for a, b in zip(reqs, reqs[1:]):
            assert b.prompt_tokens >= a.prompt_tokens + a.output_tokens


def test_phase_change_moves_the_popular_set():
    p = W.phase_change_params()
    p.requests = 1200
    t = W.phase_change(4, p)
    half = len(t.requests) // 2

    def top(reqs, k=15):
        c = Counter(it.id for r in reqs for it in r.mm)
        return {x for x, _ in c.most_common(k)}

    a, b = top(t.requests[:half]), top(t.requests[half:])
    assert len(a & b) <= 3
    # Before the boundary the trace is the one-phase Zipf workload, request
    # for request; after it only the popularity ranking differs.
    q = W.phase_change_params()
    q.requests, q.phases = p.requests, 1
    one = W.zipf_shared(4, q, name="phase_change")
    assert one.requests[:half] == t.requests[:half]
    assert [r.arrival_s for r in one.requests] == [r.arrival_s for r in t.requests]
    assert one.requests[half:] != t.requests[half:]
