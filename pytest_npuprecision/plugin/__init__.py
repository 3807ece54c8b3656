"""The pytest entry point: options and markers, and nothing heavier than pytest until the plugin is in play.

Every pytest run in an environment where the plugin is installed loads this module. The rest of the
pytest layer is registered only when the run checks a dump, collects an op case, or asks for a
report or a gate: plugin/active.py (the reports and the gate, without torch) and, where this process runs
cases, plugin/collecting.py (torch, the dump cases, op cases and Hypothesis).

Layer: the top one (docs/architecture.md); it may import every other package.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from .options import add_options, check_output_paths, is_case_file, wants_core

_ACTIVE = "npu-precision-active"


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    if node_ids_pasted(args):  # before the options are parsed: they read the rewritten arguments
        early_config.known_args_namespace = parser.parse_known_args(args, namespace=early_config.known_args_namespace)
    if getattr(early_config.known_args_namespace, "npu_precision", None):
        from .dump_options import keep_cache_out_of_dumps

        keep_cache_out_of_dumps(early_config)


_BASELINE_ONLY = " (baseline only)"


def node_ids_pasted(args: list[str]) -> bool:
    """Turn each dump case's node id, as pytest prints it after FAILED (``DUMP::step0/rank0::API.0.forward``), into
    ``--npu-precision DUMP --npu-precision-case step0/rank0::API.0.forward``, in place: pytest refuses a folder
    with ``::`` parts. Other arguments (``test_x.py::test_y``) are left to pytest. Whether any was rewritten."""
    given = {str(Path(value).resolve()) for value in _option_values(args, "--npu-precision")}
    rewritten = False
    for position, arg in reversed(list(enumerate(args))):
        head, separator, case_id = arg.partition("::")
        if not separator or arg.startswith("-") or not case_id or not _dump_path(Path(head)):
            continue
        extra = [] if str(Path(head).resolve()) in given else ["--npu-precision", head]
        given.add(str(Path(head).resolve()))
        args[position:position + 1] = [*extra, "--npu-precision-case", case_id.removesuffix(_BASELINE_ONLY)]
        rewritten = True
    return rewritten


def _dump_path(path: Path) -> bool:
    return path.is_dir() or path.name == "dump.json" and path.is_file()


def _option_values(args: list[str], option: str) -> list[str]:
    found = []
    for position, arg in enumerate(args):
        if arg == option and position + 1 < len(args):
            found.append(args[position + 1])
        elif arg.startswith(option + "="):
            found.append(arg.split("=", 1)[1])
    return found


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "npu_precision: a precision case from an msprobe dump")
    config.addinivalue_line("markers", "npu_forward: a forward API call from a dump")
    config.addinivalue_line("markers", "npu_backward: a backward API call from a dump")
    config.addinivalue_line("markers", "npu_overflow: the dump recorded an inf or nan in what this case compares")
    config.addinivalue_line("markers", "npu_op_case: an op case (YAML or precision_case), searched by Hypothesis")
    check_output_paths(config)
    if wants_core(config):
        activate(config)
    elif not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Controller(config), "npu-precision-controller")


def activate(config: pytest.Config) -> ModuleType:
    """Register the plugin's pytest layer, once; pytest runs its pytest_configure on registering."""
    from . import active

    if not config.pluginmanager.has_plugin(_ACTIVE):
        config.pluginmanager.register(active, _ACTIVE)
    return active


def collecting_layer(config: pytest.Config) -> ModuleType:
    """The layer that collects and runs cases, in a process that collects (never the xdist controller)."""
    return activate(config).collecting_layer(config)


@pytest.fixture
def npu_precision_capture(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """``with npu_precision_capture(): loss = model(x).sum(); loss.backward()`` records every API call of
    the block as an msprobe dump and checks each one as ``--npu-precision`` would (docs/capture.md)."""
    from ..capturing import CaptureFixture  # torch is imported only by tests that use the fixture
    from .settings import run_settings_for

    report = request.config.getoption("npu_precision_report")
    return CaptureFixture(request.node.nodeid, tmp_path_factory.mktemp("npu_precision_capture"),
                          run_settings_for(request.config),
                          keep=request.config.invocation_params.dir / report / "captured" if report else None)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config):
    if collection_path.name == "dump_tensor_data":
        return True  # thousands of tensor files, none of them a test
    return None


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if is_case_file(file_path, parent.config):
        return collecting_layer(parent.config).op_case_file(file_path, parent)
    return None


def pytest_itemcollected(item: pytest.Item) -> None:
    """A Python op case (``precision_case``) puts the plugin in play before it runs."""
    if getattr(getattr(item, "obj", None), "npu_precision_case", None) is not None:
        collecting_layer(item.config).op_cases_in_play(item.config)


class _Controller:
    """Under xdist the controller collects nothing: a worker's case record is what puts it in play there."""

    def __init__(self, config: pytest.Config):
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if getattr(report, "npu_precision", None) and not self.config.pluginmanager.has_plugin(_ACTIVE):
            activate(self.config)  # its collector was not registered for this report: hand it over
            self.config.pluginmanager.get_plugin("npu-precision-collector").pytest_runtest_logreport(report)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """`pytest DUMP` without --npu-precision: say what to type instead."""
    if exitstatus != pytest.ExitCode.NO_TESTS_COLLECTED or config.getoption("npu_precision"):
        return
    for arg in config.option.file_or_dir or ():
        path = Path(arg.partition("::")[0])
        if not (path.is_dir() or path.name == "dump.json"):
            continue
        from ..dump import find_dumps

        found = len(find_dumps(path))
        if found:
            terminalreporter.write_line(f"{arg} holds {found} msprobe dump{'s' if found > 1 else ''}: run "
                                        f"{'them' if found > 1 else 'it'} with `pytest --npu-precision={arg}`")
