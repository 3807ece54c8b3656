"""The Ascend half (issue 52): MoE routing and quantised matmuls against their float64 references, MindSpeed's
names and torch's fused optimizer names resolved, and no hooked op ever an input error.

Each reference is checked against the documented formula on fixed inputs and against an independent
formulation of it; a fair low-precision emulation passes and planted defects fail. A W8A8 MoE step recorded in
msprobe's format (quantised grouped matmul, quant matmul, MindSpeed's gmm, fusion attention, a permute and
unpermute around the experts, and an op with no reference) gives no input error offline, nor live with a
stand-in torch_npu that has the ops but no kernels.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from pytest_npuprecision import Status, check_call
from pytest_npuprecision.ops.fused import FUSED_OPS, MINDSPEED_OPS, UnjudgedFusedCall
from pytest_npuprecision.ops.resolution import resolve

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = Path(__file__).parents[1] / "stand_in_torch_npu"
permute = FUSED_OPS["npu_moe_token_permute"].reference
unpermute = FUSED_OPS["npu_moe_token_unpermute"].reference
quant_matmul = FUSED_OPS["npu_quant_matmul"].reference
grouped_matmul = FUSED_OPS["npu_grouped_matmul"].reference


def _routing(tokens: int = 64, hidden: int = 32, top_k: int = 2, experts: int = 8, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=generator).bfloat16()
    indices = torch.stack([torch.randperm(experts, generator=generator)[:top_k] for _ in range(tokens)])
    probs = torch.softmax(torch.randn(tokens, top_k, generator=generator), -1)
    return x, indices, probs


# ---------------------------------------------------------------- MoE routing


def test_permute_follows_the_documented_formula_on_a_small_example():
    tokens = torch.tensor([[1.0], [2.0], [3.0]])
    indices = torch.tensor([[2, 0], [0, 1], [2, 1]])  # token 0 to experts 2 and 0, ...
    permuted, sorted_indices = permute(tokens, indices)
    # by expert, ties in token order: expert 0 gets tokens 0, 1; expert 1 tokens 1, 2; expert 2 tokens 0, 2
    assert permuted.reshape(-1).tolist() == [1.0, 2.0, 2.0, 3.0, 1.0, 3.0]
    assert sorted_indices.dtype == torch.int32
    assert sorted_indices.tolist() == [4, 0, 1, 2, 5, 3]  # where each (token, k) copy landed
    for i, slot in enumerate(sorted_indices.tolist()):  # permuted[sorted_indices[i]] = tokens[i // topK]
        assert permuted[slot] == tokens[i // 2]


def test_permute_and_unpermute_agree_with_an_independent_loop():
    x, indices, probs = _routing()
    permuted, sorted_indices = permute(x, indices)
    by_expert = [(int(e), t) for e in range(8) for t in range(x.shape[0]) if e in indices[t].tolist()]
    assert torch.equal(permuted, torch.stack([x[t] for _, t in by_expert]))
    out = unpermute(permuted.float(), sorted_indices, probs)
    expected = torch.zeros(x.shape[0], x.shape[1])
    for row, (expert, token) in enumerate(by_expert):
        k = indices[token].tolist().index(expert)
        expected[token] += probs[token, k] * permuted[row].float()
    torch.testing.assert_close(out, expected)
    # with weights 1/topK each, unpermute undoes permute
    torch.testing.assert_close(unpermute(permuted.float(), sorted_indices, torch.full_like(probs, 0.5)), x.float())


def test_a_capacity_factor_drops_the_last_experts_copies():
    x, indices, probs = _routing(tokens=8)
    kept, sorted_indices = permute(x, indices, num_out_tokens=10)
    assert kept.shape[0] == 10
    full = unpermute(permute(x, indices)[0].float(), sorted_indices, probs)
    dropped = unpermute(kept.float(), sorted_indices, probs)
    lost = sorted_indices.reshape(-1, 2) >= 10
    torch.testing.assert_close(dropped, full - (lost * probs)[..., None].mul(x.float()[:, None]).sum(1))


def test_fair_routing_passes_and_wrong_routing_fails():
    x, indices, probs = _routing()
    assert check_call(permute, x, indices).status is Status.PASS
    permuted, sorted_indices = permute(x, indices)
    assert check_call(unpermute, permuted, sorted_indices, probs).status is Status.PASS

    def swapped(*args, **kwargs):  # two rows of different experts exchanged
        out, slots = permute(*args, **kwargs)
        out = out.clone()
        out[[0, -1]] = out[[-1, 0]]
        return out, slots

    def dropped(*args, **kwargs):  # one token's copy left zero
        out, slots = permute(*args, **kwargs)
        out = out.clone()
        out[5] = 0
        return out, slots

    def off_by_one(*args, **kwargs):
        out, slots = permute(*args, **kwargs)
        return out, torch.where(torch.arange(slots.numel()) == 3, slots + 1, slots).to(torch.int32)

    for defect in (swapped, dropped, off_by_one):
        assert check_call(defect, x, indices, reference=permute).status is Status.ERROR, defect.__name__

    def scaled(*args, **kwargs):
        return (unpermute(*args, **kwargs).float() * 1.01).bfloat16()

    def first_choice_only(permuted, slots, probs):  # the mask drops every token's second expert
        return unpermute(permuted, slots, probs * torch.tensor([1.0, 0.0]))

    for defect in (scaled, first_choice_only):
        verdict = check_call(defect, permuted, sorted_indices, probs, reference=unpermute)
        assert verdict.status is Status.ERROR, defect.__name__


# ---------------------------------------------------------------- quantised matmuls


def _w8a8(m: int = 16, k: int = 256, n: int = 32, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x1 = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=generator)
    x2 = torch.randint(-128, 128, (k, n), dtype=torch.int8, generator=generator)
    scale = torch.rand(n, generator=generator) * 1e-3
    per_token = torch.rand(m, generator=generator) + 0.5
    return x1, x2, scale, per_token


def test_quant_matmul_follows_the_documented_formula():
    x1, x2, scale, per_token = _w8a8(m=3, k=5, n=4)
    bias_int = torch.tensor([7, -3, 0, 100], dtype=torch.int32)
    out = quant_matmul(x1, x2, scale, pertoken_scale=per_token, bias=bias_int, output_dtype=torch.float32)
    for i in range(3):
        for j in range(4):
            exact = sum(int(x1[i, t]) * int(x2[t, j]) for t in range(5)) + int(bias_int[j])
            assert out[i, j].item() == pytest.approx(exact * scale[j].item() * per_token[i].item(), rel=1e-6)
    bias_float = torch.tensor([0.5, -0.25, 0.0, 1.0])  # a float bias adds after the scales
    out = quant_matmul(x1, x2, scale, bias=bias_float, output_dtype=torch.float32)
    exact = x1.double() @ x2.double() * scale.double() + bias_float.double()
    torch.testing.assert_close(out.double(), exact, rtol=1e-6, atol=1e-6)


def test_a_fair_quant_matmul_passes_and_a_scaled_or_transposed_one_fails():
    x1, x2, scale, per_token = _w8a8(k=32, n=32)
    bias = torch.randint(-1000, 1000, (32,), dtype=torch.int32)
    call = dict(pertoken_scale=per_token, bias=bias, output_dtype=torch.bfloat16)
    assert check_call(quant_matmul, x1, x2, scale, **call).status is Status.PASS
    defects = {
        "1 % scale": lambda *a, **k: (quant_matmul(*a, **k).float() * 1.01).bfloat16(),
        "weight transposed": lambda a, b, *rest, **k: quant_matmul(a, b.t().contiguous(), *rest, **k),
        "per-token scale ignored": lambda *a, **k: quant_matmul(*a, **{**k, "pertoken_scale": None}),
    }
    for label, defect in defects.items():
        assert check_call(defect, x1, x2, scale, reference=quant_matmul, **call).status is Status.ERROR, label


def _grouped_w8a8(seed: int = 0):
    """As vllm-ascend's W8A8 MoE calls it: int8 x and a [G, K, N] int8 weight, per-group scales, per-token
    scales, group sizes, a bfloat16 output, one tensor out."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randint(-128, 128, (24, 64), dtype=torch.int8, generator=generator)
    weight = torch.randint(-128, 128, (3, 64, 16), dtype=torch.int8, generator=generator)
    scale = torch.rand(3, 16, generator=generator) * 1e-3
    per_token = torch.rand(24, generator=generator) + 0.5
    sizes = torch.tensor([10, 6, 8])
    return (x, weight), dict(scale=[scale], per_token_scale=[per_token], group_list=sizes, group_list_type=1,
                             split_item=2, group_type=0, output_dtype=torch.bfloat16)


