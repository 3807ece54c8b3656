"""Which ops draw random numbers, so that no golden can redraw what the device drew: the catalogue's randomness.

Torch marks every aten operator that draws from a generator with the tag
``torch.Tag.nondeterministic_seeded``. Each torch tags its own set (torch 2.11 tags
``_flash_attention_forward_no_dropout_inplace``, torch 2.1 has no such op), so the catalogue holds
SEEDED_ATEN_OPS, the ops recent torches tag (an older torch simply never calls them), and the
installed torch's own set is read when the first case asks (:func:`seeded_aten_ops`), not at
collection. ``python -m pytest_npuprecision.ops.randomness`` prints it. Some of these ops draw only
while an argument says so (dropout's p, a training flag), and some Python functions draw before they
reach an aten op (fractional max pooling without ``_random_samples``): their records say so by hand
(``OpRecord.random``: ops/table/), since no tag records them; the catalogue marks the rest of the
tagged ops as always random. Names are the catalogue's: in-place spellings are folded (``bernoulli_``
is ``bernoulli``'s record).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping, Sequence

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


@lru_cache(maxsize=1)
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
class Switch:
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

    def describe_off(self) -> str:
        return f"{self.names[0]} is given" if self.off is _GIVEN else f"{self.names[0]}={self.off!r}"

    def value(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        for keyword in self.names:
            if keyword in kwargs:
                return kwargs[keyword]
        return args[self.position] if len(args) > self.position else self.default


@dataclass(frozen=True)
class Randomness:
    """Why an op's result differs from run to run: always, or only while every one of its switches is on."""

    unless: tuple[Switch, ...] = ()  # the arguments that turn it off; none: every call is random
    why: str = "always"  # what the skip message says of a call where no switch could turn it off
    in_place_only: bool = False  # only its in-place spelling is (resize_ grows a tensor; resize is a view)

    @property
    def every_call(self) -> bool:
        """Every call is random (no switch turns it off): no case of the op is ever judged."""
        return not self.unless

    def reason(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        """Why a call with these arguments is random, or None where one of its switches is off."""
        if self.every_call:
            return self.why
        values = [s.value(args, kwargs) for s in self.unless]
        if any(s.is_off(value) for value, s in zip(values, self.unless)):
            return None
        return ", ".join(s.describe(value) for value, s in zip(values, self.unless))

    def describe(self) -> str:
        """In words, for the catalogue's page: "it draws random numbers unless p=0 or training=False"."""
        if self.unless:
            return "it draws random numbers unless " + " or ".join(s.describe_off() for s in self.unless)
        if self is ALWAYS or self.why == ALWAYS.why:
            return "it draws random numbers on every call"
        return f"{self.why} (in place)" if self.in_place_only else self.why


def folded_name(name: str) -> str:
    """The catalogue's name of an in-place spelling: ``bernoulli_`` -> ``bernoulli`` (as ops.base_name folds it)."""
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def switched(*switches: Switch) -> Randomness:
    """An op that draws random numbers only while every one of its switches is on."""
    return Randomness(switches)


KEYWORD_ONLY = 1 << 30  # a switch's position where the op takes it by keyword only
ALWAYS = Randomness()
UNINITIALIZED = Randomness(why="its result is uninitialized memory")
GROWN = Randomness(why=UNINITIALIZED.why, in_place_only=True)  # resize_ grows a tensor in place; resize is a view
DROPOUT = switched(Switch(("p",), 1, 0.5, 0), Switch(("training", "train"), 2, True, False))
RNN_DROPOUT = switched(Switch(("dropout",), 5, 0.0, 0), Switch(("train",), 6, True, False))
FRACTIONAL = switched(Switch(("_random_samples",), 5, None, _GIVEN))  # its samples drawn, unless passed in


if __name__ == "__main__":
    print(sorted(seeded_aten_ops()))
