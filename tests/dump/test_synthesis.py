"""Statistics-mode tensor synthesis: dtype, shape, extremes, moments, non-finite values, roles."""

import json
import math

import pytest
import torch

from pytest_npuprecision.checks.case_run import Settings, run_case
from pytest_npuprecision.dump.descriptors import TensorSpec
from pytest_npuprecision.dump.dump_cases import load_dump
from pytest_npuprecision.dump.synthesis import ROLE_TABLE, Role, RoleKind, role_for, synthesize

INF = math.inf


def spec(dtype=torch.float32, shape=(1000,), max=1.0, min=-1.0, mean=None, norm=None, where="input_args[0]"):
    return TensorSpec(dtype, tuple(shape), max, min, mean, norm, False, None, where)


def moments(t):
    x = t.double()
    return x.max().item(), x.min().item(), x.mean().item(), x.norm().item()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(8, 16), (2, 4, 8, 8), (3,)])
def test_dtype_shape_and_extremes_are_exact(dtype, shape):
    s = spec(dtype, shape, max=3.0271542072296143, min=-2.3906002044677734, mean=0.0712, norm=11.96)
    s = spec(dtype, shape, max=float(torch.tensor(s.max).to(dtype)), min=float(torch.tensor(s.min).to(dtype)),
             mean=s.mean, norm=s.norm)
    t = synthesize(s, 7)
    assert t.dtype == dtype and tuple(t.shape) == shape and t.device.type == "cpu"
    assert t.max().item() == s.max and t.min().item() == s.min


def test_big_tensor_matches_mean_and_std_from_norm():
    n, mean, std = 100_000, 0.25, 1.5
    norm = math.sqrt(n * (std**2 + mean**2))
    t = synthesize(spec(shape=(100, 1000), max=6.0, min=-5.0, mean=mean, norm=norm), 1)
    top, bottom, got_mean, got_norm = moments(t)
    assert (top, bottom) == (6.0, -5.0)
    assert got_mean == pytest.approx(mean, abs=0.01)
    assert t.double().std(correction=0).item() == pytest.approx(std, rel=0.01)
    assert got_norm == pytest.approx(norm, rel=0.01)


def test_beats_uniform_on_a_wide_range():
    # msprobe C10: Norm 316 over 1e5 elements (std 1) came back as std 2.3 from uniform [Min, Max].
    t = synthesize(spec(shape=(100_000,), max=4.0, min=-4.0, mean=0.0, norm=316.2), 3)
    assert t.double().std().item() == pytest.approx(1.0, rel=0.02)


def test_relu_like_statistics_pile_up_at_the_lower_bound():
    # relu output: Min 0, a mean near 0 and a long upper tail, so many elements are exactly 0.
    t = synthesize(spec(shape=(8, 32), max=1.571, min=0.0, mean=0.3, norm=0.55 * 16), 5)
    assert t.min().item() == 0.0 and (t == 0).sum() > 10
    assert t.double().mean().item() == pytest.approx(0.3, rel=0.05)


def _most_repeated(t) -> float:
    """The largest share of the elements that hold one and the same value."""
    _, counts = t.unique(return_counts=True)
    return counts.max().item() / t.numel()


def test_a_skewed_gradient_is_a_tail_not_a_pile_at_its_min():
    # A real float32 layer_norm output gradient (128 x 256): mean ~0, Min -1e-4, rare values up to 8e-3.
    # A clipped normal put 81 % of the elements on Min: copies that a fair sequential sum rounds alike.
    n = 128 * 256
    t = synthesize(spec(shape=(128, 256), max=0.00816343817859888, min=-0.00010305716568836942,
                        mean=3.069544618483633e-10, norm=0.09113411605358124), 1)
    top, bottom, got_mean, got_norm = moments(t)
    assert (top, bottom) == (0.00816343817859888, -0.00010305716568836942)
    assert _most_repeated(t) < 0.01
    std = math.sqrt(0.09113411605358124**2 / n)
    assert abs(got_mean) < 0.01 * std
    assert got_norm == pytest.approx(0.09113411605358124, rel=0.1)


