# SPDX-License-Identifier: Apache-2.0
"""End-to-end: requests the engine fails for a known reason reach an OpenAI
API client as a clear error with a documented status code, not a generic
500, through vLLM's real OpenAI-compatible server (``vllm serve`` on
loopback, CPU, the tiny Qwen2-VL model).

The server runs an EC connector that fails requests on demand
(``ec_failure_plugins.FailingECConnector``, driven per request by
``vllm_xargs``) with ``ec_max_deferral_s=2``, and an encoder cache manager
whose cache (16 embeddings) is smaller than a 224x224 image (64):

* the connector loses the item (``take_unavailable_requests``): 503
  ``ServiceUnavailableError``;
* the connector never delivers it: 504 ``GatewayTimeoutError`` after the
  deferral limit, also as the error event of a streamed response;
* an image larger than the encoder cache: 400 ``BadRequestError``;
* every other request is served (200), before and after the failures.
"""

from __future__ import annotations

import base64
import io
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import engine_probe  # noqa: E402
from series import BASE_VERSION, SUFFIX, tree_dir  # noqa: E402

# The series tree by default; any checkout (e.g. a worktree) via the env.
TREE = os.environ.get("EC_FAILURE_E2E_TREE", "tree")
HERE = Path(__file__).resolve().parent
STARTUP_TIMEOUT_S = 600
MAX_DEFERRAL_S = 2.0


# Where the OpenAI server's shared serving code (``_raise_if_error``) lives:
# v0.22.1, then v0.32.0.
SERVING_FILES = (
    ("entrypoints", "openai", "engine", "serving.py"),
    ("entrypoints", "generate", "base", "serving.py"),
)


def _has_failure_statuses() -> bool:
    """Whether the tree has the deferral bound and the failure statuses."""
    tree = tree_dir(TREE) / "vllm"
    try:
        config = (tree / "config" / "ec_transfer.py").read_text()
    except OSError:
        return False
    serving = ""
    for parts in SERVING_FILES:
        path = tree.joinpath(*parts)
        if path.is_file():
            serving += path.read_text()
    return "ec_max_deferral_s" in config and "GatewayTimeoutError" in serving


# On the primary base the series has them, so their absence is a failure; a
# second base's series (patches-<version>/) may not have them yet.
pytestmark = [
    pytest.mark.skipif(
        bool(SUFFIX) and not _has_failure_statuses(),
        reason=f"the v{BASE_VERSION} series has no ec_max_deferral_s and failure "
        "statuses yet",
    ),
    # One server start and its requests: about 70 s on 2 cores.
    pytest.mark.shard_weight(70),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_num_images = 0


def _image_url(size: int) -> str:
    """A new image every call: an item the encoder cache holds is never
    waited for, whatever the connector says."""
    from PIL import Image

    global _num_images
    _num_images += 1
    buf = io.BytesIO()
    colour = (_num_images * 37 % 256, 40, 90)
    Image.new("RGB", (size, size), colour).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


@pytest.fixture(scope="module")
def server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    """``vllm serve`` from the tree, on a free loopback port."""
    if not (tree_dir(TREE) / "vllm" / "__init__.py").exists():
        pytest.fail(f"{tree_dir(TREE)} is missing: run `make tree` first")
    env = engine_probe.child_env(TREE)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(HERE)])
    port = _free_port()
    store = tmp_path_factory.mktemp("ec_store")
    kwargs = engine_probe.tiny_mm_llm_kwargs(tiny_model)
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        kwargs["model"],
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enforce-eager",
        "--max-model-len",
        str(kwargs["max_model_len"]),
        "--max-num-seqs",
        str(kwargs["max_num_seqs"]),
        "--max-num-batched-tokens",
        str(kwargs["max_num_batched_tokens"]),
        "--limit-mm-per-prompt",
        json.dumps(kwargs["limit_mm_per_prompt"]),
        "--no-enable-prefix-caching",
        "--kv-cache-memory-bytes",
        str(kwargs["kv_cache_memory_bytes"]),
        "--ec-transfer-config",
        json.dumps(
            {
                "ec_connector": "FailingECConnector",
                "ec_connector_module_path": "ec_failure_plugins",
                "ec_role": "ec_consumer",
                "ec_connector_extra_config": {"shared_storage_path": str(store)},
                "ec_max_deferral_s": MAX_DEFERRAL_S,
            }
        ),
        "--ec-manager-config",
        json.dumps(
            {"encoder_cache_manager_cls": "ec_failure_plugins.SmallEncoderCacheManager"}
        ),
    ]
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, env=env, cwd=str(HERE), stdout=log, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail("server exited:\n" + log_path.read_text()[-6000:])
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("server did not start:\n" + log_path.read_text()[-6000:])
            time.sleep(1)
        yield base, log_path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _chat(
    base: str,
    tiny_model: Path,
    image_size: int = 56,
    ec_test: str | None = None,
    stream: bool = False,
) -> tuple[int, Any]:
    """POST a one-image chat completion; (status, JSON body or SSE events)."""
    body: dict[str, Any] = {
        "model": str(tiny_model),
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": _image_url(image_size)}},
                    {"type": "text", "text": "Describe the image."},
                ],
            }
        ],
        "max_tokens": 4,
        "temperature": 0.0,
        "stream": stream,
    }
    if ec_test is not None:
        body["vllm_xargs"] = {"ec_test": ec_test}
    request = urllib.request.Request(
        base + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            text = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())
    if not stream:
        return status, json.loads(text)
    events = [
        line[len("data: ") :]
        for line in text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]
    return status, [json.loads(e) for e in events]


def test_failed_requests_get_their_status(server, tiny_model: Path) -> None:
    base, log_path = server
    status, body = _chat(base, tiny_model)
    assert status == 200, body
    assert body["choices"][0]["finish_reason"] == "length"

    status, body = _chat(base, tiny_model, ec_test="unavailable")
    assert status == 503, body
    error = body["error"]
    assert error["type"] == "ServiceUnavailableError" and error["code"] == 503
    assert "can no longer obtain the encoder cache" in error["message"]

    t0 = time.monotonic()
    status, body = _chat(base, tiny_model, ec_test="timeout")
    assert status == 504, body
    assert time.monotonic() - t0 >= MAX_DEFERRAL_S
    error = body["error"]
    assert error["type"] == "GatewayTimeoutError" and error["code"] == 504
    assert (
        "did not deliver the encoder cache of multimodal item 0" in (error["message"])
    )
    assert f"ec_max_deferral_s={MAX_DEFERRAL_S}" in error["message"]

    status, body = _chat(base, tiny_model, image_size=224)
    assert status == 400, body
    error = body["error"]
    assert error["type"] == "BadRequestError" and error["code"] == 400
    assert (
        "needs 64 encoder embeddings, more than the encoder cache size"
        in (error["message"])
    )

    # A stream has already answered 200: the status is in its error event.
    status, events = _chat(base, tiny_model, ec_test="timeout", stream=True)
    assert status == 200
    errors = [e["error"] for e in events if "error" in e]
    assert len(errors) == 1, events
    assert errors[0]["type"] == "GatewayTimeoutError"
    assert errors[0]["code"] == 504

    # The server keeps serving.
    status, body = _chat(base, tiny_model)
    assert status == 200, body
    log = log_path.read_text()
    assert "Internal server error" not in log
