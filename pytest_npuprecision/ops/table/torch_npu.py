"""torch_npu's ops, by the name after "NPU." in msprobe dumps. An op with a float64 reference has its
``FusedOp`` in ops/fused/ (joined by name); the ones no single-op golden can judge say why they skip.
"""

from __future__ import annotations

from ...bounds import (
    AccumulationRule, accumulation as acc, argument, class_count, classes_then_batch, composite_terms,
    dequantized_terms, elementwise, first_input, fusion_attention_lengths, grouped_matmul_length,
    infer_attention_lengths, loss_length, quantizer_terms,
)
from .. import randomness as random
from ..records import OpRecord, op


def _collective(name: str) -> OpRecord:
    return op(name, unjudged=("needs-process-group", f"{name} runs a collective inside the kernel: its result needs "
                              f"every rank's inputs and a process group, which a single-op replay has not"))


def _from_every_rank(name: str) -> OpRecord:
    """Judged from a dump of every rank of its communicator, as collectives (checks/collectives/fused.py)."""
    return op(name, unjudged=("needs-process-group", f"{name} runs a collective inside the kernel: a dump case of "
                              f"it is judged from every rank's entry (docs/collectives.md); alone it needs a "
                              f"process group"))


def _workspace(name: str) -> OpRecord:
    return op(name, unjudged=("not-a-computation", f"{name} asks the kernel for its workspace size, a number no "
                              f"golden computes"))


def _device_control(name: str) -> OpRecord:
    return op(name, unjudged=("not-a-computation", f"{name} manages the device (its memory, streams, limits or "
                              f"float status register) rather than computing a result a golden could"))


def _infer_attention(name: str, heads: str, key_lengths: str) -> OpRecord:
    """Inference attention (forward only): scores over the head dim, weighted values over the keys; its
    probabilities rounded to the dtype before P @ V."""
    return op(name, "error_bound", roundings=2, math="matmul",
              accumulation=AccumulationRule(lambda a, k: sum(infer_attention_lengths(heads, key_lengths, a, k))))


def _grouped_matmul(name: str, **traits) -> OpRecord:
    """Each group is a matmul over K (or over its share of K when K is grouped)."""
    return op(name, "error_bound", accumulation=AccumulationRule(grouped_matmul_length), **traits)


