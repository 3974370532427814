# SPDX-License-Identifier: Apache-2.0
"""Entry point: ``python tools/scaleout ...`` (see :mod:`scaleout.cli`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scaleout.cli import main  # noqa: E402

sys.exit(main())
