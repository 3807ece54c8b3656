"""The npu backend against a stand-in torch_npu (tests/stand_in_torch_npu): device selection, INF_NAN, errors.

Importing the stand-in renames torch's PrivateUse1 backend to npu for good, so every test that
imports it runs in a subprocess. No tensor op ever runs on the fake npu: it has no kernels.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fixtures import FIXTURES, fixture_dump

from pytest_npuprecision.backends import Backend, auto_backend

STAND_IN = Path(__file__).parents[1] / "stand_in_torch_npu"
DUMP = FIXTURES / "mlp_tensor" / "step0" / "rank0" / "dump.json"
CONTROLS = ("STAND_IN_NPU_IMPORT_ERROR", "STAND_IN_NPU_COUNT", "STAND_IN_NPU_INF_NAN", "INF_NAN_MODE_ENABLE")

pytestmark = pytest.mark.skipif("torch_npu" in sys.modules or torch._C._get_privateuse1_backend_name() != "privateuseone",
                                reason="a torch_npu (or another PrivateUse1 backend) is already loaded in this process")


@pytest.fixture
def stand_in(monkeypatch):
    """Subprocesses import the stand-in as torch_npu; returns a setter for its controls (None unsets)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(STAND_IN), os.environ.get("PYTHONPATH")])))
    for name in CONTROLS:
        monkeypatch.delenv(name, raising=False)

    def controls(**values: str | None) -> None:
        for name, value in values.items():
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)

    return controls


def header(name: str, versions: str, settings: str) -> str:
    return (f"npu-precision: device {name} (Ascend910B2-standin; torch {torch.__version__}, {versions}; {settings}), "
            f"golden cpu float64, baseline none, seed crc32(case id) per case")


FLOAT32_LINE = "npu-precision: float32 matmul ieee, conv hf32, rnn ieee on the device; policy as-run (--npu-precision-fp32)"


# ---------------------------------------------------------------- torch_npu that does not import


def test_a_torch_npu_that_fails_to_import_is_a_usage_error_naming_it_and_the_fix(pytester, monkeypatch):
    # In process: the stand-in raises before it touches torch, so nothing is renamed here.
    monkeypatch.setenv("STAND_IN_NPU_IMPORT_ERROR", "1")
    monkeypatch.syspath_prepend(STAND_IN)
    result = pytester.runpytest("--npu-precision", str(fixture_dump(DUMP)), "--npu-precision-device", "npu", "--collect-only",
                                "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.lines[0] == (
        "ERROR: --npu-precision-device: npu needs torch_npu, which does not import here (ImportError: libhccl.so: "
        "cannot open shared object file: No such file or directory (stand-in torch_npu: STAND_IN_NPU_IMPORT_ERROR "
        f"is set)): install the torch_npu release that matches torch {torch.__version__} and source CANN's set_env.sh")
    assert "torch_npu" not in sys.modules
    if not torch.cuda.is_available():
        assert type(auto_backend()) is Backend and auto_backend().name == "cpu"  # auto moves on without it


# ---------------------------------------------------------------- the adapter, many settings in one process