def test_the_quantised_grouped_matmul_follows_each_groups_formula():
    (x, weight), kwargs = _grouped_w8a8()
    out, = grouped_matmul([x], [weight], **kwargs)
    scale, per_token = kwargs["scale"][0], kwargs["per_token_scale"][0]
    start = 0
    for group, size in enumerate([10, 6, 8]):
        rows = slice(start, start + size)
        exact = (x[rows].double() @ weight[group].double()) * scale[group].double() * per_token[rows, None].double()
        torch.testing.assert_close(out[rows].double(), exact, rtol=2**-8, atol=0)
        start += size


def test_the_quantised_grouped_matmul_is_judged_and_a_wrong_group_scale_fails():
    (x, weight), kwargs = _grouped_w8a8()
    assert check_call(grouped_matmul, [x], [weight], **kwargs).status is Status.PASS

    def swapped_scales(xs, ws, **k):
        return grouped_matmul(xs, ws, **{**k, "scale": [k["scale"][0].flip(0)]})

    verdict = check_call(swapped_scales, [x], [weight], reference=grouped_matmul, **kwargs)
    assert verdict.status is Status.ERROR


# ---------------------------------------------------------------- names


def test_mindspeed_and_fused_optimizer_names_resolve():
    gmm = resolve("MindSpeed.gmm.npu_gmm")
    assert gmm.reference is MINDSPEED_OPS["gmm.npu_gmm"].reference and gmm.base_name == "npu_gmm"
    attention = resolve("MindSpeed.fusion_attention_v2.npu_fusion_attention")
    assert attention.reference is MINDSPEED_OPS["fusion_attention_v2.npu_fusion_attention"].reference
    unknown = resolve("MindSpeed.lcal_coc.npu_something")
    assert unknown.unsupported_reason == "no-reference" and "register_op" in unknown.unsupported
    for name in ("_fused_adamw_", "_fused_adam_", "_foreach_norm", "_foreach_add_"):
        torch_name, aten_name = resolve(f"Torch.{name}"), resolve(f"Aten.{name}")
        assert torch_name.func is not None and torch_name.func is aten_name.func, name


def test_hooked_ops_without_a_reference_or_needing_a_process_group_skip_with_a_reason():
    assert resolve("NPU.npu_kronecker_quant").unsupported_reason == "no-reference"
    assert resolve("NPU.npu_mm_reduce_scatter_base").unsupported_reason == "needs-process-group"
    assert resolve("NPU._npu_fused_infer_attention_score_get_max_workspace").unsupported_reason == "not-a-computation"


# ---------------------------------------------------------------- a W8A8 MoE step, recorded


def _fair_gmm(x, weight, *, bias=None, group_list=None, group_type=0):
    """MindSpeed's gmm as a fair kernel computes it: float32 accumulation, one rounding."""
    ends = [0] + [int(v) for v in group_list]
    outs = [x[a:b].float() @ weight[g].float() for g, (a, b) in enumerate(zip(ends, ends[1:]))]
    return torch.cat(outs).to(x.dtype)


def _kronecker_quant_stand_in(x, kronecker_p1=None, kronecker_p2=None, clip_ratio=None, dst_dtype=None):
    """An op msprobe hooks that has no reference here: returns something of the right kind."""
    return (x.float() * 8).round().to(torch.int8), torch.ones(1)


class W8A8MoE(torch.nn.Module):
    """Route bfloat16 tokens to experts, quantise them, run the experts as a quantised grouped matmul, dequantise
    through a quant matmul's head, attend, and run MindSpeed's gmm on the result."""

    def __init__(self, npu, mindspeed):
        super().__init__()
        self.npu, self.mindspeed = npu, mindspeed
        generator = torch.Generator().manual_seed(3)
        self.experts = torch.randint(-128, 128, (4, 32, 16), dtype=torch.int8, generator=generator)
        self.expert_scale = torch.rand(4, 16, generator=generator) * 1e-2
        self.head = torch.randint(-128, 128, (16, 8), dtype=torch.int8, generator=generator)
        self.head_scale = torch.rand(8, generator=generator) * 1e-2
        self.gmm_weight = torch.nn.Parameter(torch.randn(2, 16, 16, generator=generator).bfloat16())

    def forward(self, x):
        npu = self.npu
        generator = torch.Generator().manual_seed(5)
        indices = torch.stack([torch.randperm(4, generator=generator)[:2] for _ in range(x.shape[0])])
        probs = torch.softmax(torch.randn(x.shape[0], 2, generator=generator), -1)
        permuted, slots = npu.npu_moe_token_permute(x, indices)
        counts = torch.bincount(indices.reshape(-1), minlength=4)
        quantised = (permuted.float() * 20).round().clamp(-128, 127).to(torch.int8)
        per_token = torch.full((quantised.shape[0],), 0.05)
        hidden, = npu.npu_grouped_matmul([quantised], [self.experts], scale=[self.expert_scale],
                                         per_token_scale=[per_token], group_list=counts, group_list_type=1,
                                         split_item=2, group_type=0, output_dtype=torch.bfloat16)
        routed = npu.npu_moe_token_unpermute(hidden, slots, probs)
        head = npu.npu_quant_matmul((routed.float() * 10).round().clamp(-128, 127).to(torch.int8), self.head,
                                    self.head_scale, output_dtype=torch.bfloat16)
        q = routed.reshape(1, x.shape[0], 16)
        attended = npu.npu_fusion_attention(q, q, q, 2, "BSH", scale=0.25)[0].reshape(x.shape[0], 16)
        mixed = getattr(self.mindspeed, "gmm.npu_gmm")(attended, self.gmm_weight, group_list=[8, 16])
        npu.npu_kronecker_quant(mixed)
        return mixed.float().sum() + head.float().sum()


