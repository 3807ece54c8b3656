"""Issue 53's invariant 1: the correctly rounded result passes, for every op the catalogue knows.

The subjects are PyTorch's own OpInfo entries whose op the catalogue has a record for; each example is
one of an entry's sample calls, its float inputs reshaped by a pattern (as given, scaled by 2^s, some
zeros, few repeated values, one constant) in one dtype. The device's result is the harness's own
float64 golden rounded to each output's dtype, the most precise output there is: every standard and
every check must pass it, forward and backward, alone and beside a baseline (torch's own kernel).

    python benchmarks/fair_invariants.py                  # every subject, 20 examples each
    python benchmarks/fair_invariants.py --examples 200 --ops softmax layer_norm

tests/precision/test_fair_is_green.py runs the same property in a fast Hypothesis profile.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch

from pytest_npuprecision.checks.one_call import CallVerdict, _resolved, judge_run
from pytest_npuprecision.common.torch_compat import rms_norm
from pytest_npuprecision.ops.catalogue import catalogue
from pytest_npuprecision.ops.resolution import ResolvedOp
from pytest_npuprecision.precision.rules import Rules
from pytest_npuprecision.precision.verdict import Status
from pytest_npuprecision.replay.runner import RunOutput, run_call
from pytest_npuprecision.replay.sides import OpExecutionError

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
PATTERNS = ("given", "zeros", "repeated", "constant")
SCALES = range(-24, 25)  # 2^s times the sample's float inputs


@dataclass(frozen=True)
class Subject:
    """One op the catalogue judges, as check_call resolves it, and the calls to draw from."""

    label: str  # the OpInfo name with its variant, or long.<op> for the long reductions below
    resolved: ResolvedOp
    samples: Callable[[torch.dtype], list[tuple[tuple, dict]]]  # under torch's seed, in a dtype
    supported: tuple[torch.dtype, ...]

    def dtypes(self) -> tuple[torch.dtype, ...]:
        return tuple(d for d in DTYPES if d in self.supported)


# OpInfo entries whose samples are no single call of the op they name (a method's reflected form run
# through a lambda).
_NOT_ONE_CALL = ("<lambda>",)


@functools.lru_cache(maxsize=1)
def subjects() -> tuple[Subject, ...]:
    """OpInfo entries whose op has a catalogue record (needs torch's test package and expecttest), and
    the long reductions, whose OpInfo samples sum five terms at most."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db
    records = catalogue().records
    found = []
    for info in op_db:
        try:
            resolved = _resolved(info.op)
        except Exception:  # an entry the harness cannot name is no subject of this property
            continue
        if resolved.func is None or resolved.base_name not in records or resolved.api_name.startswith(_NOT_ONE_CALL):
            continue
        label = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
        found.append(Subject(label, resolved, functools.partial(_opinfo_samples, info),
                             tuple(info.supported_dtypes("cpu"))))
    for name, (op, make) in LONG.items():
        found.append(Subject(f"long.{name}", _resolved(op), make, DTYPES))
    return tuple(found)


def _opinfo_samples(info, dtype: torch.dtype) -> list[tuple[tuple, dict]]:
    return [((s.input, *s.args), dict(s.kwargs)) for s in info.sample_inputs("cpu", dtype, requires_grad=False)]


def _long(*shapes: tuple[int, ...] | int, **kwargs):
    """Calls on random inputs of ``shapes`` (an int stays an int argument), and ``kwargs``."""
    def make(dtype: torch.dtype) -> list[tuple[tuple, dict]]:
        return [(tuple(s if isinstance(s, int) else torch.randn(s).to(dtype) for s in shapes), dict(kwargs))]
    return make


def _normed(arguments: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple]):
    """A norm's call over rows of 1024, weights around 1 and biases around 0 (or 1, as a model's do)."""
    def make(dtype: torch.dtype) -> list[tuple[tuple, dict]]:
        x, weight, bias = torch.randn(8, 1024), 1 + 0.1 * torch.randn(1024), torch.randn(1024)
        return [(tuple(t.to(dtype) if isinstance(t, torch.Tensor) else t for t in arguments(x, weight, bias)), {})]
    return make


F = torch.nn.functional
# Reductions over 1024 and 4096 terms, where a bound's assumptions are tested: the scales and patterns
# of an Example apply to them as to OpInfo's samples (a layer norm at 2^-20 is one whose eps dominates).
LONG: dict[str, tuple[Callable, Callable]] = {
    "sum": (torch.sum, _long((8, 4096), dim=-1)),
    "mean": (torch.mean, _long((8, 4096), dim=-1)),
    "cumsum": (torch.cumsum, _long((8, 1024), dim=-1)),
    "matmul": (torch.matmul, _long((16, 4096), (4096, 16))),
    "bmm": (torch.bmm, _long((2, 16, 1024), (2, 1024, 16))),
    "linear": (F.linear, _long((16, 1024), (32, 1024), (32,))),
    "softmax": (torch.softmax, _long((8, 4096), dim=-1)),
    "log_softmax": (torch.log_softmax, _long((8, 4096), dim=-1)),
    "logsumexp": (torch.logsumexp, _long((8, 4096), dim=-1)),
    "layer_norm": (F.layer_norm, _normed(lambda x, w, b: (x, (1024,), w, b))),
    "rms_norm": (rms_norm, _normed(lambda x, w, b: (x, (1024,), w))),
    "group_norm": (F.group_norm, _long((4, 32, 8, 8), 4, (32,), (32,))),
    "var": (torch.var, _long((8, 4096), dim=-1)),
    "norm": (torch.norm, _long((8, 4096), dim=-1)),
    "mse_loss": (F.mse_loss, _long((4096,), (4096,))),
    "conv2d": (F.conv2d, _long((2, 16, 16, 16), (32, 16, 3, 3), (32,), padding=1)),
    "scaled_dot_product_attention": (F.scaled_dot_product_attention, _long((2, 4, 64, 32), (2, 4, 256, 32),
                                                                            (2, 4, 256, 32))),
}


