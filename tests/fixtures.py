"""Where the shared msprobe dumps live: ../shared beside the checkout, or $NPU_PRECISION_FIXTURES."""

import os
from pathlib import Path

FIXTURES = Path(os.environ.get("NPU_PRECISION_FIXTURES", Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "msprobe-dumps"))