def _fair_npu() -> types.SimpleNamespace:
    """Fair stand-ins for the NPU kernels: the references run in float32 (their half types' opmath)."""
    def fair(name):
        reference = FUSED_OPS[name].reference
        return lambda *a, **k: reference(*a, **k)
    npu = types.SimpleNamespace(**{n: fair(n) for n in ("npu_moe_token_permute", "npu_moe_token_unpermute",
                                                        "npu_grouped_matmul", "npu_quant_matmul",
                                                        "npu_fusion_attention")})
    npu.npu_kronecker_quant = _kronecker_quant_stand_in
    return npu


@pytest.fixture(scope="module")
def moe_dump(tmp_path_factory) -> Path:
    sys.path.insert(0, str(ROOT / "examples"))
    import make_example_dump as recording

    npu, mindspeed = _fair_npu(), types.SimpleNamespace(**{"gmm.npu_gmm": _fair_gmm})
    apis = recording.RECORDED_APIS
    recording.RECORDED_APIS = (("NPU", npu, tuple(vars(npu))), ("MindSpeed", mindspeed, ("gmm.npu_gmm",)))
    model = W8A8MoE(npu, mindspeed)
    x = torch.randn(16, 32).bfloat16()
    recording.DUMPS["moe_w8a8_tensor"] = ("tensor", lambda: (model, lambda: model(x)))
    try:
        out = tmp_path_factory.mktemp("moe")
        recording.make_dump("moe_w8a8_tensor", out)
    finally:
        recording.RECORDED_APIS = apis
        del recording.DUMPS["moe_w8a8_tensor"]
    return out / "moe_w8a8_tensor"


def _records(report: Path) -> dict[str, dict]:
    return {r["key"]: r for r in map(json.loads, (report / "cases.jsonl").read_text().splitlines())}


FORWARDS = {"NPU.npu_moe_token_permute.0.forward", "NPU.npu_grouped_matmul.0.forward",
            "NPU.npu_moe_token_unpermute.0.forward", "NPU.npu_quant_matmul.0.forward",
            "NPU.npu_fusion_attention.0.forward", "MindSpeed.gmm.npu_gmm.0.forward"}


def test_the_moe_step_gives_no_input_error_offline_and_judges_every_referenced_op(pytester, moe_dump):
    report = pytester.path / "report"
    pytester.runpytest("--npu-precision", str(moe_dump), "--npu-precision-device", "dumped",
                       "--npu-precision-report", str(report), "-p", "no:cacheprovider")
    records = _records(report)
    assert {k for k, r in records.items() if r["status"] in ("input-error", "harness-error")} == set()
    assert FORWARDS <= set(records)
    assert {k: r["status"] for k, r in records.items() if k in FORWARDS} == dict.fromkeys(FORWARDS, "pass"), \
        {k: r["message"] for k, r in records.items() if k in FORWARDS}
    mx = records["NPU.npu_kronecker_quant.0.forward"]
    assert (mx["status"], mx["reason"]) == ("skip", "no-reference") and "register_op" in mx["message"]


def test_the_moe_step_gives_no_input_error_live_with_a_stand_in_torch_npu(pytester, moe_dump):
    """torch_npu imports (the stand-in has the ops, with no kernels): a referenced op cannot run here and
    skips, saying the dump is not at fault; one without a reference skips as no-reference, not as an
    input error that fails the run (which each of msprobe's 215 unreferenced names did)."""
    report = pytester.path / "report"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(STAND_IN), str(ROOT),
                                                                      os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "pytest", "--npu-precision", str(moe_dump), "--npu-precision-device",
                           "cpu", "--npu-precision-report", str(report), "-p", "no:cacheprovider", "-p", "no:xdist"],
                          capture_output=True, text=True, env=env, cwd=pytester.path)
    records = _records(report)
    assert {k: r["message"] for k, r in records.items() if r["status"] in ("input-error", "harness-error")} == {}, \
        done.stdout[-3000:]
    assert records["NPU.npu_kronecker_quant.0.forward"]["reason"] == "no-reference"
    assert records["NPU.npu_quant_matmul.0.forward"]["reason"] == "replay-error"  # the stand-in's kernel raised
    assert done.returncode == 5, done.stdout[-3000:]  # nothing judged, nothing failed: every case skipped


# ---------------------------------------------------------------- data movement


def test_transpose_slice_and_broadcast_follow_their_documentation_and_are_judged_bit_exact():
    x = torch.randn(2, 3, 5)
    transpose, slice_, broadcast = (FUSED_OPS[n].reference for n in ("npu_transpose", "npu_slice", "npu_broadcast"))
    assert transpose(x, (2, 0, 1)).shape == (5, 2, 3) and torch.equal(transpose(x, (2, 0, 1)), x.permute(2, 0, 1))
    docs_example = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]], dtype=torch.float16)
    assert slice_(docs_example, [0, 0], [2, 2]).tolist() == [[1, 2], [6, 7]]
    assert torch.equal(broadcast(torch.arange(3.0)[None], (4, 3)), torch.arange(3.0).expand(4, 3))
    for reference, args in ((transpose, (x, (2, 0, 1))), (slice_, (x, [0, 1, 1], [2, 2, 3])),
                            (broadcast, (x[:, :1], (2, 4, 5)))):
        assert check_call(reference, *args).status is Status.PASS

        def one_ulp_off(*a, _reference=reference):
            out = _reference(*a).clone()
            out.view(-1)[0] = torch.nextafter(out.view(-1)[0], torch.tensor(float("inf")))
            return out

        assert check_call(one_ulp_off, *args, reference=reference).status is Status.ERROR


# ---------------------------------------------------------------- dynamic quantization: the quantized standard

dynamic_quant = FUSED_OPS["npu_dynamic_quant"].reference


def test_dynamic_quant_follows_the_documented_formula():
    x = torch.tensor([[1.0, -2.0, 0.5, 4.0], [0.0, 0.0, 0.0, 0.0]]).bfloat16()
    y, scale = dynamic_quant(x)
    assert y.dtype == torch.int8 and scale.dtype == torch.float32
    assert scale.tolist() == pytest.approx([4 / 127, 0.0])
    assert y.tolist() == [[32, -64, 16, 127], [0, 0, 0, 0]]  # 31.75 and 15.875 round to the nearest
    golden, _ = dynamic_quant(x.double())  # the golden keeps the value before rounding
    assert golden[0].tolist() == pytest.approx([31.75, -63.5, 15.875, 127.0])


