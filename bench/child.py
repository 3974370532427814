# SPDX-License-Identifier: Apache-2.0
"""Child process: imports one tree's vLLM once and serves replay commands.

Started by :class:`bench.runner.TreeProcess` with ``tree_env(tree)`` plus the
repository root on PYTHONPATH. Protocol: one JSON command per stdin line
(``{"id": n, "cmd": "probe"|"run"|"start"|"resume"|"exit", "spec": {...},
"key": ...}``; ``start``/``resume`` advance a run by ``spec["chunk_steps"]``
steps and reply ``{"status": "running"}`` until it ends); one reply per
command on stdout, on a line starting with :data:`MARK` (vLLM's own log
lines may share stdout). A run that hits a worker-model inconsistency
replies ``{"status": "error", "kind": "WorkerModelError", ...}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

MARK = "@@BENCH@@ "


def _reply(obj: dict) -> None:
    sys.stdout.write(MARK + json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> int:
    from bench import replay
    from bench.worker_model import WorkerModelError

    feats = replay.probe()
    warm_s = None
    if os.environ.get("BENCH_WARM", "1") == "1":
        # Build the model config and processor now, while the other tree's
        # child does the same, instead of inside the first timed run.
        warm_s = replay.warm()
    _reply(
        {
            "id": 0,
            "status": "ready",
            "features": feats,
            "pid": os.getpid(),
            "warm_s": warm_s,
        }
    )
    running: dict[str, object] = {}  # key -> paused run_iter generator
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        msg = json.loads(line)
        mid = msg.get("id")
        cmd = msg.get("cmd")
        if cmd == "exit":
            _reply({"id": mid, "status": "bye"})
            return 0
        cpu0 = time.process_time()
        try:
            if cmd == "probe":
                res = {"status": "ok", "features": replay.probe()}
            elif cmd in ("start", "resume"):
                key = msg["key"]
                if cmd == "start":
                    running[key] = replay.run_iter(msg["spec"], feats)
                try:
                    next(running[key])  # type: ignore[call-overload]
                    res = {"status": "running"}
                except StopIteration as stop:
                    res = stop.value
                    del running[key]
                except BaseException:
                    running.pop(key, None)
                    raise
            elif cmd == "run":
                pin = msg["spec"].get("pin_cpu")
                old = os.sched_getaffinity(0) if pin is not None else None
                try:
                    if pin is not None:
                        os.sched_setaffinity(0, {int(pin)})
                    res = replay.run(msg["spec"], feats)
                finally:
                    if old is not None:
                        os.sched_setaffinity(0, old)
            else:
                res = {"status": "error", "kind": "BadCommand", "message": str(cmd)}
        except replay.NotAvailable as e:
            res = {"status": "n/a", "reason": str(e)}
        except WorkerModelError as e:
            res = {"status": "error", "kind": "WorkerModelError", "message": str(e)}
        except Exception as e:  # noqa: BLE001 - reported to the parent verbatim
            res = {
                "status": "error",
                "kind": type(e).__name__,
                "message": str(e),
                "traceback": traceback.format_exc(),
            }
        res["id"] = mid
        res["child_cpu_s"] = time.process_time() - cpu0
        _reply(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
