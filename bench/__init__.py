# SPDX-License-Identifier: Apache-2.0
"""Trace-replay harness for vLLM's encoder cache (see bench/README.md).

The parent side (workloads, traces, bounds, peers, reports) is pure Python
plus numpy/networkx/highspy/libcachesim/matplotlib from the venv and never
imports vLLM. Everything that imports vLLM runs in a child process per tree
(``bench.child``), with the environment from ``tools/series.py``'s
``tree_env``. Stable entry points for other tools: ``bench.workloads.FAMILIES``
and ``bench.workloads.families(scale)`` (generators), ``bench.trace.Trace``,
``bench.runner.default_spec`` and ``bench.runner.TreeProcess`` (replays).
"""
