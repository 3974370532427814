# SPDX-License-Identifier: Apache-2.0
"""pytest plugin: shims for CPU-platform methods that upstream tests call.

Loaded with ``-p cpu_shims`` by ``tools/series.py pytest``. Each shim is
documented in README.md ("Test shims"). Nothing here changes vLLM's code.
"""