@dataclass(frozen=True)
class Example:
    subject: Subject
    dtype: torch.dtype
    sample: int  # which of the entry's sample calls (modulo their count)
    seed: int  # torch's seed while the samples are made
    pattern: str
    scale: int
    backward: bool
    baseline: bool

    def describe(self) -> str:
        return (f"{self.subject.label} {str(self.dtype)[6:]} sample {self.sample} seed {self.seed} "
                f"{self.pattern} 2^{self.scale}{' backward' if self.backward else ''}"
                f"{' with a baseline' if self.baseline else ''}")


def call_of(example: Example) -> tuple[tuple, dict] | None:
    """The example's call: the sample's arguments in its dtype, reshaped by its pattern; None where the
    entry has no sample in that dtype."""
    torch.manual_seed(example.seed)
    samples = example.subject.samples(example.dtype)
    if not samples:
        return None
    args, kwargs = samples[example.sample % len(samples)]
    return _shaped(args, example), {k: _shaped_one(v, example, False) for k, v in kwargs.items()}


def _shaped(args: tuple, example: Example) -> tuple:
    return tuple(_shaped_one(a, example, i == 0) for i, a in enumerate(args))


def _shaped_one(value: Any, example: Example, first: bool) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_shaped_one(v, example, first) for v in value)
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return value
    value = (value.double() * math.ldexp(1.0, example.scale)).to(value.dtype)
    if not first or not value.numel():
        return value
    generator = torch.Generator().manual_seed(example.seed)
    if example.pattern == "zeros":  # a third of the values zero
        return torch.where(torch.rand(value.shape, generator=generator) < 1 / 3, 0, value).to(value.dtype)
    if example.pattern == "repeated":  # four distinct values, spread over the tensor
        choices = value.reshape(-1)[torch.randint(0, value.numel(), (4,), generator=generator)]
        return choices[torch.randint(0, 4, value.shape, generator=generator)]
    if example.pattern == "constant":
        return torch.full_like(value, float(value.reshape(-1)[0]))
    return value


def rounded_golden_verdict(example: Example) -> CallVerdict | None:
    """The example's golden, rounded to each output's dtype, judged as check_call judges a device's
    results; None where the call does not run here (the sample needs what this torch lacks)."""
    call = call_of(example)
    if call is None:
        return None
    args, kwargs = call
    resolved = example.subject.resolved
    requires = tuple(i for i, a in enumerate(args) if _float_tensor(a)) if example.backward else ()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = run_call(resolved, args, kwargs, device="cpu", backward=example.backward, requires_grad=requires)
    except (OpExecutionError, RuntimeError, ValueError, TypeError, NotImplementedError):
        return None
    if run.error:
        return None
    run = dataclasses.replace(run, outputs=tuple(_rounded(o, example.baseline) for o in run.outputs),
                              grads=tuple(_rounded(o, example.baseline) for o in run.grads))
    return judge_run(resolved, run, resolved.own_rules(Rules.default()))


def _rounded(output: RunOutput, baseline: bool) -> RunOutput:
    """The output with the golden rounded to its dtype as the device's result; torch's as the baseline."""
    actual = output.actual
    rounded = output.golden.to(device=actual.device, dtype=actual.dtype) if actual.is_floating_point() \
        else output.golden.to(actual.device).to(actual.dtype)
    return dataclasses.replace(output, actual=rounded, baseline=actual if baseline else None)


def _float_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def failed(verdict: CallVerdict | None) -> bool:
    return verdict is not None and verdict.status is Status.ERROR


def main(argv: list[str] | None = None) -> int:
    import argparse
    import random
    import time
    from collections import Counter

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=20, help="examples per subject")
    parser.add_argument("--ops", nargs="*", help="subject labels to keep, as the table prints them (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args(argv)
    chosen = [s for s in subjects() if not options.ops or s.label in options.ops]
    rng = random.Random(options.seed)
    drawn, failures, ran = Counter(), Counter(), Counter()
    shown: list[str] = []
    began = time.monotonic()
    for subject in chosen:
        for _ in range(options.examples):
            dtypes = subject.dtypes()
            if not dtypes:
                break
            example = Example(subject, rng.choice(dtypes), rng.randrange(64), rng.randrange(1 << 16),
                              rng.choice(PATTERNS), rng.choice(SCALES), rng.random() < 0.5, rng.random() < 0.5)
            key = (subject.label, str(example.dtype)[6:])
            drawn[key] += 1
            verdict = rounded_golden_verdict(example)
            ran[key] += verdict is not None
            if failed(verdict):
                failures[key] += 1
                if len(shown) < 40:
                    shown.append(f"{example.describe()}\n    {verdict.message().splitlines()[0][:300]}")
    print(f"{'op':40} {'dtype':9} {'drawn':>6} {'ran':>5} {'failed':>6}")
    for key in sorted(drawn):
        print(f"{key[0]:40} {key[1]:9} {drawn[key]:6} {ran[key]:5} {failures[key]:6}")
    total, runs, bad = sum(drawn.values()), sum(ran.values()), sum(failures.values())
    print(f"\n{len(chosen)} subjects, {total} examples drawn, {runs} ran, {bad} failed, "
          f"{time.monotonic() - began:.0f} s")
    for line in shown:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
