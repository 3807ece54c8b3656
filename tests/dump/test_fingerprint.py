"""Input fingerprints: the same bits give the same digest on any machine, any change names its input."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
import torch

from pytest_npuprecision.dump.arguments import CallInputs
from pytest_npuprecision.dump.descriptors import DumpedDevice
from pytest_npuprecision.dump.fingerprints import fingerprint, update_with_tensor
from pytest_npuprecision.opcases.regression import regression_name
from pytest_npuprecision.opcases.spec import Call, OpCase


def tensor(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def inputs(**changes) -> CallInputs:
    """A backward case's inputs: a tensor that requires grad, an int tensor, scalar kwargs, one output gradient."""
    base = CallInputs(args=(tensor(2, 3), torch.tensor([0, 2]), 0.5),
                      kwargs={"reduction": "mean", "weights": [tensor(3, seed=1), None]},
                      grad_outputs=(tensor(2, 3, seed=2),), requires_grad=("input_args[0]",))
    return dataclasses.replace(base, **changes)


def one_hash(value) -> str:
    """An input's own hash, as the fingerprint shows it."""
    digest = hashlib.blake2b(digest_size=8)
    if isinstance(value, torch.Tensor):
        update_with_tensor(digest, value)
    else:
        digest.update(repr(value).encode())
    return digest.hexdigest()


def flip_lowest_bit(t: torch.Tensor, index: int = 0) -> torch.Tensor:
    bits = t.clone().view(torch.int16 if t.element_size() == 2 else torch.int32)
    bits.view(-1)[index] ^= 1
    return bits.view(t.dtype)


def test_the_same_inputs_give_the_same_digest():
    first, again = fingerprint(inputs()), fingerprint(inputs())
    assert first == again
    assert len(first.digest) == 32
    assert first.difference(again.as_dict()) == ""


def test_every_leaf_is_listed_by_its_path_with_its_own_hash():
    x = inputs()
    assert dict(fingerprint(x).inputs) == {
        "input_args[0]": f"float32[2, 3] {one_hash(x.args[0])} requires grad",
        "input_args[1]": f"int64[2] {one_hash(x.args[1])}",
        "input_args[2]": f"0.5 {one_hash(0.5)}",
        "input_kwargs['reduction']": f"'mean' {one_hash('mean')}",
        "input_kwargs['weights'][0]": f"float32[3] {one_hash(x.kwargs['weights'][0])}",
        "input_kwargs['weights'][1]": f"None {one_hash(None)}",
        "grad_outputs[0]": f"float32[2, 3] {one_hash(x.grad_outputs[0])}",
    }


def test_the_digest_is_the_documented_hash_of_paths_and_input_hashes():
    """Recorded files hold this digest: changing how it is made invalidates every recorded baseline."""
    x = CallInputs(args=(tensor(4), DumpedDevice("npu:0")), kwargs={"alpha": 2}, requires_grad=("input_args[0]",))
    total = hashlib.blake2b(digest_size=16)
    for path, value in (("input_args[0]", x.args[0]), ("input_args[1]", x.args[1]), ("input_kwargs['alpha']", 2)):
        total.update(path.encode())
        total.update(bytes.fromhex(one_hash(value)))
    total.update(repr(["input_args[0]"]).encode())
    assert fingerprint(x).digest == total.hexdigest()


def test_a_layout_is_not_an_input_only_the_values_are():
    values = tensor(3, 2)
    transposed = values.t().contiguous().t()  # the same values, column-major
    assert not transposed.is_contiguous()
    assert fingerprint(inputs(args=(values,))).digest == fingerprint(inputs(args=(transposed,))).digest


def _args(x: CallInputs, first: torch.Tensor) -> tuple:
    return (first, *x.args[1:])


