# SPDX-License-Identifier: Apache-2.0
"""Trace-replay harness for vLLM's encoder cache (see bench/README.md).

The parent side (workloads, traces, bounds, reports) is pure Python plus
networkx/matplotlib from the venv and never imports vLLM. Everything that
imports vLLM runs in a child process per tree (``bench.child``), with the
environment from ``tools/series.py``'s ``tree_env``.
"""
