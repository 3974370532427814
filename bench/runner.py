# SPDX-License-Identifier: Apache-2.0
"""Parent side: one long-lived child process per tree (see bench.child)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import series  # type: ignore[import-not-found]  # noqa: E402

sys.path.pop(0)
BUILD = ROOT / "build"
# The selected base's trees and venv (SERIES_BASE; make bench BASE=0.32.0).
BASE_DIR, TREE_DIR = series.BASE_DIR, series.TREE_DIR
BASE_VERSION: str = series.BASE_VERSION
BENCH_DIR = BUILD / f"bench{series.SUFFIX}"
VENV_PY = series.VENV / "bin" / "python"


def tree_env(tree: Path) -> dict[str, str]:
    """``tools/series.py``'s tree_env, plus the repo root for ``bench``."""
    env = series.tree_env(tree)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(ROOT)])
    env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    return env


class ChildError(RuntimeError):
    pass


class TreeProcess:
    """A child that imported vLLM from ``tree`` and replays runs on request."""

    def __init__(self, name: str, tree: Path, log_dir: Path | None = None) -> None:
        self.name = name
        self.tree = tree
        log_dir = log_dir or (BENCH_DIR / "logs")
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"child-{name}.log"
        self._log = open(self.log_path, "w")
        py = str(VENV_PY if VENV_PY.exists() else sys.executable)
        env = tree_env(tree)
        if tree.resolve() not in (BASE_DIR.resolve(), TREE_DIR.resolve()):
            env["PYTHONDONTWRITEBYTECODE"] = "1"  # leave others' checkouts untouched
        self.proc = subprocess.Popen(
            [py, "-m", "bench.child"],
            cwd=str(ROOT),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            bufsize=1,
        )
        self._next = 1
        self.features: dict[str, Any] | None = None
        self.started = time.perf_counter()

    def _read_reply(self) -> dict[str, Any]:
        from bench.child import MARK

        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise ChildError(
                    f"child {self.name} exited (rc={self.proc.poll()}); see {self.log_path}"
                )
            if line.startswith(MARK):
                return json.loads(line[len(MARK) :])
            self._log.write(line)

    def wait_ready(self) -> dict[str, Any]:
        if self.features is None:
            r = self._read_reply()
            if r.get("status") != "ready":
                raise ChildError(f"child {self.name}: unexpected {r}")
            self.features = r["features"]
            self.ready_s = time.perf_counter() - self.started
        return self.features

    def request(
        self, cmd: str, spec: dict[str, Any] | None = None, key: str | None = None
    ) -> dict[str, Any]:
        self.wait_ready()
        mid = self._next
        self._next += 1
        assert self.proc.stdin is not None
        msg = {"id": mid, "cmd": cmd, "spec": spec, "key": key}
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        r = self._read_reply()
        if r.get("id") != mid:
            raise ChildError(
                f"child {self.name}: reply {r.get('id')} for request {mid}"
            )
        return r

    def run(self, spec: dict[str, Any]) -> dict[str, Any]:
        return self.request("run", spec)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.request("exit")
            except (ChildError, BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._log.close()

    def __enter__(self) -> "TreeProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def default_spec(trace: str | Path, **over: Any) -> dict[str, Any]:
    from bench.replay import DEFAULT_SCHED

    """A run spec with the documented defaults (see bench/README.md)."""
    spec: dict[str, Any] = {
        "trace": str(trace),
        "model": "Qwen/Qwen2-VL-2B-Instruct",
        "manager": {"kind": "default"},
        "device_embeds": 8192,
        "host_embeds": 0,
        "sched": dict(DEFAULT_SCHED),
        "connector": None,
        "cost": {},
        "cost_model_path": None,
        "strict_budget": True,
        "record_accesses": True,
        "record_wall": False,
    }
    for k, v in over.items():
        if k == "sched":
            spec["sched"].update(v)
        else:
            spec[k] = v
    return spec


def cost_model_path(tree: Path) -> str | None:
    """The tree's stdlib-only ec_cost_model.py, if it has one."""
    p = tree / "vllm" / "v1" / "core" / "ec_cost_model.py"
    return str(p) if p.is_file() else None
