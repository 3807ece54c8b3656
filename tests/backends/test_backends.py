"""Backends: one string names the device under test, the golden or the baseline; a user's backend plugs in.

Everything here runs on the CPU. The npu adapter is tested against a stand-in torch_npu in
test_npu_stand_in.py, the cuda adapter in test_cuda.py.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import platform
import sys
import textwrap
import types
from pathlib import Path
from xml.etree import ElementTree

import pytest
import torch
from fixtures import FIXTURES, fixture_dump

import pytest_npuprecision
from pytest_npuprecision.backends import Backend, BackendError, BackendInfo, load_backend
from pytest_npuprecision.backends.base import _cpu_name
from pytest_npuprecision.ops.resolution import resolve
from pytest_npuprecision.replay import threads
from pytest_npuprecision.replay.runner import run_call

SMALL_DUMP = FIXTURES / "mlp_tensor" / "step0" / "rank0" / "dump.json"
ONLY_CPU = torch.cuda.is_available() or importlib.util.find_spec("torch_npu") is not None
cpu_only = pytest.mark.skipif(ONLY_CPU, reason="auto picks an accelerator here: this checks a CPU-only machine")


class CountingBackend(Backend):
    """A plain CPU backend that records what the runner asks of it."""

    def __init__(self) -> None:
        super().__init__("cpu", name="counting-cpu")
        self.asked: collections.Counter[str] = collections.Counter()
        self.ops: list[tuple[str, str]] = []  # ("call" | "gradients", api)

    def to_device(self, tensor):
        self.asked["to_device"] += 1
        return super().to_device(tensor)

    def call(self, api, func, args, kwargs):
        self.ops.append(("call", api))
        return super().call(api, func, args, kwargs)

    def gradients(self, api, outputs, inputs, grad_outputs):
        self.ops.append(("gradients", api))
        return super().gradients(api, outputs, inputs, grad_outputs)

    def synchronize(self):
        self.asked["synchronize"] += 1

    def to_host(self, tensor):
        self.asked["to_host"] += 1
        return super().to_host(tensor)

    def running(self, seed):
        self.asked["running"] += 1
        return super().running(seed)


def _failing_factory():
    raise ValueError("no licence server")


@pytest.fixture
def user_module(monkeypatch):
    """A module ``user_backends`` importable by name, as a user's backend module would be."""
    module = types.ModuleType("user_backends")
    module.Counting = CountingBackend
    module.instance = CountingBackend()
    module.make = lambda: Backend("cpu", name="made-by-a-function")
    module.failing = _failing_factory
    module.not_a_backend = "cpu"
    module.namespace = types.SimpleNamespace(inner=Backend("cpu", name="nested"))
    monkeypatch.setitem(sys.modules, "user_backends", module)
    return module


# ---------------------------------------------------------------- names


def test_cpu_is_a_plain_torch_device():
    backend = load_backend("cpu")
    assert type(backend) is Backend and backend.name == "cpu" and backend.device == torch.device("cpu")
    assert load_backend(torch.device("cpu")).name == "cpu"
    assert load_backend(backend) is backend


@cpu_only
def test_auto_is_the_cpu_on_a_machine_without_npu_or_gpu():
    backend = load_backend("auto")
    assert type(backend) is Backend and backend.name == "cpu"


def test_only_the_device_under_test_can_be_auto():
    with pytest.raises(BackendError) as error:
        load_backend("auto", "golden")
    assert str(error.value) == "the golden cannot be auto: name it (cpu or cuda)"


def test_an_unknown_name_lists_what_is_accepted():
    with pytest.raises(BackendError) as error:
        load_backend("gpu")
    assert str(error.value) == ("'gpu' is not a device or backend (did you mean cuda?): use auto, dumped, cpu, "
                                "cuda[:N], npu[:N], module:object, or an installed backend (none installed)")


