"""torch_npu's MoE gating and routing ops against their float64 references (issue: MoE routing).

Each reference is checked on a small example worked by hand from the documented formula and against an
independent loop over tokens and experts; its own low-precision call (the fair kernel) passes check_call,
planted defects fail, and a gating kernel that picks the other of two tied experts passes while one
that picks a clearly lower-scored expert fails (replay/tie_alignment.py).
"""

from __future__ import annotations

import math

import pytest
import torch

from pytest_npuprecision import Status, check_call
from pytest_npuprecision.ops.fused import FUSED_OPS, UnjudgedFusedCall

gating = FUSED_OPS["npu_moe_gating_top_k"].reference
gating_softmax = FUSED_OPS["npu_moe_gating_top_k_softmax"].reference
init_routing = FUSED_OPS["npu_moe_init_routing"].reference
init_routing_v2 = FUSED_OPS["npu_moe_init_routing_v2"].reference
finalize_routing = FUSED_OPS["npu_moe_finalize_routing"].reference
expert_tokens = FUSED_OPS["npu_moe_compute_expert_tokens"].reference
permute_with_map = FUSED_OPS["npu_moe_token_permute_with_routing_map"].reference


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _experts(tokens: int, top_k: int, experts: int, seed: int = 0) -> torch.Tensor:
    g = _generator(seed)
    return torch.stack([torch.randperm(experts, generator=g)[:top_k] for _ in range(tokens)]).to(torch.int32)


# ---------------------------------------------------------------- npu_moe_gating_top_k


