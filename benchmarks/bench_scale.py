"""How the harness scales, against issues 19 and 41: start-up, collection, per-case cost, xdist, msprobe.

Each line prints the measurement, its target and the ratio; the script exits 1 when any measurement
misses its target by more than 2x, so a regression shows. Every pytest run is a fresh subprocess in
an empty folder (warm bytecode cache: run it twice after changing the code).

    python benchmarks/bench_scale.py [--quick] [--no-msprobe] [--markdown]

`--markdown` ends with the README's speed table: every figure, its target and the load average when
it was taken.

- start-up: `pytest --co` in an empty folder, the plugin installed but unused against `-p no:npuprecision`
  and against a site-packages without the plugin, in paired alternating whole processes (10 rounds,
  4 with --quick): the median ratio of CPU (getrusage of the child) and of wall, and the peak RSS
- collection: `pytest --co --npu-precision` of synthetic statistics dumps of 1k, 10k and 100k entries,
  CPU (getrusage of the child) above the start-up of a 1-entry dump, and beside it pytest's own floor:
  as many bare `pytest.Item`s, and parametrized test functions, made by a conftest
- per case: the median CPU (process time, one intra-op thread) of 1,000 small statistics cases (linear
  forward and backward, gelu, add_), in process (run_case) and as pytest items (each item's whole run
  protocol, timed by a hook), beside pytest's own per-item run cost with torch loaded
- xdist: `-n 2` against a serial run of the same dump, wall time (and against a serial run with one
  intra-op thread); the target is not to lose (issue 41 retired issue 19's 1.6x)
- judging threads: judge() of one 1M-element float32 output with torch's default threads over one thread
- matmul memory: the peak RSS rise of one case judging a 4096x4096 float32 matmul (2048 with --quick) from a
  tensor dump, in a fresh process, over the bytes of its dumped tensors
- against msprobe: a whole tensor dump (transformer_tensor's step 0, 4 times over; once with --quick)
  by us, serial and -n 2, and by msprobe's acc_check on the CPU, per API (benchmarks/bench_msprobe.py)
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_dump  # noqa: E402  (its synthetic dumps)
import bench_metrics  # noqa: E402  (its seeded judge inputs)
import bench_msprobe  # noqa: E402  (a whole dump against msprobe's acc_check)
from bench_report import MISSES, load_average, markdown, report  # noqa: E402

from pytest_npuprecision import capture
from pytest_npuprecision.checks.case_run import CaseInputError, CaseSkipped, Settings, run_case
from pytest_npuprecision.dump.dump_cases import load_dump
from pytest_npuprecision.replay.threads import available_cores

ROOT = Path(__file__).resolve().parents[1]
def synthetic_dump(entries: int, folder: Path, apis: tuple[str, ...] | None = None) -> Path:
    """The rank folder of a statistics dump of ``entries`` entries copied from the mlp statistics fixture."""
    source = next((ROOT / "tests" / "data" / "msprobe-dumps" / "mlp_statistics").rglob("dump.json"))
    return bench_dump.synthetic_dump(source, entries, folder, apis).parent


def pytest_wall(*args: str, cwd: Path, env: dict[str, str] | None = None) -> float:
    """Wall seconds of one fresh pytest run (its peak memory is pytest_usage's: ru_maxrss of a child
    counts the pages of this process, which forked it)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=cwd,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    return time.perf_counter() - started


# Start-up (issue 41): `pytest --co` in an empty folder three ways, in alternating whole processes,
# each launched alike (`python -S`, then site.addsitedir of a site-packages folder, then pytest), so
# that a machine others use moves both sides of each ratio alike:
STARTUP_WAYS = {
    "plugin unused": (),  # installed, in the run, no dump and no op case: the user's everyday cost
    "-p no:npuprecision": ("-p", "no:npuprecision"),  # blocked before pluggy imports it
    "not installed": (),  # a site-packages of links to every entry but the plugin's
}
LAUNCH = ("import runpy, site, sys; site.addsitedir(sys.argv[1]); sys.argv = ['pytest', *sys.argv[2:]]; "
          "runpy.run_module('pytest', run_name='__main__', alter_sys=True)")


