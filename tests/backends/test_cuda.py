"""The cuda backend: as the device under test, as the float64 golden, and as a live baseline.

The GPU tests skip, saying so, where ``torch.cuda.is_available()`` is False. On a GPU machine,
``python -m pytest tests/backends/test_cuda.py -s`` also prints how long the cpu and the cuda golden took on
a large matmul (and records it as JUnit properties). The first tests run everywhere.
"""

from __future__ import annotations

import contextlib
import json
import time

import pytest
import torch
from fixtures import FIXTURES, fixture_dump

from pytest_npuprecision import judge
from pytest_npuprecision.backends import Backend, BackendError, CudaBackend, load_backend
from pytest_npuprecision.ops.resolution import resolve
from pytest_npuprecision.replay.runner import run_call

requires_gpu = pytest.mark.skipif(not torch.cuda.is_available(),
                                  reason="needs an NVIDIA GPU: torch.cuda.is_available() is False")
SMALL_DUMP = FIXTURES / "mlp_tensor" / "step0" / "rank0" / "dump.json"
GOLDEN_AGREEMENT = 1e-12  # two float64 goldens differ by summation order only: ~sqrt(K) * 2^-53


def _unavailable(device: str) -> str:
    why = f"torch {torch.__version__} has no CUDA" if torch.version.cuda is None else "no GPU is visible"
    return f"{device} is not available ({why}): use cpu, or run on a machine with an NVIDIA GPU"


