# SPDX-License-Identifier: Apache-2.0
"""Deliberately broken encoder-cache managers (harness self-tests only).

Each one makes a mistake a real manager could make; the replay's worker
model must catch it. Imported in the child, against either tree.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.core.encoder_cache_manager import EncoderCacheManager


class ForgetsRefManager(EncoderCacheManager):
    """Reports a hit but does not take the request's reference.

    The entry stays evictable, so a later allocation in the same step can
    evict it while the request still needs it."""

    def check_and_update_cache(self, request: Any, input_id: int) -> bool:
        return request.mm_features[input_id].identifier in self.cached


class StaleHitManager(EncoderCacheManager):
    """Remembers every item it ever cached and reports hits for evicted ones."""

    def __init__(self, cache_size: int) -> None:
        super().__init__(cache_size)
        self.ever: set[str] = set()

    def allocate(self, request: Any, input_id: int) -> None:
        super().allocate(request, input_id)
        self.ever.add(request.mm_features[input_id].identifier)

    def check_and_update_cache(self, request: Any, input_id: int) -> bool:
        if super().check_and_update_cache(request, input_id):
            return True
        return request.mm_features[input_id].identifier in self.ever


def _two_tier() -> Any:
    from vllm.v1.core.two_tier_encoder_cache_manager import (  # type: ignore[import-not-found]
        TwoTierEncoderCacheManager,
    )

    return TwoTierEncoderCacheManager


try:  # only on trees with the two-tier manager
    _TT = _two_tier()

    class SkipsPromotionsManager(_TT):  # type: ignore[misc, valid-type]
        """Two-tier manager whose metadata forgets the step's promotions."""

        def get_manager_metadata(self) -> Any:
            meta = super().get_manager_metadata()
            meta.promote = []
            return meta

except ImportError:  # pragma: no cover - base has no two-tier manager
    pass
