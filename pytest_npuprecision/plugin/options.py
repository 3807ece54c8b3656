"""The command-line options and what decides whether a file is an op case: all that pytest needs of
this plugin in a run that checks no dump and no op case. Imports nothing heavier than pytest."""

from __future__ import annotations

import argparse
import fnmatch
import os
from pathlib import Path

import pytest

from ..common import DEFAULT_POLICY, POLICIES, declared_modes, parse_size

# Options that shape a verdict and their defaults: the rerun command repeats those given otherwise.
VERDICT_DEFAULTS = {"npu_precision_device": "auto", "npu_precision_golden": "cpu", "npu_precision_baseline": "none",
                    "npu_precision_rules": None, "npu_precision_fp32": DEFAULT_POLICY,
                    "npu_precision_fp32_modes": None}
PROFILE_NAMES = ("ci", "dev", "thorough")  # opcases.search.PROFILES, named here without importing Hypothesis
DEFAULT_CASE_PATTERNS = ("op_cases*.yaml", "op_cases*.yml")
# Options that ask for the plugin's reports or gate: the run needs the plugin's core from its start.
WANTS_CORE = ("npu_precision", "npu_precision_report", "npu_precision_html", "npu_precision_record",
              "npu_precision_known_failures", "npu_precision_update_known_failures")


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("npuprecision", "single-operator precision checks of msprobe dumps")
    group.addoption("--npu-precision", action="append", default=[], metavar="DUMP",
                    help="a dump.json, rank, step or dump root folder: each API call becomes a test")
    group.addoption("--npu-precision-case", action="append", default=[], metavar="CASE_ID",
                    help="run only this case of the dumps (repeatable): its id as reports print it, "
                         "such as mlp_tensor/step0/rank0::Functional.gelu.0.forward")
    group.addoption("--npu-precision-device", default=VERDICT_DEFAULTS["npu_precision_device"], metavar="DEVICE",
                    help="device under test: auto (npu, else cuda, else cpu), cpu, cuda[:N], npu[:N], dumped "
                         "(the dump's recorded results), module:object (a Backend) or an installed backend's name")
    group.addoption("--npu-precision-golden", default=VERDICT_DEFAULTS["npu_precision_golden"], metavar="DEVICE",
                    help="where the float64 golden runs: cpu (default) or cuda[:N]")
    group.addoption("--npu-precision-baseline", default=VERDICT_DEFAULTS["npu_precision_baseline"],
                    metavar="DEVICE|FILE|DUMP",
                    help="baseline for the benchmark standard: none (default), a device running the same "
                         "dtype (cpu, cuda[:N], module:object), a file written by --npu-precision-record, or "
                         "a dump folder of the same model taken elsewhere, each entry judged offline")
    group.addoption("--npu-precision-record", default=None, metavar="FILE",
                    help="write each case's input fingerprint and metrics against the golden to FILE, "
                         "for --npu-precision-baseline FILE on another machine")
    group.addoption("--npu-precision-allow-tf32", action="store_true", default=False,
                    help="let a cuda golden or baseline use TF32 (off by default: it is less precise)")
    group.addoption("--npu-precision-fp32", default=DEFAULT_POLICY, choices=tuple(POLICIES), metavar="POLICY",
                    help="float32 ops a device runs in TF32 or HF32: " + "; ".join(
                        f"{name}: {meaning}" for name, meaning in POLICIES.items()) + f" (default {DEFAULT_POLICY})")
    group.addoption("--npu-precision-fp32-modes", default=None, type=float32_modes, metavar="MODES",
                    help="the device's float32 math modes where it cannot tell them: a dump judged offline, or "
                         "CANN's ACL_PRECISION_MODE on an NPU: FAMILY=MODE pairs (conv=hf32,matmul=ieee; "
                         "families matmul, conv, rnn) or an ACL_PRECISION_MODE value (allow_fp32_to_fp16)")
    group.addoption("--npu-precision-report", default=None, metavar="DIR",
                    help="write cases.jsonl and msprobe-compatible accuracy_checking_*.csv here")
    group.addoption("--npu-precision-save-error-data", action="store_true", default=False,
                    help="save each failing dump case's inputs, device output, golden and baseline as .pt files "
                         "under the report folder's error_data/ (bounded; needs --npu-precision-report)")
    group.addoption("--npu-precision-max-case-memory", default=None, type=memory_size, metavar="SIZE",
                    help="skip a case as too-large when its dumped shapes need more memory than this "
                         "(512MiB, 4GB, ...); default: half the available memory, shared among xdist workers")
    group.addoption("--npu-precision-threads", default=None, type=thread_count, metavar="N",
                    help="torch intra-op threads for every case; default: one for a small case, and for a "
                         "large one the process's count (the cores shared among xdist workers), unless "
                         "OMP_NUM_THREADS or torch.set_num_threads before the run chose one")
    group.addoption("--npu-precision-rules", default=VERDICT_DEFAULTS["npu_precision_rules"], metavar="FILE",
                    help="YAML overrides of the threshold and op tables")
    # Gating
    group.addoption("--npu-precision-known-failures", default=None, metavar="FILE",
                    help="JSON file of accepted failures keyed by case id: listed cases run as strict xfail")
    group.addoption("--npu-precision-known-failures-margin", default=0.1, type=margin, metavar="MARGIN",
                    help="how much further past its limit (value/limit) a known failure's check may go "
                         "before it fails as a regression: 0.1 or 10%% (default 10%%)")
    group.addoption("--npu-precision-update-known-failures", action="store_true", default=False,
                    help="rewrite the known-failures file from this run at the end of the session")
    group.addoption("--npu-precision-warn-stale", action="store_true", default=False,
                    help="only warn about known failures that match no collected case (default: fail the run)")
    group.addoption("--npu-precision-strict-warnings", action="store_true", default=False,
                    help="cases with a warning verdict fail like errors")
    group.addoption("--npu-precision-html", default=None, metavar="FILE",
                    help="write a self-contained HTML report (summary, sortable cases, error plots) here")
    # Op cases
    group.addoption("--npu-precision-profile", default="ci", choices=PROFILE_NAMES, metavar="PROFILE",
                    help="how hard op cases search: ci (deterministic, bounded; default), dev (random, local "
                         "example database) or thorough (many examples)")
    group.addoption("--npu-precision-regressions", default=None, metavar="DIR",
                    help="write failing op case examples here as regression cases (default: op_cases/regressions "
                         "under the rootdir; 'none' writes nothing)")
    group.addoption("--npu-precision-cases", action="append", default=[], metavar="GLOB",
                    help="collect YAML files whose name matches GLOB as op cases, besides every YAML file in an "
                         "op_cases/ folder (default: op_cases*.yaml)")