# ---------------------------------------------------------------- without a GPU


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible here")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_without_a_gpu_raises_a_backend_error_that_says_why(device):
    with pytest.raises(BackendError) as error:
        CudaBackend(device)
    assert str(error.value) == _unavailable(device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible here")
@pytest.mark.parametrize("option", ["--npu-precision-device", "--npu-precision-golden", "--npu-precision-baseline"])
def test_asking_for_cuda_without_a_gpu_is_a_usage_error(pytester, option):
    args = ["--npu-precision", str(fixture_dump(SMALL_DUMP)), "--npu-precision-device", "cpu", option, "cuda"]
    result = pytester.runpytest(*args, "--collect-only", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.lines[0] == f"ERROR: {option}: {_unavailable('cuda')}"


NEW_TF32_API = hasattr(torch.backends.cudnn, "conv") and hasattr(torch.backends.cudnn.conv, "fp32_precision")
TF32_APIS = ["legacy", "fp32_precision"] if NEW_TF32_API else ["legacy"]


def _tf32_flags() -> tuple[bool, bool]:
    """(matmul, cuDNN conv) TF32, read through the API this torch has (reading the legacy one may raise)."""
    if NEW_TF32_API:
        return (torch.backends.cuda.matmul.fp32_precision == "tf32",
                torch.backends.cudnn.conv.fp32_precision == "tf32")
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


@contextlib.contextmanager
def _process_tf32(on: bool, api: str = "legacy"):
    """TF32 as a training process may set it, by either API; torch's own flags put back afterwards.

    Not monkeypatch: torch serves these flags through __getattr__, and monkeypatch's undo deletes an
    attribute it did not find in the object's __dict__.
    """
    if api == "legacy":
        modules, name, value = [torch.backends.cuda.matmul, torch.backends.cudnn], "allow_tf32", on
    else:
        modules = [torch.backends.cuda.matmul, torch.backends.cudnn.conv, torch.backends.cudnn.rnn]
        name, value = "fp32_precision", "tf32" if on else "ieee"
    saved = [getattr(m, name) for m in modules]
    for module in modules:
        setattr(module, name, value)
    try:
        yield
    finally:
        for module, old in zip(modules, saved):
            setattr(module, name, old)


def _without_gpu(monkeypatch, tf32: bool | None) -> CudaBackend:
    """A CudaBackend whose device context is a no-op, so that its flag handling runs on the CPU."""
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "no GPU (flags only)")
    backend = CudaBackend.__new__(CudaBackend)
    Backend.__init__(backend, "cpu", name="cuda:0")
    backend.tf32 = tf32
    return backend


@pytest.mark.filterwarnings("ignore:Please use the new API settings to control TF32")
@pytest.mark.parametrize("api", TF32_APIS)
@pytest.mark.parametrize("process", [True, False], ids=["process-tf32-on", "process-tf32-off"])
@pytest.mark.parametrize("tf32", [False, True, None], ids=["golden", "allow-tf32", "device"])
def test_running_pins_tf32_for_golden_and_baseline_and_restores_it(monkeypatch, process, tf32, api):
    """Flags only: torch keeps them without a GPU. The same with real matmuls is the GPU test below.

    Since torch 2.9 a process may set TF32 through fp32_precision, after which torch refuses to read the
    legacy allow_tf32 flags: the backend must neither read them nor fail then.
    """
    backend = _without_gpu(monkeypatch, tf32)
    expected = process if tf32 is None else tf32
    with _process_tf32(process, api):
        with backend.running(7):
            inside = (*_tf32_flags(), torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
                      torch.are_deterministic_algorithms_enabled())
        after = _tf32_flags()
        settings = dict(backend.info().settings)
    assert inside == (expected, expected, True, False, True)
    assert after == (process, process)
    assert settings["tf32 matmul"] == settings["tf32 conv"] == ("on" if expected else "off")
    assert not torch.backends.cudnn.deterministic and not torch.are_deterministic_algorithms_enabled()


def test_the_device_reports_matmul_and_conv_tf32_apart(monkeypatch):
    """torch's defaults differ: float32 matmuls in full precision, cuDNN convolutions in TF32. A device
    under test that said "tf32 off" would hide that its convolutions round to 10 bits."""
    info = _without_gpu(monkeypatch, None).info()
    assert dict(info.settings) == {"tf32 matmul": "off", "tf32 conv": "on", "deterministic": "on"}
    assert "tf32 matmul off, tf32 conv on" in info.describe()
    golden = dict(_without_gpu(monkeypatch, False).info().settings)
    assert golden["tf32 matmul"] == golden["tf32 conv"] == "off"


# ---------------------------------------------------------------- the cuda backend itself


@requires_gpu
def test_info_names_the_gpu_and_the_cuda_version():
    info = load_backend("cuda").info()
    assert info.name == "cuda:0" and info.device_name == torch.cuda.get_device_name(0)
    versions = dict(info.versions)
    assert versions["torch"] == torch.__version__ and versions["cuda"] == torch.version.cuda
    assert info.describe().startswith(f"cuda:0 ({torch.cuda.get_device_name(0)}; torch {torch.__version__}, "
                                      f"cuda {torch.version.cuda}")
    assert dict(info.settings)["deterministic"] == "on"


@requires_gpu
def test_an_index_past_the_last_gpu_names_the_range():
    count = torch.cuda.device_count()
    with pytest.raises(BackendError) as error:
        load_backend(f"cuda:{count}")
    assert str(error.value) == (f"cuda:{count} does not exist: this machine has {count} GPU(s), "
                                f"cuda:0 to cuda:{count - 1}")


@requires_gpu
@pytest.mark.filterwarnings("ignore:Please use the new API settings to control TF32")
@pytest.mark.parametrize("api", TF32_APIS)
def test_tf32_stays_off_in_a_cuda_golden_even_when_the_process_turned_it_on(api):
    with _process_tf32(True, api):
        _check_tf32_roles()


def _check_tf32_roles() -> None:
    golden, device = load_backend("cuda", "golden"), load_backend("cuda", "device")
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(512, 4096, generator=generator).cuda()
    b = torch.randn(4096, 512, generator=generator).cuda()
    exact = a.double() @ b.double()

    def error() -> float:  # norm-wise: float32 gives ~1e-7, TF32 (10-bit inputs) ~4e-4
        return ((a @ b).double() - exact).norm().item() / exact.norm().item()

    with golden.running(0):
        flags = _tf32_flags()
        golden_error = error()
    assert flags == (False, False)
    assert _tf32_flags() == (True, True)  # restored
    with device.running(0):  # the device under test keeps what the process (training) uses
        device_flag = _tf32_flags()[0]
        device_error = error()
    assert device_flag is True
    assert golden_error < 1e-5, golden_error
    if torch.cuda.get_device_capability() >= (8, 0):  # TF32 tensor cores exist from Ampere on
        assert device_error > 1e-4, device_error
    assert dict(golden.info().settings)["tf32 matmul"] == "off" and dict(device.info().settings)["tf32 matmul"] == "on"
    with load_backend("cuda", "golden", allow_tf32=True).running(0):
        assert _tf32_flags() == (True, True)  # --npu-precision-allow-tf32


# ---------------------------------------------------------------- the cuda golden agrees with the cpu golden


def _inputs(*shapes, dtype=torch.float32, seed=0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype) for shape in shapes]


