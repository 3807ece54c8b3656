"""torch_compat: each fallback does what the newer torch API does, and what a torch lacks is a clear
skip or a clear start-up error, never an AttributeError per case (issue 36).

These run on every supported torch; CI runs them on the oldest (2.1) and the pinned one.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest
import torch
from fixtures import FIXTURES, needs_dumps

from pytest_npuprecision.capturing.naming import api_name
from pytest_npuprecision.common import torch_compat

HALF = [torch.float16, torch.bfloat16]


@pytest.fixture
def without_kernels(monkeypatch):
    """Every probe says this torch has no kernel, so the fallbacks run (as they do on torch 2.1)."""
    monkeypatch.setattr(torch_compat, "_has_kernel", lambda *_: False)


def _reference_nextafter(values: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The next value by sorting the whole 16-bit grid: slow, obviously right."""
    grid = torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16).view(values.dtype).float()
    grid = torch.sort(grid[~grid.isnan()]).values.unique()
    out = []
    for v, t in zip(values.float().tolist(), target.float().tolist()):
        if v == t:
            out.append(t)
        elif t > v:
            out.append(grid[grid > v][0].item())
        else:
            out.append(grid[grid < v][-1].item())
    return torch.tensor(out).to(values.dtype)


@pytest.mark.parametrize("dtype", HALF)
def test_nextafter_without_a_kernel_steps_to_the_next_value(dtype):
    info = torch.finfo(dtype)
    values = (torch.randn(100, generator=torch.Generator().manual_seed(0)) * 100).to(dtype)
    edges = torch.tensor([0.0, -0.0, 1.0, info.max, -info.max, info.tiny, info.tiny / 4, float("inf"), float("-inf")])
    values = torch.cat([edges.to(dtype), values])
    native = torch_compat._has_kernel("nextafter", dtype, "cpu")
    for towards in (float("inf"), float("-inf"), 0.0, 1.0):
        target = torch.full_like(values, towards)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(torch_compat, "_has_kernel", lambda *_: False)
            found = torch_compat.nextafter(values, target)
        assert torch.equal(found.float(), _reference_nextafter(values, target).float())
        if native:  # bit for bit what torch's own kernel gives, signed zeros included
            assert torch.equal(found.view(torch.int16), torch.nextafter(values, target).view(torch.int16))


@pytest.mark.parametrize("dtype", HALF)
def test_aminmax_without_a_kernel_is_exact(dtype, without_kernels):
    values = (torch.randn(1000, generator=torch.Generator().manual_seed(1)) * 1e3).to(dtype)
    low, high = torch_compat.aminmax(values)
    assert (low.dtype, high.dtype) == (dtype, dtype)
    assert (low.item(), high.item()) == (values.min().item(), values.max().item())


def test_the_default_device_without_get_default_device_is_where_factories_land(monkeypatch):
    monkeypatch.delattr(torch, "get_default_device", raising=False)
    assert torch_compat.default_device() == torch.device("cpu")
    with torch.device("meta"):
        assert torch_compat.default_device() == torch.device("meta")


def test_is_compiling_without_torch_compiler_asks_dynamo_if_it_is_loaded(monkeypatch):
    monkeypatch.delattr(torch.compiler, "is_compiling", raising=False)  # as on torch 2.1 and 2.2
    monkeypatch.delitem(sys.modules, "torch._dynamo", raising=False)
    assert torch_compat.is_compiling() is False  # nothing compiles before torch.compile imports dynamo
    monkeypatch.setitem(sys.modules, "torch._dynamo", SimpleNamespace(is_compiling=lambda: True))
    assert torch_compat.is_compiling() is True


class _Method:
    """A Tensor method as torch 2.1 names it (torch 2.3 renamed _TensorBase to TensorBase)."""
    __module__ = "torch._C"

    def __init__(self, qualname: str):
        self.__name__ = qualname.rsplit(".", 1)[-1]
        self.__qualname__ = qualname


