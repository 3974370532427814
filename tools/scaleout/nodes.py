# SPDX-License-Identifier: Apache-2.0
"""TP=2 across two nodes with vLLM's own multi-node launcher (the
multiproc executor, ``--nnodes 2 --node-rank 0|1 --master-addr``, the second
node ``--headless``), both "nodes" on loopback, the two-tier cache with a
64-embedding device tier. Optional (``python tools/scaleout --nodes``);
not part of ``summary.json``.

One rank runs in each node's process tree, so each node holds its own host
tier: with a host region shared by the ranks of a node, a multi-node
instance holds one region per node. The harness sends the TP cases' prompts
as OpenAI chats to node 0 three times and reads both ranks' probes through
``/collective_rpc`` (which reaches the remote node's worker too).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parents[1]
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

import engine_probe  # noqa: E402

from scaleout import epd, tp  # noqa: E402
from scaleout.procs import HOST, Server, free_port  # noqa: E402


def node_argv(model: Path, port: int, master_port: int, rank: int) -> list[str]:
    two_tier = {
        "encoder_cache_manager_cls": tp.TWO_TIER,
        "manager_config": {"host_cache_gib": tp.HOST_CACHE_GIB},
    }
    extra = [
        "--tensor-parallel-size",
        "2",
        "--distributed-executor-backend",
        "mp",
        "--nnodes",
        "2",
        "--node-rank",
        str(rank),
        "--master-addr",
        HOST,
        "--master-port",
        str(master_port),
        "--max-num-batched-tokens",
        str(tp.DEVICE_TIER_EMBEDS),
        "--ec-manager-config",
        json.dumps(two_tier),
        "--worker-extension-cls",
        tp.EXTENSION,
    ]
    if rank:
        extra.append("--headless")
    return epd.serve_argv(model, port, *extra)


def run_nodes(
    tree: str,
    model: Path,
    out_dir: Path,
    reference: list[list[list[int]]] | None = None,
    log: Any = print,
) -> dict[str, Any]:
    """Run the two-node case; ``reference`` are the per-round token ids of
    ``tp1_default`` (``LLM.generate`` with the same prompts), if it ran."""
    run = out_dir / "nodes"
    run.mkdir(parents=True, exist_ok=True)
    env = engine_probe.child_env(
        tree, {"VLLM_SERVER_DEV_MODE": "1", "VLLM_LOG_STATS_INTERVAL": "0.5"}
    )
    port, master_port = free_port(), free_port()
    servers: list[Server] = []
    result: dict[str, Any] = {}
    t0 = time.monotonic()
    try:
        for rank, node_port in enumerate((port, free_port())):
            servers.append(
                Server(
                    f"node{rank}",
                    node_argv(model, node_port, master_port, rank),
                    env,
                    run / f"node{rank}.log",
                    node_port,
                )
            )
        head = servers[0]
        head.wait_ready(time.monotonic() + epd.STARTUP_TIMEOUT_S)
        servers[1].note_shm()
        workers = epd.rpc(head, "scaleout_install")
        images = engine_probe.make_images(tp.NUM_IMAGES, seed=0)
        bodies = [
            epd.chat(img, q) for img, q in zip(images, engine_probe.TINY_MM_QUESTIONS)
        ]
        epd.rpc(head, "scaleout_read", "1")
        rounds = []
        for _ in range(tp.ROUNDS):
            got = epd.run_all([(head.url, b) for b in bodies])
            rounds.append(
                {
                    "token_ids": [g.get("token_ids") for g in got],
                    "statuses": [g["status"] for g in got],
                    "ranks": epd.rpc(head, "scaleout_read", "1"),
                }
            )
        res = {
            "startup_s": head.ready_s or 0.0,
            "wall_s": time.monotonic() - t0,
            "workers": workers,
            "rounds": rounds,
            "log": str(head.log),
            "leaked_shm": [],
            "host_hits": None,
            "tp": 2,
            "two_tier": True,
        }
        hits = tp.HOST_HITS_RE.findall(head.tail(200_000))
        res["host_hits"] = int(hits[-1]) if hits else None
        ref = {"rounds": [{"token_ids": r} for r in reference]} if reference else None
        result = tp.summarize_case(res, ref)
        result["pids_per_node"] = {
            s.name: sorted({w["pid"] for w in workers} & set(_group(s)))
            for s in servers
        }
        result["all_ok"] = all(st == 200 for r in rounds for st in r["statuses"])
        if ref is None:
            result["identical_across_rounds"] = all(
                r["token_ids"] == rounds[0]["token_ids"] for r in rounds
            )
        log(f"scaleout: TP=2 over two nodes: {json.dumps(tp._short(result))}")
        return result
    finally:
        for s in reversed(servers):
            s.stop()
        result["leaked_shm_removed"] = [p for s in servers for p in s.leaked_shm]
        result["leftover_groups"] = [s.name for s in servers if s.group_alive()]


def _group(server: Server) -> list[int]:
    from scaleout.procs import group_pids

    return group_pids(server.pgid)