ADAPTER_CHECKS = r"""
import json, os, torch
from pytest_npuprecision.backends import BackendError, auto_backend, load_backend
from pytest_npuprecision.reports.run_facts import RunFacts
from pytest_npuprecision.checks.case_run import Settings

def env(**values):
    for name, value in values.items():
        os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)

def error(spec):
    try:
        load_backend(spec)
    except BackendError as exc:
        return str(exc)
    return None

import torch_npu
calls = torch_npu.npu.standin_set_device_calls
out = {}
env(STAND_IN_NPU_COUNT="0")
out["no_device"] = error("npu")
out["auto_without_device"] = auto_backend().name
env(STAND_IN_NPU_COUNT="2", STAND_IN_NPU_INF_NAN="1")
out["out_of_range"] = error("npu:5")
auto = auto_backend()
out["auto"] = [type(auto).__name__, auto.name, list(calls)]
del calls[:]
chosen = load_backend("npu:1")
out["chosen"] = [chosen.name, str(chosen.device), list(calls), torch.npu.current_device()]
out["info"] = chosen.info().as_dict()
out["header"] = RunFacts.of(Settings(device=chosen)).header()
with chosen.running(1234):
    out["inside"] = [torch.are_deterministic_algorithms_enabled(), torch_npu.npu.standin_seeds[-1]]
out["after"] = torch.are_deterministic_algorithms_enabled()
modes = {}
for inf_nan, enable in [("1", None), ("0", None), ("0", "1"), (None, "1"), (None, "0"), (None, None)]:
    env(STAND_IN_NPU_INF_NAN=inf_nan, INF_NAN_MODE_ENABLE=enable)
    modes[f"{inf_nan}/{enable}"] = dict(load_backend("npu").info().settings)["inf_nan_mode"]
out["modes"] = modes
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def adapter() -> dict:
    """What the npu adapter did with the stand-in, in one subprocess."""
    env = {k: v for k, v in os.environ.items() if k not in CONTROLS}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STAND_IN), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", ADAPTER_CHECKS], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_no_visible_npu_is_an_error_and_auto_moves_on(adapter):
    assert adapter["no_device"] == ("torch_npu imports but sees no NPU: check ASCEND_RT_VISIBLE_DEVICES and that "
                                    "npu-smi info lists a device")
    assert adapter["auto_without_device"] == ("cuda:0" if torch.cuda.is_available() else "cpu")


def test_an_index_past_the_last_npu_names_the_range(adapter):
    assert adapter["out_of_range"] == "npu:5 does not exist: this machine has 2 NPU(s), npu:0 to npu:1"


def test_auto_picks_the_current_npu_when_torch_npu_sees_one(adapter):
    assert adapter["auto"] == ["NpuBackend", "npu:0", [0]]


def test_npu_1_selects_device_1(adapter):
    assert adapter["chosen"] == ["npu:1", "npu:1", [1], 1]


def test_info_names_the_chip_versions_and_settings(adapter):
    assert adapter["info"] == {
        "name": "npu:1", "device_name": "Ascend910B2-standin",
        "versions": {"torch": torch.__version__, "torch_npu": "2.13.0.standin"},
        "settings": {"inf_nan_mode": "on", "deterministic": "on"}}
    assert adapter["header"] == [header("npu:1", "torch_npu 2.13.0.standin", "inf_nan_mode on, deterministic on"),
                                 FLOAT32_LINE]


def test_each_call_runs_deterministic_with_the_case_seed_on_the_npu_too(adapter):
    assert adapter["inside"] == [True, 1234]
    assert adapter["after"] is False


@pytest.mark.parametrize("asked, mode", [
    ("1/None", "on"),
    ("0/None", "off (saturation)"),
    ("0/1", "off (saturation)"),  # torch_npu's own answer wins over the environment
    ("None/1", "on"),  # a torch_npu without is_support_inf_nan: INF_NAN_MODE_ENABLE says
    ("None/0", "off (saturation)"),
    ("None/None", "unknown"),
])
def test_inf_nan_mode_comes_from_torch_npu_else_the_environment(adapter, asked, mode):
    """asked: STAND_IN_NPU_INF_NAN / INF_NAN_MODE_ENABLE."""
    assert adapter["modes"][asked] == mode


# ---------------------------------------------------------------- the header of a real run


@pytest.mark.parametrize("device, controls, shown", [
    ("npu:1", {"STAND_IN_NPU_INF_NAN": "1"}, ("npu:1", "inf_nan_mode on")),
    ("auto", {"STAND_IN_NPU_INF_NAN": "0"}, ("npu:0", "inf_nan_mode off (saturation)")),
    ("npu:1", {}, ("npu:1", "inf_nan_mode unknown")),
], ids=["inf-nan", "saturation-auto", "unknown"])
def test_the_header_line_shows_the_npu_and_its_inf_nan_mode(pytester, stand_in, device, controls, shown):
    stand_in(STAND_IN_NPU_COUNT="2", **controls)
    result = pytester.runpytest_subprocess("--npu-precision", str(fixture_dump(DUMP)), "--npu-precision-device", device,
                                           "--collect-only", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    name, mode = shown
    assert header(name, "torch_npu 2.13.0.standin", f"{mode}, deterministic on") in result.stdout.lines
    result.stdout.fnmatch_lines(["*23 tests collected*"])