def _group_norm_activation(name: str, groups_index: int, groups_name: str) -> OpRecord:
    """A group norm over each group's elements, then an activation."""
    return op(name, "error_bound", accumulation=AccumulationRule(
        lambda a, k: first_input(a, k).numel()
        // max(first_input(a, k).shape[0] * int(argument(a, k, groups_index, groups_name)), 1)))


ATTENTION = (
    # As scaled_dot_product_attention: scores over D, weighted values over the keys (the longest sequence
    # for TND); backward also over the queries. The grad op's outputs are that backward. Both round their
    # probabilities to the dtype before P @ V.
    op("npu_fusion_attention", "error_bound", level="L1", roundings=2, math="matmul",
       accumulation=AccumulationRule(lambda a, k: sum(fusion_attention_lengths(a, k)[1:]),
                                     backward_length=lambda a, k: sum(fusion_attention_lengths(a, k))),
       random=random.switched(random.Switch(("keep_prob",), 9, 1.0, 1))),
    op("npu_fusion_attention_grad", "error_bound", level="L1", roundings=2, math="matmul",
       accumulation=AccumulationRule(lambda a, k: sum(fusion_attention_lengths(a, k, head_num_index=4))),
       random=random.switched(random.Switch(("keep_prob",), random.KEYWORD_ONLY, 1.0, 1))),
    _infer_attention("npu_prompt_flash_attention", "num_heads", "actual_seq_lengths_kv"),
    _infer_attention("npu_incre_flash_attention", "num_heads", "actual_seq_lengths"),  # its lengths are the keys'
    _infer_attention("npu_fused_infer_attention_score", "num_heads", "actual_seq_lengths_kv"),
    _infer_attention("npu_fused_infer_attention_score_v2", "num_query_heads", "actual_seq_kvlen"),
    # Scores over the head dims (the rope part's added), weighted values over the selected keys.
    op("npu_sparse_flash_attention", "error_bound", roundings=2, math="matmul", accumulation=AccumulationRule(
        lambda a, k: argument(a, k, 3, "sparse_indices").shape[-1] + argument(a, k, 0, "query").shape[-1]
        + (0 if k.get("query_rope") is None else k["query_rope"].shape[-1]))),
    op("npu_lightning_indexer", "binary"),  # the indices of the top-k scores
    op("npu_scaled_masked_softmax", "error_bound",
       accumulation=AccumulationRule(lambda a, k: argument(a, k, 0, "x").shape[-1], shared=True)),
)

NORMS = (
    # Norms scale a whole row by one factor (rsqrt of the mean square), which a fair fused kernel may round
    # to the output dtype: a common relative error of u over the row.
    op("npu_rms_norm", "error_bound", level="L2", roundings=1, statistics="rms_norm",
       accumulation=AccumulationRule(lambda a, k: argument(a, k, 1, "gamma").numel(), shared=True)),
    op("npu_add_rms_norm", "error_bound", roundings=1,
       accumulation=AccumulationRule(lambda a, k: argument(a, k, 2, "gamma").numel(), shared=True)),
    # dx sums over the normalised elements, dgamma over the rows: two chains, their lengths added.
    op("npu_rms_norm_backward", "error_bound", accumulation=AccumulationRule(
        lambda a, k: argument(a, k, 2, "gamma").numel()
        + argument(a, k, 1, "self").numel() // max(argument(a, k, 2, "gamma").numel(), 1),
        arguments=("dy", "self", "gamma", "rstd"))),
    # c_kv is an rms norm over gamma's elements; k_rope and the cache copies round once or not at all.
    op("npu_kv_rmsnorm_rope_cache", "error_bound", accumulation=AccumulationRule(
        lambda a, k: argument(a, k, 1, "gamma").numel(),
        arguments=("kv", "gamma", "cos", "sin", "index", "k_cache", "ckv_cache"))),
    op("npu_layer_norm_eval", "error_bound", accumulation=acc.NORMALIZED),
    _group_norm_activation("npu_group_norm_silu", 3, "group"),
    _group_norm_activation("npu_group_norm_swish", 1, "num_groups"),
)

ELEMENTWISE = (
    # Rotations and gated activations: a few correctly rounded steps per element.
    op("npu_rotary_mul", "error_bound", elementwise=True),
    op("npu_apply_rotary_pos_emb", "error_bound", elementwise=True),
    op("npu_interleave_rope", "error_bound", elementwise=True),
    op("npu_mrope", "error_bound", elementwise=True),
    op("npu_swiglu", "error_bound", elementwise=True),
    op("npu_clipped_swiglu", "error_bound", elementwise=True),
    # gelu rounds its 1 + erf(x / sqrt 2) factor to the dtype before the product.
    op("npu_gelu", "error_bound", roundings=2, accumulation=acc.GELU, elementwise=True, statistics="elementwise"),
    op("npu_geglu", "error_bound", roundings=2, elementwise=True),
    op("npu_gelu_mul", "error_bound", elementwise=True,
       accumulation=AccumulationRule(elementwise, sensitivity=composite_terms.gelu_mul_terms)),
    op("npu_fast_gelu", "ulp"),
    op("fast_gelu", "ulp"),
    op("npu_mish", "ulp"),
    op("npu_silu", "ulp"),
    # One optimizer step: m and v round twice or three times (two products and a sum), var through its decay,
    # the bias corrections, the square root, the quotient and the subtraction.
    op("npu_apply_adam", "error_bound", roundings=4, elementwise=True),
    op("npu_apply_adam_w", "error_bound", roundings=4, elementwise=True),
)

MATMULS = (
    op("npu_linear", "error_bound", accumulation=acc.LINEAR, math="matmul", plain_sum=True),
    op("npu_bmmV2", "error_bound", accumulation=acc.MATMUL, plain_sum=True),
    # A batched matmul over K, the input's dim perm_x1[2] (linear in both: squared inputs give the term norms).
    op("npu_transpose_batchmatmul", "error_bound", accumulation=AccumulationRule(
        lambda a, k: argument(a, k, 0, "input").shape[(list(k.get("perm_x1") or [0, 1, 2]))[2]], squared=True,
        arguments=("input", "weight"))),
    _grouped_matmul("npu_grouped_matmul", math="matmul"),
    _grouped_matmul("npu_gmm", math="matmul"),
    _grouped_matmul("npu_gmm_v2"),
)

MOE = (
    op("npu_moe_gating_top_k_softmax", "error_bound",
       accumulation=AccumulationRule(lambda a, k: argument(a, k, 0, "x").shape[-1], shared=True)),
    # Softmax sums the experts (sigmoid nothing); sigmoid's weights are then renormalised over the k chosen.
    op("npu_moe_gating_top_k", "error_bound", accumulation=AccumulationRule(
        lambda a, k: (argument(a, k, 0, "x").shape[-1] if int(argument(a, k, 9, "norm_type", default=0)) == 0 else 1)
        + int(argument(a, k, 1, "k")))),
    # Each token sums its topK expert outputs, each times its probability: linear in both.
    op("npu_moe_token_unpermute", "error_bound", accumulation=AccumulationRule(
        lambda a, k: 1 if argument(a, k, 2, "probs") is None else argument(a, k, 2, "probs").shape[-1], squared=True,
        arguments=("permuted_tokens", "sorted_indices", "probs"))),
    # Each token sums its K expert outputs (plus each expert's bias) times its scales, then skip1 and skip2.
    op("npu_moe_finalize_routing", "error_bound", accumulation=AccumulationRule(
        lambda a, k: (argument(a, k, 4, "scales").shape[-1] if argument(a, k, 4, "scales") is not None
                      else int(argument(a, k, 8, "k", default=1))) + 2, squared=True,
        arguments=("expanded_permuted_rows", "skip1", "skip2", "bias", "scales", "expanded_src_to_dst_row",
                   "export_for_source_row"))),
    # Routing moves and counts tokens: exact.
    op("npu_moe_init_routing", "binary"),
    op("npu_moe_init_routing_v2", "binary"),
    op("npu_moe_compute_expert_tokens", "binary"),
    op("npu_moe_token_permute", "binary"),
    op("npu_moe_token_permute_with_routing_map", "binary"),
)

QUANTIZATION = (
    # Quantizers: integer and float8 outputs whose golden is the exact value before rounding.
    op("npu_dynamic_quant", "quantized"),
    op("npu_quantize", "quantized"),
    op("npu_dynamic_mx_quant", "quantized"),
    op("npu_grouped_dynamic_mx_quant", "quantized"),
    op("npu_dynamic_block_quant", "quantized"),
    op("npu_group_quant", "quantized"),
    op("npu_quant_scatter", "quantized"),
    # A per-token asymmetric quantizer's float offset, 127 - row max / scale, cancels its two terms.
    op("npu_dynamic_quant_asymmetric", "quantized", accumulation=AccumulationRule(
        elementwise, output_norms=quantizer_terms.asymmetric_offset_terms, arguments=("x",))),
    # A quantised matmul's integer product is exact; its dequantization rounds the product (past 2^24 in
    # float32), the scale's and the per-token scale's products and the offset's or bias's sum.
    op("npu_quant_matmul", "error_bound", roundings=4, elementwise=True),
    # x times an int8 weight dequantized on the fly: K terms, their norms through the dequantized weight.
    op("npu_weight_quant_batchmatmul", "error_bound", accumulation=AccumulationRule(
        lambda a, k: argument(a, k, 0, "x").shape[-1], added=(6, "bias"),
        term_norm=dequantized_terms.weight_quant_terms,
        arguments=("x", "weight", "antiquant_scale", "antiquant_offset", "quant_scale", "quant_offset", "bias"))),
    op("npu_anti_quant", "error_bound", elementwise=True),  # (x + offset) * scale: two roundings and the cast
    op("npu_convert_weight_to_int4pack", "binary"),
)

LOSSES = (
    # As cross_entropy: the log-sum-exp over the classes, then the mean over the batch unless reduction is 'none'.
    op("npu_cross_entropy_loss", "error_bound",
       accumulation=AccumulationRule(loss_length(3, per_sample=class_count, total=classes_then_batch))),
    op("npu_softmax_cross_entropy_with_logits", "error_bound",
       accumulation=AccumulationRule(lambda a, k: 2 * class_count(first_input(a, k)))),
)

TENSOR_OPS = (
    # Moving, casting, padding, selecting and packing: exact.
    *(op(name, "binary") for name in (
        "npu_confusion_transpose", "npu_transpose", "npu_slice", "npu_broadcast", "npu_reshape", "npu_pad",
        "npu_indexing", "npu_scatter_nd_update", "scatter_update", "npu_dtype_cast", "npu_one_hot", "one",
        "npu_masked_fill_range", "npu_sort_v2", "npu_max", "npu_min", "npu_sign_bits_pack", "npu_sign_bits_unpack")),
    op("npu_format_cast", "binary", statistics="same_values"),
)

RANDOM = (
    *(op(name, random=random.ALWAYS) for name in (  # torch does not tag torch_npu's ops
        "npu_dropout", "npu_dropout_gen_mask", "_npu_dropout", "npu_random_choice_with_mask", "npu_sim_exponential")),
    op("npu_dropout_with_add_softmax", random=random.switched(random.Switch(("prob",), 3, None, 0))),
)

UNJUDGED = (
    *map(_from_every_rank, ("npu_mm_reduce_scatter_base", "npu_all_gather_base_mm", "npu_mm_all_reduce_base")),
    *map(_collective, (
        "npu_alltoallv_gmm", "npu_gmm_alltoallv", "npu_moe_distribute_dispatch", "npu_moe_distribute_combine",
        "npu_moe_distribute_dispatch_v2", "npu_moe_distribute_combine_v2", "npu_moe_distribute_combine_add_rms_norm",
        "npu_grouped_matmul_finalize_routing_all_reduce", "npu_all_gather_quant_mm", "npu_all_to_all_matmul",
        "npu_all_to_all_quant_matmul", "npu_alltoallv_quant_gmm", "npu_matmul_all_to_all", "npu_quant_all_reduce",
        "npu_quant_gmm_alltoallv", "npu_quant_matmul_all_to_all", "npu_quant_mm_reduce_scatter",
        "npu_quant_reduce_scatter", "npu_moe_distribute_combine_setup", "npu_moe_distribute_combine_teardown",
        "npu_moe_distribute_dispatch_setup", "npu_moe_distribute_dispatch_teardown")),
    *map(_workspace, (
        "_npu_fused_infer_attention_score_get_max_workspace", "npu_fused_infer_attention_score_get_max_workspace",
        "atb._npu_multi_head_latent_attention_get_workspace", "atb._npu_paged_attention_v2_get_workspace")),
    *map(_device_control, (
        "npu_alloc_float_status", "npu_get_float_status", "npu_clear_float_status", "erase_stream", "get_device_limit",
        "get_stream_limit", "set_device_limit", "set_stream_limit", "reset_stream_limit", "empty_with_format",
        "empty_with_swapped_memory", "npu_prefetch", "save_npugraph_tensor", "copy_memory_")),
)

RECORDS = (*ATTENTION, *NORMS, *ELEMENTWISE, *MATMULS, *MOE, *QUANTIZATION, *LOSSES, *TENSOR_OPS, *RANDOM, *UNJUDGED)
