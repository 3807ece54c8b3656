"""Hypothesis's pytest plugin, in a process where Hypothesis never ran, without its end-of-run import.

That plugin imports Hypothesis only where a test uses it, except in its terminal summary, which
imports ``hypothesis.internal.observability`` in every run. A dump run never runs Hypothesis, nor
does an xdist controller, yet each such process paid the whole import at its end, the workers
included: 0.3 s with warm bytecode caches, about 0.6 s where they cannot be written (pytest rewrites
the modules of every plugin's package, Hypothesis's too). Under xdist the controller waits for its
workers to exit, so that is twice the serial run's cost in wall time.

Where Hypothesis was never imported here, its statistics were not asked for and no report carries
its output (``_hypothesis_*`` attributes, which its hooks set where a test ran it), its summary has
nothing to print: the plugin is unregistered before the summary is written. Any run that uses
Hypothesis keeps it whole.
"""

from __future__ import annotations

import sys

import pytest

_PLUGIN = "hypothesispytest"  # the name of Hypothesis's pytest11 entry point


def skip_idle_summary(config: pytest.Config) -> None:
    """Call from pytest_sessionfinish, before the terminal summary runs."""
    plugin = config.pluginmanager.get_plugin(_PLUGIN)
    if plugin is None or "hypothesis" in sys.modules or config.getoption("--hypothesis-show-statistics", False):
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    reports = [report for kept in (reporter.stats.values() if reporter is not None else ()) for report in kept]
    if any(name.startswith("_hypothesis") for report in reports for name in getattr(report, "__dict__", ())):
        return
    config.pluginmanager.unregister(plugin)