@pytest.mark.parametrize("qualname", ["_TensorBase.sum", "TensorBase.sum", "Tensor.sum"])
def test_capture_names_tensor_methods_of_every_torch(qualname):
    assert api_name(_Method(qualname), None) == "Tensor.sum"


# ---------------------------------------------------------------- rms_norm's eps


def test_rms_norm_eps_by_torch_version(monkeypatch):
    monkeypatch.setattr(torch_compat, "TORCH", (2, 5))  # the input's dtype holds eps
    assert torch_compat.rms_norm_eps(torch.float16, None) == torch.finfo(torch.float16).eps
    assert torch_compat.rms_norm_eps(torch.bfloat16, 1e-6) == torch.tensor(1e-6, dtype=torch.bfloat16).item()
    monkeypatch.setattr(torch_compat, "TORCH", (2, 7))  # float32 holds it (pytorch#142848)
    assert torch_compat.rms_norm_eps(torch.float16, None) == torch.finfo(torch.float32).eps
    assert torch_compat.rms_norm_eps(torch.bfloat16, 1e-6) == torch.tensor(1e-6, dtype=torch.float32).item()
    assert torch_compat.rms_norm_eps(torch.float64, None) == torch.finfo(torch.float64).eps


@pytest.mark.skipif(not hasattr(torch.nn.functional, "rms_norm"), reason=f"torch {torch.__version__} has no rms_norm")
@pytest.mark.parametrize("dtype", HALF)
def test_the_golden_eps_is_the_one_the_installed_torchs_kernel_adds(dtype):
    """Rows whose mean square is near eps: another eps moves the result by many ulp."""
    x = (torch.randn(8, 64, generator=torch.Generator().manual_seed(2)) * 3e-3).to(dtype)
    kernel = torch.nn.functional.rms_norm(x, (64,)).double()

    def golden(eps: float) -> torch.Tensor:
        wide = x.double()
        return wide * torch.rsqrt(wide.square().mean(-1, keepdim=True) + eps)

    ulp = torch.finfo(dtype).eps
    assert ((kernel - golden(torch_compat.rms_norm_eps(dtype, None))).abs() <= 2 * ulp * kernel.abs().clamp(min=1)).all()
    other = torch.finfo(torch.float32 if torch_compat.TORCH < (2, 7) else dtype).eps
    assert not ((kernel - golden(other)).abs() <= 2 * ulp * kernel.abs().clamp(min=1)).all()


# ---------------------------------------------------------------- what a torch lacks


def test_a_missing_kernel_is_named_with_op_dtype_and_torch():
    cause = RuntimeError("\"addmm_impl_cpu_\" not implemented for 'Half'")
    assert torch_compat.missing_kernel("Functional.linear", "device (cpu)", cause) == (
        f"Functional.linear has no Half kernel on the device (cpu) in torch {torch.__version__} "
        f"(\"addmm_impl_cpu_\" not implemented for 'Half')")
    assert torch_compat.missing_kernel("Functional.linear", "device (cpu)", RuntimeError("shapes differ")) is None
    unquoted = RuntimeError("grid_sampler_2d_cpu not implemented for Half")  # torch's other wording
    assert torch_compat.kernel_gap(unquoted) == ("grid_sampler_2d_cpu", "Half")
    assert torch_compat.kernel_gap(RuntimeError("backward is not implemented for this input")) is None


def test_an_op_of_a_later_torch_says_which(monkeypatch):
    monkeypatch.setattr(torch_compat, "TORCH", (2, 1))
    assert torch_compat.newer_op("Functional.rms_norm") == \
        f"Functional.rms_norm came in torch 2.4; this is torch {torch.__version__}"
    assert torch_compat.newer_op("Functional.rms_nrom") is None  # a misspelling stays a usage error
    monkeypatch.setattr(torch_compat, "TORCH", (2, 4))
    assert torch_compat.newer_op("Functional.rms_norm") is None