def start_up(empty: Path, folder: Path, pairs: int) -> None:
    """Median over paired, alternating runs of the plugin unused over each way without it, CPU
    (getrusage of the child) and wall, with the lowest and highest pair."""
    sites = _startup_sites(folder / "site-packages")
    ways = [way for way in STARTUP_WAYS if way in sites]
    runs: dict[str, list[tuple[float, float, float]]] = {way: [] for way in ways}
    for turn in range(pairs):
        for way in ways if turn % 2 == 0 else reversed(ways):
            runs[way].append(_startup_run(sites[way], STARTUP_WAYS[way], empty))
    print(f"start-up: {pairs} rounds, median wall / CPU seconds: "
          + ", ".join(f"{way} {statistics.median(r[0] for r in runs[way]):.2f} / "
                      f"{statistics.median(r[1] for r in runs[way]):.2f}" for way in ways))
    for baseline in ways[1:]:
        for index, kind in ((1, "CPU"), (0, "wall")):
            ratios = [used[index] / without[index] for used, without in zip(runs["plugin unused"], runs[baseline])]
            report(f"start-up: plugin unused / {baseline}, {kind}", statistics.median(ratios), 1.2, "x",
                   detail=f"median of {pairs} pairs, {min(ratios):.2f}-{max(ratios):.2f}x")
    extra = statistics.median(used[2] - without[2] for used, without in zip(runs["plugin unused"], runs[ways[-1]]))
    report(f"start-up: extra peak memory of the plugin over {ways[-1]}", max(0.0, extra), 20, "MiB")


def _startup_sites(farm: Path) -> dict[str, Path]:
    """The site-packages folder each way runs with; "not installed" only where the plugin is installed."""
    try:
        site_packages = Path(importlib.metadata.distribution("pytest-npuprecision").locate_file(""))
    except importlib.metadata.PackageNotFoundError:
        print("start-up: the plugin is not installed here, so every way below runs without it")
        return {"plugin unused": Path(sysconfig.get_paths()["purelib"])}
    farm.mkdir()
    for entry in site_packages.iterdir():  # the package, its dist-info, an editable install's hook
        if not re.match(r"(__editable__[._]+)?pytest_npuprecision", entry.name):
            (farm / entry.name).symlink_to(entry)
    return {"plugin unused": site_packages, "-p no:npuprecision": site_packages, "not installed": farm}


def _startup_run(site_packages: Path, args: tuple[str, ...], cwd: Path) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS MiB) of one `pytest --co` process. The checkout's package
    comes first on its path, as for `python -m pytest` in the checkout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-S", "-c", LAUNCH, str(site_packages), "-q", "-p", "no:cacheprovider",
                              "--co", *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = 0
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) not in (0, 5):  # 5: no tests collected
        raise SystemExit(f"start-up run failed ({os.waitstatus_to_exitcode(status)}): {site_packages} {args}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def info(what: str, value: float, unit: str) -> None:
    """A figure printed beside the targets, with none of its own (pytest's floor, a reference)."""
    print(f"{what:58s} {value:9.3g} {unit:4s} (reference)")


# pytest, which prints its own peak RSS at exit: getrusage's ru_maxrss of a child counts the pages of
# the process it was forked from (this one, torch loaded), so a child smaller than that reads as its size.
_PEAK_RSS = """import atexit, runpy, sys
def peak():
    with open("/proc/self/status") as status:
        print("PEAK_RSS_KB", next(line.split()[1] for line in status if line.startswith("VmHWM:")))
atexit.register(peak)
sys.argv[0] = "pytest"
runpy.run_module("pytest", run_name="__main__", alter_sys=True)
"""


def pytest_usage(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """(CPU seconds, peak RSS MiB of that pytest process, its output) of one fresh pytest run."""
    with tempfile.TemporaryFile("w+") as out:
        child = subprocess.Popen([sys.executable, "-c", _PEAK_RSS, "-q", "-p", "no:cacheprovider", *args], cwd=cwd,
                                 stdout=out, stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})})
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        output = out.read()
    if child.returncode != 0:
        raise SystemExit(f"pytest {' '.join(args)} failed ({child.returncode}): {output[-2000:]}")
    peak = next(int(line.split()[1]) for line in output.splitlines() if line.startswith("PEAK_RSS_KB "))
    return usage.ru_utime + usage.ru_stime, peak / 1024, output


def least(runs: int, *args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float, str]:
    return min((pytest_usage(*args, cwd=cwd, env=env) for _ in range(runs)), key=lambda r: r[0])


# pytest's own floor: items that do nothing, as a conftest makes them (bare Items) or as a test file does.
_BARE_ITEMS = """
import gc, os, pytest
class Bare(pytest.Item):
    def runtest(self):
        pass
class Items(pytest.Collector):
    def collect(self):
        if os.environ.get("NO_GC"):  # as the plugin makes its items: no cyclic gc, frozen after
            gc.disable()
        items = [Bare.from_parent(self, name=f"Functional.gelu.{i}.forward") for i in range(int(os.environ["ITEMS"]))]
        if os.environ.get("NO_GC"):
            gc.freeze()
            gc.enable()
        return items
def pytest_collect_file(file_path, parent):
    if file_path.name == "items.txt":
        return Items.from_parent(parent, path=file_path, name=file_path.name)
"""
_PARAMETRIZED = """
import os, pytest
@pytest.mark.parametrize("i", range(int(os.environ["ITEMS"])))
def test_nothing(i):
    pass
"""