CHANGES = {
    "one bit of a tensor": (lambda x: dict(args=_args(x, flip_lowest_bit(x.args[0], 4))), "input_args[0]"),
    "a tensor's dtype": (lambda x: dict(args=_args(x, x.args[0].double())), "input_args[0]"),
    "a tensor's shape": (lambda x: dict(args=_args(x, x.args[0].reshape(3, 2))), "input_args[0]"),
    "a scalar argument": (lambda x: dict(args=(*x.args[:2], 0.25)), "input_args[2]"),
    "a scalar kwarg": (lambda x: dict(kwargs={**x.kwargs, "reduction": "sum"}), "input_kwargs['reduction']"),
    "a nested kwarg": (lambda x: dict(kwargs={**x.kwargs, "weights": [x.kwargs["weights"][0], 1.0]}),
                       "input_kwargs['weights'][1]"),
    "an output gradient": (lambda x: dict(grad_outputs=(flip_lowest_bit(x.grad_outputs[0]),)), "grad_outputs[0]"),
    "which input requires grad": (lambda x: dict(requires_grad=()), "input_args[0]"),
    "an extra argument": (lambda x: dict(args=(*x.args, 1)), "input_args[3]"),
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_changed_input_changes_the_digest_and_is_named(change):
    edit, path = CHANGES[change]
    recorded = fingerprint(inputs())
    here = fingerprint(inputs(**edit(inputs())))
    assert here.digest != recorded.digest
    ours, theirs = dict(here.inputs), dict(recorded.inputs)
    assert here.difference(recorded.as_dict()) == (f"{path} is {ours.get(path, 'absent')} here but was "
                                                   f"{theirs.get(path, 'absent')} when recorded")


def test_a_difference_in_words():
    recorded = fingerprint(inputs())
    x = inputs()
    changed = x.args[0].double()
    here = fingerprint(inputs(args=_args(x, changed)))
    assert here.difference(recorded.as_dict()) == (
        f"input_args[0] is float64[2, 3] {one_hash(changed)} requires grad here but was "
        f"float32[2, 3] {one_hash(x.args[0])} requires grad when recorded")
    removed = fingerprint(inputs(grad_outputs=()))
    assert removed.difference(recorded.as_dict()) == (
        f"grad_outputs[0] is absent here but was float32[2, 3] {one_hash(x.grad_outputs[0])} when recorded")


def test_a_long_scalar_is_shown_shortened_and_hashed_whole():
    long, longer = "x" * 50, "x" * 51
    shown = dict(fingerprint(CallInputs(args=(long,), kwargs={})).inputs)["input_args[0]"]
    assert shown == f"'{'x' * 36}... {one_hash(long)}"
    assert fingerprint(CallInputs(args=(long,), kwargs={})) != fingerprint(CallInputs(args=(longer,), kwargs={}))


def test_a_dumped_device_fingerprints_by_its_dumped_string_not_this_machine():
    """run_case fingerprints before the dumped devices are replaced: an npu dump reads the same on a cpu."""
    npu = CallInputs(args=(tensor(2), DumpedDevice("npu:0")), kwargs={"device": DumpedDevice("npu:0")})
    shown = dict(fingerprint(npu).inputs)
    assert shown["input_args[1]"] == f"DumpedDevice(original='npu:0') {one_hash(DumpedDevice('npu:0'))}"
    assert fingerprint(npu) == fingerprint(CallInputs(args=(tensor(2), DumpedDevice("npu:0")),
                                                      kwargs={"device": DumpedDevice("npu:0")}))
    other = CallInputs(args=(tensor(2), DumpedDevice("npu:1")), kwargs={"device": DumpedDevice("npu:0")})
    assert fingerprint(other).difference(fingerprint(npu).as_dict()).startswith(
        "input_args[1] is DumpedDevice(original='npu:1') ")
    # Replaced by this machine's device, the inputs would no longer match the recording.
    assert fingerprint(npu.with_device("cpu")).digest != fingerprint(npu).digest


def test_empty_tensors_fingerprint_by_dtype_and_shape():
    digests = {fingerprint(CallInputs(args=(t,), kwargs={})).digest
               for t in (torch.empty(0, 3), torch.empty(3, 0), torch.empty(0), torch.empty(0, 3, dtype=torch.float16))}
    assert len(digests) == 4
    assert dict(fingerprint(CallInputs(args=(torch.empty(0, 3),), kwargs={})).inputs)["input_args[0]"].startswith(
        "float32[0, 3] ")


def test_dtypes_numpy_lacks_fingerprint_by_their_bits():
    """numpy has no bfloat16 or float8: the bytes are taken through a uint8 view."""
    bf16 = tensor(5, dtype=torch.bfloat16)
    same_bits = bf16.view(torch.float16)
    a, b = fingerprint(CallInputs(args=(bf16,), kwargs={})), fingerprint(CallInputs(args=(same_bits,), kwargs={}))
    assert a.digest != b.digest  # same bytes, other dtype
    assert dict(a.inputs)["input_args[0]"].startswith("bfloat16[5] ")
    flipped = fingerprint(CallInputs(args=(flip_lowest_bit(bf16, 2),), kwargs={}))
    assert flipped.digest != a.digest
    fp8 = tensor(4).to(torch.float8_e4m3fn)
    assert fingerprint(CallInputs(args=(fp8,), kwargs={})).digest != fingerprint(
        CallInputs(args=(fp8.view(torch.uint8),), kwargs={})).digest


def test_scalars_bools_and_lazy_views_fingerprint_by_their_values():
    for t in (torch.tensor(1.5), torch.tensor([True, False]), torch.tensor([1 + 2j, 3 - 1j])):
        assert fingerprint(CallInputs(args=(t,), kwargs={})) == fingerprint(CallInputs(args=(t.clone(),), kwargs={}))
    z = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    assert z.conj().is_conj()
    assert one_hash(z.conj()) == one_hash(z.conj().resolve_conj())


def test_regression_file_names_keep_their_digest_of_op_dtype_and_arguments():
    """opcases/regression.py names a found example by sha1 over the same tensor bytes as fingerprints."""
    case = OpCase(id="gelu", op="torch.nn.functional.gelu", dtypes=(torch.float16,), source="op_cases/x.yaml")
    x = tensor(2, 3, dtype=torch.float16)
    call = Call(args=(x, 2), kwargs={"approximate": "tanh"})
    by_hand = hashlib.sha1(b"torch.nn.functional.gelu|torch.float16|False")
    by_hand.update(b"torch.float16(2, 3)")
    by_hand.update(x.numpy().tobytes())
    by_hand.update(b"2")
    by_hand.update(b"('approximate', 'tanh')")
    assert regression_name(case, torch.float16, call) == f"gelu-float16-{by_hand.hexdigest()[:8]}"
