"""The run's settings, read once from the options: device, golden, baseline, rules and the memory budget.

Dump cases, op cases and the reports all take their Settings from here, so every part of a run
judges with the same backends and tables, and a bad option is one usage error that names it.
The backends (and torch) are imported when the settings are made, not with this module: the xdist
controller reads the options without them (reports/run_facts.py).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..reports import RunFacts, from_workers
from .options import VERDICT_DEFAULTS

if TYPE_CHECKING:
    from ..backends import Backend
    from ..checks import BaselineDump
    from ..checks import Settings
    from ..checks import RecordedBaseline

_SETTINGS = pytest.StashKey["Settings"]()


def backend_option(config: pytest.Config, option: str, role: str) -> Backend:
    """The backend an option names; a bad value is a usage error that names the option."""
    from ..backends import BackendError, load_backend

    value = config.getoption(option)
    try:
        return load_backend(value, role, allow_tf32=config.getoption("npu_precision_allow_tf32"),
                            search=(config.invocation_params.dir, config.rootpath))
    except BackendError as exc:
        raise pytest.UsageError(f"--{option.replace('_', '-')}: {exc}") from None


def _error_data_folder(config: pytest.Config) -> Path | None:
    report = config.getoption("npu_precision_report")
    if not config.getoption("npu_precision_save_error_data") or report is None:
        return None
    return (config.invocation_params.dir / report / "error_data").resolve()


def _device_option(config: pytest.Config) -> Backend:
    """The device under test, told its float32 modes or pinned to IEEE float32 as the options say."""
    from ..backends import BackendError, DumpedOutputs
    from ..common import declared_modes

    device = backend_option(config, "npu_precision_device", "device")
    declared = config.getoption("npu_precision_fp32_modes")
    if declared is not None:
        if not isinstance(device, DumpedOutputs) and getattr(device.device, "type", "") != "npu":
            # A live cpu or cuda backend reads its own modes: declared ones would loosen its bounds unasked.
            raise pytest.UsageError(
                f"--npu-precision-fp32-modes declares the modes of a device that cannot tell them (a dump judged "
                f"with --npu-precision-device dumped, or an NPU under CANN's ACL_PRECISION_MODE); device "
                f"{device.name} runs here and reads its own: drop the option")
        device.declared_float32 = declared_modes(declared)
    if config.getoption("npu_precision_fp32") == "run-ieee":
        if declared is not None:
            raise pytest.UsageError("--npu-precision-fp32 run-ieee pins the device's float32 modes, so "
                                    "--npu-precision-fp32-modes cannot also declare them: give one of the two")
        try:
            device.pin_ieee_float32()
        except BackendError as exc:
            raise pytest.UsageError(f"--npu-precision-fp32 run-ieee: {exc}") from None
    return device


def _baseline_option(config: pytest.Config) -> Backend | RecordedBaseline | BaselineDump | None:
    from ..checks import BaselineDump, BaselineDumpError, is_dump_path
    from ..checks import BaselineFileError, RecordedBaseline

    value = config.getoption("npu_precision_baseline")
    if value == "none":
        return None
    if os.path.lexists(value) and is_dump_path(value):  # a folder is a dump; a file a recorded baseline
        try:
            dump = BaselineDump.load(value)
        except BaselineDumpError as exc:
            raise pytest.UsageError(str(exc)) from None
        if dump.statistics and config.getoption("npu_precision_device") != "dumped":
            raise pytest.UsageError(
                f"--npu-precision-baseline {value!r} is a statistics dump ({dump.statistics[0]} recorded no tensor "
                f"files): it pairs with a dump judged offline, by statistics. Add --npu-precision-device dumped, or "
                f"dump the baseline with task 'tensor' and data_mode 'all'")
        return dump
    if os.path.lexists(value):
        try:
            return RecordedBaseline.load(value)
        except BaselineFileError as exc:
            raise pytest.UsageError(str(exc)) from None
    if value.endswith(".json"):
        raise pytest.UsageError(f"--npu-precision-baseline {value!r} does not exist: give a file written by "
                                f"--npu-precision-record, a device, or none")
    if "/" in value or os.sep in value or value.startswith(("~", ".")):  # a path, not a device's name
        raise pytest.UsageError(f"--npu-precision-baseline {value!r} does not exist: give a dump folder (a dump root, "
                                f"step or rank folder), a file written by --npu-precision-record, a device, or none")
    return backend_option(config, "npu_precision_baseline", "baseline")


def run_settings_for(config: pytest.Config) -> Settings:
    """The device, golden, baseline and rules of this run, made once from the options."""
    if _SETTINGS not in config.stash:
        from ..common import UnsupportedEnvironment, check_environment

        try:  # before anything runs: an old torch or one without its numpy fails each case otherwise
            check_environment()
        except UnsupportedEnvironment as exc:
            raise pytest.UsageError(str(exc)) from None
        from ..checks import Settings
        from ..precision import Rules
        from ..replay import default_budget

        rules = Rules.default()
        if config.getoption("npu_precision_rules"):
            try:
                rules = rules.merged(config.getoption("npu_precision_rules"))
            except ValueError as exc:
                raise pytest.UsageError(str(exc)) from None
        golden = config.getoption("npu_precision_golden")
        if golden != "cpu" and not golden.startswith("cuda"):
            raise pytest.UsageError(f"--npu-precision-golden {golden!r} cannot compute in float64 here: use cpu "
                                    f"or cuda[:N]")
        config.stash[_SETTINGS] = Settings(
            device=_device_option(config), rules=rules, float32=config.getoption("npu_precision_fp32"),
            golden=backend_option(config, "npu_precision_golden", "golden"), baseline=_baseline_option(config),
            max_case_bytes=config.getoption("npu_precision_max_case_memory") or default_budget(),
            error_data=_error_data_folder(config))
    return config.stash[_SETTINGS]


def rerun_options(config: pytest.Config) -> list[str]:
    """The options that shaped a verdict, for a rerun command that reaches the same one from anywhere."""
    words = []
    for name, default in VERDICT_DEFAULTS.items():
        value = config.getoption(name)
        if value != default:
            words += [f"--{name.replace('_', '-')}", str(Path(value).resolve()) if Path(value).exists() else value]
    for name in ("npu_precision_allow_tf32", "npu_precision_strict_warnings"):
        if config.getoption(name):
            words.append(f"--{name.replace('_', '-')}")
    return words


def rerun_command(config: pytest.Config, *words: str) -> str:
    """``pytest WORDS`` with the verdict's options, as a shell command that works as printed from anywhere.

    A ``module:object`` backend was imported from the rootdir or the folder pytest ran in, so the
    command then starts there.
    """
    command = shlex.join(["pytest", *words[:2], *rerun_options(config), *words[2:]])
    if any(_is_object_spec(config.getoption(name)) for name in ("npu_precision_device", "npu_precision_baseline")):
        command = f"cd {shlex.quote(str(config.invocation_params.dir))} && {command}"
    return command


def _is_object_spec(value: str) -> bool:
    module, colon, attribute = value.partition(":")
    return bool(colon) and not attribute.isdigit() and not os.path.lexists(value)


def stashed(config: pytest.Config) -> Settings | None:
    """The settings if this run has made them (a run with dumps or op cases), else None."""
    return config.stash.get(_SETTINGS, None)


def local_facts(config: pytest.Config) -> RunFacts | None:
    """This process's own run facts, if it has made the settings (it runs cases, or it checked the options)."""
    settings = stashed(config)
    return None if settings is None else RunFacts.of(settings)


def facts_for_reports(config: pytest.Config) -> RunFacts:
    """The facts a report writes: this process's, else what the xdist workers sent, else the settings
    made here (no worker sent any)."""
    return local_facts(config) or from_workers(config) or RunFacts.of(run_settings_for(config))
