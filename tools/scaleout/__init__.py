# SPDX-License-Identifier: Apache-2.0
"""Scale-out checks of the series on vLLM's own distributed engine, on CPU
(issue 13): tensor parallelism through the multiproc executor and
encoder-disaggregated serving (E -> PD) with real OpenAI servers.

Modules:

* :mod:`scaleout.probe` -- a vLLM *worker extension* (``worker_extension_cls``)
  loaded into every worker process. It records, per engine step, a digest of
  the ``ec_manager_metadata`` the rank received and of the tier contents it
  ends the step with, the multimodal items the rank's encoder ran on, and
  the host memory of the encoder cache's host tier (the bytes allocated to
  the files backing it, and private resident pages). Read through
  ``collective_rpc`` (``LLM.collective_rpc`` or the server's
  ``/collective_rpc`` in dev mode).
* :mod:`scaleout.tp` -- TP=1 / TP=2 runs of ``LLM`` with the tiny Qwen2-VL
  model, default manager and two-tier manager.
* :mod:`scaleout.epd` -- one encoder-only producer, one prefill+decode
  consumer and the in-tree example proxy on loopback; happy path, slow
  storage path (deferral), producer kill.
* :mod:`scaleout.procs` -- process groups, free ports, bounded waits.
* :mod:`scaleout.cli` -- ``python tools/scaleout [--tree T] [--only tp|epd]
  [--reduced]``; writes ``build/scaleout/summary.json`` and ``report.json``.

``tools/`` must be importable in every vLLM process (``engine_probe.child_env``
puts it on ``PYTHONPATH``) because the worker extension is loaded by name.
"""