def _loop_gating(x, k, bias, k_group, group_count, group_select_mode, norm_type, scaling, eps):
    """Token by token, expert by expert, in Python floats."""
    ys, ids = [], []
    for row in x.double().tolist():
        if norm_type == 0:
            top = max(row)
            exps = [math.exp(v - top) for v in row]
            norm = [e / sum(exps) for e in exps]
        else:
            norm = [1 / (1 + math.exp(-v)) for v in row]
        score = [n + (0.0 if bias is None else float(b)) for n, b in zip(norm, bias if bias is not None else norm)]
        size = len(row) // group_count
        groups = [score[g * size:(g + 1) * size] for g in range(group_count)]
        group_score = [max(s) if group_select_mode == 0 else sum(sorted(s)[-2:]) for s in groups]
        kept = sorted(range(group_count), key=lambda g: (-group_score[g], g))[:k_group]
        allowed = [e for e in range(len(row)) if e // size in kept]
        chosen = sorted(allowed, key=lambda e: (-score[e], e))[:k]
        weights = [norm[e] for e in chosen]
        if norm_type == 1:
            total = sum(weights) + eps
            weights = [w / total for w in weights]
        ys.append([w * scaling for w in weights])
        ids.append(chosen)
    return torch.tensor(ys, dtype=torch.float64), torch.tensor(ids, dtype=torch.int32)


def test_gating_top_k_follows_the_documented_formula_on_a_small_example():
    x = torch.tensor([[0.0, 3.0, 1.0, 2.0]], dtype=torch.float64)
    y, idx, norm = gating(x, 2, norm_type=1, out_flag=True)
    s = torch.sigmoid(x[0])
    assert idx.dtype == torch.int32 and idx.tolist() == [[1, 3]]
    torch.testing.assert_close(y, torch.stack([s[1], s[3]]).div(s[1] + s[3])[None])
    torch.testing.assert_close(norm, s[None])
    # a bias moves the choice, but the weights stay the unbiased sigmoid's
    _, idx, _ = gating(x, 2, torch.tensor([2.0, 0.0, 0.0, 0.0], dtype=torch.float64), norm_type=1)
    assert idx.tolist() == [[0, 1]]
    # two groups of two: the group [0, 3] scores 3 (its max), [1, 2] scores 2 at x = [0, 3, 1, 2] reordered
    grouped = torch.tensor([[3.0, 0.0, 2.0, 1.0]], dtype=torch.float64)
    _, idx, _ = gating(grouped, 2, k_group=1, group_count=2, norm_type=0)
    assert idx.tolist() == [[0, 1]]  # experts 2 and 3 score next, but their group lost
    y, _, norm = gating(grouped, 1, routed_scaling_factor=2.5)  # softmax: no renormalisation, scaled
    torch.testing.assert_close(y, torch.softmax(grouped, -1)[:, :1] * 2.5)
    assert norm.numel() == 0  # out_flag False: the kernel leaves norm_out unwritten


@pytest.mark.parametrize("norm_type", [0, 1])
@pytest.mark.parametrize("group_select_mode", [0, 1])
def test_gating_top_k_agrees_with_a_loop_over_tokens_and_experts(norm_type, group_select_mode):
    g = _generator(norm_type * 2 + group_select_mode)
    x, bias = torch.randn(6, 16, generator=g, dtype=torch.float64), torch.rand(16, generator=g, dtype=torch.float64)
    for b, k_group, group_count in ((None, 1, 1), (bias, 2, 4), (bias, 1, 4)):
        y, idx, _ = gating(x, 3, b, k_group=k_group, group_count=group_count, group_select_mode=group_select_mode,
                           norm_type=norm_type, routed_scaling_factor=1.5, eps=1e-20)
        want_y, want_idx = _loop_gating(x, 3, b, k_group, group_count, group_select_mode, norm_type, 1.5, 1e-20)
        assert torch.equal(idx, want_idx)
        torch.testing.assert_close(y, want_y)


def test_gating_top_k_hash_mode_reads_the_experts_from_the_table():
    x = torch.randn(3, 8, generator=_generator(), dtype=torch.float64)
    table = torch.tensor([[1, 2], [7, 0], [3, 4], [5, 6]], dtype=torch.int32)
    y, idx, _ = gating(x, 2, input_ids=torch.tensor([2, 0, 2]), tid2eid=table, norm_type=1)
    assert idx.tolist() == [[3, 4], [1, 2], [3, 4]]
    s = torch.sigmoid(x).gather(-1, idx.long())
    torch.testing.assert_close(y, s / s.sum(-1, keepdim=True))


def _gating_case(seed: int = 0):
    g = _generator(seed)
    x = torch.randn(32, 32, generator=g).bfloat16()
    bias = (torch.rand(32, generator=g) * 0.5).bfloat16()
    return (x, 4), dict(bias=bias, k_group=2, group_count=4, group_select_mode=1, norm_type=1,
                        routed_scaling_factor=2.5, eps=1e-20)


def test_fair_gating_passes_and_wrong_gating_fails():
    args, kwargs = _gating_case()
    assert check_call(gating, *args, **kwargs).status is Status.PASS

    def scaled(*a, **k):  # 1 % on the weights
        y, idx, norm = gating(*a, **k)
        return (y.float() * 1.01).bfloat16(), idx, norm

    def no_bias(x, k, **kw):  # the bias forgotten: other experts chosen
        return gating(x, k, **{**kw, "bias": None})

    def no_renorm(x, k, **kw):  # sigmoid weights not renormalised over the chosen experts
        y, idx, norm = gating(x, k, **kw)
        picked = torch.sigmoid(x.float()).gather(-1, idx.long())
        return (picked * kw["routed_scaling_factor"]).bfloat16(), idx, norm

    def wrong_expert(*a, **k):  # row 0's last pick replaced by the lowest-scored expert
        y, idx, norm = gating(*a, **k)
        idx = idx.clone()
        idx[0, -1] = int(torch.argmin(torch.sigmoid(a[0][0].float()) + k["bias"].float()))
        return y, idx, norm

    for defect in (scaled, no_bias, no_renorm, wrong_expert):
        verdict = check_call(defect, *args, reference=gating, **kwargs)
        assert verdict.status is Status.ERROR, defect.__name__


def _tied_logits():
    """bfloat16 logits whose rows repeat their best value: experts 1 and 2 tie in every row."""
    x = torch.tensor([[0.5, 2.0, 2.0, -1.0, 0.25, 1.0, -0.5, 0.0]] * 4).bfloat16()
    return x + torch.arange(4).bfloat16()[:, None] * 0.125


def _swap_ties(idx: torch.Tensor) -> torch.Tensor:
    """The other of the tied experts 1 and 2 wherever one was picked."""
    return torch.where(idx == 1, 2, torch.where(idx == 2, 1, idx)).to(torch.int32)


@pytest.mark.parametrize("k", [1, 2])
def test_gating_picking_the_other_tied_expert_passes(k):
    x = _tied_logits()
    for norm_type in (0, 1):
        def other_tie(x, k, **kw):
            y, idx, norm = gating(x, k, **kw)
            return y, _swap_ties(idx), norm

        verdict = check_call(other_tie, x, k, norm_type=norm_type, reference=gating)
        assert verdict.status is Status.PASS, verdict.message()

    def other_tie_softmax(x, finished=None, k=1):
        y, idx, row_idx = gating_softmax(x, finished, k)
        return y, _swap_ties(idx), row_idx

    verdict = check_call(other_tie_softmax, x, None, k, reference=gating_softmax)
    assert verdict.status is Status.PASS, verdict.message()


def test_gating_picking_a_clearly_lower_expert_still_fails():
    x = _tied_logits()

    def lower(x, k, **kw):  # expert 5 (logit 1.0) instead of a tied 2.0
        y, idx, norm = gating(x, k, **kw)
        return y, torch.where(idx == 2, 5, idx).to(torch.int32), norm

    assert check_call(lower, x, 2, norm_type=1, reference=gating).status is Status.ERROR

    def lower_softmax(x, finished=None, k=1):
        y, idx, row_idx = gating_softmax(x, finished, k)
        return y, torch.where(idx == 2, 5, idx).to(torch.int32), row_idx

    assert check_call(lower_softmax, x, None, 2, reference=gating_softmax).status is Status.ERROR


def test_gating_modes_without_a_reference_raise_unjudged():
    x = torch.randn(2, 8)
    with pytest.raises(UnjudgedFusedCall, match="renorm"):
        gating(x, 2, renorm=1)
    with pytest.raises(UnjudgedFusedCall, match="norm_type"):
        gating(x, 2, norm_type=2)


# ---------------------------------------------------------------- npu_moe_init_routing(_v2)


def test_init_routing_v2_follows_the_documented_formula_on_a_small_example():
    x = torch.tensor([[1.0], [2.0], [3.0]])
    expert_idx = torch.tensor([[2, 0], [0, 1], [2, 1]], dtype=torch.int32)
    expanded_x, row_idx, counts, scale = init_routing_v2(
        x, expert_idx, scale=torch.tensor([0.5, 0.25, 0.125]), expert_num=3, expert_tokens_num_type=1,
        expert_tokens_num_flag=True)
    # copies (token, k) flattened: e = [2, 0, 0, 1, 2, 1]; by expert, stably: copies 1, 2, 3, 5, 0, 4
    assert expanded_x.reshape(-1).tolist() == [1.0, 2.0, 2.0, 3.0, 1.0, 3.0]
    assert row_idx.dtype == torch.int32 and row_idx.tolist() == [4, 0, 1, 2, 5, 3]  # where each copy landed
    assert counts.dtype == torch.int64 and counts.tolist() == [2, 2, 2]
    assert scale.tolist() == [0.5, 0.25, 0.25, 0.125, 0.5, 0.125]
    _, scatter, cumsum, no_scale = init_routing_v2(x, expert_idx, expert_num=3, expert_tokens_num_flag=True,
                                                   row_idx_type=1)
    assert scatter.tolist() == [1, 2, 3, 5, 0, 4] and cumsum.tolist() == [2, 4, 6] and no_scale.numel() == 0
    _, _, pairs, _ = init_routing_v2(x, expert_idx, expert_num=4, expert_tokens_num_type=2,
                                     expert_tokens_num_flag=True)
    assert pairs.tolist() == [[0, 2], [1, 2], [2, 2], [0, 0]]


def test_init_routing_v2_agrees_with_a_loop():
    x = torch.randn(10, 4, generator=_generator()).bfloat16()
    expert_idx = _experts(10, 3, 8)
    for active_range, row_idx_type in (((), 0), ((2, 6), 0), ((), 1)):
        start, end = active_range or (0, 8)
        copies = [(e, c) for e in range(start, end) for c in range(30) if int(expert_idx.reshape(-1)[c]) == e]
        expanded_x, row_idx, counts, _ = init_routing_v2(
            x, expert_idx, expert_num=8, active_expert_range=list(active_range), expert_tokens_num_type=1,
            expert_tokens_num_flag=True, row_idx_type=row_idx_type, active_num=len(copies))
        assert torch.equal(expanded_x, torch.stack([x[c // 3] for _, c in copies]))
        if row_idx_type == 0:
            want = [-1] * 30
            for row, (_, c) in enumerate(copies):
                want[c] = row
            assert row_idx.tolist() == want
        else:
            assert row_idx.tolist() == [c for _, c in copies]
        assert counts.tolist() == [sum(1 for e, _ in copies if e == i) for i in range(start, end)]


def test_init_routing_v1_agrees_with_its_formula_and_a_loop():
    x = torch.randn(5, 4, generator=_generator()).bfloat16()
    expert_idx = _experts(5, 2, 4)
    row_idx = torch.arange(10, dtype=torch.int32).reshape(2, 5).t().contiguous()  # k-major, as gating returns it
    expanded_x, expanded_row_idx, expanded_expert_idx = init_routing(x, row_idx, expert_idx, 5)
    flat = expert_idx.reshape(-1).tolist()
    order = sorted(range(10), key=lambda c: (flat[c], c))
    assert expanded_expert_idx.tolist() == [flat[c] for c in order]
    for dst, c in enumerate(order):
        src = int(row_idx.reshape(-1)[c])
        assert int(expanded_row_idx[src]) == dst and torch.equal(expanded_x[dst], x[src % 5])
    assert init_routing(x, row_idx, expert_idx, 2)[0].shape == (4, 4)  # min(N, active_num) * K rows


def test_fair_init_routing_passes_and_wrong_routing_fails():
    x = torch.randn(16, 8, generator=_generator()).bfloat16()
    expert_idx, scale = _experts(16, 2, 6), torch.rand(16, generator=_generator(1))
    kwargs = dict(scale=scale, expert_num=6, expert_tokens_num_type=1, expert_tokens_num_flag=True)
    assert check_call(init_routing_v2, x, expert_idx, **kwargs).status is Status.PASS

    def dropped(*a, **k):  # one copy left zero
        out = list(init_routing_v2(*a, **k))
        out[0] = out[0].clone()
        out[0][5] = 0
        return tuple(out)

    def swapped(*a, **k):  # two rows of different experts exchanged
        out = list(init_routing_v2(*a, **k))
        out[0] = out[0][torch.tensor([31, *range(1, 31), 0])]
        return tuple(out)

    def off_by_one(*a, **k):
        out = list(init_routing_v2(*a, **k))
        out[1] = torch.where(torch.arange(32) == 3, out[1] + 1, out[1]).to(torch.int32)
        return tuple(out)

    def miscounted(*a, **k):
        out = list(init_routing_v2(*a, **k))
        out[2] = out[2] + torch.tensor([1, -1, 0, 0, 0, 0])
        return tuple(out)

    for defect in (dropped, swapped, off_by_one, miscounted):
        verdict = check_call(defect, x, expert_idx, reference=init_routing_v2, **kwargs)
        assert verdict.status is Status.ERROR, defect.__name__
    row_idx = torch.arange(32, dtype=torch.int32).reshape(2, 16).t().contiguous()
    assert check_call(init_routing, x, row_idx, expert_idx, 16).status is Status.PASS


def test_init_routing_v2_modes_without_a_reference_raise_unjudged():
    x, expert_idx = torch.randn(4, 8), _experts(4, 2, 4)
    with pytest.raises(UnjudgedFusedCall, match="quant_mode"):
        init_routing_v2(x, expert_idx, expert_num=4, quant_mode=1)
    with pytest.raises(UnjudgedFusedCall, match="drop_pad_mode"):
        init_routing_v2(x, expert_idx, expert_num=4, drop_pad_mode=1, expert_capacity=2)
    with pytest.raises(UnjudgedFusedCall, match="undefined"):  # rows past the routed copies
        init_routing_v2(x, expert_idx, expert_num=4, active_expert_range=[0, 2])


# ---------------------------------------------------------------- npu_moe_finalize_routing, compute_expert_tokens


def _finalize_case(dtype=torch.bfloat16, tokens: int = 12, top_k: int = 2, experts: int = 4, hidden: int = 16):
    g = _generator(3)
    rows = torch.randn(tokens * top_k, hidden, generator=g).to(dtype)
    skip1, skip2 = torch.randn(tokens, hidden, generator=g).to(dtype), torch.randn(tokens, hidden, generator=g).to(dtype)
    bias = torch.randn(experts, hidden, generator=g).to(dtype)
    scales = torch.softmax(torch.randn(tokens, top_k, generator=g), -1).to(dtype)
    src_to_dst = torch.randperm(tokens * top_k, generator=g).to(torch.int32)
    experts_of = _experts(tokens, top_k, experts)
    return rows, skip1, skip2, bias, scales, src_to_dst, experts_of


def test_finalize_routing_agrees_with_a_loop():
    rows, skip1, skip2, bias, scales, src_to_dst, experts_of = _finalize_case(torch.float64)
    out = finalize_routing(rows, skip1, skip2, bias, scales, src_to_dst, experts_of)
    tokens, top_k = scales.shape
    for i in range(tokens):
        want = skip1[i] + skip2[i]
        for k in range(top_k):
            want = want + scales[i, k] * (rows[int(src_to_dst[i + k * tokens])] + bias[int(experts_of[i, k])])
        torch.testing.assert_close(out[i], want)
    plain = finalize_routing(rows, None, None, None, None, src_to_dst, None, 0, top_k)  # weights 1, no skips
    torch.testing.assert_close(plain, rows[src_to_dst.long()].reshape(top_k, tokens, -1).sum(0))


def test_fair_finalize_routing_passes_and_defects_fail():
    args = _finalize_case()
    assert check_call(finalize_routing, *args).status is Status.PASS

    def scaled(*a):
        return (finalize_routing(*a).float() * 1.01).bfloat16()

    def dropped(rows, skip1, skip2, bias, scales, src_to_dst, experts_of):  # token 3's second copy lost
        scales = scales.clone()
        scales[3, 1] = 0
        return finalize_routing(rows, skip1, skip2, bias, scales, src_to_dst, experts_of)

    def no_bias(rows, skip1, skip2, bias, *rest):
        return finalize_routing(rows, skip1, skip2, None, *rest)

    for defect in (scaled, dropped, no_bias):
        assert check_call(defect, *args, reference=finalize_routing).status is Status.ERROR, defect.__name__
    with pytest.raises(UnjudgedFusedCall):
        finalize_routing(*args, drop_pad_mode=1)


def test_compute_expert_tokens_counts_rows_up_to_each_expert():
    sorted_experts = torch.tensor([0, 0, 2, 2, 2, 3, 5], dtype=torch.int32)
    ends = expert_tokens(sorted_experts, 6)
    assert ends.dtype == torch.int32 and ends.tolist() == [2, 2, 5, 6, 6, 7]
    assert ends.tolist() == [sum(1 for e in sorted_experts.tolist() if e <= i) for i in range(6)]
    assert check_call(expert_tokens, sorted_experts, 6).status is Status.PASS

    def off_by_one(s, n):
        return expert_tokens(s, n) + torch.tensor([0, 1, 0, 0, 0, 0], dtype=torch.int32)

    assert check_call(off_by_one, sorted_experts, 6, reference=expert_tokens).status is Status.ERROR


# ---------------------------------------------------------------- npu_moe_token_permute_with_routing_map


def test_permute_with_routing_map_agrees_with_a_loop():
    tokens = torch.randn(6, 4, generator=_generator()).bfloat16()
    experts = _experts(6, 2, 5)
    routing_map = torch.zeros(6, 5, dtype=torch.bool).scatter(1, experts.long(), True)
    probs = torch.rand(6, 5, generator=_generator(1))
    permuted, permuted_probs, sorted_indices = permute_with_map(tokens, routing_map, probs=probs, num_out_tokens=12)
    by_expert = [(e, t) for e in range(5) for t in range(6) if routing_map[t, e]]
    assert torch.equal(permuted, torch.stack([tokens[t] for _, t in by_expert]))
    assert permuted_probs.tolist() == [probs[t, e].item() for e, t in by_expert]
    copies = [(t, e) for t in range(6) for e in range(5) if routing_map[t, e]]  # i: token i // 2's experts in order
    assert sorted_indices.tolist() == [by_expert.index((e, t)) for t, e in copies]
    assert permute_with_map(tokens, routing_map, num_out_tokens=12)[1].numel() == 0
    assert check_call(permute_with_map, tokens, routing_map, probs=probs, num_out_tokens=12).status is Status.PASS

    def swapped(*a, **k):
        out, p, idx = permute_with_map(*a, **k)
        return out[torch.tensor([11, *range(1, 11), 0])], p, idx

    verdict = check_call(swapped, tokens, routing_map, probs=probs, num_out_tokens=12, reference=permute_with_map)
    assert verdict.status is Status.ERROR
    with pytest.raises(UnjudgedFusedCall):
        permute_with_map(tokens, routing_map, drop_and_pad=True)
