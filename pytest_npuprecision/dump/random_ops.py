"""Which calls draw random numbers, so that no golden can redraw what the device drew.

Torch marks every aten operator that draws from a generator with the tag
``torch.Tag.nondeterministic_seeded``. Each torch tags its own set (torch 2.11 tags
``_flash_attention_forward_no_dropout_inplace``, torch 2.1 has no such op), so the set is read from
the installed torch when the first case is judged, not at collection, joined with SEEDED_ATEN_OPS:
the ops recent torches tag, which an older torch simply never calls. ``python -m
pytest_npuprecision.dump.random_ops`` prints the installed torch's set. Some of these ops
draw only while an argument says so (dropout's p, a training flag), and some Python functions draw
before they reach an aten op (fractional max pooling without ``_random_samples``): those switches
are spelled out by hand in _RANDOM_UNLESS, since no tag records them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .descriptors import DecodedCall

# What torch 2.13 tags, for ops that the installed torch may not know yet.
SEEDED_ATEN_OPS = frozenset({
    "_cudnn_attention_backward", "_cudnn_attention_forward", "_cudnn_init_dropout_state", "_cudnn_rnn",
    "_efficient_attention_forward", "_fill_mem_eff_dropout_mask_", "_flash_attention_forward",
    "_flash_attention_forward_no_dropout_inplace", "_fused_dropout", "_fused_sdp_choice", "_lstm_mps",
    "_nested_tensor_softmax_with_shape", "_sample_dirichlet", "_scaled_dot_product_attention_math",
    "_scaled_dot_product_attention_math_for_mps", "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_cudnn_attention_backward", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_fused_attention_overrideable",
    "_standard_gamma", "_triton_scaled_dot_attention", "alpha_dropout", "alpha_dropout_", "bernoulli", "bernoulli_",
    "binomial", "cauchy", "cauchy_", "dropout", "dropout_", "exponential", "exponential_", "feature_alpha_dropout",
    "feature_alpha_dropout_", "feature_dropout", "feature_dropout_", "geometric", "geometric_", "gru", "log_normal",
    "log_normal_", "lstm", "miopen_rnn", "multinomial", "native_dropout", "normal", "normal_", "normal_functional",
    "poisson", "rand", "rand_like", "randint", "randint_like", "randn", "randn_like", "random", "random_", "randperm",
    "rnn_relu", "rnn_tanh", "rrelu", "rrelu_", "rrelu_with_noise", "rrelu_with_noise_", "rrelu_with_noise_functional",
    "scaled_dot_product_attention", "uniform", "uniform_",
})


def seeded_aten_ops() -> frozenset[str]:
    """The aten operators that the installed torch tags ``nondeterministic_seeded`` (0.3 s: not at startup)."""
    import torch

    found = set()
    for schema in torch._C._jit_get_all_schemas():
        namespace, _, name = schema.name.partition("::")
        packet = getattr(torch.ops.aten, name, None) if namespace == "aten" else None
        if packet is not None and any(torch.Tag.nondeterministic_seeded in getattr(packet, overload).tags
                                      for overload in packet.overloads()):
            found.add(name)
    return frozenset(found)


_GIVEN = object()  # a switch that any recorded value turns off: the random draws were passed in


@dataclass(frozen=True)
class _Switch:
    """An argument that turns an op's randomness off when it has the value ``off``."""

    names: tuple[str, ...]  # keyword spellings
    position: int
    default: Any
    off: Any

    def is_off(self, value: Any) -> bool:
        if self.off is _GIVEN:
            return value is not None
        return value is None or value == self.off

    def describe(self, value: Any) -> str:
        return f"{self.names[0]} not recorded" if self.off is _GIVEN else f"{self.names[0]}={value!r}"


_P = _Switch(("p",), 1, 0.5, 0)
_TRAINING = _Switch(("training", "train"), 2, True, False)
_RNN = (_Switch(("dropout",), 5, 0.0, 0), _Switch(("train",), 6, True, False))
_FRACTIONAL = (_Switch(("_random_samples",), 5, None, _GIVEN),)
# Ops that draw random numbers only while every one of their switches is on.
_RANDOM_UNLESS: dict[str, tuple[_Switch, ...]] = {
    **{op: (_P, _TRAINING) for op in ("dropout", "dropout_", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
                                       "alpha_dropout_", "feature_alpha_dropout", "feature_alpha_dropout_",
                                       "feature_dropout", "feature_dropout_", "native_dropout")},
    **{op: (_Switch(("training",), 3, False, False),) for op in ("rrelu", "rrelu_")},
    **{op: _RNN for op in ("lstm", "gru", "rnn_relu", "rnn_tanh")},
    **{op: _FRACTIONAL for op in ("fractional_max_pool2d", "fractional_max_pool3d",
                                  "fractional_max_pool2d_with_indices", "fractional_max_pool3d_with_indices")},
    "scaled_dot_product_attention": (_Switch(("dropout_p",), 4, 0.0, 0),),
    "multi_head_attention_forward": (_Switch(("dropout_p",), 10, None, 0), _Switch(("training",), 13, True, False)),
    "npu_fusion_attention": (_Switch(("keep_prob",), 9, 1.0, 1),),
    "npu_fusion_attention_grad": (_Switch(("keep_prob",), 1 << 30, 1.0, 1),),  # keyword only
    "npu_dropout_with_add_softmax": (_Switch(("prob",), 3, None, 0),),
}
# Python functions that draw before any tagged aten op, and torch_npu's, which torch does not tag.
_UNTAGGED = frozenset({"gumbel_softmax", "npu_dropout", "npu_dropout_gen_mask", "_npu_dropout",
                       "npu_random_choice_with_mask", "npu_sim_exponential_"})


@lru_cache(maxsize=1)
def always_random() -> frozenset[str]:
    """The ops that draw random numbers whatever their arguments, for the installed torch."""
    return frozenset((SEEDED_ATEN_OPS | seeded_aten_ops() | _UNTAGGED) - set(_RANDOM_UNLESS))


# Ops whose result is (or may be, growing a tensor) uninitialized memory: no two runs need agree.
_UNINITIALIZED = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_",
                            "resize_as_"})


def random_reason(name: str, call: DecodedCall) -> str | None:
    """Why calling op ``name`` with these arguments is random, or None when it is deterministic."""
    op = name.rsplit(".", 1)[-1]
    if op in always_random():
        return "always"
    if op in _UNINITIALIZED:
        return "its result is uninitialized memory"
    switches = _RANDOM_UNLESS.get(op)
    if switches is None:
        return "its name says dropout" if "dropout" in op else None
    values = [_argument(call, s) for s in switches]
    if any(s.is_off(value) for value, s in zip(values, switches)):
        return None
    return ", ".join(s.describe(value) for value, s in zip(values, switches))


def _argument(call: DecodedCall, switch: _Switch) -> Any:
    for keyword in switch.names:
        if keyword in call.kwargs:
            return call.kwargs[keyword]
    return call.args[switch.position] if len(call.args) > switch.position else switch.default


if __name__ == "__main__":
    print(sorted(seeded_aten_ops()))