def _op_cases() -> list:
    """(api, args, kwargs, inputs to differentiate), small enough to build at collection."""
    x, w, b = _inputs((64, 4096), (256, 4096), (256,))
    m1, m2 = _inputs((128, 4096), (4096, 128), seed=1)
    h1, h2 = _inputs((96, 2048), (2048, 80), dtype=torch.bfloat16, seed=2)
    logits, = _inputs((32, 1000), seed=3)
    ln, ln_w, ln_b = _inputs((16, 1024), (1024,), (1024,), seed=4)
    q, k, v = _inputs((2, 4, 128, 64), (2, 4, 128, 64), (2, 4, 128, 64), seed=5)
    img, kernel, bias = _inputs((4, 16, 32, 32), (32, 16, 3, 3), (32,), seed=6)
    return [
        pytest.param("Functional.linear", (x, w, b), {}, (0, 1, 2), id="linear-float32-K4096"),
        pytest.param("Torch.matmul", (m1, m2), {}, (0, 1), id="matmul-float32-K4096"),
        pytest.param("Torch.matmul", (h1, h2), {}, (0, 1), id="matmul-bfloat16-K2048"),
        pytest.param("Functional.softmax", (logits,), {"dim": -1}, (0,), id="softmax"),
        pytest.param("Functional.layer_norm", (ln, (1024,), ln_w, ln_b), {}, (0, 2, 3), id="layer_norm"),
        pytest.param("Functional.scaled_dot_product_attention", (q, k, v), {"is_causal": True}, (0, 1, 2),
                     id="sdpa-causal"),
        pytest.param("Functional.conv2d", (img, kernel, bias), {"padding": 1}, (0, 1, 2), id="conv2d"),
    ]


def _relative_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().cpu().double(), b.detach().cpu().double()
    return ((a - b).abs().max() / b.abs().max().clamp_min(torch.finfo(torch.float64).tiny)).item()


