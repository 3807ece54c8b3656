"""The pytest layer once the plugin is in play: the dumps checked, the known-failures gate, the
header, the case records gathered into reports and the summary. plugin/__init__.py registers this module
when a run checks a dump or an op case, or asks for a report or a gate.

This part never imports torch. Where this process collects and runs cases (a serial run, an xdist
worker) it registers plugin/collecting.py too, which does; the xdist controller runs no case, so it
reports from the workers' records without ever loading torch.

Everything that decides anything lives in the core modules; this file only translates.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from ..reports import Collector, gating, run_facts
from . import idle_hypothesis
from .dump_options import check_dumps, found_dumps
from .options import is_xdist_controller
from .settings import facts_for_reports, local_facts

_COLLECTING = "npu-precision-collecting"


def pytest_configure(config: pytest.Config) -> None:
    """Run once, when plugin/__init__.py registers this module (pytest calls it then, even mid-collection)."""
    runs_cases = not is_xdist_controller(config)
    if runs_cases:
        collecting_layer(config)  # its own pytest_configure sets the threads and configures the gate
    else:
        gating.configure(config)  # the controller collects nothing, so it marks nothing
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(Collector(config, lambda: facts_for_reports(config)), "npu-precision-collector")
    if not check_dumps(config):
        return
    if runs_cases or run_facts.checked_only_by_loading(config):
        from .settings import run_settings_for  # the backends, and torch

        run_settings_for(config)
    if not config.option.file_or_dir:
        # `pytest --npu-precision DUMP` runs the dump, not the project's own tests. The dump is never
        # a path for pytest to collect: pytest would import a conftest.py or test_*.py inside it.
        config.args[:] = []


def collecting_layer(config: pytest.Config) -> ModuleType:
    """The part of the pytest layer that collects and runs cases (and imports torch), registered once."""
    from . import collecting

    if not config.pluginmanager.has_plugin(_COLLECTING):
        config.pluginmanager.register(collecting, _COLLECTING)
    return collecting


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    facts = local_facts(config)
    if facts is None:  # the xdist controller of a dump run names the device when its workers have
        return run_facts.options_header(config) if found_dumps(config) else None
    note = run_facts.fallback_note(config, facts)
    return facts.header() + ([note] if note else [])


def pytest_sessionfinish(session: pytest.Session) -> None:
    idle_hypothesis.skip_idle_summary(session.config)  # a dump run never runs Hypothesis


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """An xdist worker finished: keep what it compared, for the summary and the reports."""
    run_facts.receive(node.config, node)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """Say what the workers compared where the header could not, and loudly what `auto` fell back to."""
    local = local_facts(config)
    facts = local or run_facts.from_workers(config)
    if local is None and facts is not None:
        terminalreporter.write_line(f"npu-precision: the xdist workers ran device {facts.device_text}, "
                                    f"{facts.float32_text}")
    note = run_facts.fallback_note(config, facts)
    if note is not None:
        terminalreporter.write_line(note, yellow=True, bold=True)


def pytest_report_teststatus(report, config):
    """An overflow passes, but is counted and shown apart: 'O' in the progress line, 'N overflow' at the end."""
    if report.when == "call" and report.passed and getattr(report, "npu_overflow", False):
        return "overflow", "O", ("OVERFLOW", {"yellow": True})
    return None