@pytest.mark.parametrize("typed, meant", [("dumpd", "dumped"), ("npu0", "npu:0"), ("cuda1", "cuda:1"),
                                          ("gpu2", "cuda:2"), ("cpuu", "cpu"), ("Ascend", "npu")])
def test_a_mistyped_device_says_what_was_meant(typed, meant):
    with pytest.raises(BackendError) as error:
        load_backend(typed)
    assert f"(did you mean {meant}?)" in str(error.value)


def test_a_baseline_is_never_offered_dumped():
    with pytest.raises(BackendError) as error:
        load_backend("dumpd", "baseline")
    assert "dumped" not in str(error.value).split(":", 1)[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="cuda is available here")
def test_cuda_without_a_gpu_says_so():
    with pytest.raises(BackendError) as error:
        load_backend("cuda")
    why = f"torch {torch.__version__} has no CUDA" if torch.version.cuda is None else "no GPU is visible"
    assert str(error.value) == f"cuda is not available ({why}): use cpu, or run on a machine with an NVIDIA GPU"


# ---------------------------------------------------------------- module:object


def test_module_object_takes_an_instance(user_module):
    assert load_backend("user_backends:instance") is user_module.instance


def test_module_object_takes_a_class_a_factory_or_a_dotted_attribute(user_module):
    assert type(load_backend("user_backends:Counting")) is CountingBackend
    assert load_backend("user_backends:make").name == "made-by-a-function"
    assert load_backend("user_backends:namespace.inner").name == "nested"


@pytest.mark.parametrize("spec, message", [
    ("user_backends:not_a_backend",
     "backend 'user_backends:not_a_backend' is a str, not a Backend: subclass pytest_npuprecision.Backend "
     "(see docs/backends.md, \"Writing a backend\")"),
    ("user_backends:failing",
     "backend 'user_backends:failing' failed to start (ValueError: no licence server)"),
    ("user_backends:missing",
     "backend 'user_backends:missing' does not load (AttributeError: module 'user_backends' has no attribute "
     "'missing'): give module:object with the module importable from here"),
    ("no_such_backend_module:Remote",
     "backend 'no_such_backend_module:Remote' does not load (ModuleNotFoundError: No module named "
     "'no_such_backend_module'): give module:object with the module importable from here"),
])
def test_module_object_errors_name_the_spec_and_the_fix(user_module, spec, message):
    with pytest.raises(BackendError) as error:
        load_backend(spec)
    assert str(error.value) == message


