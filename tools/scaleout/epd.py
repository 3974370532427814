# SPDX-License-Identifier: Apache-2.0
"""Encoder-disaggregated serving (E -> PD) on loopback, mirroring the in-tree
1E1PD example (``examples/disaggregated/disaggregated_encoder/
disagg_1e1pd_example.sh``) with the tiny Qwen2-VL model on CPU.

Processes, each its own process group, all on 127.0.0.1 with free ports:

* ``ref``: a plain single instance (no EC connector, default manager): the
  reference outputs (a reduced run may use ``LLM.generate`` outputs instead,
  see :func:`run_epd`).
* ``encoder``: the producer, ``ECExampleConnector`` as ``ec_producer``
  writing to ``<run>/ec_store`` (the example's flags: eager, no prefix
  caching, a large batch budget).
* ``pd``: the prefill+decode consumer, ``ECExampleConnector`` as
  ``ec_consumer`` with ``async_prefetch`` (copies into ``<run>/prefetch``),
  a bounded deferral (``ec_max_deferral_s``) and the two-tier manager with a
  64-embedding device tier.
* ``proxy``: the example's own ``disagg_epd_proxy.py`` from the tree, E + PD
  (``--prefill-servers-urls disable``).

The encoder and PD servers load :mod:`scaleout.probe` as their worker
extension (``--worker-extension-cls``) and expose ``/collective_rpc``
(``VLLM_SERVER_DEV_MODE=1``), through which the harness reads which items
each worker's encoder ran on.

Phases (``run_epd``):

A. happy path: chats with one image each through the proxy, twice;
   outputs token-identical to ``ref``; the consumer's encoder ran on no item
   the producer wrote to the store.
B. slow storage (full run): the producer encodes new images; their store
   files are then replaced by FIFOs whose bytes a feeder thread delivers
   ``SLOW_STORE_DELAY_S`` after each open, i.e. a storage path that takes
   that long per read. The chats go to the consumer (the proxy's decode
   leg); ``vllm:num_requests_ec_deferred`` on its ``/metrics`` is sampled
   meanwhile. No request may fail; outputs equal ``ref``'s.
C. producer kill (full run): the producer's process group is SIGKILLed
   while chats for produced items run on the consumer. Then: a chat whose
   image the producer never encoded, through the proxy, must fail (502
   naming the encoder); a text-only chat through the proxy, chats for
   produced items sent to the consumer and the in-flight chats must
   succeed with ``ref``'s tokens; a chat whose store entry never receives
   its bytes (a FIFO without a writer: a transfer whose source died) must
   fail on the consumer, after ``ec_max_deferral_s``, with an error that
   names the encoder cache (not a generic 500); the consumer stays healthy
   and serves a request afterwards. Last, a chat whose store file is
   incomplete (what a non-atomic writer killed mid-write leaves) must be
   computed locally (``ref``'s tokens) or fail alone with a clear error, and
   the consumer must still serve afterwards.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import shutil
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parents[1]
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

import engine_probe  # noqa: E402
from series import tree_dir  # noqa: E402

from scaleout.procs import (  # noqa: E402
    HOST,
    Server,
    free_port,
    group_pids,
    http,
    wait_group_gone,
)
from scaleout.tp import EXTENSION, TWO_TIER  # noqa: E402

MODEL_NAME = "tiny-qwen2-vl"
MAX_TOKENS = 8
LONG_MAX_TOKENS = 48
SLOW_STORE_DELAY_S = 2.0
MAX_DEFERRAL_S = 8.0
STARTUP_TIMEOUT_S = 420.0
REQUEST_TIMEOUT_S = 120.0
DEFERRED_RE = re.compile(
    r"^vllm:num_requests_ec_deferred\{[^}]*\}\s+([0-9.eE+-]+)", re.MULTILINE
)
PROXY_REL = "examples/disaggregated/disaggregated_encoder/disagg_epd_proxy.py"
STORE_FILE = "encoder_cache.safetensors"


# ---------------------------------------------------------------- requests
def data_url(image: Any) -> str:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def chat(image: Any | None, question: str, max_tokens: int = MAX_TOKENS) -> dict:
    """An OpenAI chat request: one image (or none) and a question; greedy,
    ``max_tokens`` tokens, EOS ignored, token ids returned."""
    content: list[dict[str, Any]] = []
    if image is not None:
        content.append({"type": "image_url", "image_url": {"url": data_url(image)}})
    content.append({"type": "text", "text": question})
    return {
        "model": MODEL_NAME,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": 0,
        "ignore_eos": True,
        "return_token_ids": True,
    }


def encoder_leg(body: dict) -> dict:
    """The request the example proxy sends to an encoder instance for the
    (single) image of ``body`` (``fanout_encoder_primer``)."""
    item = next(
        c for c in body["messages"][0]["content"] if c.get("type") == "image_url"
    )
    return {
        "model": body["model"],
        "messages": [{"role": "user", "content": [item]}],
        "max_tokens": 1,
        "stream": False,
    }


def post_chat(url: str, body: dict) -> dict[str, Any]:
    """POST a chat; returns status, token ids (on success) or the error."""
    t0 = time.monotonic()
    status, resp = http("POST", url + "/v1/chat/completions", body, REQUEST_TIMEOUT_S)
    out: dict[str, Any] = {"status": status, "s": round(time.monotonic() - t0, 2)}
    if status == 200 and isinstance(resp, dict):
        choice = resp["choices"][0]
        out["token_ids"] = choice.get("token_ids")
        out["prompt_token_ids"] = resp.get("prompt_token_ids")
        out["finish_reason"] = choice.get("finish_reason")
    else:
        out["error"] = resp if isinstance(resp, dict | str) else repr(resp)
    return out


def run_all(url_bodies: list[tuple[str, dict]]) -> list[dict[str, Any]]:
    """Send requests concurrently; results in order."""
    with ThreadPoolExecutor(max_workers=max(1, len(url_bodies))) as pool:
        return list(pool.map(lambda ub: post_chat(*ub), url_bodies))


def error_text(res: dict[str, Any]) -> str:
    err = res.get("error")
    return json.dumps(err) if not isinstance(err, str) else err


# ------------------------------------------------------------- the store
def store_items(store: Path) -> set[str]:
    """Identifiers (mm_hash) with an encoder cache file in the store."""
    if not store.is_dir():
        return set()
    return {p.name for p in store.iterdir() if (p / STORE_FILE).exists()}


class SlowEntry:
    """Turns one store file into a FIFO. With ``delay`` set, a feeder thread
    delivers the original bytes ``delay`` seconds after the first open for
    reading, then puts the regular file back (a storage path whose first
    read of the entry is slow); with ``delay=None`` nothing is ever written
    (a transfer whose source died). :meth:`close` unblocks any reader and
    restores the regular file."""

    def __init__(self, path: Path, delay: float | None) -> None:
        self.path = path
        self.data = path.read_bytes()
        self.delay = delay
        self.served = 0
        self._stop = threading.Event()
        self._restored = False
        self._lock = threading.Lock()
        path.unlink()
        os.mkfifo(path)
        self._thread: threading.Thread | None = None
        if delay is not None:
            self._thread = threading.Thread(target=self._serve, daemon=True)
            self._thread.start()

    def _serve(self) -> None:
        fd = os.open(self.path, os.O_WRONLY)  # waits for a reader
        try:
            if self._stop.is_set():
                return
            time.sleep(self.delay or 0.0)
            view = memoryview(self.data)
            while view:
                view = view[os.write(fd, view) :]
            self.served += 1
        except BrokenPipeError:
            pass
        finally:
            # Later opens find the regular file; the reader sees end-of-file
            # once this (only) writer closes.
            self._restore()
            os.close(fd)

    def _restore(self) -> None:
        with self._lock:
            if self._restored:
                return
            tmp = self.path.with_suffix(".restore")
            tmp.write_bytes(self.data)
            os.replace(tmp, self.path)
            self._restored = True

    def close(self) -> None:
        self._stop.set()
        # Wake a feeder waiting for a reader, and a reader waiting for a
        # writer (it then reads end-of-file).
        for flags in (os.O_RDONLY | os.O_NONBLOCK, os.O_WRONLY | os.O_NONBLOCK):
            with contextlib.suppress(OSError):
                os.close(os.open(self.path, flags))
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._restore()


class MetricsSampler:
    """Samples ``vllm:num_requests_ec_deferred`` from a server's /metrics
    every ``interval`` seconds in a thread; keeps the maximum."""

    def __init__(self, url: str, interval: float = 0.05) -> None:
        self.url = url
        self.interval = interval
        self.max_deferred = 0.0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> MetricsSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            status, text = http("GET", self.url + "/metrics", timeout=5)
            if status == 200 and isinstance(text, str):
                self.samples += 1
                for value in DEFERRED_RE.findall(text):
                    self.max_deferred = max(self.max_deferred, float(value))
            self._stop.wait(self.interval)


# --------------------------------------------------------------- servers
def serve_argv(model: Path, port: int, *extra: str) -> list[str]:
    """``vllm serve`` of the tiny model on 127.0.0.1:``port``."""
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        str(model),
        "--served-model-name",
        MODEL_NAME,
        "--host",
        HOST,
        "--port",
        str(port),
        "--enforce-eager",
        "--max-model-len",
        "1024",
        "--max-num-seqs",
        "8",
        "--limit-mm-per-prompt",
        json.dumps({"image": 1, "video": 0}),
        "--kv-cache-memory-bytes",
        str(64 << 20),
        "--seed",
        "0",
        "--enable-request-id-headers",
        *extra,
    ]


def server_specs(model: Path, run: Path, ports: dict[str, int]) -> dict[str, list[str]]:
    """argv of the ref, encoder and pd servers."""
    store, prefetch = run / "ec_store", run / "prefetch"
    producer = {
        "ec_connector": "ECExampleConnector",
        "ec_role": "ec_producer",
        "ec_connector_extra_config": {"shared_storage_path": str(store)},
    }
    consumer = {
        "ec_connector": "ECExampleConnector",
        "ec_role": "ec_consumer",
        "ec_max_deferral_s": MAX_DEFERRAL_S,
        "ec_connector_extra_config": {
            "shared_storage_path": str(store),
            "async_prefetch": True,
            "prefetch_dir": str(prefetch),
        },
    }
    two_tier = {
        "encoder_cache_manager_cls": TWO_TIER,
        "manager_config": {"host_cache_gib": 0.01},
    }
    # ref and pd schedule alike (a 64-token budget, which is also the
    # device tier of pd's two-tier cache), so only the EC path differs.
    same = ["--max-num-batched-tokens", "64"]
    return {
        "ref": serve_argv(model, ports["ref"], *same),
        "encoder": serve_argv(
            model,
            ports["encoder"],
            "--no-enable-prefix-caching",
            "--max-num-batched-tokens",
            "4096",
            "--ec-transfer-config",
            json.dumps(producer),
            "--worker-extension-cls",
            EXTENSION,
        ),
        "pd": serve_argv(
            model,
            ports["pd"],
            *same,
            "--ec-transfer-config",
            json.dumps(consumer),
            "--ec-manager-config",
            json.dumps(two_tier),
            "--worker-extension-cls",
            EXTENSION,
        ),
    }


def rpc(server: Server, method: str, *args: str) -> list[dict[str, Any]]:
    status, resp = http(
        "POST",
        server.url + "/collective_rpc",
        {"method": method, "args": list(args)},
        timeout=60,
    )
    if status != 200 or not isinstance(resp, dict):
        raise RuntimeError(f"{server.name} /collective_rpc {method}: {status} {resp}")
    return resp["results"]


def encoded_items(server: Server) -> list[str]:
    """Identifiers the server's workers ran the encoder on (since install)."""
    return [e[2] for r in rpc(server, "scaleout_read", "0") for e in r["encoded"]]