def test_a_uniform_initialized_weight_is_uniform_not_piled_at_both_ends():
    # Linear's default init: U(-1/sqrt(32), 1/sqrt(32)), so its std is the range's over sqrt(12).
    bound = 1 / math.sqrt(32)
    std = 2 * bound / math.sqrt(12)
    t = synthesize(spec(shape=(32, 32), max=bound, min=-bound, mean=0.0, norm=std * 32), 2)
    assert _most_repeated(t) < 0.01
    assert t.double().std(correction=0).item() == pytest.approx(std, rel=0.05)
    thirds = torch.histc(t.double(), bins=3, min=-bound, max=bound)
    assert thirds.min() > 0.25 * t.numel()  # as flat as a uniform, not a bell


@pytest.mark.parametrize("low", [0.0, -1.0])
def test_only_a_bound_of_zero_keeps_its_pile(low):
    # relu's zeros are real and add exactly; a pile on a nonzero Min would be invented copies.
    mean, std = low + 0.2, 0.4
    t = synthesize(spec(shape=(4096,), max=low + 3.0, min=low, mean=mean, norm=math.sqrt(4096 * (std**2 + mean**2))), 4)
    assert (_most_repeated(t) > 0.2) == (low == 0.0)


def test_same_seed_same_tensor_and_other_seed_other_tensor():
    s = spec(mean=0.1, norm=10.0)
    assert torch.equal(synthesize(s, 42), synthesize(s, 42))
    assert not torch.equal(synthesize(s, 42), synthesize(s, 43))


def test_never_touches_the_global_rng():
    state = torch.get_rng_state()
    synthesize(spec(mean=0.0, norm=10.0), 1)
    synthesize(spec(torch.int64, max=9, min=0), 1)
    assert torch.equal(state, torch.get_rng_state())


@pytest.mark.parametrize(
    "stats, nonfinite",
    [
        (dict(max=math.nan, min=-1.0, mean=math.nan, norm=math.nan), "nan"),
        (dict(max=1.0, min=-1.0, mean=0.0, norm=math.nan), "nan"),
        (dict(max=1.037, min=-INF, mean=-INF, norm=INF), "-inf"),  # the dumped masked_fill output
        (dict(max=INF, min=-2.0, mean=INF, norm=INF), "inf"),
        (dict(max=INF, min=-INF, mean=math.nan, norm=INF), "both infs"),
    ],
)
def test_non_finite_statistics_place_only_a_few_non_finite_elements(stats, nonfinite):
    t = synthesize(spec(shape=(2, 4, 8, 8), **stats), 9)
    bad = ~torch.isfinite(t)
    assert 1 <= bad.sum().item() <= 16 and bad.sum().item() < t.numel() // 4
    finite = t[torch.isfinite(t)]
    if math.isfinite(stats["max"]):
        assert finite.max().item() == pytest.approx(stats["max"])
    if math.isfinite(stats["min"]):
        assert finite.min().item() == pytest.approx(stats["min"])
    if nonfinite == "nan":
        assert torch.isnan(t).any() and not torch.isinf(t).any()
    elif nonfinite == "-inf":
        assert (t == -INF).any() and not torch.isnan(t).any() and not (t == INF).any()
    elif nonfinite == "inf":
        assert (t == INF).any() and not torch.isnan(t).any() and not (t == -INF).any()
    else:
        assert (t == INF).any() and (t == -INF).any() and not torch.isnan(t).any()


def test_infinite_norm_with_finite_extremes_is_overflow_not_inf_elements():
    t = synthesize(spec(torch.float16, shape=(10_000,), max=300.0, min=-300.0, mean=0.0, norm=INF), 2)
    assert torch.isfinite(t).all()


def test_all_minus_inf_when_max_is_minus_inf():
    t = synthesize(spec(shape=(4,), max=-INF, min=-INF, mean=-INF, norm=INF), 0)
    assert (t == -INF).all()