@requires_gpu
@pytest.mark.parametrize("api, args, kwargs, grad", _op_cases())
def test_the_cuda_golden_agrees_with_the_cpu_golden(api, args, kwargs, grad):
    device = load_backend("cuda")
    runs = {name: run_call(resolve(api), args, kwargs, device=device, golden=golden, backward=True,
                           requires_grad=grad, seed=1)
            for name, golden in [("cpu", Backend("cpu")), ("cuda", load_backend("cuda", "golden"))]}
    cpu, gpu = runs["cpu"], runs["cuda"]
    assert cpu.ok and gpu.ok and cpu.golden_dtype == gpu.golden_dtype == torch.float64, (cpu.notes, gpu.notes)
    cpu_outputs = {o.name: o for o in cpu.outputs + cpu.grads}
    gpu_outputs = {o.name: o for o in gpu.outputs + gpu.grads}
    assert cpu_outputs.keys() == gpu_outputs.keys() and len(cpu.grads) == len(grad)
    for name, on_gpu in gpu_outputs.items():
        on_cpu = cpu_outputs[name]
        assert on_gpu.golden.device.type == "cuda" and on_gpu.golden.dtype == torch.float64
        difference = _relative_difference(on_gpu.golden, on_cpu.golden)
        assert difference < GOLDEN_AGREEMENT, f"{api} {name}: the goldens differ by {difference:.3g}"
        # One device output judged against each golden, the cuda one where it lies: the same verdict.
        # (Not each run's own device output: some GPU backward kernels are not bitwise reproducible.)
        by_cpu = judge(on_cpu.actual, on_cpu.golden, op=api, accumulation=on_cpu.accumulation)
        by_gpu = judge(on_cpu.actual.cuda(), on_gpu.golden, op=api, accumulation=on_gpu.accumulation)
        assert (by_gpu.status, by_gpu.standard) == (by_cpu.status, by_cpu.standard), f"{api} {name}"


@requires_gpu
def test_timing_of_the_cpu_and_the_cuda_golden_on_a_large_matmul(record_property, capsys):
    a, b = _inputs((2048, 8192), (8192, 2048), seed=7)
    op, device, cuda_golden = resolve("Torch.matmul"), load_backend("cuda"), load_backend("cuda", "golden")
    run_call(op, (a[:64], b[:, :64]), device=device, golden=cuda_golden)  # cuBLAS handles, workspace
    runs, walls = {}, {}
    for name, golden in [("cpu", Backend("cpu")), ("cuda", cuda_golden)]:
        start = time.perf_counter()
        runs[name] = run_call(op, (a, b), device=device, golden=golden)
        walls[name] = time.perf_counter() - start
    difference = _relative_difference(runs["cuda"].outputs[0].golden, runs["cpu"].outputs[0].golden)
    assert difference < GOLDEN_AGREEMENT
    line = (f"float64 golden of matmul [2048, 8192] @ [8192, 2048] on {torch.cuda.get_device_name(0)}: "
            f"cpu {runs['cpu'].golden_seconds:.3f} s (case {walls['cpu']:.3f} s), "
            f"cuda {runs['cuda'].golden_seconds:.4f} s (case {walls['cuda']:.3f} s), goldens differ by {difference:.2g}")
    for name in runs:
        record_property(f"{name}_golden_seconds", f"{runs[name].golden_seconds:.6f}")
        record_property(f"{name}_case_seconds", f"{walls[name]:.6f}")
    with capsys.disabled():
        print(f"\n{line}")


# ---------------------------------------------------------------- real dumps, end to end

DUMPS = ["mlp_tensor", "mlp_fp16_tensor", "mlp_statistics", "transformer_tensor", "transformer_bf16_tensor"]


def _run_dump(pytester, dump: str, *options: str) -> tuple[dict[str, int], dict[str, dict], list[str]]:
    """Outcomes, the cases.jsonl records by case id, and the output lines of one run."""
    report = pytester.path / f"report{len(list(pytester.path.glob('report*')))}"
    result = pytester.runpytest("--npu-precision", str(fixture_dump(dump)), "--npu-precision-report", str(report),
                                "-p", "no:cacheprovider", "-rfEs", *options)
    lines = result.stdout.lines
    assert (report / "cases.jsonl").is_file(), "\n".join(lines[-40:] + result.stderr.lines[-20:])
    records = (json.loads(line) for line in (report / "cases.jsonl").read_text().splitlines())
    return result.parseoutcomes(), {r["case_id"]: r for r in records}, lines


def _assert_all_pass(outcomes: dict[str, int], lines: list[str]) -> None:
    clean = outcomes.get("passed", 0) > 0 and not outcomes.get("failed") and not outcomes.get("errors")
    assert clean, "\n".join(lines[-80:])


