# SPDX-License-Identifier: Apache-2.0
"""tools/device_check_two_tier.py without a GPU: its ``--dry-run`` runs the
two-tier worker of this base's tree on CPU tensors (demotions, scattered
promotions, round trips) and must print exactly one JSON line on stdout,
whatever vLLM logs, so that a lent GPU's run can be parsed as is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from series import tree_dir  # noqa: E402

SCRIPT = ROOT / "tools" / "device_check_two_tier.py"


def test_dry_run_prints_one_json_line_and_round_trips_bit_exact():
    tree = tree_dir("tree")
    assert (tree / "vllm" / "__init__.py").exists(), f"{tree}: run `make tree`"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--tree", str(tree)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, lines[:5]
    result = json.loads(lines[0])
    assert result["tree"] == str(tree)
    assert result["dry_run"] is True
    assert result["ok"] is True and result["bit_exact"] is True
    # vLLM did log (to stderr): the redirection, not silence, keeps stdout clean.
    assert proc.stderr.strip()
