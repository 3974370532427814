# SPDX-License-Identifier: Apache-2.0
"""Processes for the scale-out harness: every server runs in its own process
group (``start_new_session``), is waited for with a deadline, and is stopped
by signalling its group (SIGTERM, then SIGKILL), so no vLLM engine or worker
process outlives the harness. Loopback only."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
SHM_DIR = "/dev/shm/"


def group_pids(pgid: int) -> list[int]:
    """Pids of the live processes of process group ``pgid``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the command: state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry))
    return pids


def group_shm_files(pgid: int) -> set[str]:
    """The /dev/shm files mapped or open in the processes of ``pgid``."""
    found: set[str] = set()
    for pid in group_pids(pgid):
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    parts = line.split(maxsplit=5)
                    path = parts[5].strip() if len(parts) > 5 else ""
                    if path.startswith(SHM_DIR):
                        found.add(path.removesuffix(" (deleted)"))
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith(SHM_DIR):
                        found.add(target.removesuffix(" (deleted)"))
    return found


def wait_group_gone(pgid: int, timeout: float) -> bool:
    """Wait until no live process of ``pgid`` is left."""
    deadline = time.monotonic() + timeout
    while group_pids(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def remove_leaked_shm(paths: set[str]) -> list[str]:
    """Unlink the ``paths`` (/dev/shm files of a process group that is gone)
    that still exist; returns those removed."""
    removed = []
    for path in sorted(paths):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed.append(path)
    return removed


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def http(
    method: str,
    url: str,
    body: Any = None,
    timeout: float = 60.0,
) -> tuple[int, Any]:
    """One HTTP request; returns (status, parsed JSON or text). Connection
    errors return status 0 and the error text."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read().decode()
            status = resp.status
    except urllib.error.HTTPError as e:
        raw = e.read().decode(errors="replace")
        status = e.code
    except (urllib.error.URLError, OSError) as e:
        return 0, f"{type(e).__name__}: {e}"
    try:
        return status, json.loads(raw)
    except json.JSONDecodeError:
        return status, raw


class Server:
    """A process group started from ``argv`` with its output in ``log``."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        env: dict[str, str],
        log: Path,
        port: int,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.port = port
        self.url = f"http://{HOST}:{port}"
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(log, "wb")  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(
            list(argv),
            env=env,
            cwd=str(cwd) if cwd else None,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.started = time.monotonic()
        self.ready_s: float | None = None
        # /dev/shm files the group used; removed if still there once it is
        # gone (a SIGKILLed vLLM process cannot unlink its segments).
        self.shm_files: set[str] = set()
        self.leaked_shm: list[str] = []
        self._watching = threading.Event()
        self._watcher = threading.Thread(target=self._watch_shm, daemon=True)
        self._watcher.start()

    def _watch_shm(self) -> None:
        """Note the group's /dev/shm files every second while it runs."""
        while not self._watching.wait(1.0):
            self.note_shm()

    @property
    def pgid(self) -> int:
        return self.proc.pid  # a session leader's pgid is its pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, deadline: float, path: str = "/health") -> None:
        """Wait until ``GET path`` answers 200; raise with the log tail if
        the process exits or the (monotonic) deadline passes."""
        while True:
            if not self.alive():
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode} during "
                    f"startup:\n{self.tail()}"
                )
            status, _ = http("GET", self.url + path, timeout=5)
            if status == 200:
                self.ready_s = time.monotonic() - self.started
                self.note_shm()
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name} not ready on {self.url} after "
                    f"{time.monotonic() - self.started:.0f}s:\n{self.tail()}"
                )
            time.sleep(0.5)

    def tail(self, n: int = 6000) -> str:
        self._log_file.flush()
        with contextlib.suppress(OSError):
            return self.log.read_bytes()[-n:].decode(errors="replace")
        return ""

    def note_shm(self) -> None:
        """Remember the /dev/shm files the group uses now."""
        self.shm_files |= group_shm_files(self.pgid)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (the server and its children)."""
        if sig == signal.SIGKILL:
            self.note_shm()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def stop(self, grace: float = 20.0) -> int | None:
        """SIGTERM the group, wait up to ``grace`` seconds, then SIGKILL it.
        Returns the leader's exit code."""
        self.note_shm()
        if self.alive():
            self.kill(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace)
        # Children (engine core, workers) may outlive the leader: let them
        # finish their own shutdown, then kill what is left of the group.
        wait_group_gone(self.pgid, 5.0)
        self.kill(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        wait_group_gone(self.pgid, 10.0)
        self._watching.set()
        self._watcher.join(timeout=10)
        self.leaked_shm += remove_leaked_shm(self.shm_files)
        self._log_file.close()
        return self.proc.returncode

    def group_alive(self) -> bool:
        """Whether any live (non-zombie) process of the group is left."""
        return bool(group_pids(self.pgid))
