# SPDX-License-Identifier: Apache-2.0
"""The worker model on hand-written steps (no vLLM needed)."""

from __future__ import annotations

import pytest

from bench.worker_model import Feature, StepInput, WorkerModel, WorkerModelError

X = Feature("x", offset=10, length=100, embeds=100)
Y = Feature("y", offset=120, length=50, embeds=50)


def _first_step(w: WorkerModel) -> None:
    w.step(
        StepInput(
            step=0,
            new_reqs=[("a", [X, Y], 0, 200)],
            num_scheduled={"a": 200},
            encoder_inputs={"a": [0, 1]},
        )
    )


def test_compute_then_hit():
    w = WorkerModel(device_capacity=200)
    _first_step(w)
    st = w.step(
        StepInput(step=1, new_reqs=[("b", [X], 0, 150)], num_scheduled={"b": 150})
    )
    assert st.encoded_embeds == 0 and st.prefill_tokens == 150
    assert [k for _, _, k in w.accesses] == ["miss", "miss", "device"]


def test_missing_output_fails_loudly():
    w = WorkerModel(device_capacity=200)
    _first_step(w)
    with pytest.raises(WorkerModelError, match="needs encoder output 'x'.*nowhere"):
        w.step(
            StepInput(
                step=1,
                free_hashes=["x"],
                new_reqs=[("b", [X], 0, 150)],
                num_scheduled={"b": 150},
            )
        )


def test_demote_promote_round_trip():
    w = WorkerModel(device_capacity=150, host_capacity=200)
    _first_step(w)
    w.step(StepInput(step=1, manager_ops=[("demote", "x")]))
    assert "x" in w.host and "x" not in w.device
    with pytest.raises(WorkerModelError, match="on the host only"):
        w.step(
            StepInput(step=2, new_reqs=[("b", [X], 0, 150)], num_scheduled={"b": 150})
        )
    w2 = WorkerModel(device_capacity=150, host_capacity=200)
    _first_step(w2)
    w2.step(StepInput(step=1, manager_ops=[("demote", "x")]))
    st = w2.step(
        StepInput(
            step=2,
            manager_ops=[("promote", "x")],
            new_reqs=[("b", [X], 0, 150)],
            num_scheduled={"b": 150},
        )
    )
    assert st.h2d_embeds == 100 and w2.accesses[-1][2] == "host"


def test_bad_metadata_and_budget_fail():
    w = WorkerModel(device_capacity=150, host_capacity=10)
    _first_step(w)
    with pytest.raises(WorkerModelError, match="promotes 'x'"):
        w.step(StepInput(step=1, manager_ops=[("promote", "x")]))
    w = WorkerModel(device_capacity=150, host_capacity=10)
    _first_step(w)
    with pytest.raises(WorkerModelError, match="host tier holds 100"):
        w.step(StepInput(step=1, manager_ops=[("demote", "x")]))
    w = WorkerModel(device_capacity=120)
    with pytest.raises(WorkerModelError, match="device tier holds 150"):
        _first_step(w)


def test_only_overlapping_items_are_needed():
    w = WorkerModel(device_capacity=200)
    # Tokens 0..50 only: x (10..110) is needed, y (120..170) is not.
    w.step(
        StepInput(
            step=0,
            new_reqs=[("a", [X, Y], 0, 200)],
            num_scheduled={"a": 50},
            encoder_inputs={"a": [0]},
        )
    )
    with pytest.raises(WorkerModelError, match="'y'"):
        w.step(StepInput(step=1, cached_reqs=[("a", 50)], num_scheduled={"a": 100}))


def test_wasted_demotions_are_counted():
    """Demoted then dropped before any promotion = wasted; promoted = not."""
    w = WorkerModel(device_capacity=200, host_capacity=200)
    _first_step(w)  # x (100) and y (50) on the device
    st = w.step(StepInput(step=1, manager_ops=[("demote", "x"), ("demote", "y")]))
    assert st.d2h_embeds == 150 and w.pending_demotions == {"x": 100, "y": 50}
    w.step(StepInput(step=2, manager_ops=[("promote", "x")]))
    w.step(StepInput(step=3, manager_ops=[("drop_host", "y")]))
    assert w.wasted_demotion_embeds == 50 and w.pending_demotions == {}
    # x was promoted: demoting it again and clearing the host wastes 100.
    w.step(StepInput(step=4, manager_ops=[("demote", "x"), ("clear_host", "")]))
    assert w.wasted_demotion_embeds == 150 and not w.host