def memory_size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def thread_count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"thread count {text!r} is not a whole number of at least 1: give 1, 2, 8, ...")
    return int(text)


def float32_modes(text: str) -> str:
    try:
        declared_modes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def margin(text: str) -> float:
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(
            f"margin {text!r} is not a non-negative number: give a fraction such as 0.1 or a percentage such as 10%")
    return value


def wants_core(config: pytest.Config) -> bool:
    """Whether the options alone put the plugin in play (dumps, reports, a gate)."""
    return any(config.getoption(name) for name in WANTS_CORE)


def check_output_paths(config: pytest.Config) -> None:
    """The report folder and the record file must be what they are named as, before a run spends its time."""
    report = config.getoption("npu_precision_report")
    if report is not None and os.path.lexists(report) and not os.path.isdir(report):
        raise pytest.UsageError(f"--npu-precision-report {report!r} is a file, not a folder: name a folder for the "
                                f"reports (it is created if missing)")
    if config.getoption("npu_precision_save_error_data") and report is None:
        raise pytest.UsageError("--npu-precision-save-error-data saves under the report folder: give "
                                "--npu-precision-report DIR too")
    for option, what in (("npu_precision_record", "--npu-precision-record"), ("npu_precision_html", "--npu-precision-html")):
        target = config.getoption(option)
        if target is not None and os.path.isdir(target):
            raise pytest.UsageError(f"{what} {target!r} is a folder: name the file to write, such as "
                                    f"{os.path.join(target, 'baseline.json' if option.endswith('record') else 'report.html')}")


def is_case_file(file_path: Path, config: pytest.Config) -> bool:
    """A YAML op case file: in an op_cases/ folder, in the regressions folder, or named by a pattern."""
    if file_path.suffix not in (".yaml", ".yml"):
        return False
    if "op_cases" in file_path.parent.parts:
        return True
    folder = config.getoption("npu_precision_regressions")
    if folder and folder.lower() != "none":
        root = (config.invocation_params.dir / folder).resolve()
        if root == file_path.parent.resolve() or root in file_path.resolve().parents:
            return True
    patterns = config.getoption("npu_precision_cases") or DEFAULT_CASE_PATTERNS
    return any(fnmatch.fnmatch(file_path.name, pattern) for pattern in patterns)


def is_xdist_controller(config: pytest.Config) -> bool:
    """Whether pytest-xdist's workers run this session's tests, so that this process collects and runs none.

    xdist's own test (xdist/plugin.py), read before xdist registers its session: its pytest_configure
    runs last. A worker has ``workerinput``; ``--co`` collects here and distributes nothing.
    """
    option = config.option
    return (not hasattr(config, "workerinput") and not option.collectonly
            and getattr(option, "dist", "no") != "no" and bool(getattr(option, "tx", None)))
