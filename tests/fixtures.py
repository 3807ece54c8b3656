"""Where the msprobe-written dumps live: tests/data/msprobe-dumps in this repository, or $NPU_PRECISION_FIXTURES."""

import os
from pathlib import Path

FIXTURES = Path(os.environ.get("NPU_PRECISION_FIXTURES", Path(__file__).resolve().parent / "data" / "msprobe-dumps"))
