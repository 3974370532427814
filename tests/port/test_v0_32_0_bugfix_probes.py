# SPDX-License-Identifier: Apache-2.0
"""Do the v0.22.1 series' scheduler bug fixes still reproduce on vLLM 0.32.0?

Probe tests for the port report (docs/port-0.32.0.md), run inside a vLLM
tree (they import its ``tests.v1.core.utils``):

    make pytest BASE=0.32.0 TREE=base ARGS="$PWD/tests/port/test_v0_32_0_bugfix_probes.py"

Each test states the correct behaviour, so it fails where the bug
reproduces. The real Scheduler is driven with a stand-in for the worker's
encoder cache (a set of mm_hashes) that honours ``free_encoder_mm_hashes``
and ``scheduled_encoder_inputs``, and every item the model would gather in a
step must be in it (the worker raises "Encoder cache miss" otherwise).

A test whose bug reproduces moves, with its fix, into ``patches-0.32.0/``.
Both that reproduce are ported: the in-step preemption one is
``patches-0.32.0/0002`` (tests in ``tests/v1/core/test_scheduler.py`` and
``test_encoder_cache_manager.py``), the repeated-item one ``0003`` (tests in
``test_encoder_cache_manager.py``). The probes stay as the port report's
evidence: on ``TREE=base`` those two fail, on ``TREE=tree`` all four pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vllm.multimodal.inputs import PlaceholderRange
from vllm.v1.outputs import ModelRunnerOutput


def _consumed_mm_hashes(request: Any, start: int, end: int) -> list[str]:
    """The mm_hashes the model runner gathers for tokens [start, end)."""
    hashes = []
    for feature in request.mm_features:
        pos = feature.mm_position
        if pos.offset >= end:
            break
        if pos.offset + pos.length <= start:
            continue
        lo = max(start - pos.offset, 0)
        hi = min(end - pos.offset, pos.length)
        embeds_start, embeds_end = pos.get_embeds_indices_in_range(lo, hi)
        if embeds_start != embeds_end:
            hashes.append(feature.identifier)
    return hashes


class WorkerStandIn:
    """What the model runner does with each SchedulerOutput, minus the model."""

    def __init__(self, scheduler: Any, requests: dict[str, Any]) -> None:
        self.scheduler = scheduler
        self.requests = requests
        self.cache: set[str] = set()
        self.encoded: list[tuple[str, str]] = []

    def step(self, check_output: Callable[[Any], None] | None = None) -> Any:
        output = self.scheduler.schedule()
        if check_output is not None:
            check_output(output)
        for mm_hash in output.free_encoder_mm_hashes:
            self.cache.discard(mm_hash)
        for req_id, input_ids in output.scheduled_encoder_inputs.items():
            for input_id in input_ids:
                mm_hash = self.requests[req_id].mm_features[input_id].identifier
                self.encoded.append((req_id, mm_hash))
                self.cache.add(mm_hash)
        for req_id, num_tokens in output.num_scheduled_tokens.items():
            request = self.requests[req_id]
            end = request.num_computed_tokens
            for mm_hash in _consumed_mm_hashes(request, end - num_tokens, end):
                assert mm_hash in self.cache, (
                    f"Encoder cache miss for {mm_hash} (request {req_id})"
                )
        req_ids = list(output.num_scheduled_tokens)
        self.scheduler.update_from_output(
            output,
            ModelRunnerOutput(
                req_ids=req_ids,
                req_id_to_index={r: i for i, r in enumerate(req_ids)},
                sampled_token_ids=[
                    [0]
                    if self.requests[r].num_computed_tokens
                    >= self.requests[r].num_prompt_tokens
                    else []
                    for r in req_ids
                ],
                logprobs=None,
                prompt_logprobs_dict={},
                pooler_output=[],
            ),
        )
        return output

    def run(self, max_steps: int, check_output=None) -> None:
        for _ in range(max_steps):
            if not self.scheduler.has_requests():
                return
            self.step(check_output)


# ------------------------------------------------------------ repeated items
def test_repeated_item_not_evicted_between_occurrences():
    """Request A shows image "h" at [0, 300) and again at [600, 900); B needs
    800 embeddings for "g". The reference A holds for "h" must survive the
    free of its first occurrence, else B evicts "h" and A encodes it twice."""
    from tests.v1.core.utils import create_requests, create_scheduler

    scheduler = create_scheduler(
        model="llava-hf/llava-1.5-7b-hf",
        max_num_batched_tokens=1024,
        max_model_len=2048,
        long_prefill_token_threshold=400,
    )
    assert scheduler.encoder_cache_manager.cache_size == 1024
    (req_b,) = create_requests(
        num_requests=1,
        num_tokens=1400,
        mm_hashes_list=[["g"]],
        mm_positions=[[PlaceholderRange(offset=500, length=800)]],
        max_tokens=1,
        req_ids=["B"],
    )
    (req_a,) = create_requests(
        num_requests=1,
        num_tokens=1000,
        mm_hashes_list=[["h", "h"]],
        mm_positions=[
            [
                PlaceholderRange(offset=0, length=300),
                PlaceholderRange(offset=600, length=300),
            ]
        ],
        max_tokens=1,
        req_ids=["A"],
    )
    scheduler.add_request(req_b)
    scheduler.add_request(req_a)
    worker = WorkerStandIn(scheduler, {"A": req_a, "B": req_b})
    worker.run(max_steps=20)
    assert not scheduler.has_requests()
    assert worker.encoded.count(("A", "h")) == 1, worker.encoded
    assert worker.encoded.count(("B", "g")) == 1, worker.encoded


def test_repeated_item_does_not_stall_a_request_in_a_small_cache():
    """[x, y, x], 600 embeddings each, cache 1024: x and y never fit together.
    The request must finish (x computed again), not wait forever."""
    from tests.v1.core.utils import create_requests, create_scheduler

    scheduler = create_scheduler(
        model="llava-hf/llava-1.5-7b-hf",
        max_num_batched_tokens=1024,
        max_model_len=4096,
    )
    (req_a,) = create_requests(
        num_requests=1,
        num_tokens=2100,
        mm_hashes_list=[["x", "y", "x"]],
        mm_positions=[
            [
                PlaceholderRange(offset=0, length=600),
                PlaceholderRange(offset=700, length=600),
                PlaceholderRange(offset=1400, length=600),
            ]
        ],
        max_tokens=1,
        req_ids=["A"],
    )
    scheduler.add_request(req_a)
    worker = WorkerStandIn(scheduler, {"A": req_a})
    worker.run(max_steps=20)
    assert not scheduler.has_requests(), "request A stalled"
    assert worker.encoded == [("A", "x"), ("A", "y"), ("A", "x")]


# --------------------------------------------------- preemption (priority)
def _priority_requests(specs: list[tuple[str, int, int, int, str]]) -> list[Any]:
    """(req_id, priority, num_tokens, mm offset, mm_hash) -> requests with one
    50-embedding image each."""
    from tests.v1.core.test_scheduler import create_requests_with_priority

    out = []
    for req_id, prio, num_tokens, offset, mm_hash in specs:
        if req_id == "D":
            # A short text-only request with the top priority that keeps
            # decoding: with a second eligible request the scheduler applies
            # long_prefill_token_threshold (it lifts it for a lone request).
            (req,) = create_requests_with_priority(
                num_requests=1,
                priorities=[prio],
                arrival_times=[-1.0],
                num_tokens=num_tokens,
                max_tokens=200,
                req_ids=[req_id],
            )
            out.append(req)
            continue
        (req,) = create_requests_with_priority(
            num_requests=1,
            priorities=[prio],
            arrival_times=[float(len(out))],
            num_tokens=num_tokens,
            mm_hashes_list=[[mm_hash]],
            mm_positions=[[PlaceholderRange(offset=offset, length=50)]],
            max_tokens=4,
            req_ids=[req_id],
        )
        out.append(req)
    return out


def _priority_scheduler(num_blocks: int, max_num_batched_tokens: int = 1024) -> Any:
    from tests.v1.core.utils import create_scheduler

    return create_scheduler(
        model="llava-hf/llava-1.5-7b-hf",
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=1024,
        long_prefill_token_threshold=100,
        num_blocks=num_blocks,
        block_size=16,
        scheduling_policy="priority",
    )


def test_in_step_preemption_does_not_leave_uncomputed_output_cached():
    """A (lowest priority) allocates encoder input X in a step; B hits X in
    the same step; C then preempts A. A's encoder work is dropped, so X must
    not stay listed as cached: B (and A when it resumes) would read an output
    that was never computed ("Encoder cache miss")."""
    d, a, b, c = _priority_requests(
        [
            ("D", -1, 16, 0, ""),
            ("A", 2, 400, 300, "X"),  # X reached in step 4 (chunks of 100)
            ("B", 1, 300, 200, "X"),  # X reached in step 4 too
            ("C", 0, 300, 250, "Z"),
        ]
    )
    # Blocks: after step 3 A/B/C hold 19/13/7; step 4 needs +6 each, and the
    # pool has room for A's and B's only, so C preempts A (lowest priority).
    scheduler = _priority_scheduler(num_blocks=56)
    worker = WorkerStandIn(scheduler, {"A": a, "B": b, "C": c, "D": d})
    scheduler.add_request(d)
    scheduler.add_request(a)
    worker.step()
    scheduler.add_request(b)
    worker.step()
    scheduler.add_request(c)
    worker.step()
    assert [r.request_id for r in scheduler.running] == ["D", "A", "B", "C"]
    preempted = []

    def check(output: Any) -> None:
        preempted.extend(output.preempted_req_ids or ())

    worker.step(check)  # step 4: the scenario
    assert preempted == ["A"], f"scenario not reached: preempted {preempted}"
    worker.run(max_steps=40)
    # D decodes on (max_tokens=200); A, B and C must be done.
    assert set(scheduler.requests) <= {"D"}, sorted(scheduler.requests)
    assert ("A", "X") in worker.encoded or ("B", "X") in worker.encoded


def test_priority_preemption_keeps_the_next_request_in_the_step():
    """The victim of a priority preemption sits before the current request in
    `running` and was not scheduled this step (its next chunk starts at an
    image the encoder cache has no room for). Removing it shifts `running`;
    the request after the current one must still be scheduled in the step."""
    d, v, p, q = _priority_requests(
        [
            ("D", -1, 16, 0, ""),
            ("V", 5, 500, 200, "v"),  # image [200, 500) blocked in step 3
            ("P", 0, 300, 250, "p"),  # needs blocks in step 3 -> preempts V
            ("Q", 1, 112, 40, "q"),  # after P in running: must stay scheduled
        ]
    )
    # P's image (300 embeddings, referenced while P prefills it) leaves no
    # room for V's (300) in step 3: the encoder cache holds 576.
    v.mm_features[0].mm_position = PlaceholderRange(offset=200, length=300)
    p.mm_features[0].mm_position = PlaceholderRange(offset=0, length=300)
    scheduler = _priority_scheduler(num_blocks=35, max_num_batched_tokens=512)
    assert scheduler.encoder_cache_manager.cache_size < 600
    worker = WorkerStandIn(scheduler, {"V": v, "P": p, "Q": q, "D": d})
    scheduler.add_request(d)
    scheduler.add_request(v)
    worker.step()  # V [0, 100)
    scheduler.add_request(p)
    scheduler.add_request(q)
    worker.step()  # V [100, 200); P [0, 100) allocates its 600; Q [0, 100)
    assert [r.request_id for r in scheduler.running] == ["D", "V", "P", "Q"]
    seen: dict[str, Any] = {}

    def check(output: Any) -> None:
        seen["scheduled"] = dict(output.num_scheduled_tokens)
        seen["preempted"] = set(output.preempted_req_ids or ())

    worker.step(check)  # step 3: V skipped (no room for its image), P preempts V
    assert seen["preempted"] == {"V"}, f"scenario not reached: {seen}"
    assert "V" not in seen["scheduled"], seen
    assert "Q" in seen["scheduled"], f"Q skipped for a step: {seen}"