def pytest_floor(folder: Path, source: str, file_name: str) -> Path:
    folder.mkdir()
    (folder / file_name).write_text(source)
    (folder / "items.txt").write_text("")
    return folder


def collection(empty: Path, folder: Path, sizes: list[int]) -> None:
    """CPU (getrusage) above the start-up of a run collecting one entry, so torch and the core are
    imported as for any dump; the issue's targets hold at 100k entries."""
    base, base_rss, _ = least(2, "--co", "--npu-precision", str(synthetic_dump(1, folder / "collect1")), cwd=empty)
    for size in sizes:
        dump = synthetic_dump(size, folder / f"collect{size}")
        cpu, rss, _ = pytest_usage("--co", "--npu-precision", str(dump), cwd=empty)
        report(f"collection: {size} entries, CPU above start-up", cpu - base, max(30e-6 * size, 0.1), "s")
    report(f"collection: {size} entries, CPU per entry", (cpu - base) / size * 1e6, 30, "us")
    report(f"collection: {size} entries, peak memory above start-up", rss - base_rss, 300, "MiB")
    bare = pytest_floor(folder / "bare", _BARE_ITEMS, "conftest.py")
    floors = {"bare pytest.Item": (bare, {}), "bare pytest.Item, no cyclic gc": (bare, {"NO_GC": "1"}),
              "parametrized test": (pytest_floor(folder / "parametrized", _PARAMETRIZED, "test_nothing.py"), {})}
    for name, (where, env) in floors.items():
        one, one_rss, _ = least(2, "--co", "-p", "no:npuprecision", cwd=where, env={**env, "ITEMS": "1"})
        many, many_rss, _ = pytest_usage("--co", "-p", "no:npuprecision", cwd=where, env={**env, "ITEMS": str(size)})
        info(f"pytest's floor: {size} items ({name}), CPU per item", (many - one) / size * 1e6, "us")
        info(f"pytest's floor: {size} items ({name}), memory", many_rss - one_rss, "MiB")


SMALL_APIS = ("Functional.linear", "Functional.gelu", "Tensor.add_")

# A plugin that times each item's whole run protocol (setup, call, teardown and their reports) in
# CPU seconds, and prints the median at the end.
_ITEM_CPU = """
import json, statistics, time, pytest
_cpu = []
@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    started = time.process_time()
    try:
        return (yield)
    finally:
        _cpu.append(time.process_time() - started)
def pytest_unconfigure(config):
    print("ITEM_CPU " + json.dumps({"items": len(_cpu), "median": statistics.median(_cpu) if _cpu else None}))
"""


def item_cpu(output: str) -> tuple[int, float]:
    """(items timed, their median CPU seconds) from a run with the item_cpu plugin."""
    line = next(line for line in output.splitlines() if line.startswith("ITEM_CPU "))
    found = json.loads(line.removeprefix("ITEM_CPU "))
    return found["items"], found["median"]


def per_case(folder: Path, cases: int = 1000) -> None:
    """The median CPU of one small case with one intra-op thread (as the thread policy runs it)."""
    torch.set_num_threads(1)
    dump_folder = synthetic_dump(cases, folder / "small-cases", SMALL_APIS)
    settings = Settings(device=torch.device("cpu"))
    dump = load_dump(dump_folder / "dump.json")
    cpu = []
    for round_ in range(2):  # the first round loads what every case uses
        cpu.clear()
        for case in dump.cases:
            started = time.process_time()
            try:
                run_case(case, dump.data_dir, settings)
            except (CaseSkipped, CaseInputError):
                continue
            cpu.append(time.process_time() - started)
    report(f"per case: median CPU of {len(cpu)} small cases, in process", statistics.median(cpu) * 1e3, 3.0, "ms")
    plugins = folder / "item-plugins"
    plugins.mkdir()
    (plugins / "item_cpu.py").write_text(_ITEM_CPU)
    (plugins / "conftest.py").write_text("import torch  # its loggers, as in a run of dump cases\n" + _BARE_ITEMS)
    (plugins / "items.txt").write_text("")
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(plugins), os.environ.get("PYTHONPATH", "")])}
    _, _, output = pytest_usage("-p", "item_cpu", "--npu-precision", str(dump_folder), "--npu-precision-device", "cpu",
                                cwd=folder / "empty", env=env)
    items, median = item_cpu(output)
    report(f"per case: median CPU of {items} small cases, pytest items", median * 1e3, 3.0, "ms")
    _, _, output = pytest_usage("-p", "item_cpu", "-p", "no:npuprecision", cwd=plugins,
                                env={**env, "ITEMS": str(cases)})
    items, median = item_cpu(output)
    info(f"pytest's floor: median CPU of {items} bare items, torch loaded", median * 1e3, "ms")