@requires_gpu
@pytest.mark.parametrize("dump", DUMPS)
def test_real_dumps_pass_with_the_gpu_as_device_under_test(pytester, dump):
    outcomes, records, lines = _run_dump(pytester, dump, "--npu-precision-device", "cuda")
    _assert_all_pass(outcomes, lines)
    header = next(line for line in lines if line.startswith("npu-precision: device "))
    assert header.startswith(f"npu-precision: device cuda:0 ({torch.cuda.get_device_name(0)}; ")
    assert {r["device"] for r in records.values()} == {"cuda:0"}
    assert all(r["reason"] for r in records.values() if r["status"] == "skip")


@requires_gpu
@pytest.mark.parametrize("dump", ["mlp_tensor", "mlp_statistics", "transformer_bf16_tensor"])
def test_a_cuda_golden_judges_a_dump_as_the_cpu_golden_does(pytester, dump):
    _, by_cpu, _ = _run_dump(pytester, dump, "--npu-precision-device", "cuda")
    outcomes, by_gpu, lines = _run_dump(pytester, dump, "--npu-precision-device", "cuda",
                                        "--npu-precision-golden", "cuda")
    _assert_all_pass(outcomes, lines)
    assert any(line.endswith(", golden cuda:0 float64, baseline none, seed crc32(case id) per case") for line in lines)
    assert by_gpu.keys() == by_cpu.keys()
    for case_id, record in by_gpu.items():
        other = by_cpu[case_id]
        assert [(o["name"], o["standard"]) for o in record["outputs"]] == \
            [(o["name"], o["standard"]) for o in other["outputs"]], case_id
        # The golden's own statistics: the device's output may differ by a bit between the two runs.
        for mine, theirs in zip(record["outputs"], other["outputs"]):
            a, b = mine["metrics"]["golden_rms"], theirs["metrics"]["golden_rms"]
            assert abs(a - b) <= GOLDEN_AGREEMENT * max(abs(a), abs(b)), (case_id, mine["name"], a, b)


def _judged_against_the_baseline(records: dict[str, dict]) -> None:
    ran = [r for r in records.values() if r["status"] not in ("skip",)]
    assert ran and all(r["baseline_state"] == "live" for r in ran), {r["case_id"]: r["status"] for r in ran}
    standards = {o["standard"] for r in ran for o in r["outputs"]}
    assert standards - {"binary"} and all(s == "binary" or s.startswith("benchmark+") for s in standards), standards


@requires_gpu
def test_a_live_cuda_baseline_of_the_same_gpu_passes_every_case(pytester):
    """Device and baseline run the same kernels, so every benchmark ratio is 1."""
    outcomes, records, lines = _run_dump(pytester, "mlp_tensor", "--npu-precision-device", "cuda",
                                         "--npu-precision-baseline", "cuda")
    _assert_all_pass(outcomes, lines)
    assert any(", baseline cuda:0 same dtype, " in line for line in lines if line.startswith("npu-precision: "))
    _judged_against_the_baseline(records)


@requires_gpu
@pytest.mark.parametrize("device, baseline", [("cpu", "cuda"), ("cuda", "cpu")])
def test_a_live_baseline_across_cpu_and_gpu_runs_every_case(pytester, device, baseline, record_property):
    """Whether one fair device's error stays within the benchmark ratios of another's is the limits'
    business, not the adapter's: this checks that every case ran against the live baseline, and
    records how many failed."""
    outcomes, records, lines = _run_dump(pytester, "mlp_tensor", "--npu-precision-device", device,
                                         "--npu-precision-baseline", baseline)
    assert outcomes.get("passed", 0) > 0 and not outcomes.get("errors"), "\n".join(lines[-80:])
    assert all(r["status"] in ("pass", "warning", "error", "skip") for r in records.values())  # no harness errors
    _judged_against_the_baseline(records)
    record_property("benchmark_failures", str(outcomes.get("failed", 0)))
