"""A case that crashes its process or runs out of memory loses that case alone (issue 13).

The crashing backend raises MemoryError in one case and kills its process (os._exit, as a segfaulting
kernel or the OOM killer would) in another. Every other case still runs and every report lists all.
"""

import json

import pytest

from fixtures import FIXTURES

DUMP = FIXTURES / "mlp_tensor" / "step0" / "rank0" / "dump.json"
BACKEND = '''
import os
from pytest_npuprecision import Backend

class Crashing(Backend):
    """cpu, except that gelu raises MemoryError and the last linear kills its process when asked."""

    def call(self, api, func, args, kwargs):
        if api == "Functional.gelu":
            raise MemoryError("planted: no memory for gelu")
        if api == "Functional.linear" and os.environ.get("CRASH_LINEAR") == "1" and tuple(args[1].shape) == (4, 32):
            os._exit(9)
        return super().call(api, func, args, kwargs)

backend = Crashing("cpu", name="crashing")
'''


def _records(pytester) -> dict[str, dict]:
    lines = (pytester.path / "report" / "cases.jsonl").read_text().splitlines()
    return {record["key"]: record for record in map(json.loads, lines)}


def _run(pytester, monkeypatch, *options, crash: bool):
    if not DUMP.is_file():
        pytest.skip(f"the msprobe fixture dump {DUMP} is not here")
    pytester.makepyfile(crashing_backend=BACKEND)
    pytester.syspathinsert()
    monkeypatch.setenv("CRASH_LINEAR", "1" if crash else "0")
    return pytester.runpytest("--npu-precision", str(DUMP), "--npu-precision-device", "crashing_backend:backend",
                              "--npu-precision-report", "report", "-p", "no:cacheprovider", *options)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_memory_error_fails_that_case_alone(pytester, monkeypatch, workers):
    result = _run(pytester, monkeypatch, *workers, crash=False)
    records = _records(pytester)
    gelu = [key for key in records if key.startswith("Functional.gelu")]
    assert gelu and all(records[key]["status"] == "harness-error" for key in gelu)
    assert all("MemoryError: planted" in records[key]["message"] for key in gelu)
    others = [r["status"] for key, r in records.items() if key not in gelu]
    assert others and set(others) == {"pass"}
    result.assert_outcomes(passed=len(others), failed=len(gelu))


def test_a_killed_worker_loses_only_the_case_it_ran(pytester, monkeypatch):
    result = _run(pytester, monkeypatch, "-n", "2", crash=True)
    records = _records(pytester)
    died = {key: r for key, r in records.items() if "process running this case died" in r["message"]}
    assert sorted(died) == ["Functional.linear.2.backward", "Functional.linear.2.forward"]
    assert all(r["status"] == "harness-error" for r in died.values())
    assert all(r["case_id"] == f"step0/rank0::{key}" for key, r in died.items())
    # Every case of the dump is in the report: the lost ones as harness errors, the rest judged.
    assert len(records) == 23
    judged = {key: r["status"] for key, r in records.items() if key not in died}
    assert {status for key, status in judged.items() if not key.startswith("Functional.gelu")} == {"pass"}
    assert result.ret == 1