def _quantized_kernels(reference):
    def rounded_away_from_zero(x, **kwargs):  # a fair kernel: half-way values go the other way
        _, scale = reference(x, **kwargs)
        q = x.float() * (1 if kwargs.get("smooth_scales") is None else kwargs["smooth_scales"].float()) / scale[..., None]
        return (q.sign() * (q.abs() + 0.5).floor()).clamp(-128, 127).to(torch.int8), scale

    def truncated(x, **kwargs):
        _, scale = reference(x, **kwargs)
        return (x.float() / scale[..., None]).trunc().to(torch.int8), scale

    def one_off(x, **kwargs):
        y, scale = reference(x, **kwargs)
        y = y.clone()
        y[3, 7] = y[3, 7] - 1 if y[3, 7] > -128 else y[3, 7] + 1
        return y, scale

    def scale_off(x, **kwargs):
        y, scale = reference(x, **kwargs)
        return y, scale * 1.01

    def smoothing_ignored(x, **kwargs):
        return reference(x)

    return rounded_away_from_zero, (truncated, one_off, scale_off, smoothing_ignored)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_fair_dynamic_quant_passes_with_ties_either_way_and_defects_fail(dtype):
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(64, 256, generator=generator).to(dtype)
    smooth = (torch.rand(256, generator=generator) + 0.5).to(dtype)
    fair, defects = _quantized_kernels(dynamic_quant)
    for kernel in (dynamic_quant, fair):
        verdict = check_call(kernel, x, smooth_scales=smooth, reference=dynamic_quant)
        assert verdict.status is Status.PASS, verdict.message()
    for defect in defects:
        verdict = check_call(defect, x, smooth_scales=smooth, reference=dynamic_quant)
        assert verdict.status is Status.ERROR, defect.__name__


def test_dynamic_quant_applies_each_groups_smoothing_to_its_rows():
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(64, 128, generator=generator).bfloat16()
    smooth = (torch.rand(3, 128, generator=generator) + 0.5).bfloat16()
    ends = torch.tensor([20, 50, 64], dtype=torch.int32)
    y, scale = dynamic_quant(x, smooth_scales=smooth, group_index=ends)
    expected, _ = dynamic_quant(x[20:50], smooth_scales=smooth[1])
    assert torch.equal(y[20:50], expected)
    assert check_call(dynamic_quant, x, smooth_scales=smooth, group_index=ends).status is Status.PASS

    def groups_swapped(x, smooth_scales, group_index):
        return dynamic_quant(x, smooth_scales=smooth_scales.flip(0), group_index=group_index)

    verdict = check_call(groups_swapped, x, smooth_scales=smooth, group_index=ends, reference=dynamic_quant)
    assert verdict.status is Status.ERROR


# ---------------------------------------------------------------- optimizer updates

adam_w, adam = FUSED_OPS["npu_apply_adam_w"].reference, FUSED_OPS["npu_apply_adam"].reference


def _optimizer_state(n: int = 4096, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(n, generator=generator), torch.randn(n, generator=generator) * 1e-3,
            torch.rand(n, generator=generator) * 1e-6, torch.randn(n, generator=generator) * 1e-3)


def test_adam_w_and_adam_agree_with_torchs_optimizers_on_a_first_step():
    """From a zero state torch_npu's powers are those before the step (AdamW multiplies them once; Adam's
    are the step's own, as TensorFlow's ApplyAdam): torch.optim's first step, an independent formula. epsilon
    0: TensorFlow's adds it outside the bias correction, torch's inside (sqrt(1 - beta2) apart)."""
    var, _, _, grad = _optimizer_state(256)
    zeros = torch.zeros_like(var)
    for name, reference, powers, optimizer in (
            ("AdamW", adam_w, (1.0, 1.0), torch.optim.AdamW), ("Adam", adam, (0.9, 0.999), torch.optim.Adam)):
        parameter = torch.nn.Parameter(var.double().clone())
        decay = 0.01 if name == "AdamW" else 0.0
        step = optimizer([parameter], lr=1e-3, betas=(0.9, 0.999), eps=0.0, weight_decay=decay)
        parameter.grad = grad.double()
        step.step()
        scalars = (*powers, 1e-3, *((decay,) if name == "AdamW" else ()), 0.9, 0.999, 0.0, grad.double())
        rest = (None, False, False) if name == "AdamW" else (False, False)
        updated, m, v = reference(*scalars, *rest, out=(var.double(), zeros.double(), zeros.double()))
        torch.testing.assert_close(updated, parameter.detach(), rtol=1e-12, atol=1e-13, msg=name)
        torch.testing.assert_close(m, 0.1 * grad.double())


def test_fair_optimizer_steps_pass_and_wrong_ones_fail():
    var, m, v, grad = _optimizer_state()
    adam_w_args = (0.9**10, 0.999**10, 1e-3, 0.01, 0.9, 0.999, 1e-8, grad, None, False, False)
    adam_args = (0.9**10, 0.999**10, 1e-3, 0.9, 0.999, 1e-8, grad, False, False)
    assert check_call(adam_w, *adam_w_args, out=(var, m, v)).status is Status.PASS
    assert check_call(adam, *adam_args, out=(var, m, v)).status is Status.PASS

    def lr_off(*args, out):
        return adam_w(*args[:2], args[2] * 1.01, *args[3:], out=out)

    def no_bias_correction(*args, out):
        return adam_w(0.0, 0.0, *args[2:], out=out)

    def decay_missed(*args, out):
        return adam_w(*args[:3], 0.0, *args[4:], out=out)

    for defect in (lr_off, no_bias_correction, decay_missed):
        assert check_call(defect, *adam_w_args, out=(var, m, v), reference=adam_w).status is Status.ERROR, \
            defect.__name__

    def nesterov_where_not_asked(*args, out):
        return adam(*args[:8], True, out=out)

    assert check_call(nesterov_where_not_asked, *adam_args, out=(var, m, v), reference=adam).status is Status.ERROR


# ---------------------------------------------------------------- quantization by given scales

quantize = FUSED_OPS["npu_quantize"].reference


def test_quantize_follows_the_documented_formula():
    x = torch.tensor([[1.0, -2.0, 0.5, 400.0], [0.3, 0.0, -7.0, -500.0]])
    scales = torch.tensor([0.5, 0.5, 0.25, 1.0])
    y = quantize(x, scales, None, torch.qint8, -1, True)  # divided, rounded, saturated
    assert y.dtype == torch.int8 and y.tolist() == [[2, -4, 2, 127], [1, 0, -28, -128]]
    y = quantize(x, scales, torch.tensor([1.0, 1.0, 1.0, 1.0]), torch.qint8, -1, False)  # multiplied, offset
    assert y.tolist() == [[2, 0, 1, 127], [1, 1, -1, -128]]
    assert quantize(x, scales, None, torch.quint8, -1, True)[1].tolist() == [1, 0, 0, 0]  # uint8 saturates at 0
    rows = torch.tensor([2.0, 4.0])  # axis -2: the scales run along the rows
    assert quantize(x, rows, None, torch.qint8, -2, False)[0, :3].tolist() == [2, -4, 1]
    golden = quantize(x.double(), scales.double(), None, torch.qint8, -1, True)
    assert golden.dtype == torch.float64 and golden[1, 0].item() == pytest.approx(0.6)  # unrounded: 0.3 / 0.5


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_a_fair_quantize_passes_with_ties_either_way_and_defects_fail(dtype):
    generator = torch.Generator().manual_seed(3)
    x = (torch.randn(32, 128, generator=generator) * 30).to(dtype)
    scales = (torch.rand(128, generator=generator) * 0.5 + 0.1).to(dtype)
    offsets = torch.randint(-4, 4, (128,), generator=generator).to(dtype)
    call = (x, scales, offsets, torch.qint8, -1, False)

    def away_from_zero(x, scales, zero_points, dtype, axis, div_mode):
        v = x.float() * scales.float() + zero_points.float()
        return (v.sign() * (v.abs() + 0.5).floor()).clamp(-128, 127).to(torch.int8)

    def truncated(x, scales, zero_points, dtype, axis, div_mode):
        return (x.float() * scales.float() + zero_points.float()).trunc().clamp(-128, 127).to(torch.int8)

    def offset_ignored(x, scales, zero_points, dtype, axis, div_mode):
        return quantize(x, scales, None, dtype, axis, div_mode)

    def one_off(*args):
        y = quantize(*args).clone()
        y[5, 9] += 1 if y[5, 9] < 127 else -1
        return y

    for kernel in (quantize, away_from_zero):
        assert check_call(kernel, *call, reference=quantize).status is Status.PASS, kernel.__name__
    for defect in (truncated, offset_ignored, one_off):
        assert check_call(defect, *call, reference=quantize).status is Status.ERROR, defect.__name__


