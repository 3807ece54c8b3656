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

# The same for the plugin's own modules: an in-process run that first imports plugin/settings.py would leave
# the next run a fresh Backend class, and settings made by one would fail isinstance in the other.
for _module in ("plugin.collecting", "plugin.op_case_items", "plugin.settings"):
    importlib.import_module(f"pytest_npuprecision.{_module}")


# What a supported torch lacks (torch 2.1's CPU has no float16 addmm or softmax, torch 2.5's no half
# mse_loss; F.rms_norm came in 2.4) skips a test that calls it directly, as a case of it skips: naming
# the op, the dtype and the torch. Only torch's own message for a missing kernel, or a name a later
# torch added, is taken for that; any other error still fails the test.
import pytest  # noqa: E402

from pytest_npuprecision.common import torch_compat  # noqa: E402


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        return (yield)
    except (RuntimeError, NotImplementedError, AttributeError) as exc:
        lacking = torch_compat.lacking(exc)
        if lacking is None:
            raise
        pytest.skip(f"[no-kernel] this torch cannot run the test: {lacking}")