# ----------------------------------------------------------------- phases
def same_tokens(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Both succeeded with the same prompt and the same output tokens."""
    return (
        a.get("status") == 200 == b.get("status")
        and a.get("token_ids") == b.get("token_ids")
        and a.get("prompt_token_ids") == b.get("prompt_token_ids")
    )


def run_epd(
    tree: str,
    model: Path,
    out_dir: Path,
    full: bool = True,
    reference: dict[str, list[list[int]]] | None = None,
    log: Any = print,
) -> dict[str, Any]:
    """Run the E -> PD scenario; returns ``{"details": ..., "summary": ...}``
    with the ``epd`` block of ``summary.json`` (fields of phases that did not
    run are None).

    The single instance the outputs are compared with is the ``ref`` server.
    A reduced run (``full=False``) given ``reference`` (``token_ids`` and
    ``prompt_token_ids`` of ``LLM.generate`` with the TP cases' prompts and
    images on a TP=1 default-manager engine, :func:`scaleout.tp.run_tp`)
    compares with that instead and starts no ``ref`` server: phase A sends
    the same images and questions, and its prompts must tokenize the same.
    """
    run = out_dir / "epd"
    shutil.rmtree(run, ignore_errors=True)
    (run / "ec_store").mkdir(parents=True)
    env = engine_probe.child_env(tree, {"VLLM_SERVER_DEV_MODE": "1"})
    ports = {name: free_port() for name in ("ref", "encoder", "pd", "proxy")}
    specs = server_specs(model, run, ports)
    if reference is not None and not full:
        del specs["ref"]
    servers: dict[str, Server] = {}
    details: dict[str, Any] = {"ports": ports, "phases": {}}
    summary: dict[str, Any] = {
        "identical_outputs": False,
        "consumer_encoder_runs_for_remote_items": None,
        "deferred_observed": None,
        "producer_kill_only_affected_failed": None,
    }
    slow: list[SlowEntry] = []
    t_start = time.monotonic()
    try:
        for name, argv in specs.items():
            servers[name] = Server(name, argv, env, run / f"{name}.log", ports[name])
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        for name in specs:
            servers[name].wait_ready(deadline)
        proxy_py = tree_dir(tree) / PROXY_REL
        servers["proxy"] = Server(
            "proxy",
            [
                sys.executable,
                str(proxy_py),
                "--host",
                HOST,
                "--port",
                str(ports["proxy"]),
                "--encode-servers-urls",
                servers["encoder"].url,
                "--prefill-servers-urls",
                "disable",
                "--decode-servers-urls",
                servers["pd"].url,
            ],
            env,
            run / "proxy.log",
            ports["proxy"],
        )
        servers["proxy"].wait_ready(time.monotonic() + 60)
        details["startup_s"] = {n: round(s.ready_s or 0, 1) for n, s in servers.items()}
        log(f"scaleout: E->PD servers up: {details['startup_s']}")
        for name in ("encoder", "pd"):
            details[f"{name}_worker"] = rpc(servers[name], "scaleout_install")
        ref = servers.get("ref")
        enc, pd, proxy = (servers[n] for n in ("encoder", "pd", "proxy"))
        store = run / "ec_store"
        questions = engine_probe.TINY_MM_QUESTIONS

        # ---- A: happy path through the proxy (twice, as a chat re-sends).
        images_a = engine_probe.make_images(4, seed=0)
        bodies_a = [chat(img, q) for img, q in zip(images_a, questions)]
        got_a = [run_all([(proxy.url, b) for b in bodies_a]) for _ in range(2)]
        if ref is not None:
            want_a = run_all([(ref.url, b) for b in bodies_a])
        else:
            assert reference is not None
            want_a = [
                {"status": 200, "token_ids": t, "prompt_token_ids": p}
                for t, p in zip(reference["token_ids"], reference["prompt_token_ids"])
            ]
        produced = store_items(store)
        pd_encoded = encoded_items(pd)
        remote_runs = sorted(set(pd_encoded) & produced)
        identical_a = all(
            same_tokens(g, w) for rnd in got_a for g, w in zip(rnd, want_a)
        )
        details["phases"]["A"] = {
            "results": got_a,
            "ref": want_a,
            "identical": identical_a,
            "store_items": len(produced),
            "encoder_items": len(encoded_items(enc)),
            "pd_encoded_items": pd_encoded,
            "pd_encoder_runs_for_remote_items": remote_runs,
        }
        summary["identical_outputs"] = identical_a and len(produced) >= len(bodies_a)
        summary["consumer_encoder_runs_for_remote_items"] = len(
            [i for i in pd_encoded if i in produced]
        )
        log(
            f"scaleout: E->PD A: identical={identical_a}, store items "
            f"{len(produced)}, consumer encoder runs for remote items "
            f"{len(remote_runs)}"
        )
        if not full:
            return {"details": details, "summary": summary}
        assert ref is not None

        # ---- B: slow storage path -> deferral on the consumer, no failure.
        images_b = engine_probe.make_images(8, seed=1)[:2]
        bodies_b = [chat(img, q) for img, q in zip(images_b, questions)]
        before = store_items(store)
        prod_b = run_all([(enc.url, encoder_leg(b)) for b in bodies_b])
        new_b = sorted(store_items(store) - before)
        slow = [SlowEntry(store / h / STORE_FILE, SLOW_STORE_DELAY_S) for h in new_b]
        with MetricsSampler(pd.url) as sampler:
            got_b = run_all([(pd.url, b) for b in bodies_b])
        served_b = sum(e.served for e in slow)
        for entry in slow:
            entry.close()
        slow = []
        want_b = run_all([(ref.url, b) for b in bodies_b])
        ok_b = all(same_tokens(g, w) for g, w in zip(got_b, want_b))
        details["phases"]["B"] = {
            "producer": prod_b,
            "slow_items": new_b,
            "slow_reads_served": served_b,
            "results": got_b,
            "ref": want_b,
            "identical_no_failure": ok_b,
            "max_num_requests_ec_deferred": sampler.max_deferred,
            "metrics_samples": sampler.samples,
        }
        summary["deferred_observed"] = (
            sampler.max_deferred >= 1 and ok_b and served_b >= len(new_b) > 0
        )
        log(
            f"scaleout: E->PD B: max vllm:num_requests_ec_deferred "
            f"{sampler.max_deferred} over {sampler.samples} samples, slow reads "
            f"{served_b}, all ok and identical={ok_b}"
        )

        # ---- C: kill the producer mid-run.
        images_c = engine_probe.make_images(12, seed=2)
        stalled_body = chat(images_c[0], questions[0])
        before = store_items(store)
        prod_c = run_all([(enc.url, encoder_leg(stalled_body))])
        stalled_items = sorted(store_items(store) - before)
        slow = [SlowEntry(store / h / STORE_FILE, None) for h in stalled_items]
        # What a non-atomic writer killed mid-write leaves: the file exists,
        # its bytes are incomplete.
        partial_body = chat(images_c[2], questions[2])
        before = store_items(store)
        prod_c += run_all([(enc.url, encoder_leg(partial_body))])
        partial_items = sorted(store_items(store) - before)
        for h in partial_items:
            f = store / h / STORE_FILE
            f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
        inflight_bodies = [
            chat(img, q, LONG_MAX_TOKENS) for img, q in zip(images_a[:2], questions)
        ]
        pool = ThreadPoolExecutor(max_workers=len(inflight_bodies))
        inflight: list[Future] = [
            pool.submit(post_chat, pd.url, b) for b in inflight_bodies
        ]
        time.sleep(0.2)
        running_at_kill = sum(not f.done() for f in inflight)
        enc.kill()
        enc.proc.wait(timeout=30)
        killed_at = time.monotonic()
        missing_body = chat(images_c[1], questions[1])
        text_body = chat(None, "Say something.")
        produced_bodies = [chat(img, q) for img, q in zip(images_a[2:], questions[2:])]
        after = run_all(
            [
                (proxy.url, missing_body),
                (proxy.url, text_body),
                (pd.url, stalled_body),
                *[(pd.url, b) for b in produced_bodies],
            ]
        )
        got_inflight = [f.result(timeout=REQUEST_TIMEOUT_S) for f in inflight]
        pool.shutdown()
        for entry in slow:
            entry.close()
        slow = []
        missing_res, text_res, stalled_res, *produced_res = after
        health_status, _ = http("GET", pd.url + "/health", timeout=10)
        final_body = chat(images_a[0], questions[3])
        final_res = post_chat(pd.url, final_body)
        want = run_all(
            [
                (ref.url, b)
                for b in [text_body, *produced_bodies, *inflight_bodies, final_body]
            ]
        )
        want_text, want_produced, want_inflight, want_final = (
            want[0],
            want[1 : 1 + len(produced_bodies)],
            want[1 + len(produced_bodies) : -1],
            want[-1],
        )
        want_partial = post_chat(ref.url, partial_body)
        # Last, as it may take the consumer down: the partially written item.
        partial_res = post_chat(pd.url, partial_body)
        partial_health, _ = http("GET", pd.url + "/health", timeout=10)
        after_partial = post_chat(pd.url, final_body)
        # SIGKILLed processes exit asynchronously (a loaded machine takes a
        # while to tear down a large address space): allow a bounded wait,
        # and name what is left if anything is.
        producer_gone = wait_group_gone(enc.pgid, 30.0)
        producer_left = [_describe_pid(pid) for pid in group_pids(enc.pgid)]
        checks = {
            "missing_item_failed_at_proxy": missing_res["status"] == 502
            and "Encoder request failed" in error_text(missing_res),
            "text_only_ok": same_tokens(text_res, want_text),
            "produced_items_ok": all(
                same_tokens(g, w) for g, w in zip(produced_res, want_produced)
            ),
            "inflight_ok": all(
                same_tokens(g, w) for g, w in zip(got_inflight, want_inflight)
            ),
            "stalled_item_failed": stalled_res["status"] not in (0, 200),
            "stalled_item_clear_error": stalled_res["status"] not in (0, 200, 500)
            and "encoder cache" in error_text(stalled_res).lower(),
            "consumer_healthy": health_status == 200,
            "consumer_serves_after": same_tokens(final_res, want_final),
            "producer_group_gone": producer_gone,
            "partial_item_computed_or_failed_clearly": same_tokens(
                partial_res, want_partial
            )
            or partial_res["status"] not in (0, 200, 500),
            "consumer_survives_partial_item": partial_health == 200
            and same_tokens(after_partial, want_final),
        }
        details["phases"]["C"] = {
            "producer": prod_c,
            "stalled_items": stalled_items,
            "running_at_kill": running_at_kill,
            "stalled_request_s": stalled_res.get("s"),
            "since_kill_s": round(time.monotonic() - killed_at, 1),
            "missing": missing_res,
            "text_only": text_res,
            "stalled": stalled_res,
            "produced": produced_res,
            "inflight": got_inflight,
            "final": final_res,
            "partial_items": partial_items,
            "producer_left_after_kill": producer_left,
            "partial": partial_res,
            "after_partial": after_partial,
            "checks": checks,
        }
        if not checks["consumer_survives_partial_item"]:
            details["phases"]["C"]["pd_log_tail"] = pd.tail(4000)
        summary["producer_kill_only_affected_failed"] = all(checks.values())
        log(f"scaleout: E->PD C: {json.dumps(checks)}")
        log(f"scaleout:   stalled request -> {stalled_res}")
        log(f"scaleout:   missing item via proxy -> {missing_res}")
        log(f"scaleout:   partially written item -> {partial_res}")
        return {"details": details, "summary": summary}
    finally:
        for entry in slow:
            entry.close()
        for name in ("proxy", "pd", "encoder", "ref"):
            if name in servers:
                servers[name].stop()
        details["wall_s"] = round(time.monotonic() - t_start, 1)
        details["leftover_groups"] = [n for n, s in servers.items() if s.group_alive()]
        details["leaked_shm_removed"] = {n: s.leaked_shm for n, s in servers.items()}
        details["shm_seen"] = {n: sorted(s.shm_files) for n, s in servers.items()}


def _describe_pid(pid: int) -> str:
    """`pid state cmdline` of a process, for the report."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return f"{pid} (gone)"
    return f"{pid} {state} {cmd[:200]}"