def xdist(empty: Path, folder: Path, entries: int) -> None:
    dump = synthetic_dump(entries, folder / f"xdist{entries}")
    serial = pytest_wall("--npu-precision", str(dump), cwd=empty)
    parallel = pytest_wall("--npu-precision", str(dump), "-n", "2", cwd=empty)
    # Issue 41 retired issue 19's 1.6x: on 2 cores xdist's own messages bound it near 2C / (C + E), and
    # a serial run now gives small cases one thread, as each worker does. -n 2 must not lose.
    report(f"xdist: -n 2 speed-up over serial, {entries} cases", serial / parallel, 0.9, "x", higher_is_better=True)
    one_thread = pytest_wall("--npu-precision", str(dump), cwd=empty, env={"OMP_NUM_THREADS": "1"})
    report(f"xdist: -n 2 over serial with 1 thread, {entries} cases", one_thread / parallel, 0.9, "x",
           higher_is_better=True)


def judge_threads(elements: int = 1 << 20) -> None:
    """judge() of one float32 output with torch's default intra-op threads over the same with one."""
    golden, actual, _ = bench_metrics.make_inputs(elements, torch.float32, False)
    times = {}
    for threads in (1, available_cores()):  # per_case() has set one thread by now
        torch.set_num_threads(threads)
        bench_metrics.run_judge(golden, actual, None)
        times[threads] = min(timed(lambda: bench_metrics.run_judge(golden, actual, None)) for _ in range(5))
    report(f"judging 1M float32: {max(times)} threads over 1 thread, time", times[max(times)] / times[1], 1.0, "x")
    torch.set_num_threads(1)


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def matmul_memory(folder: Path, size: int) -> None:
    """Peak memory of one case judging a size x size float32 matmul, over its dumped tensors' bytes."""
    dump = folder / f"matmul{size}"
    child = subprocess.run([sys.executable, __file__, "--matmul-child", str(dump), str(size)],
                           capture_output=True, text=True, check=True)
    measured = json.loads(child.stdout.strip().splitlines()[-1])
    report(f"matmul {size}x{size} float32: peak memory over its tensors", measured["ratio"], 3.0, "x")


def matmul_child(dump: Path, size: int) -> None:
    """In a fresh process: capture the dump, run one small matmul case to load everything, then the
    large one; print the rise of the peak RSS (VmHWM, reset before it) over the dumped tensors' bytes."""
    generator = torch.Generator().manual_seed(0)
    for name, n in (("small", 64), ("large", size)):
        a, b = (torch.randn(n, n, generator=generator) for _ in range(2))
        with capture(str(dump / name), task="tensor", rank=0):
            torch.matmul(a, b)
    del a, b
    settings = Settings(device=torch.device("cpu"))
    small, large = (load_dump(next((dump / name).rglob("dump.json"))) for name in ("small", "large"))
    run_case(small.cases[0], small.data_dir, settings)
    tensors = sum(path.stat().st_size for path in large.data_dir.iterdir())
    with open("/proc/self/clear_refs", "w") as out:
        out.write("5")
    before = _peak_rss()
    run_case(large.cases[0], large.data_dir, settings)
    print(json.dumps({"ratio": (_peak_rss() - before) / tensors, "tensors": tensors}))


def against_msprobe(folder: Path, copies: int) -> None:
    """A whole tensor dump, serial and -n 2, against msprobe's acc_check (benchmarks/bench_msprobe.py)."""
    if importlib.util.find_spec("msprobe") is None:
        print("against msprobe: not run, msprobe is not installed (pip install mindstudio-probe==26.2.0)")
        return
    bench_msprobe.print_figures(bench_msprobe.measure(folder / "msprobe", copies), report)


def _peak_rss() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller dumps, fewer runs")
    parser.add_argument("--no-msprobe", action="store_true", help="leave out the comparison with msprobe")
    parser.add_argument("--markdown", action="store_true", help="end with the README's speed table of these figures")
    parser.add_argument("--matmul-child", nargs=2, metavar=("DUMP", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.matmul_child:
        matmul_child(Path(args.matmul_child[0]), int(args.matmul_child[1]))
        return 0
    load_before = load_average()
    print(f"load average before: {load_before} ({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        empty = folder / "empty"
        empty.mkdir()
        start_up(empty, folder, 4 if args.quick else 10)
        collection(empty, folder, [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000])
        per_case(folder)
        xdist(empty, folder, 1_000 if args.quick else 6_000)
        judge_threads()
        matmul_memory(folder, 2048 if args.quick else 4096)
        if not args.no_msprobe:
            against_msprobe(folder, 1 if args.quick else 4)
    if args.markdown:
        print(markdown(" ".join(["python benchmarks/bench_scale.py", *sys.argv[1:]]), load_before))
    if MISSES:
        print(f"missed by more than 2x: {', '.join(MISSES)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
