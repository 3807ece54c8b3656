"""What a run compares, said once for the header, run.json, the record file and the records of lost
cases: its device with versions and settings, its golden and its baseline.

A process that runs cases knows this from its Settings. Under pytest-xdist the workers run the
cases; the controller runs none and never imports torch, so its header names the device as the
option does, and the workers' exact description reaches it when they finish (``workeroutput``).
Only options that loading alone can check (a named accelerator, a baseline, a rules file) make the
controller load the backends itself, before its workers start, so that a bad one stays one usage
error.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import pytest

from ..common import describe_modes
from ..replay import threads

if TYPE_CHECKING:
    from ..checks import Settings

_WORKER_KEY = "npu_precision_run"
_FROM_WORKERS = pytest.StashKey["RunFacts"]()
# Option values whose backend cannot fail to load: the controller need not load it to check it.
_ALWAYS_LOADS = {"npu_precision_device": ("auto", "cpu", "dumped"), "npu_precision_golden": ("cpu",),
                 "npu_precision_baseline": ("none",), "npu_precision_rules": (None,)}
SEED = "crc32(case id) per case"


@dataclass(frozen=True)
class RunFacts:
    described: dict[str, Any]  # Settings.describe(): run.json's device, golden and baseline with their versions
    device_text: str  # the device in one line: cuda:0 (NVIDIA H100 80GB HBM3; torch 2.13.0, cuda 12.8; ...)
    device_name: str  # as records name it: cuda:0, cpu, dumped

    @classmethod
    def of(cls, settings: Settings) -> RunFacts:
        described = settings.describe()
        policy = threads.active()  # this process runs cases: its policy, as it found the user's threads
        if policy is not None:
            described["torch_threads"] = policy.as_dict()
        return cls(described, settings.device.info().describe(), settings.device.name)

    @property
    def golden_label(self) -> str:
        return self.described["golden"]

    @property
    def baseline_label(self) -> str:
        return self.described["baseline"]

    @property
    def float32_text(self) -> str:
        """'float32 matmul ieee, conv tf32, rnn tf32 on the device; policy as-run': its modes, then the policy."""
        float32 = self.described.get("float32")
        if not float32:
            return "float32 ieee"
        modes = describe_modes(float32["device_modes"])
        where = "" if "not recorded" in modes else " on the device"
        return f"{modes}{where}; policy {float32['policy']} (--npu-precision-fp32)"

    def header(self) -> list[str]:
        """What this run compared: the device, golden, baseline and seeds; then its float32 line."""
        return [f"npu-precision: device {self.device_text}, golden {self.golden_label}, "
                f"baseline {self.baseline_label}, seed {SEED}", f"npu-precision: {self.float32_text}"]


def checked_only_by_loading(config: pytest.Config) -> bool:
    """Whether an option names something only loading it can check: then the controller loads it too."""
    return any(config.getoption(name) not in values for name, values in _ALWAYS_LOADS.items())


def options_header(config: pytest.Config) -> list[str]:
    """The xdist controller's header, before any worker has loaded a backend: the options as given."""
    return [f"npu-precision: device {config.getoption('npu_precision_device')} (resolved by the xdist "
            f"workers: see the end of the run), golden {config.getoption('npu_precision_golden')} float64, "
            f"baseline {config.getoption('npu_precision_baseline')}, seed {SEED}",
            f"npu-precision: float32 policy {config.getoption('npu_precision_fp32')} (--npu-precision-fp32); the "
            f"device's modes: see the end of the run"]


def from_workers(config: pytest.Config) -> RunFacts | None:
    return config.stash.get(_FROM_WORKERS, None)


def send(config: pytest.Config, facts: RunFacts | None) -> None:
    """On an xdist worker that made the settings: hand the facts to the controller."""
    if facts is not None and hasattr(config, "workeroutput"):
        # As JSON text, as run.json will write it: versions are str subclasses that execnet refuses.
        config.workeroutput[_WORKER_KEY] = json.dumps(asdict(facts))


def receive(config: pytest.Config, node) -> None:
    """On the controller: keep the first facts a finishing worker sent (they all load the same options)."""
    sent = getattr(node, "workeroutput", {}).get(_WORKER_KEY)
    if sent and _FROM_WORKERS not in config.stash:
        config.stash[_FROM_WORKERS] = RunFacts(**json.loads(sent))


def fallback_note(config: pytest.Config, facts: RunFacts | None) -> str | None:
    """What `auto` settled for when it found no accelerator: the run then checks CPU torch, not the dump's device."""
    if facts is None or config.getoption("npu_precision_device") != "auto" or facts.device_name != "cpu":
        return None
    return ("npu-precision: --npu-precision-device auto found no NPU or GPU here, so these verdicts judge CPU "
            "torch's own kernels, not the device the dump was taken on; run on that device (npu, cuda) to check it")