def test_wasted_demotions_after_the_last_use_are_told_apart():
    """A wasted demotion of an item the run accesses again (a host that kept
    it would have hit) is not one after the item's last use; a wasted
    demotion of an item never accessed again is."""
    w = WorkerModel(device_capacity=200, host_capacity=200)
    _first_step(w)
    w.step(StepInput(step=1, manager_ops=[("demote", "x"), ("demote", "y")]))
    w.step(StepInput(step=2, manager_ops=[("drop_host", "x"), ("drop_host", "y")]))
    assert w.wasted_demotion_embeds == 150
    assert w.wasted_after_last_use() == 150  # nothing accessed since
    # y comes back (recomputed) after its host copy was dropped.
    w.step(
        StepInput(
            step=3,
            new_reqs=[("b", [Feature("y", 0, 50, 50)], 0, 60)],
            num_scheduled={"b": 60},
            encoder_inputs={"b": [0]},
        )
    )
    assert w.wasted_demotion_embeds == 150
    assert w.wasted_after_last_use() == 100
    # An access in the step that drops it counts as coming back too.
    w.step(StepInput(step=4, manager_ops=[("demote", "y")]))
    w.step(
        StepInput(
            step=5,
            manager_ops=[("drop_host", "y")],
            new_reqs=[("c", [Feature("y", 0, 50, 50)], 0, 60)],
            num_scheduled={"c": 60},
            encoder_inputs={"c": [0]},
        )
    )
    assert w.wasted_demotion_embeds == 200
    assert w.wasted_after_last_use() == 100


def test_copy_ops_keep_the_source_and_resolve_demotions():
    w = WorkerModel(device_capacity=200, host_capacity=200)
    _first_step(w)
    w.step(StepInput(step=1, manager_ops=[("demote_copy", "x")]))
    assert "x" in w.device and "x" in w.host
    w.step(StepInput(step=2, manager_ops=[("drop_device", "x"), ("promote_copy", "x")]))
    assert "x" in w.device and "x" in w.host and not w.pending_demotions
    w.step(StepInput(step=3, manager_ops=[("drop_host", "x")]))
    assert w.wasted_demotion_embeds == 0  # it paid off once


def test_a_demoted_entrys_tail_stays_on_the_device_until_moved():
    """("demote_split", h, tail) leaves `tail` embeddings in device memory;
    ("move_tail", h, blocks) moves as much of it as the blocks hold; a
    promotion takes both parts and copies only what was on the host."""
    w = WorkerModel(device_capacity=200, host_capacity=200, host_block_embeddings=32)
    _first_step(w)
    st = w.step(StepInput(step=1, manager_ops=[("demote_split", "x", 36)]))
    assert w.host["x"] == 64 and w.tails == {"x": 36} and st.d2h_embeds == 64
    st = w.step(StepInput(step=2, manager_ops=[("move_tail", "x", 1)]))
    assert w.host["x"] == 96 and w.tails == {"x": 4} and st.d2h_embeds == 32
    st = w.step(
        StepInput(
            step=3,
            manager_ops=[("promote", "x")],
            new_reqs=[("b", [X], 0, 150)],
            num_scheduled={"b": 150},
        )
    )
    assert st.h2d_embeds == 96 and w.device["x"] == 100 and w.tails == {}
    assert w.accesses[-1][2] == "host"
    with pytest.raises(WorkerModelError, match="moves the tail of 'y'"):
        w.step(StepInput(step=4, manager_ops=[("move_tail", "y", 1)]))


def test_tails_count_in_the_device_budget():
    z = Feature("z", offset=10, length=50, embeds=50)
    w = WorkerModel(device_capacity=150, host_capacity=200)
    _first_step(w)
    w.step(StepInput(step=1, manager_ops=[("demote_split", "x", 100)]))
    with pytest.raises(WorkerModelError, match="device tier holds 200"):
        w.step(
            StepInput(
                step=2,
                new_reqs=[("c", [z], 0, 100)],
                num_scheduled={"c": 100},
                encoder_inputs={"c": [0]},
            )
        )


def test_two_tier_metadata_becomes_worker_model_ops():
    """The replay reads the metadata's lists in the order the workers apply
    them; a demotion that keeps a tail carries its size, a tail move its
    number of blocks."""
    from types import SimpleNamespace

    from bench.replay import _metadata_ops

    meta = SimpleNamespace(
        clear_host=False,
        drop_host=["a"],
        drop_device=["f"],
        promote=["b"],
        demote=["c", "d"],
        device_tail={"d": 5},
        tail_blocks={"e": [7, 2]},
    )
    assert _metadata_ops(meta) == [
        ("drop_host", "a"),
        ("drop_device", "f"),
        ("promote", "b"),
        ("demote", "c"),
        ("demote_split", "d", 5),
        ("move_tail", "e", 2),
    ]
