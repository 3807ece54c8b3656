"""torch's intra-op threads per case: one for a small case, the budget for a large one; the user's count wins."""

from __future__ import annotations

import json

import pytest
import torch

from fixtures import fixture_dump

from pytest_npuprecision import check_call
from pytest_npuprecision.checks import case_run
from pytest_npuprecision.checks.case_run import Settings, run_case
from pytest_npuprecision.dump.dump_cases import load_dump
from pytest_npuprecision.opcases import run as opcase_run
from pytest_npuprecision.replay import threads
from pytest_npuprecision.replay.threads import LARGE_CASE_ELEMENTS, ThreadPolicy, available_cores

PER_CASE = {"threads_per_process": None, "source": "torch default", "small_case_threads": 1,
            "large_case_elements": LARGE_CASE_ELEMENTS}


@pytest.fixture
def process_threads():
    """This process at torch's default count (an xdist worker of this suite may run at one), and its
    own count back after the test."""
    before = torch.get_num_threads()
    torch.set_num_threads(available_cores())
    yield available_cores()
    torch.set_num_threads(before)


@pytest.fixture
def per_case_run(process_threads):
    """The per-case policy of a serial run, as a pytest run of cases applies it, at a count of 3."""
    torch.set_num_threads(3)
    threads.apply(ThreadPolicy(None, "torch default", per_case=True))
    yield
    threads.release()


def test_a_small_case_gets_one_thread_and_a_large_one_the_budget():
    serial = threads.thread_policy(0, {})
    assert serial == ThreadPolicy(None, "torch default", per_case=True)
    assert serial.threads_for(8 * 32) == 1
    assert serial.threads_for(LARGE_CASE_ELEMENTS - 1) == 1
    assert serial.threads_for(3 * 2048 * 2048) is None  # the process's own count
    worker = threads.thread_policy(2, {})
    assert worker.threads_for(100) == 1
    assert worker.threads_for(LARGE_CASE_ELEMENTS) == max(1, available_cores() // 2)


def test_xdist_workers_share_the_cores(monkeypatch):
    monkeypatch.setattr(threads, "available_cores", lambda: 8)
    assert threads.thread_policy(2, {}) == ThreadPolicy(4, "cores // workers", per_case=True)
    assert threads.thread_policy(16, {}) == ThreadPolicy(1, "cores // workers", per_case=True)


def test_the_users_count_wins_for_every_case():
    omp = threads.thread_policy(2, {"OMP_NUM_THREADS": "3"})
    assert omp == ThreadPolicy(None, "OMP_NUM_THREADS")
    assert omp.threads_for(10) is None
    user = threads.thread_policy(0, {}, user_threads=3)
    assert user == ThreadPolicy(3, "torch.set_num_threads")
    assert user.threads_for(10) == 3
    # The option wins over both.
    option = threads.thread_policy(2, {"OMP_NUM_THREADS": "3"}, option=5, user_threads=3)
    assert option == ThreadPolicy(5, "--npu-precision-threads")
    assert option.threads_for(10) == option.threads_for(LARGE_CASE_ELEMENTS) == 5


def test_a_count_set_before_the_run_reads_as_the_users(process_threads):
    assert threads.chosen_by_user() is None  # torch's default
    torch.set_num_threads(process_threads + 1)
    assert threads.chosen_by_user() == process_threads + 1


def test_a_small_dump_case_runs_with_one_thread_and_gives_the_count_back(per_case_run, monkeypatch):
    seen = []
    original = case_run.replay

    def recording(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(*args, **kwargs)

    monkeypatch.setattr(case_run, "replay", recording)
    dump = load_dump(next(fixture_dump("mlp_statistics").rglob("dump.json")))
    case = next(c for c in dump.cases if c.key == "Functional.linear.0.forward")
    run_case(case, dump.data_dir, Settings(device="cpu"))
    assert seen == [1]
    assert torch.get_num_threads() == 3


def test_a_large_case_keeps_the_process_count_and_the_count_comes_back_after_a_failure(per_case_run):
    with threads.for_case(LARGE_CASE_ELEMENTS):
        assert torch.get_num_threads() == 3
    with pytest.raises(RuntimeError), threads.for_case(10):
        assert torch.get_num_threads() == 1
        raise RuntimeError("the case failed")
    assert torch.get_num_threads() == 3


def test_an_op_case_example_runs_with_one_thread(per_case_run, monkeypatch):
    seen = []
    monkeypatch.setattr(opcase_run, "_run_example", lambda *args: seen.append(torch.get_num_threads()))
    opcase_run.run_example(None, None, opcase_run.Call((torch.ones(8),)), "cpu")
    assert seen == [1] and torch.get_num_threads() == 3


def test_check_call_keeps_the_users_count_even_inside_a_run(per_case_run):
    seen = []

    def scaled(x):
        seen.append(torch.get_num_threads())
        return x * 2

    check_call(scaled, torch.ones(8), reference=lambda x: x * 2)
    threads.release()
    check_call(scaled, torch.ones(8), reference=lambda x: x * 2)
    threads.apply(ThreadPolicy(None, "torch default", per_case=True))  # for the fixture's release
    assert set(seen) == {3}


def _run_json(pytester, *args: str) -> dict:
    result = pytester.runpytest("--npu-precision", str(fixture_dump("mlp_statistics")), "--npu-precision-device",
                                "cpu", "--npu-precision-report", "r", "-p", "no:cacheprovider", *args)
    assert result.ret == 0, result.stdout.str()
    return json.loads((pytester.path / "r" / "run.json").read_text())["torch_threads"]


def test_run_json_records_the_per_case_policy_and_the_run_gives_the_count_back(pytester, process_threads):
    outer = threads.active()  # this suite's own run, where it runs op cases
    assert _run_json(pytester) == PER_CASE
    assert _run_json(pytester, "--npu-precision-threads", "3") == {
        "threads_per_process": 3, "source": "--npu-precision-threads", "small_case_threads": 3,
        "large_case_elements": None}
    assert torch.get_num_threads() == process_threads and threads.active() == outer


def test_run_json_records_a_count_the_users_conftest_set(pytester, process_threads):
    pytester.makeconftest(f"import torch\ntorch.set_num_threads({process_threads + 1})\n")
    assert _run_json(pytester)["source"] == "torch.set_num_threads"


def test_run_json_says_how_many_threads_each_worker_ran_with(pytester):
    run = _run_json(pytester, "-n", "2")
    assert run == {**PER_CASE, "threads_per_process": max(1, available_cores() // 2), "source": "cores // workers"}


def test_a_thread_count_below_one_is_a_usage_error(pytester):
    result = pytester.runpytest("--npu-precision-threads", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*thread count '0' is not a whole number of at least 1*"])