# ---------------------------------------------------------------- a float matmul of an int8 weight

weight_quant_matmul = FUSED_OPS["npu_weight_quant_batchmatmul"].reference


def _w8a16(m: int = 32, k: int = 256, n: int = 64, seed: int = 4, dtype=torch.bfloat16, group: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=generator).to(dtype)
    weight = torch.randint(-128, 128, (k, n), dtype=torch.int8, generator=generator)
    rows = -(-k // group) if group else 1
    scale = (torch.rand(rows, n, generator=generator) * 0.02 + 0.001).to(dtype)
    offset = torch.randint(-8, 8, (rows, n), generator=generator).to(dtype)
    return x, weight, scale, offset


def test_weight_quant_batchmatmul_follows_the_documented_formula():
    x, weight, scale, offset = _w8a16(m=3, k=8, n=4, dtype=torch.float32, group=4)
    out = weight_quant_matmul(x, weight, scale, offset, antiquant_group_size=4)
    for i in range(3):
        for j in range(4):
            exact = sum(x[i, t].item() * (int(weight[t, j]) + offset[t // 4, j].item()) * scale[t // 4, j].item()
                        for t in range(8))
            assert out[i, j].item() == pytest.approx(exact, rel=1e-5, abs=1e-6)
    bias = torch.tensor([0.5, -0.25, 0.0, 1.0])
    per_channel = weight_quant_matmul(x, weight, scale[0], offset[0], bias=bias)
    exact = x.double() @ ((weight.double() + offset[0].double()) * scale[0].double()) + bias.double()
    torch.testing.assert_close(per_channel.double(), exact, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("group", [0, 64])
def test_a_fair_weight_quant_batchmatmul_passes_and_defects_fail(group):
    x, weight, scale, offset = _w8a16(group=group)
    call = dict(antiquant_offset=offset, antiquant_group_size=group)

    def bf16_product(x, weight, antiquant_scale, antiquant_offset=None, antiquant_group_size=0):
        """A fair kernel that rounds the dequantized weight to bfloat16 first, then accumulates in float32."""
        s, o = antiquant_scale.float(), antiquant_offset.float()
        if antiquant_group_size:
            s, o = (t.repeat_interleave(antiquant_group_size, 0)[:weight.shape[0]] for t in (s, o))
        return (x.float() @ ((weight.float() + o) * s).bfloat16().float()).bfloat16()

    for kernel in (weight_quant_matmul, bf16_product):
        verdict = check_call(kernel, x, weight, scale, reference=weight_quant_matmul, **call)
        assert verdict.status is Status.PASS, verdict.message()
    defects = {
        "offset ignored": lambda x, w, s, antiquant_offset=None, **k: weight_quant_matmul(x, w, s, None, **k),
        "offset subtracted": lambda x, w, s, antiquant_offset=None, **k: weight_quant_matmul(x, w, s, -antiquant_offset,
                                                                                            **k),
        "1 % scale": lambda *a, **k: (weight_quant_matmul(*a, **k).float() * 1.01).bfloat16(),
        "bfloat16 accumulation": lambda x, w, s, antiquant_offset=None, antiquant_group_size=0: (
            _bf16_sequential(x, weight_quant_matmul(torch.eye(x.shape[1], dtype=torch.float32), w, s.float(),
                                                    antiquant_offset.float(),
                                                    antiquant_group_size=antiquant_group_size).bfloat16())),
    }
    for label, defect in defects.items():
        verdict = check_call(defect, x, weight, scale, reference=weight_quant_matmul, **call)
        assert verdict.status is Status.ERROR, label


def _bf16_sequential(x, w):
    """x @ w summed one product at a time in bfloat16."""
    acc = torch.zeros(x.shape[0], w.shape[1], dtype=torch.bfloat16)
    for t in range(x.shape[1]):
        acc = acc + x[:, t:t + 1] * w[t:t + 1]
    return acc


def _double(args):
    return [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]


@pytest.mark.parametrize("scale", [2.0**-20, 1.0, 2.0**20])
@pytest.mark.parametrize("seed", range(3))
def test_the_correctly_rounded_quantize_and_weight_quant_matmul_pass_at_every_scale(seed, scale):
    generator = torch.Generator().manual_seed(seed)
    x = (torch.randn(16, 64, generator=generator) * 40 * scale).bfloat16()
    scales = ((torch.rand(64, generator=generator) * 0.5 + 0.1) / scale).bfloat16()
    call = (x, scales, None, torch.qint8, -1, False)
    rounded = torch.round(quantize(*_double(call))).to(torch.int8)
    assert check_call(lambda *a: rounded, *call, reference=quantize).status is Status.PASS
    x, weight, w_scale, offset = _w8a16(m=16, k=128, n=32, seed=seed, group=32)
    x = (x.float() * scale).bfloat16()
    call = (x, weight, w_scale)
    kwargs = dict(antiquant_offset=offset, antiquant_group_size=32)
    golden = weight_quant_matmul(*_double(call), **{**kwargs, "antiquant_offset": offset.double()})
    verdict = check_call(lambda *a, **k: golden.bfloat16(), *call, reference=weight_quant_matmul, **kwargs)
    assert verdict.status is Status.PASS, verdict.message()


# ---------------------------------------------------------------- storage formats and scattered updates


def test_format_cast_and_scatter_nd_update_follow_their_documentation_and_are_judged_bit_exact():
    format_cast, scatter = (FUSED_OPS[n].reference for n in ("npu_format_cast", "npu_scatter_nd_update"))
    x = torch.randn(4, 5, 6)
    assert torch.equal(format_cast(x, 29), x)  # FRACTAL_NZ: the same values
    indices = torch.tensor([[0, 1], [3, 4], [2, 0]], dtype=torch.int32)  # the docs' example shapes
    updates = torch.randn(3, 6)
    out = scatter(x, indices, updates)
    assert torch.equal(out[3, 4], updates[1]) and torch.equal(out[1], x[1]) and torch.equal(x, x.clone())
    assert resolve("NPU.npu_scatter_nd_update_").reference is not None  # the in-place spelling, by its result
    for reference, args in ((format_cast, (x, 29)), (scatter, (x, indices, updates))):
        assert check_call(reference, *args).status is Status.PASS

        def one_ulp_off(*a, _reference=reference):
            out = _reference(*a).clone()
            out[3, 4, 0] = torch.nextafter(out[3, 4, 0], torch.tensor(float("inf")))
            return out

        assert check_call(one_ulp_off, *args, reference=reference).status is Status.ERROR
    stale = lambda x, indices, updates: x.clone()  # the update never landed
    assert check_call(stale, x, indices, updates, reference=scatter).status is Status.ERROR


# ---------------------------------------------------------------- interleaved rotary embedding


def test_interleave_rope_follows_the_documented_formula_and_defects_fail():
    rope = FUSED_OPS["npu_interleave_rope"].reference
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(2, 4, 3, 64, generator=generator)
    angle = torch.randn(2, 1, 3, 32, generator=generator)
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
    out = rope(x, cos, sin)
    even, odd = x[..., 0::2], x[..., 1::2]  # the pairs (x[2i], x[2i+1]), rotated by angle i, evens first
    expected = torch.cat([even * angle.cos() - odd * angle.sin(), odd * angle.cos() + even * angle.sin()], -1)
    torch.testing.assert_close(out, expected)
    half = (x.bfloat16(), cos.bfloat16(), sin.bfloat16())
    assert check_call(rope, *half).status is Status.PASS
    rotary_mul = FUSED_OPS["npu_rotary_mul"].reference
    defects = {
        "not de-interleaved": lambda x, c, s: rotary_mul(x, c, s),
        "sin negated": lambda x, c, s: rope(x, c, -s),
        "2 ulp scaling": lambda x, c, s: (rope(x, c, s).float() * (1 + 2.0**-7)).bfloat16(),
    }
    for label, defect in defects.items():
        assert check_call(defect, *half, reference=rope).status is Status.ERROR, label


# ---------------------------------------------------------------- transposed batched matmul


def test_transpose_batchmatmul_follows_the_documented_shapes_and_defects_fail():
    tbmm = FUSED_OPS["npu_transpose_batchmatmul"].reference
    generator = torch.Generator().manual_seed(6)
    m, b, k, n = 8, 4, 256, 16
    x1 = torch.randn(m, b, k, generator=generator).bfloat16()  # (M, B, K): perm_x1 [1, 0, 2] makes it (B, M, K)
    x2 = torch.randn(b, k, n, generator=generator).bfloat16()
    call = dict(perm_x1=[1, 0, 2], perm_x2=[0, 1, 2], perm_y=[1, 0, 2])
    out = tbmm(x1, x2, **call)
    expected = torch.matmul(x1.float().transpose(0, 1), x2.float()).transpose(0, 1)  # op-plugin's own test's form
    assert out.shape == (m, b, n)
    torch.testing.assert_close(out.float(), expected, rtol=2**-7, atol=1e-2)
    split = tbmm(x1, x2, **call, batch_split_factor=2)
    assert split.shape == (2, m, b * n // 2) and torch.equal(split[1], out.reshape(m, b * n)[:, b * n // 2:])
    assert check_call(tbmm, x1, x2, **call).status is Status.PASS
    assert check_call(tbmm, x1, x2, **call, batch_split_factor=2).status is Status.PASS
    defects = {
        "batch-major output": lambda a, w, **kw: tbmm(a, w, **kw).transpose(0, 1).reshape(m, b, n),
        "1 % scale": lambda a, w, **kw: (tbmm(a, w, **kw).float() * 1.01).bfloat16(),
        "bfloat16 accumulation": lambda a, w, **kw: torch.stack(
            [_bf16_sequential(a[:, i], w[i]) for i in range(b)], dim=1),
    }
    for label, defect in defects.items():
        assert check_call(defect, x1, x2, reference=tbmm, **call).status is Status.ERROR, label


# ---------------------------------------------------------------- multimodal rotary embedding


def _mrope_inputs(tokens=6, q_heads=4, k_heads=2, head=64, rotary=32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    positions = torch.randint(0, 16, (3, tokens), generator=generator)
    query = torch.randn(tokens, q_heads * head, generator=generator)
    key = torch.randn(tokens, k_heads * head, generator=generator)
    angle = torch.rand(16, rotary // 2, generator=generator) * 6
    return positions, query, key, torch.cat([angle.cos(), angle.sin()], -1), angle


@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_mrope_rotates_each_sections_pairs_by_its_own_positions_angle(mode):
    mrope = FUSED_OPS["npu_mrope"].reference
    positions, query, key, cache, angle = _mrope_inputs()
    out, _ = mrope(positions, query, key, cache, 64, mrope_section=[4, 6, 6], rotary_mode=mode)
    # independently: pair i of a head is a complex number turned by the angle of section(i)'s position
    turn = torch.cat([angle[positions[0], :4], angle[positions[1], 4:10], angle[positions[2], 10:]], -1)
    heads = query.reshape(6, 4, 64)
    rotated = heads[..., :32]
    pairs = (rotated[..., :16], rotated[..., 16:]) if mode == "half" else (rotated[..., 0::2], rotated[..., 1::2])
    z = torch.complex(*pairs) * torch.polar(torch.ones_like(turn), turn)[:, None]
    turned = torch.cat([z.real, z.imag], -1) if mode == "half" else torch.stack([z.real, z.imag], -1).flatten(-2)
    torch.testing.assert_close(out, torch.cat([turned, heads[..., 32:]], -1).reshape(6, -1))
    # rope mode (1-D positions) is mrope with every section on the same row
    one_row, _ = mrope(positions[0], query, key, cache, 64, rotary_mode=mode)
    same, _ = mrope(positions[0].expand(3, -1), query, key, cache, 64, mrope_section=[4, 6, 6], rotary_mode=mode)
    torch.testing.assert_close(one_row, same)


def test_a_fair_mrope_passes_and_defects_fail():
    mrope = FUSED_OPS["npu_mrope"].reference
    positions, query, key, cache, _ = _mrope_inputs(tokens=32, seed=1)
    args = (positions, query.bfloat16(), key.bfloat16(), cache.bfloat16(), 64)
    section = {"mrope_section": [4, 6, 6]}
    assert check_call(mrope, *args, reference=mrope, **section).status is Status.PASS
    defects = {
        "sections swapped": lambda *a, **k: mrope(*a, mrope_section=[6, 6, 4]),
        "interleaved instead of halves": lambda *a, **k: mrope(*a, rotary_mode="interleave", **k),
        "temporal row only": lambda p, *a, **k: mrope(p[0], *a),
        "1 % scale": lambda *a, **k: tuple((o.float() * 1.01).bfloat16() for o in mrope(*a, **k)),
    }
    for label, defect in defects.items():
        assert check_call(defect, *args, reference=mrope, **section).status is Status.ERROR, label


# ---------------------------------------------------------------- rms norm backward


def test_rms_norm_backward_is_autograd_of_the_forward_given_its_rstd():
    backward = FUSED_OPS["npu_rms_norm_backward"].reference
    generator = torch.Generator().manual_seed(2)
    x, gamma, dy = (torch.randn(*s, generator=generator, dtype=torch.float64) for s in ((3, 5, 32), (32,), (3, 5, 32)))
    leaf, weight = x.clone().requires_grad_(), gamma.clone().requires_grad_()
    rstd = torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6)
    (leaf * torch.rsqrt(leaf.square().mean(-1, keepdim=True) + 1e-6) * weight).backward(dy)
    dx, dgamma = backward(dy, x, gamma, rstd)
    torch.testing.assert_close(dx, leaf.grad)
    torch.testing.assert_close(dgamma, weight.grad)  # summed to gamma's shape (msprobe's is left unsummed)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_a_fair_rms_norm_backward_passes_and_defects_fail(dtype):
    backward, forward = FUSED_OPS["npu_rms_norm_backward"].reference, FUSED_OPS["npu_rms_norm"].reference
    generator = torch.Generator().manual_seed(3)
    x, gamma, dy = (torch.randn(*s, generator=generator).to(dtype) for s in ((8, 16, 256), (256,), (8, 16, 256)))
    args = (dy, x, gamma, forward(x, gamma)[1])
    assert check_call(backward, *args, reference=backward).status is Status.PASS
    defects = {
        "1 % dx": lambda *a: ((backward(*a)[0].float() * 1.01).to(dtype), backward(*a)[1]),
        "dgamma missing a row": lambda dy, x, g, r: (backward(dy, x, g, r)[0],
                                                      backward(dy.index_fill(0, torch.tensor([7]), 0), x, g, r)[1]),
        "mean term dropped": lambda dy, x, g, r: (((dy.float() * g.float()) * r).to(dtype), backward(dy, x, g, r)[1]),
    }
    for label, defect in defects.items():
        assert check_call(defect, *args, reference=backward).status is Status.ERROR, label


# ---------------------------------------------------------------- gated activations, group norm swish, losses


def _fair_and_defects(reference, args, kwargs, defects):
    assert check_call(reference, *args, reference=reference, **kwargs).status is Status.PASS
    for label, defect in defects.items():
        assert check_call(defect, *args, reference=reference, **kwargs).status is Status.ERROR, label


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_gelu_mul_and_clipped_swiglu_follow_their_formulas_and_defects_fail(dtype):
    gelu_mul, clipped = FUSED_OPS["npu_gelu_mul"].reference, FUSED_OPS["npu_clipped_swiglu"].reference
    x = torch.randn(16, 256, generator=torch.Generator().manual_seed(4), dtype=torch.float64) * 4
    erf_gelu = lambda v: 0.5 * v * (1 + torch.erf(v / math.sqrt(2)))
    torch.testing.assert_close(gelu_mul(x), erf_gelu(x[:, :128]) * x[:, 128:])
    a, b = x[:, 0::2].clamp(max=7.0), x[:, 1::2].clamp(-7.0, 7.0)
    torch.testing.assert_close(clipped(x), a / (1 + torch.exp(-1.702 * a)) * (b + 1.0))
    half = x.to(dtype)
    _fair_and_defects(gelu_mul, (half,), {"approximate": "tanh"}, {
        "halves swapped": lambda v, approximate: gelu_mul(v.roll(128, -1), approximate=approximate),
        "erf for tanh": lambda v, approximate: gelu_mul(v * 1.0, approximate="none") if dtype != torch.float32
        else gelu_mul(v, approximate="none"),
    })
    _fair_and_defects(clipped, (half,), {"interleaved": True}, {
        "halves for pairs": lambda v, interleaved: clipped(v, interleaved=False),
        "no clamp": lambda v, interleaved: clipped(v, interleaved=interleaved, limit=1e9),
        "1 % scale": lambda v, interleaved: (clipped(v, interleaved=interleaved).float() * 1.01).to(dtype),
    })


def test_group_norm_swish_is_group_norm_then_a_scaled_swish():
    swish = FUSED_OPS["npu_group_norm_swish"].reference
    generator = torch.Generator().manual_seed(5)
    x, w, b = (torch.randn(*s, generator=generator, dtype=torch.float64) for s in ((3, 8, 5, 5), (8,), (8,)))
    out, mean, rstd = swish(x, 4, w, b, eps=1e-5, swish_scale=1.5)
    y = torch.nn.functional.group_norm(x, 4, w, b, 1e-5)
    torch.testing.assert_close(out, y * torch.sigmoid(1.5 * y))
    torch.testing.assert_close(mean, x.reshape(3, 4, -1).mean(-1))
    half = tuple(t.bfloat16() for t in (x, w, b))
    _fair_and_defects(swish, (half[0], 4, *half[1:]), {"swish_scale": 1.5}, {
        "scale ignored": lambda *a, swish_scale: swish(*a),
        "normalised over groups of 2": lambda x, g, w, b, swish_scale: (swish(x, 2, w, b, swish_scale=swish_scale)[0],
                                                                        *swish(x, g, w, b, swish_scale=swish_scale)[1:]),
    })


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_loss_is_log_softmax_then_nll_and_defects_fail(reduction):
    loss = FUSED_OPS["npu_cross_entropy_loss"].reference
    generator = torch.Generator().manual_seed(6)
    logits = torch.randn(64, 512, generator=generator, dtype=torch.float64) * 3
    target = torch.randint(0, 512, (64,), generator=generator)
    target[5] = -100  # ignored
    weight = torch.rand(512, generator=generator, dtype=torch.float64) + 0.5
    value, log_prob, zloss, lse = loss(logits, target, weight, reduction)
    expected = torch.nn.functional.cross_entropy(logits, target, weight, reduction=reduction)
    torch.testing.assert_close(value, expected.reshape(-1) if reduction != "none" else expected)
    torch.testing.assert_close(log_prob, torch.log_softmax(logits, -1))
    assert zloss.numel() == lse.numel() == 0
    smoothed = loss(logits, target, None, reduction, -100, 0.1)[0]
    torch.testing.assert_close(smoothed.reshape(-1), torch.nn.functional.cross_entropy(
        logits, target, reduction=reduction, label_smoothing=0.1).reshape(-1))
    half = logits.bfloat16()
    _fair_and_defects(loss, (half, target, None, reduction), {}, {
        "1 % loss": lambda *a: ((loss(*a)[0].float() * 1.01).bfloat16(), *loss(*a)[1:]),
        "ignore_index not ignored": lambda x, t, w, r: loss(x, t.clamp(min=0), w, r),
    })


def test_softmax_cross_entropy_with_logits_sums_each_rows_labels_times_log_probabilities():
    sce = FUSED_OPS["npu_softmax_cross_entropy_with_logits"].reference
    generator = torch.Generator().manual_seed(7)
    features = torch.randn(8, 32, generator=generator, dtype=torch.float64) * 3
    labels = torch.softmax(torch.randn(8, 32, generator=generator, dtype=torch.float64), -1)
    for row in range(8):
        exact = -sum(labels[row, c] * (features[row, c] - torch.logsumexp(features[row], 0)) for c in range(32))
        torch.testing.assert_close(sce(features, labels)[row], exact)
    _fair_and_defects(sce, (features.float(), labels.float()), {}, {
        "labels of the next row": lambda f, lab: sce(f, lab.roll(1, 0)),
    })


# ---------------------------------------------------------------- MLA's latent cache write


def _latent_cache_inputs(seed=0):
    generator = torch.Generator().manual_seed(seed)
    kv = torch.randn(2, 1, 3, 512 + 64, generator=generator, dtype=torch.float64)
    gamma = torch.randn(512, generator=generator, dtype=torch.float64)
    angle = torch.rand(2, 1, 3, 32, generator=generator, dtype=torch.float64) * 6
    caches = (torch.randn(2, 1, 8, 64, generator=generator, dtype=torch.float64),
              torch.randn(2, 1, 8, 512, generator=generator, dtype=torch.float64))
    return kv, gamma, angle, caches


def test_kv_rmsnorm_rope_cache_norms_rotates_and_writes_each_token_at_its_index():
    op = FUSED_OPS["npu_kv_rmsnorm_rope_cache"].reference
    kv, gamma, angle, (k_cache, ckv_cache) = _latent_cache_inputs()
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
    index = torch.tensor([[0, 5, -1], [7, 2, 3]])  # -1: not written
    new_k, new_ckv, k_rope, c_kv = op(kv, gamma, cos, sin, index, k_cache, ckv_cache, is_output_kv=True)
    latent = kv[..., :512]
    expected_c = latent / torch.sqrt(latent.square().mean(-1, keepdim=True) + 1e-5) * gamma
    rope = kv[..., 512:]
    even, odd = rope[..., 0::2], rope[..., 1::2]  # de-interleaved, then each pair turned by its angle
    expected_rope = torch.cat([even * angle.cos() - odd * angle.sin(), odd * angle.cos() + even * angle.sin()], -1)
    torch.testing.assert_close(c_kv, expected_c)
    torch.testing.assert_close(k_rope, expected_rope)
    written = {(b, int(index[b, s])): s for b in range(2) for s in range(3) if index[b, s] >= 0}
    for b in range(2):
        for row in range(8):
            s = written.get((b, row))
            torch.testing.assert_close(new_k[b, 0, row], k_cache[b, 0, row] if s is None else expected_rope[b, 0, s])
            torch.testing.assert_close(new_ckv[b, 0, row], ckv_cache[b, 0, row] if s is None else expected_c[b, 0, s])
    assert not torch.equal(k_cache, new_k)  # copies: the caches given are left as they were


def test_a_fair_kv_rmsnorm_rope_cache_passes_and_defects_fail():
    op = FUSED_OPS["npu_kv_rmsnorm_rope_cache"].reference
    kv, gamma, angle, caches = _latent_cache_inputs(seed=1)
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
    args = (*(t.bfloat16() for t in (kv, gamma, cos, sin)), torch.tensor([[0, 5, -1], [7, 2, 3]]),
            *(c.bfloat16() for c in caches))
    _fair_and_defects(op, args, {"is_output_kv": True}, {
        "indices of the wrong tokens": lambda kv, g, c, s, i, *caches, **k: op(kv, g, c, s, i.flip(-1), *caches, **k),
        "not normalised (eps 1)": lambda *a, **k: op(*a, epsilon=1.0, **k),
        "not de-interleaved": lambda kv, g, c, s, i, *caches, **k: op(
            torch.cat([kv[..., :512], kv[..., 512:].reshape(*kv.shape[:-1], 2, 32).transpose(-1, -2).reshape(
                *kv.shape[:-1], 64)], -1), g, c, s, i, *caches, **k),
    })
    pages = tuple(torch.randn(4, 4, 1, d, generator=torch.Generator().manual_seed(2)).bfloat16() for d in (64, 512))
    slots = torch.tensor([3, 9, -1, 12, 0, 15])  # block 0 slot 3, block 2 slot 1, ...
    paged = (*args[:4], slots, *pages)
    assert check_call(op, *paged, cache_mode="PA_BNSD", is_output_kv=True, reference=op).status is Status.PASS
    with pytest.raises(UnjudgedFusedCall, match="PA_NZ"):
        op(*paged, cache_mode="PA_NZ")


# ---------------------------------------------------------------- the correctly rounded result, at every scale


def _scaled_calls(scale, seed):
    """(reference name, args, kwargs) of this session's float references, on bfloat16 inputs scaled by ``scale``
    (angles, probabilities, gamma, indices and labels keep their size: they are not magnitudes)."""
    generator = torch.Generator().manual_seed(seed)
    t = lambda *shape: (torch.randn(*shape, generator=generator) * scale).bfloat16()
    positions, query, key, cache, _ = _mrope_inputs(seed=seed)
    kv, gamma, angle, caches = _latent_cache_inputs(seed=seed)
    cos, sin = (torch.cat([f(angle)] * 2, -1).bfloat16() for f in (torch.cos, torch.sin))
    x, weight = t(4, 64, 256), torch.randn(256, generator=generator).bfloat16()
    return [
        ("npu_mrope", (positions, (query * scale).bfloat16(), (key * scale).bfloat16(), cache.bfloat16(), 64),
         {"mrope_section": [4, 6, 6]}),
        ("npu_kv_rmsnorm_rope_cache", ((kv * scale).bfloat16(), gamma.bfloat16(), cos, sin,
                                       torch.tensor([[0, 5, -1], [7, 2, 3]]),
                                       *((c * scale).bfloat16() for c in caches)), {"is_output_kv": True}),
        ("npu_rms_norm_backward", (t(4, 64, 256), x, weight, FUSED_OPS["npu_rms_norm"].reference(x, weight)[1]), {}),
        ("npu_gelu_mul", (t(16, 256),), {"approximate": "tanh"}),
        ("npu_clipped_swiglu", (t(16, 256),), {}),
        ("npu_group_norm_swish", (t(3, 8, 5, 5), 4, weight[:8], weight[8:16]), {"swish_scale": 1.5}),
        ("npu_cross_entropy_loss", (t(64, 512), torch.randint(0, 512, (64,), generator=generator)), {}),
        ("npu_softmax_cross_entropy_with_logits", (t(8, 32), torch.softmax(torch.randn(8, 32), -1).bfloat16()), {}),
    ]


@pytest.mark.parametrize("scale", [2.0**-20, 1.0, 2.0**20])
def test_the_correctly_rounded_result_of_each_new_float_reference_passes_at_every_scale(scale):
    for name, args, kwargs in _scaled_calls(scale, seed=4):
        reference = FUSED_OPS[name].reference
        golden = reference(*_double(args), **kwargs)
        golden = golden if isinstance(golden, tuple) else (golden,)
        dtypes = reference(*args, **kwargs)
        dtypes = [o.dtype for o in (dtypes if isinstance(dtypes, tuple) else (dtypes,))]
        rounded = tuple(g.to(d) for g, d in zip(golden, dtypes))
        verdict = check_call(lambda *a, **k: rounded if len(rounded) > 1 else rounded[0], *args, reference=reference,
                             **kwargs)
        assert verdict.status is Status.PASS, f"{name} at scale {scale}: {verdict.message()}"
