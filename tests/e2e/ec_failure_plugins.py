# SPDX-License-Identifier: Apache-2.0
"""Plugins loaded by the engine in ``test_ec_failure_http.py``.

Imported by name from ``--ec-transfer-config`` and ``--ec-manager-config``
in the server's processes (this directory is on their ``PYTHONPATH``).
"""

from __future__ import annotations

from typing import Any

from vllm.distributed.ec_transfer.ec_connector.example_connector import (
    ECExampleConnector,
)
from vllm.v1.core.encoder_cache_manager import EncoderCacheManager

# The device encoder cache of SmallEncoderCacheManager, in embeddings: a
# 56x56 image (4 embeddings) fits, a 224x224 one (64) never does.
SMALL_CACHE_SIZE = 16


class FailingECConnector(ECExampleConnector):
    """The example connector (a consumer with an empty store), except for
    requests that ask, through ``vllm_xargs``, to be failed:

    * ``{"ec_test": "unavailable"}``: deferred once, then reported by
      ``take_unavailable_requests`` (the connector lost the item);
    * ``{"ec_test": "timeout"}``: deferred until ``ec_max_deferral_s``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._unavailable: set[str] = set()

    @staticmethod
    def _mode(request: Any) -> str | None:
        params = request.sampling_params
        extra_args = params.extra_args if params is not None else None
        return (extra_args or {}).get("ec_test")

    def ensure_cache_available(self, request: Any, num_computed_tokens: int) -> bool:
        mode = self._mode(request)
        if mode == "unavailable":
            self._unavailable.add(request.request_id)
            return False
        return mode != "timeout"

    def is_cache_item_in_transit(self, identifier: str) -> bool:
        # Asked only about requests deferred above (the example connector's
        # own answer is about its prefetch, unused here).
        return True

    def take_unavailable_requests(self) -> set[str]:
        unavailable, self._unavailable = self._unavailable, set()
        return unavailable


class SmallEncoderCacheManager(EncoderCacheManager):
    """The default manager with a device cache smaller than the largest
    image the model accepts."""

    @classmethod
    def create_manager(
        cls, *, cache_size: int, vllm_config: Any
    ) -> EncoderCacheManager:
        return cls(cache_size=SMALL_CACHE_SIZE)
