"""Matrix products, convolutions, recurrent layers, attention and matrix algorithms: what sums over a
contracted dim, and the float32 math mode (TF32, HF32) each runs in."""

from __future__ import annotations

from ...bounds import AccumulationRule, accumulation as acc
from .. import randomness as random
from ..records import OpRecord, op


def _matrix_algorithm(name: str, rule: AccumulationRule = acc.MATRIX_ALGORITHM) -> OpRecord:
    """A factorization, a solve, an inverse or a matrix function: backward stable normwise, its length the
    matrix's entries (bounds.accumulation.MATRIX_ALGORITHM) unless its outputs' terms need their own."""
    return op(name, accumulation=rule, matrix_algorithm=True)


RECORDS = (
    # Attention rounds its probabilities to the dtype before P @ V.
    op("scaled_dot_product_attention", "error_bound", roundings=2, accumulation=acc.SCALED_DOT_PRODUCT_ATTENTION,
       math="matmul", rounded_once_in_half=True, random=random.switched(random.Switch(("dropout_p",), 4, 0.0, 0))),
    # An unfused bias: the product is rounded to the dtype before the bias is added.
    op("addmm", "error_bound", level="L2", roundings=1, accumulation=acc.ADDMM, math="matmul", plain_sum=True),
    op("linear", "error_bound", level="L2", roundings=1, accumulation=acc.LINEAR, math="matmul", plain_sum=True,
       rounded_once=True),
    # torch's half-precision CPU conv_transpose rounds the convolution before adding the bias (95 % of float16
    # elements equal that unfused form; a cancelling bias then leaves 280 ulp of the result).
    op("conv_transpose1d", "thousandth", roundings=1, accumulation=acc.TRANSPOSED_CONVOLUTION, math="conv"),
    op("conv_transpose2d", "thousandth", roundings=1, accumulation=acc.TRANSPOSED_CONVOLUTION, math="conv"),
    op("conv_transpose3d", "thousandth", roundings=1, accumulation=acc.TRANSPOSED_CONVOLUTION, math="conv"),
    # Where a contracted dim of 1 meets a longer one, torch's tensordot first sums the other operand over it,
    # rounded to the dtype, then multiplies (float16 1x1 result: 1.3 u).
    op("tensordot", roundings=1, accumulation=acc.TENSORDOT, math="matmul", plain_sum=True),

    op("_convolution", accumulation=acc.ANY_CONVOLUTION, math="conv"),
    op("addbmm", "error_bound", accumulation=acc.ADDBMM, math="matmul", plain_sum=True),
    op("baddbmm", "error_bound", accumulation=acc.BADDBMM, math="matmul", plain_sum=True),
    op("bilinear", "error_bound", accumulation=acc.BILINEAR, math="matmul"),
    op("bmm", "error_bound", accumulation=acc.MATMUL, math="matmul", plain_sum=True, rounded_once=True),
    op("chain_matmul", "error_bound", accumulation=acc.CHAIN_MATMUL, math="matmul"),
    _matrix_algorithm("cholesky"),
    _matrix_algorithm("cholesky_ex"),
    _matrix_algorithm("cholesky_inverse"),
    _matrix_algorithm("cholesky_solve"),
    _matrix_algorithm("cond"),
    op("conv1d", "thousandth", accumulation=acc.CONVOLUTION, math="conv", rounded_once=True),
    op("conv2d", "thousandth", accumulation=acc.CONVOLUTION, math="conv", rounded_once=True),
    op("conv3d", "thousandth", accumulation=acc.CONVOLUTION, math="conv", rounded_once=True),
    op("conv_tbc", math="conv"),
    op("convolution", "thousandth", accumulation=acc.ANY_CONVOLUTION, math="conv"),
    _matrix_algorithm("det"),
    op("dot", "error_bound", accumulation=acc.MATMUL, plain_sum=True),
    _matrix_algorithm("eig"),
    _matrix_algorithm("eigh", acc.EIGH),
    _matrix_algorithm("eigvals"),
    _matrix_algorithm("eigvalsh", acc.EIGVALSH),
    op("einsum", "error_bound", accumulation=acc.EINSUM, math="matmul"),
    _matrix_algorithm("geqrf"),
    op("gru", accumulation=acc.RECURRENT, math="rnn", random=random.RNN_DROPOUT),
    op("gru_cell", math="rnn"),
    _matrix_algorithm("householder_product"),
    _matrix_algorithm("inv"),
    _matrix_algorithm("inv_ex"),
    _matrix_algorithm("inverse"),
    _matrix_algorithm("ldl_factor"),
    _matrix_algorithm("ldl_factor_ex"),
    _matrix_algorithm("ldl_solve"),
    _matrix_algorithm("logdet"),
    op("lstm", accumulation=acc.RECURRENT, math="rnn", random=random.RNN_DROPOUT),
    op("lstm_cell", math="rnn"),
    _matrix_algorithm("lstsq"),
    _matrix_algorithm("lu"),
    _matrix_algorithm("lu_factor"),
    _matrix_algorithm("lu_factor_ex"),
    _matrix_algorithm("lu_solve"),
    op("matmul", "error_bound", level="L2", accumulation=acc.MATMUL, math="matmul", plain_sum=True, rounded_once=True),
    _matrix_algorithm("matrix_exp"),
    _matrix_algorithm("matrix_norm"),
    _matrix_algorithm("matrix_power"),
    _matrix_algorithm("matrix_rank"),
    op("mm", "error_bound", level="L2", accumulation=acc.MATMUL, math="matmul", plain_sum=True, rounded_once=True),
    op("multi_dot", accumulation=acc.MATRIX_ALGORITHM, math="matmul", matrix_algorithm=True),
    op("multi_head_attention_forward", accumulation=acc.MULTI_HEAD_ATTENTION, math="matmul",
       random=random.switched(random.Switch(("dropout_p",), 10, None, 0), random.Switch(("training",), 13, True,
       False))),
    op("mv", "error_bound", accumulation=acc.MATMUL, plain_sum=True),
    _matrix_algorithm("ormqr"),
    _matrix_algorithm("pca_lowrank"),
    _matrix_algorithm("pinv", acc.PSEUDO_INVERSE),
    _matrix_algorithm("pinverse", acc.PSEUDO_INVERSE),
    _matrix_algorithm("qr"),
    op("rnn_relu", accumulation=acc.RECURRENT, math="rnn", random=random.RNN_DROPOUT),
    op("rnn_relu_cell", math="rnn"),
    op("rnn_tanh", accumulation=acc.RECURRENT, math="rnn", random=random.RNN_DROPOUT),
    op("rnn_tanh_cell", math="rnn"),
    _matrix_algorithm("slogdet"),
    _matrix_algorithm("solve"),
    _matrix_algorithm("solve_ex"),
    _matrix_algorithm("solve_triangular"),
    _matrix_algorithm("svd", acc.SVD),
    _matrix_algorithm("svd_lowrank"),
    _matrix_algorithm("svdvals", acc.SVDVALS),
    _matrix_algorithm("tensorinv"),
    _matrix_algorithm("tensorsolve"),
    _matrix_algorithm("triangular_solve"),
)
