# SPDX-License-Identifier: Apache-2.0
"""pytest plugin: write each test's outcome, keyed by node id, to a JSON file.

Loaded with ``-p outcomes`` by ``tools/series.py`` (parallel runs) and
``tools/regression.py``. The file is named by the ``PYTEST_OUTCOMES``
environment variable; without it the plugin does nothing. It holds::

    {"collected": [node ids, in collection order],
     "outcomes": {node id: "passed" | "failed" | "skipped"}}

A test is ``failed`` when any phase (setup, call, teardown) failed, ``skipped``
when it was skipped (or xfailed), otherwise ``passed``. Node ids are the ones
pytest prints, so they can be handed back to pytest to rerun the same tests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

_ENV = "PYTEST_OUTCOMES"
_collected: list[str] = []
_outcomes: dict[str, str] = {}


def pytest_collection_finish(session: pytest.Session) -> None:
    _collected[:] = [item.nodeid for item in session.items]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    prev = _outcomes.get(report.nodeid)
    if report.failed:
        # An xfail-strict pass or an error in any phase fails the test.
        _outcomes[report.nodeid] = "failed"
    elif report.skipped:
        if prev != "failed":
            _outcomes[report.nodeid] = "skipped"
    elif report.when == "call" and prev is None:
        _outcomes[report.nodeid] = "passed"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get(_ENV)
    if not path:
        return
    Path(path).write_text(json.dumps({"collected": _collected, "outcomes": _outcomes}))
