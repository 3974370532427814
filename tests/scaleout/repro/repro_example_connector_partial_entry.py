# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Reproduction for the series (patch "[EC Connector] Add optional asynchronous
prefetch to the example connector"), found by `make scaleout` (issue 13):
killing the producer while it writes an encoder cache takes the consumer
down.

ECExampleConnector.save_caches writes `<store>/<mm_hash>/encoder_cache.
safetensors` in place (safetensors.torch.save_file on the final name), so
the entry is visible (`has_cache_item` is True) before it is complete, and
stays incomplete if the producer dies meanwhile. The consumer then
prefetches the incomplete bytes without checking them, and the worker's
`start_load_caches` raises SafetensorError inside `execute_model`: the
EngineCore dies (EngineDeadError) and every request on the consumer fails,
not only the one that needs the item.

Both tests FAIL on build/tree (series v7) and should pass once the producer
writes atomically (temporary name + os.replace) and the consumer turns an
unreadable entry into a failure of the requests that need it (for example
through take_unavailable_requests) or into local computation, never into a
worker exception. Not collected by the repository's test run (file name);
drop it into tests/v1/ec_connector/unit/ of the series. Run with:

    cd /work/main && .venv/bin/python tools/series.py pytest --tree tree -q \
        /work/main/tests/scaleout/repro/repro_example_connector_partial_entry.py
"""

import os
import time

import pytest
import safetensors.torch
import torch

from tests.v1.core.utils import create_requests, create_scheduler
from vllm.config import ECTransferConfig, VllmConfig
from vllm.distributed.ec_transfer.ec_connector.base import ECConnectorRole
from vllm.distributed.ec_transfer.ec_connector.example_connector import (
    ECExampleConnector,
)
from vllm.multimodal.inputs import PlaceholderRange
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus

MM_MODEL = "llava-hf/llava-1.5-7b-hf"
BLOCK_SIZE = 16
IMAGE = "img_partial"
NUM_IMAGE_TOKENS = 100


def _config(ec_role: str, store: str, **extra) -> ECTransferConfig:
    return ECTransferConfig(
        ec_connector="ECExampleConnector",
        ec_role=ec_role,
        ec_connector_extra_config={"shared_storage_path": store, **extra},
    )


def _request(req_id: str, mm: bool) -> Request:
    kwargs = {}
    if mm:
        kwargs = dict(
            mm_hashes_list=[[IMAGE]],
            mm_positions=[[PlaceholderRange(offset=0, length=NUM_IMAGE_TOKENS)]],
        )
    return create_requests(
        num_requests=1,
        num_tokens=200 if mm else 50,
        req_ids=[req_id],
        block_size=BLOCK_SIZE,
        **kwargs,
    )[0]


def _model_output(scheduler_output: SchedulerOutput) -> ModelRunnerOutput:
    req_ids = list(scheduler_output.num_scheduled_tokens)
    return ModelRunnerOutput(
        req_ids=req_ids,
        req_id_to_index={req_id: i for i, req_id in enumerate(req_ids)},
        sampled_token_ids=[[1000] for _ in req_ids],
        logprobs=None,
        prompt_logprobs_dict={},
        pooler_output=[],
    )


def test_interrupted_save_leaves_no_visible_entry(tmp_path, monkeypatch):
    store = str(tmp_path / "store")

    def killed_while_writing(tensors, filename, *args, **kwargs):
        with open(filename, "wb") as f:
            f.write(b"\x08\x00\x00\x00")  # the first bytes of a header
        raise OSError("producer killed while writing")

    monkeypatch.setattr(safetensors.torch, "save_file", killed_while_writing)
    producer = ECExampleConnector(
        VllmConfig(ec_transfer_config=_config("ec_producer", store)),
        ECConnectorRole.WORKER,
    )
    with pytest.raises(OSError):
        producer.save_caches({IMAGE: torch.randn(NUM_IMAGE_TOKENS, 8)}, IMAGE)
    consumer = ECExampleConnector(
        VllmConfig(ec_transfer_config=_config("ec_consumer", store)),
        ECConnectorRole.SCHEDULER,
    )
    # Fails today: the half-written file is a cache hit for the consumer.
    assert not consumer.has_cache_item(IMAGE)


def test_incomplete_store_entry_fails_only_its_request(tmp_path):
    store, prefetch_dir = str(tmp_path / "store"), str(tmp_path / "prefetch")
    producer = ECExampleConnector(
        VllmConfig(ec_transfer_config=_config("ec_producer", store)),
        ECConnectorRole.WORKER,
    )
    producer.save_caches({IMAGE: torch.randn(NUM_IMAGE_TOKENS, 8)}, IMAGE)
    path = os.path.join(store, IMAGE, "encoder_cache.safetensors")
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:  # what a producer killed mid-write leaves
        f.write(data[: len(data) // 2])

    scheduler = create_scheduler(
        model=MM_MODEL,
        block_size=BLOCK_SIZE,
        ec_transfer_config=_config(
            "ec_consumer", store, async_prefetch=True, prefetch_dir=prefetch_dir
        ),
    )
    worker = ECExampleConnector(scheduler.vllm_config, ECConnectorRole.WORKER)
    mm, text = _request("mm", mm=True), _request("text", mm=False)
    scheduler.add_request(mm)
    scheduler.add_request(text)
    encoded_locally = False
    for _ in range(200):
        output = scheduler.schedule()
        encoded_locally |= "mm" in output.scheduled_encoder_inputs
        worker.bind_connector_metadata(output.ec_connector_metadata)
        # What the worker does in execute_model. Fails today with
        # SafetensorError ("incomplete metadata"), which kills the engine.
        worker.start_load_caches({})
        worker.clear_connector_metadata()
        scheduler.update_from_output(output, _model_output(output))
        if not scheduler.has_requests():
            break
        time.sleep(0.01)  # let the prefetch thread run
    assert not scheduler.has_requests()
    assert text.status == RequestStatus.FINISHED_LENGTH_CAPPED
    # The request that needs the broken item fails, or computes it itself.
    assert mm.status == RequestStatus.FINISHED_ERROR or encoded_locally
