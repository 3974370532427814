# SPDX-License-Identifier: Apache-2.0
"""tools/cpu_import_hook.py: the import hook of .venv-0.32.0's .pth adapters."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def test_runs_once_after_the_target_executes_and_removes_itself(tmp_path):
    (tmp_path / "target_mod.py").write_text("VALUE = 1\n")
    (tmp_path / "other_mod.py").write_text("VALUE = 2\n")
    code = textwrap.dedent(
        """
        import sys
        from cpu_import_hook import _Finder, after_import
        seen = []
        def then(module):
            seen.append((module.__name__, module.VALUE))
        after_import("target_mod", then)
        after_import("target_mod", then)  # one hook per target
        after_import("other_mod", lambda m: seen.append(("other", m.VALUE)))
        print(sum(isinstance(f, _Finder) for f in sys.meta_path))
        import target_mod
        import target_mod  # cached: not run again
        print(seen)
        print(sum(isinstance(f, _Finder) for f in sys.meta_path))
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(TOOLS)]))
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["2", "[('target_mod', 1)]", "1"]