# ---------------------------------------------------------------- installed backends (entry points)


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A distribution on sys.path that installs two backends: ``remote`` and ``broken``."""
    (tmp_path / "remote_backend.py").write_text(textwrap.dedent("""
        from pytest_npuprecision import Backend

        class Remote(Backend):
            def __init__(self):
                super().__init__("cpu", name="remote-accelerator")
    """))
    dist = tmp_path / "remote_backend-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: remote-backend\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[pytest_npuprecision.backends]\nremote = remote_backend:Remote\n"
                                           "broken = not_installed_runtime:Backend\n")
    monkeypatch.syspath_prepend(tmp_path)
    monkeypatch.delitem(sys.modules, "remote_backend", raising=False)
    yield
    sys.modules.pop("remote_backend", None)


def test_an_installed_backend_loads_by_its_entry_name(installed):
    backend = load_backend("remote")
    assert type(backend).__name__ == "Remote" and backend.name == "remote-accelerator"


def test_an_installed_backend_that_does_not_load_names_its_target(installed):
    with pytest.raises(BackendError) as error:
        load_backend("broken")
    assert str(error.value) == ("backend 'broken' (not_installed_runtime:Backend) does not load (ModuleNotFoundError: "
                                "No module named 'not_installed_runtime')")


def test_an_unknown_name_lists_the_installed_backends(installed):
    with pytest.raises(BackendError, match=r"or an installed backend \(broken, remote\)$"):
        load_backend("remot")


# ---------------------------------------------------------------- the options


@pytest.mark.parametrize("option, value, message", [
    ("--npu-precision-golden", "npu", "--npu-precision-golden 'npu' cannot compute in float64 here: use cpu or cuda[:N]"),
    ("--npu-precision-golden", "auto", "--npu-precision-golden 'auto' cannot compute in float64 here: use cpu or "
                                       "cuda[:N]"),
    ("--npu-precision-baseline", "auto", "--npu-precision-baseline: the baseline cannot be auto: name it (cpu or cuda)"),
    ("--npu-precision-device", "gpu", "--npu-precision-device: 'gpu' is not a device or backend (did you mean cuda?): "
                                      "use auto, dumped, cpu, cuda[:N], npu[:N], module:object, or an installed "
                                      "backend (none installed)"),
    ("--npu-precision-device", "no_such_backend_module:Remote",
     "--npu-precision-device: backend 'no_such_backend_module:Remote' does not load (ModuleNotFoundError: No module "
     "named 'no_such_backend_module'): give module:object with the module importable from here"),
])
def test_a_bad_device_golden_or_baseline_is_a_usage_error(pytester, option, value, message):
    result = pytester.runpytest("--npu-precision", str(fixture_dump(SMALL_DUMP)), "--npu-precision-device", "cpu", option, value,
                                "--collect-only", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.lines[0] == f"ERROR: {message}"


def test_the_header_line_names_device_golden_baseline_and_seed(pytester):
    result = pytester.runpytest("--npu-precision", str(fixture_dump(SMALL_DUMP)), "--npu-precision-device", "cpu",
                                "--npu-precision-baseline", "cpu", "--collect-only", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK
    assert (f"npu-precision: device cpu ({_cpu_name()}; torch {torch.__version__}), "
            f"golden cpu float64, baseline cpu same dtype, seed crc32(case id) per case") in result.stdout.lines
    assert "npu-precision: float32 ieee on the device; policy as-run (--npu-precision-fp32)" in result.stdout.lines


def test_every_report_records_device_golden_baseline_and_seed(pytester, user_module):
    # This process's own threads decide the policy (tests/replay/test_threads.py checks each decision).
    policy = threads.thread_policy(0, user_threads=threads.chosen_by_user()).as_dict()
    result = pytester.runpytest("--npu-precision", str(fixture_dump(SMALL_DUMP)), "--npu-precision-device", "user_backends:make",
                                "--npu-precision-baseline", "cpu", "-k", "linear.0", "--npu-precision-report", "r",
                                "--junitxml", "r/junit.xml", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK
    run = json.loads((pytester.path / "r" / "run.json").read_text())
    assert [Path(name).parent.as_posix() for name in run.pop("msprobe_csv_files")] == ["msprobe/step0/rank0"] * 2
    cpu = {"name": "cpu", "device_name": _cpu_name(), "versions": {"torch": torch.__version__}, "settings": {}}
    assert run == {"pytest_npuprecision": pytest_npuprecision.__version__, "python": platform.python_version(),
                   "machine": platform.machine(), "device": dict(cpu, name="made-by-a-function"),
                   "golden": "cpu float64", "golden_backend": cpu, "baseline": "cpu same dtype",
                   "baseline_backend": cpu, "seed": "crc32(case id) per case",
                   "float32": {"policy": "as-run",
                               "device_modes": {"matmul": "ieee", "conv": "ieee", "rnn": "ieee", "known": True}},
                   "torch_threads": policy}
    records = [json.loads(line) for line in (pytester.path / "r" / "cases.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(isinstance(r["seed"], int) for r in records)
    assert {(r["device"], r["golden"], r["baseline"]) for r in records} == {
        ("made-by-a-function", "cpu float64", "cpu same dtype")}
    assert {r["float32_mode"] for r in records} == {"ieee"}  # a float32 linear, forward and backward
    junit = ElementTree.parse(pytester.path / "r" / "junit.xml")
    for case, record in zip(junit.iter("testcase"), records):
        properties = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert (properties["npu_precision_device"], properties["npu_precision_golden"],
                properties["npu_precision_baseline"], properties["npu_precision_seed"]) == (
            "made-by-a-function", "cpu float64", "cpu same dtype", str(record["seed"]))


# ---------------------------------------------------------------- a user's backend, end to end


def test_a_custom_backend_runs_a_real_dump_forward_and_backward(pytester, user_module):
    """Every case goes through the backend: one ``call`` per case, one ``gradients`` per backward case."""
    backend = user_module.instance
    dump = fixture_dump("mlp_tensor")
    result = pytester.runpytest("--npu-precision", str(dump), "--npu-precision-device", "user_backends:instance",
                                "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) > 0 and set(outcomes) == {"passed"}, result.stdout.str()[-3000:]
    assert any(line.startswith("npu-precision: device counting-cpu (") for line in result.stdout.lines)

    keys = [case.rsplit("::", 1)[1] for case in _collected(pytester, dump)]
    assert len(keys) == outcomes["passed"]
    apis = collections.Counter(key.rsplit(".", 2)[0] for key in keys)
    backward = collections.Counter(key.rsplit(".", 2)[0] for key in keys if key.endswith(".backward"))
    assert backward and sum(backward.values()) < len(keys)
    assert collections.Counter(api for what, api in backend.ops if what == "call") == apis
    assert collections.Counter(api for what, api in backend.ops if what == "gradients") == backward
    # Each forward and each backward ran inside running(seed), and synchronized.
    assert backend.asked["running"] == backend.asked["synchronize"] == len(backend.ops)
    assert backend.asked["to_device"] >= len(keys) and backend.asked["to_host"] >= len(keys)


def _collected(pytester, dump) -> list[str]:
    result = pytester.runpytest("--npu-precision", str(dump), "--npu-precision-device", "cpu", "--collect-only", "-q",
                                "-p", "no:cacheprovider")
    return [line for line in result.stdout.lines if "::" in line]


# ---------------------------------------------------------------- the Backend base


def test_to_device_never_aliases_the_callers_tensor():
    x = torch.arange(4.0)
    placed = Backend("cpu").to_device(x)
    placed.add_(1)
    assert torch.equal(x, torch.arange(4.0))


class AliasingBackend(Backend):
    """A careless backend whose to_device hands back the caller's own tensor."""

    def to_device(self, tensor):
        return tensor