def test_what_this_torch_lacks_is_told_from_other_errors(monkeypatch):
    """torch_compat.lacking: what the tests' skips and the defect suite's skipped cells say."""
    assert torch_compat.lacking(RuntimeError("\"cumsum_out_cpu\" not implemented for 'Half'")) == \
        f"torch {torch.__version__} has no Half kernel \"cumsum_out_cpu\""
    assert torch_compat.lacking(RuntimeError("shapes differ")) is None
    monkeypatch.setattr(torch_compat, "TORCH", (2, 1))
    stand_in = torch_compat.optional(SimpleNamespace(__name__="torch.nn.functional"), "rms_norm")
    with pytest.raises(AttributeError) as raised:
        stand_in(torch.ones(2), (2,))
    assert torch_compat.lacking(raised.value) == \
        f"torch.nn.functional.rms_norm came in torch 2.4; this is torch {torch.__version__}"
    assert torch_compat.lacking(AttributeError("no attribute 'rms_nrom'")) is None  # not torch's


def test_an_old_torch_is_a_usage_error_at_start_up(pytester, monkeypatch):
    monkeypatch.setattr(torch_compat, "TORCH", (2, 0))
    result = pytester.runpytest("--npu-precision", str(FIXTURES / "mlp_tensor"), "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.lines[0] == (f"ERROR: pytest-npuprecision needs torch 2.1 or later, and this is torch "
                                      f"{torch.__version__}: install a newer torch (or torch_npu release)")


def test_a_numpy_torch_cannot_use_is_a_usage_error_at_start_up(monkeypatch):
    def unavailable(self):
        raise RuntimeError("Numpy is not available")

    monkeypatch.setattr(torch.Tensor, "numpy", unavailable)
    with pytest.raises(torch_compat.UnsupportedEnvironment, match=r"cannot use the installed numpy .*"
                                                                  r"\(torch says: Numpy is not available\): "
                                                                  r"install 'numpy<2' beside this torch"):
        torch_compat.check_environment()


NO_KERNEL_BACKEND = '''
import torch
from pytest_npuprecision import Backend


class NoHalfGelu(Backend):
    """A device whose torch was built without a float32 gelu: it raises as torch does."""

    def call(self, api, func, args, kwargs):
        if api.startswith("Functional.gelu"):
            raise RuntimeError("\\"GeluKernelImpl\\" not implemented for 'Float'")
        return super().call(api, func, args, kwargs)


backend = NoHalfGelu("cpu")
'''


@needs_dumps(FIXTURES / "mlp_tensor")
def test_a_dump_case_without_a_kernel_skips_as_no_kernel(pytester):
    pytester.makepyfile(no_kernel=NO_KERNEL_BACKEND)
    pytester.syspathinsert()
    result = pytester.runpytest("--npu-precision", str(FIXTURES / "mlp_tensor" / "step0"), "--npu-precision-device",
                                "no_kernel:backend", "--npu-precision-report", "report", "-p", "no:cacheprovider",
                                "-k", "gelu.0.forward")
    records = [json.loads(line) for line in (pytester.path / "report" / "cases.jsonl").read_text().splitlines()]
    assert [(r["key"], r["status"], r["reason"]) for r in records] == [
        ("Functional.gelu.0.forward", "skip", "no-kernel")], result.stdout.str()[-2000:]
    assert records[0]["message"] == (
        f"Functional.gelu.0.forward: Functional.gelu has no Float kernel on the device (cpu) in torch "
        f"{torch.__version__} (\"GeluKernelImpl\" not implemented for 'Float')")


def test_an_op_case_without_a_kernel_skips_naming_op_dtype_and_torch(pytester):
    pytester.makepyfile(no_kernel=NO_KERNEL_BACKEND)
    pytester.syspathinsert()
    (pytester.path / "op_cases").mkdir()
    (pytester.path / "op_cases" / "gelu.yaml").write_text(
        "cases:\n  - op: Functional.gelu\n    dtypes: [float32]\n    inputs:\n      - shape: [8]\n")
    result = pytester.runpytest("op_cases", "--npu-precision-device", "no_kernel:backend", "-rs",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([f"SKIPPED * [[]no-kernel[]] Functional.gelu has no Float kernel on the device "
                                 f"(cpu) in torch {torch.__version__} *"])
