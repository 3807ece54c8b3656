import importlib
import sys
from pathlib import Path

# The shared op and defect tables sit next to the tests.
sys.path.insert(0, str(Path(__file__).parent))

# pytester's in-process runs restore sys.modules afterwards, dropping torch modules first imported
# inside them; importing one again registers its TORCH_LIBRARY twice and raises. Import the ones that
# torch loads lazily (assert_close loads DTensor, an optimizer loads dynamo) before any test runs.
import torch  # noqa: E402
import torch._dynamo  # noqa: E402,F401

if torch.distributed.is_available():
    import torch.distributed.tensor  # noqa: F401

# The same for the plugin's own modules: an in-process run that first imports settings.py would leave
# the next run a fresh Backend class, and settings made by one would fail isinstance in the other.
for _module in ("collecting", "opcases.plugin", "settings"):
    importlib.import_module(f"pytest_npuprecision.{_module}")
