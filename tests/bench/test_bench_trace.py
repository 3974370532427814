# SPDX-License-Identifier: Apache-2.0
"""Trace format: round trip, validation, seeded generators."""

from __future__ import annotations

import json

import pytest

from bench import workloads as W
from bench.trace import MMItem, Trace, TraceError, TraceRequest


def _small_traces() -> list[Trace]:
    mt = W.multi_turn(3, W.MultiTurnParams(conversations=4))
    zp = W.zipf_shared(3, W.ZipfParams(requests=20, catalogue=10))
    ms = W.mixed_sizes(
        3, W.ZipfParams(requests=20, catalogue=10, size_weights={"thumb": 1, "4k": 1})
    )
    sc = W.with_scan(mt, 3, W.ScanParams(rate_per_s=1.0))
    rm = W.with_remote(zp, 3, W.RemoteParams(p_remote=0.5))
    return [mt, zp, ms, sc, rm]


@pytest.mark.parametrize("idx", range(5))
def test_round_trip(tmp_path, idx):
    t = _small_traces()[idx]
    p = t.save(tmp_path / "t.jsonl")
    back = Trace.load(p)
    assert back.requests == t.requests
    assert (back.name, back.generator, back.seed) == (t.name, t.generator, t.seed)
    assert back.params == json.loads(json.dumps(t.params))
    # Saving the loaded trace reproduces the file byte for byte.
    p2 = back.save(tmp_path / "t2.jsonl")
    assert p.read_bytes() == p2.read_bytes()