def test_the_runner_protects_the_inputs_even_from_an_aliasing_backend():
    x, y = torch.arange(4.0), torch.ones(4)
    result = run_call(resolve("Tensor.add_"), (x, y), device=AliasingBackend("cpu"), baseline=AliasingBackend("cpu"))
    assert torch.equal(x, torch.arange(4.0)) and torch.equal(y, torch.ones(4))
    (out,) = result.outputs
    assert torch.equal(out.actual, torch.arange(4.0) + 1) and torch.equal(out.baseline, torch.arange(4.0) + 1)


def test_info_describes_itself_in_one_line():
    info = BackendInfo("cuda:0", "NVIDIA H100 80GB HBM3", (("torch", "2.13.0"), ("cuda", "12.8")),
                       (("tf32", "off"), ("deterministic", "on")))
    assert info.describe() == "cuda:0 (NVIDIA H100 80GB HBM3; torch 2.13.0, cuda 12.8; tf32 off, deterministic on)"
    assert BackendInfo("remote", "a box").describe() == "remote (a box)"
    assert info.as_dict() == {"name": "cuda:0", "device_name": "NVIDIA H100 80GB HBM3",
                              "versions": {"torch": "2.13.0", "cuda": "12.8"},
                              "settings": {"tf32": "off", "deterministic": "on"}}


def test_a_plain_backend_reports_the_cpu_and_torch():
    assert Backend("cpu").info() == BackendInfo("cpu", _cpu_name(), (("torch", torch.__version__),))
    assert repr(Backend("cpu", name="mine")) == "Backend('mine')"
