"""torch_npu's quantization ops: integer quantizers and their inverse (integers), block and microscaling formats
and int4 packing (mx), and quantised matmuls (matmuls). A quantizer's float64 golden is the exact value before
rounding, which the quantized standard judges its integer or float8 output against."""

from . import integers, matmuls, mx

OPS = integers.OPS + mx.OPS + matmuls.OPS

__all__ = ["OPS", "integers", "matmuls", "mx"]