def test_fp16_full_range_does_not_overflow():
    t = synthesize(spec(torch.float16, shape=(10_000,), max=65504.0, min=-65504.0, mean=0.0, norm=6.0e6), 4)
    assert torch.isfinite(t).all() and t.max().item() == 65504.0 and t.min().item() == -65504.0


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.int8])
def test_integers_are_uniform_in_range_with_both_extremes(dtype):
    t = synthesize(spec(dtype, shape=(500,), max=100, min=3), 11)
    assert t.dtype == dtype and t.max().item() == 100 and t.min().item() == 3
    assert len(t.unique()) > 50


@pytest.mark.parametrize(
    "any_, all_, expect",
    [(False, False, "all false"), (True, True, "all true"), (True, False, "mixed")],
)
def test_bool_max_is_any_and_min_is_all(any_, all_, expect):
    t = synthesize(spec(torch.bool, shape=(8, 8), max=any_, min=all_), 1)
    assert t.dtype == torch.bool
    assert {"all false": not t.any(), "all true": t.all(), "mixed": t.any() and not t.all()}[expect]


@pytest.mark.parametrize("shape", [(0,), (2, 0, 3), (0, 0)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_zero_element_shapes(shape, dtype):
    t = synthesize(spec(dtype, shape=shape, max=None, min=None), 0)
    assert tuple(t.shape) == shape and t.dtype == dtype


def test_zero_dim_tensor_takes_its_value():
    # 0-d tensors are dumped with Max = Min = Mean = Norm = the value, so Norm can be negative.
    t = synthesize(spec(shape=(), max=-1.5, min=-1.5, mean=-1.5, norm=-1.5), 0)
    assert t.shape == () and t.item() == -1.5


@pytest.mark.parametrize(
    "stats",
    [
        dict(max=1.0, min=-1.0, mean=5.0, norm=10.0),  # mean outside [Min, Max]
        dict(max=1.0, min=-1.0, mean=0.9, norm=0.1),  # negative variance
        dict(max=1.0, min=-1.0, mean=0.0, norm=1e6),  # more spread than [Min, Max] allows
        dict(max=-1.0, min=1.0, mean=0.0, norm=1.0),  # Min above Max
    ],
)
def test_inconsistent_statistics_fall_back_to_the_range(stats):
    t = synthesize(spec(**stats), 3)
    assert torch.isfinite(t).all() and t.min().item() >= -1.0 and t.max().item() <= 1.0


def test_float8_is_made_in_float32_and_cast():
    t = synthesize(spec(torch.float8_e4m3fn, shape=(64,), max=2.0, min=-2.0, mean=0.0, norm=8.0), 1)
    assert t.dtype == torch.float8_e4m3fn and t.float().max().item() == 2.0


def test_complex_magnitudes_follow_the_statistics():
    t = synthesize(spec(torch.complex64, shape=(256,), max=3.0, min=0.5, mean=1.5, norm=26.0), 1)
    assert t.dtype == torch.complex64
    assert t.abs().max().item() == pytest.approx(3.0) and t.abs().min().item() == pytest.approx(0.5)


# ---------------------------------------------------------------- roles


@pytest.mark.parametrize(
    "op, where, kind",
    [
        ("embedding", "input_args[0]", RoleKind.INDEX),
        ("embedding", "input_kwargs['input']", RoleKind.INDEX),
        ("embedding", "input_args[1]", None),
        ("index_select", "input_args[2]", RoleKind.INDEX),
        ("gather", "input_kwargs['index']", RoleKind.INDEX),
        ("cross_entropy", "input_args[1]", RoleKind.CLASS_TARGET),
        ("nll_loss", "input_kwargs['target']", RoleKind.CLASS_TARGET),
        ("binary_cross_entropy", "input_args[0]", RoleKind.PROBABILITY),
        ("masked_fill", "input_args[1]", RoleKind.MASK),
        ("where", "input_args[0]", RoleKind.MASK),
        ("log", "input_args[0]", RoleKind.POSITIVE),
        ("linalg.inv", "input_args[0]", None),
        ("gelu", "input_args[0]", None),
    ],
)
def test_role_for(op, where, kind):
    role = role_for(op, where)
    assert (role.kind if role else None) is kind


def test_role_table_is_plain_data():
    for op, rules in ROLE_TABLE.items():
        assert op == op.strip() and all(isinstance(r, Role) and wheres for wheres, r in rules)


def test_index_role_keeps_indices_below_the_limit_even_with_wider_statistics():
    t = synthesize(spec(torch.int64, shape=(2, 8), max=100, min=-5), 0, role=Role(RoleKind.INDEX, limit=64))
    assert t.min().item() >= 0 and t.max().item() <= 63


def test_class_target_keeps_a_few_ignore_index_values():
    role = Role(RoleKind.CLASS_TARGET, limit=4, ignore_index=-100)
    t = synthesize(spec(torch.int64, shape=(1000,), max=3, min=-100), 0, role=role)
    ignored = t == -100
    assert 1 <= ignored.sum().item() <= 16
    assert t[~ignored].min().item() >= 0 and t[~ignored].max().item() <= 3


def test_probability_role_clips_to_unit_interval():
    t = synthesize(spec(shape=(1000,), max=3.0, min=-2.0, mean=0.3, norm=20.0), 0, role=Role(RoleKind.PROBABILITY))
    assert t.min().item() >= 0.0 and t.max().item() <= 1.0


def test_mask_role_on_a_uint8_mask_gives_zeros_and_ones():
    t = synthesize(spec(torch.uint8, shape=(64,), max=1, min=0), 0, role=Role(RoleKind.MASK))
    assert set(t.unique().tolist()) == {0, 1}


def test_positive_role_keeps_zero_only_as_the_dumped_min():
    t = synthesize(spec(shape=(1000,), max=2.0, min=0.0, mean=0.1, norm=5.0), 0, role=Role(RoleKind.POSITIVE))
    assert (t == 0).sum().item() == 1 and t.min().item() == 0.0


def _stats(shape, top, bottom, mean, norm, requires_grad=False):
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(shape), "Max": top, "Min": bottom,
            "Mean": mean, "Norm": norm, "requires_grad": requires_grad}


# One layer_norm of a transformer block's float32 training step, as `capture(task="statistics")` wrote it.
LAYER_NORM_STEP = {
    "Functional.layer_norm.114.forward": {
        "input_args": [_stats((128, 256), 141.40126037597656, -182.7802276611328, -0.02042210102081299,
                              9742.833984375, True),
                       [{"type": "int", "value": 256}], _stats((256,), 1.0, 1.0, 1.0, 16.0, True),
                       _stats((256,), 0.0, 0.0, 0.0, 0.0, True), {"type": "float", "value": 1e-05}],
        "input_kwargs": {},
        "output": [_stats((128, 256), 2.630725860595703, -3.391324758529663, 1.210719347000122e-08, 181.0193634033203)]},
    "Functional.layer_norm.114.backward": {
        "input": [_stats((128, 256), 0.00816343817859888, -0.00010305716568836942, 3.069544618483633e-10,
                         0.09113411605358124)],
        "output": [_stats((128, 256), 0.00014810144784860313, -4.680505753640318e-06, -1.4210854715202004e-14,
                          0.0016734035452827811),
                   _stats((256,), 2.6243159770965576, -0.018187861889600754, 0.009839056991040707, 2.6257452964782715),
                   _stats((256,), 1.026877522468567, -0.009695508517324924, 3.882450982928276e-08, 1.031009316444397)]},
}


def test_a_fair_sequential_bias_gradient_passes_on_synthesized_inputs(tmp_path):
    # With one thread torch sums the bias gradient row after row; over 104 copies of Min in each column
    # every addition rounded alike and the fair kernel's bound_bias reached 0.34 > 0.3 (7 of 60 blocks).
    folder = tmp_path / "step0" / "rank0"
    folder.mkdir(parents=True)
    (folder / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch",
                                                  "dump_data_dir": None, "data": LAYER_NORM_STEP}))
    dump = load_dump(folder / "dump.json")
    backward = next(case for case in dump.cases if case.direction == "backward")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = run_case(backward, dump.data_dir, Settings(device=torch.device("cpu")))
    finally:
        torch.set_num_threads(threads)
    assert {out.name: out.verdict.status.value for out in result.outputs} == {
        "grad.input_args[0]": "pass", "grad.input_args[2]": "pass", "grad.input_args[3]": "pass"}