def test_headerless_file_loads(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text(
        '{"id": "a", "arrival_s": 0, "prompt_tokens": 50, "output_tokens": 3,'
        ' "mm": [{"id": "img", "offset": 5, "embeds": 20}]}\n'
        '{"id": "b", "arrival_s": 1.5, "prompt_tokens": 60, "output_tokens": 2,'
        ' "mm": [{"id": "img", "offset": 10, "embeds": 20, "remote": true}]}\n'
    )
    t = Trace.load(p)
    assert [r.id for r in t.requests] == ["a", "b"]
    assert t.requests[1].mm[0] == MMItem("img", 10, 20, "image", True)
    assert t.access_sequence() == [("img", 20), ("img", 20)]


@pytest.mark.parametrize(
    "reqs, msg",
    [
        (
            [TraceRequest("a", 0, 50, 1, (MMItem("x", 40, 20),))],
            "ends after the prompt",
        ),
        (
            [TraceRequest("a", 0, 80, 1, (MMItem("x", 5, 20), MMItem("y", 10, 5)))],
            "overlaps",
        ),
        (
            [
                TraceRequest("a", 0, 80, 1, (MMItem("x", 5, 20),)),
                TraceRequest("b", 1, 80, 1, (MMItem("x", 5, 21),)),
            ],
            "sizes",
        ),
        ([TraceRequest("a", 2, 80, 1), TraceRequest("b", 1, 80, 1)], "decreases"),
        ([TraceRequest("a", 0, 80, 1), TraceRequest("a", 1, 80, 1)], "duplicate"),
    ],
)
def test_validation(reqs, msg):
    with pytest.raises(TraceError, match=msg):
        Trace("bad", list(reqs)).validate()


def test_generators_are_seeded():
    for make in (
        lambda s: W.multi_turn(s, W.MultiTurnParams(conversations=5)),
        lambda s: W.zipf_shared(s, W.ZipfParams(requests=30)),
    ):
        assert make(1).requests == make(1).requests
        assert make(1).requests != make(2).requests


def test_multi_turn_resends_history():
    t = W.multi_turn(0, W.MultiTurnParams(conversations=3, p_image=1.0))
    by_conv: dict[str, list[TraceRequest]] = {}
    for r in t.requests:
        by_conv.setdefault(r.session, []).append(r)
    for turns in by_conv.values():
        for prev, cur in zip(turns, turns[1:]):
            # Every earlier image is re-sent at the same offset, plus one new.
            assert cur.mm[: len(prev.mm)] == prev.mm
            assert len(cur.mm) == len(prev.mm) + 1
            assert cur.prompt_tokens > prev.prompt_tokens


def test_mixed_sizes_span_100x():
    t = W.mixed_sizes(0)
    sizes = {it.embeds for r in t.requests for it in r.mm}
    assert max(sizes) / min(sizes) >= 100


def test_negative_offset_is_rejected():
    t = Trace("bad", [TraceRequest("a", 0, 80, 1, (MMItem("x", -5, 20),))])
    with pytest.raises(TraceError, match="'a': item 'x' has a negative offset"):
        t.validate()


GOOD = '{"id": "a", "arrival_s": 0, "prompt_tokens": 50, "output_tokens": 3}'


@pytest.mark.parametrize(
    "line, msg",
    [
        (
            '{"id": "b", "arrival_s": NaN, "prompt_tokens": 5, "output_tokens": 1}',
            r":2: request 'b': arrival_s must be finite and >= 0, not nan",
        ),
        (
            '{"id": "b", "arrival_s": -1, "prompt_tokens": 5, "output_tokens": 1}',
            r":2: request 'b': arrival_s must be finite and >= 0, not -1",
        ),
        (
            '{"id": "b", "arrival_s": null, "prompt_tokens": 5, "output_tokens": 1}',
            r":2: request 'b' lacks field 'arrival_s'",
        ),
        (
            '{"id": "b", "arrival_s": 1, "prompt_tokens": "abc", "output_tokens": 1}',
            r":2: request 'b': field 'prompt_tokens' must be an integer, not 'abc'",
        ),
        (
            '{"id": "b", "arrival_s": 1, "prompt_tokens": 100.7, "output_tokens": 1}',
            r":2: request 'b': field 'prompt_tokens' must be an integer, not 100.7",
        ),
        (
            '{"id": "b", "arrival_s": 1, "prompt_tokens": 5, "output_tokens": true}',
            r":2: request 'b': field 'output_tokens' must be an integer, not True",
        ),
        (
            '{"id": "b", "arrival_s": 1, "prompt_tokens": 5, "output_tokens": 1, '
            '"session": 5}',
            r":2: request 'b': field 'session' must be a string, not 5",
        ),
        (
            '{"id": "b", "arrival_s": 1, "prompt_tokens": 50, "output_tokens": 1, '
            '"mm": [{"id": "x", "offset": 1, "embeds": 2, "remote": "false"}]}',
            r":2: request 'b': mm\[0\]: field 'remote' must be true or false",
        ),
        (
            '{"id": "b", "arrival_s": 1, "prompt_tokens": 50, "output_tokens": 1, '
            '"mm": [{"offset": 1, "embeds": 2}]}',
            r":2: request 'b': mm\[0\] lacks field 'id'",
        ),
        (
            '{"id": "b", "arrival_s": 1, "prompt_tokens": 50, "output_tokens": 1, '
            '"mm": {"id": "x"}}',
            r":2: request 'b': field 'mm' must be a list",
        ),
        (
            '{"id": 7, "arrival_s": 1, "prompt_tokens": 50, "output_tokens": 1}',
            r":2: request: field 'id' must be a string, not 7",
        ),
        ("[1, 2]", r":2: a request must be a JSON object, not \[1, 2\]"),
        ('{"trace": {"name": "late"}}', r":2: a header line must be the first line"),
    ],
)
def test_load_names_the_line_and_the_field(tmp_path, line, msg):
    p = tmp_path / "x.jsonl"
    p.write_text(GOOD + "\n" + line + "\n")
    with pytest.raises(TraceError, match=msg):
        Trace.load(p)


def test_load_rejects_an_empty_trace_and_names_the_file(tmp_path):
    p = tmp_path / "empty.jsonl"
    p.write_text('{"trace": {"version": 1}}\n')
    with pytest.raises(TraceError, match=r"empty.jsonl: no request"):
        Trace.load(p)
    p.write_text(
        GOOD
        + "\n"
        + GOOD.replace('"a"', '"b"')
        .replace('"arrival_s": 0', '"arrival_s": 1')
        .replace("}", ', "mm": [{"id": "x", "offset": 1, "embeds": 2}]}')
        + "\n"
        + GOOD.replace('"a"', '"c"')
        .replace('"arrival_s": 0', '"arrival_s": 2')
        .replace("}", ', "mm": [{"id": "x", "offset": 1, "embeds": 3}]}')
        + "\n"
    )
    with pytest.raises(
        TraceError,
        match=r"empty.jsonl: item 'x' has 2 embeds in request 'b' and 3 in request 'c'",
    ):
        Trace.load(p)
