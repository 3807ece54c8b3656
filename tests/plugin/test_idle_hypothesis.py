"""Hypothesis's pytest plugin imports Hypothesis at the end of every run; where Hypothesis never ran
and its summary has nothing to print, the plugin is set aside first (plugin/idle_hypothesis.py)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
from fixtures import fixture_dump

from pytest_npuprecision.plugin import idle_hypothesis

PROBE = '''
import sys

import pytest

@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        print("HYPOTHESIS=" + str("hypothesis" in sys.modules))
'''


def _run(tmp_path, *options: str) -> str:
    (tmp_path / "conftest.py").write_text(PROBE)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s",
                           "--npu-precision", str(fixture_dump("mlp_statistics")), *options],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_a_dump_run_ends_without_importing_hypothesis(tmp_path):
    assert "HYPOTHESIS=False" in _run(tmp_path)


def test_asked_for_statistics_hypothesis_keeps_its_summary(tmp_path):
    out = _run(tmp_path, "--hypothesis-show-statistics")
    assert "Hypothesis Statistics" in out and "HYPOTHESIS=True" in out


class _PluginManager:
    def __init__(self, reports):
        self.plugins = {"hypothesispytest": object(), "terminalreporter": SimpleNamespace(stats={"passed": reports})}

    def get_plugin(self, name):
        return self.plugins.get(name)

    def unregister(self, plugin):
        self.plugins = {name: p for name, p in self.plugins.items() if p is not plugin}


def _config(reports):
    return SimpleNamespace(pluginmanager=_PluginManager(reports), getoption=lambda name, default=None: False)


@pytest.mark.parametrize("ran, reports, kept", [
    (False, [SimpleNamespace(nodeid="a")], False),
    (False, [SimpleNamespace(nodeid="a", _hypothesis_failing_examples="[]")], True),  # from an xdist worker
    (True, [SimpleNamespace(nodeid="a")], True),
], ids=["never ran", "a report carries its output", "ran here"])
def test_the_plugin_stays_wherever_its_summary_has_something_to_say(monkeypatch, ran, reports, kept):
    if not ran:
        monkeypatch.delitem(sys.modules, "hypothesis", raising=False)
    else:
        monkeypatch.setitem(sys.modules, "hypothesis", sys.modules.get("hypothesis") or SimpleNamespace())
    config = _config(reports)
    idle_hypothesis.skip_idle_summary(config)
    assert (config.pluginmanager.get_plugin("hypothesispytest") is not None) == kept
