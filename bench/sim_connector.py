# SPDX-License-Identifier: Apache-2.0
"""An EC connector with a simulated delivery latency (imported in the child).

Selected with ``ECTransferConfig(ec_connector="SimDelayECConnector",
ec_connector_module_path="bench.sim_connector", ec_role="ec_consumer",
ec_connector_extra_config={"latency_s": L, "defer": bool})``. Items whose ids the harness
registers in :attr:`SimDelayECConnector.remote` are "encoded elsewhere":
``has_cache_item`` says so, and a transfer of latency ``L`` on the simulated
clock starts the first time the scheduler asks for it (``ensure_cache_available``
where the tree has it, else at allocation). The worker side is the harness's
worker model: it reads :class:`SimECMetadata.loads` and, in blocking mode,
stalls the step until every load has arrived.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from vllm.distributed.ec_transfer.ec_connector.base import (
    ECConnectorBase,
    ECConnectorMetadata,
    ECConnectorRole,
)

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.request import Request


@dataclass
class SimECMetadata(ECConnectorMetadata):
    """Loads the worker performs this step: (mm_hash, delivery time)."""

    loads: list[tuple[str, float]] = field(default_factory=list)


class SimDelayECConnector(ECConnectorBase):
    """Remote encoder outputs that arrive ``latency_s`` after being requested."""

    def __init__(self, vllm_config: "VllmConfig", role: ECConnectorRole) -> None:
        super().__init__(vllm_config, role)
        extra: dict[str, Any] = vllm_config.ec_transfer_config.ec_connector_extra_config
        self.latency_s = float(extra.get("latency_s", 0.0))
        #: False: never defer (what a connector without the method does)
        self.defer = bool(extra.get("defer", True))
        self.remote: set[str] = set(extra.get("remote_ids", ()))
        #: The harness replaces this with the simulated clock.
        self.clock: Callable[[], float] = lambda: 0.0
        #: mm_hash -> simulated delivery time, set when the transfer starts
        self.ready: dict[str, float] = {}
        self._loads: list[str] = []
        self.polls = 0
        self.not_ready = 0

    # ------------------------------------------------------- scheduler side
    def _start(self, mm_hash: str) -> float:
        t = self.ready.get(mm_hash)
        if t is None:  # idempotent: one transfer per item
            t = self.ready[mm_hash] = self.clock() + self.latency_s
        return t

    def ensure_cache_available(
        self, request: "Request", num_computed_tokens: int
    ) -> bool:
        """Start missing transfers; True once every needed remote item arrived.

        Only items ending after the computed frontier count
        (``offset + length > num_computed_tokens``)."""
        self.polls += 1
        if not self.defer:
            return True
        now = self.clock()
        ok = True
        helper = getattr(ECConnectorBase, "get_pending_mm_features", None)
        if helper is not None:
            pending = helper(request, num_computed_tokens)
        else:
            pending = [
                f
                for f in request.mm_features or ()
                if f.mm_position.offset + f.mm_position.length > num_computed_tokens
            ]
        for f in pending:
            if f.identifier not in self.remote:
                continue
            if self._start(f.identifier) > now:
                ok = False
        if not ok:
            self.not_ready += 1
        return ok

    def has_cache_item(self, identifier: str) -> bool:
        return identifier in self.remote

    def update_state_after_alloc(self, request: "Request", index: int) -> None:
        h = request.mm_features[index].identifier
        if h in self.remote:
            self._start(h)
            self._loads.append(h)

    def build_connector_meta(
        self, scheduler_output: "SchedulerOutput"
    ) -> SimECMetadata:
        meta = SimECMetadata(loads=[(h, self.ready[h]) for h in self._loads])
        self._loads = []
        return meta

    # ---------------------------------------------------------- worker side
    def start_load_caches(self, encoder_cache: dict, **kwargs: Any) -> None:
        """Unused: the harness's worker model performs the loads."""

    def save_caches(self, encoder_cache: dict, mm_hash: str, **kwargs: Any) -> None:
        """Unused: nothing is produced locally for other instances."""
