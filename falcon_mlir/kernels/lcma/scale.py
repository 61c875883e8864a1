"""Scaled f16 operands for bf16 plans (the default): the power-of-two scales and the kernel that finds them.

A bf16 plan that forms its combined operands and products in bf16 rounds
each sum and each product to 8 significant bits; Strassen^2's error is then
about 5x classical's (1.7e-2 against 3e-3 of max|C| at 16384^3 on the H200).
f16 has 11 significant bits and the same tensor-core rate, but a range of
only 2^-24 .. 65504, where bf16 reaches 3e38. So a scaled plan
(``PlanSpec(dtype="bf16", operand_dtype="f16")``) runs:

1. **absmax A, absmax B**: a kernel of ``NP`` persistent programs writes
   ``NP`` partial maxima of ``|A|`` (of ``|B|``) as f32 (:data:`ABSMAX_SOURCE`);
2. **combine A** reads the partials, takes ``e_A`` with ``max|A| = f 2^e_A``,
   ``f`` in [0.5, 1), and stores ``2^-(e_A + s_A) sum_ij U[r,i,j] A_ij`` in
   f16 (likewise B with ``e_B``, ``s_B``); a power of two is exact in f32;
3. the products ``P_r = A_r @ B_r`` accumulate in f32 and are stored in f16;
4. **combine C** multiplies its f32 sums by ``2^(e_A + s_A) 2^(e_B + s_B)``
   before rounding C once to bf16.

The static shifts ``s_A``, ``s_B`` (:func:`operand_shifts`) keep the products
inside f16: after scaling ``|A| < 1``, a combined operand is at most
``u = max_r sum |U_r|`` and a product at most ``u v bk``; the shifts take
``u v bk`` down to ``2^15`` (half of f16's largest power of two, room for the
rounding). Values far below the maximum fall into f16's subnormals, whose
absolute error (``2^-25`` of the scaled maximum) is far below the max-norm
error of the result. The maximum is taken over finite values: an inf or NaN in
A or B reaches C through the sums as in any LCMA plan (more entries than
classically), and the finite ones keep their scale. Exponents run over all of
bf16's range (-126 .. 128; combine C's factor up to 2^300 is applied as three
normal f32 factors in turn), so A near 3e38 times a tiny B stays finite.

**What one scale per matrix cannot hold**: an element more than about 2^24
below its matrix's largest finite element becomes zero in f16 (2^14 below
it: a subnormal with fewer bits). The max-norm error of C stays small while
such elements' contributions are small next to max|C| (random data; outlier
elements or channels x1000; rows or columns scaled by up to 2^+-40; one huge
element), but not when both matrices hold elements far above the ones C's
largest entries are made of: with ``A[0, 0] = B[5, 5] = 2^e`` among O(1)
values, ``C[0, 5] = A[0, 0] B[0, 5] + A[0, 5] B[5, 5]`` needs the O(1)
elements, and the scaled Strassen plan errs by 1.3x bf16 operands' error at
e = 16, 0.15 at e = 20 and 1.0 (C[0, 5] = 0) at e = 64, where bf16 operands
give 5e-3. Everywhere else the emulation of docs/accuracy.md (section
*Scaled f16 operands*, ``scripts/scaled_operands.py``) measures the scaled
plan at 0.06-0.82x the bf16-operand plan's error, so it is the default of bf16
kernel-form plans (:func:`.spec.default_operand_dtype`); ``operands=input``
of lcma-rewrite (``PlanSpec(operand_dtype="bf16")``) keeps bf16 operands
for data of such a range.

Emulated in float32/numpy at 1024^3 (random normal bf16, max-norm error
against float64): classical 3.3e-3; Strassen with bf16 operands and
products 8.2e-3, scaled f16 3.7e-3; Strassen^2 1.8e-2 and 3.7e-3; the same
with A scaled by 1e-6 or 3e4 (no scaling: f16 would underflow or overflow).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

#: Partial maxima per matrix (programs of the absmax kernel; a power of two for ``tl.arange``).
NP = 256
#: Elements each absmax program reads per step.
ABSMAX_BLOCK = 8192
#: Largest power of two a scaled product may reach (f16's max is 65504 < 2^16).
PRODUCT_LIMIT_LOG2 = 15
#: The absmax kernel's entry symbol.
ABSMAX_FN = "falcon_absmax"

#: The absmax kernel: ``y[pid] = max |x|`` over the ``BLOCK``-element chunks ``pid, pid + NP, ...`` of ``x``.
ABSMAX_SOURCE = '''"""falcon-mlir absmax kernel: NP partial maxima of |x| in f32 (falcon_mlir.kernels.lcma.scale); do not edit."""
import triton
import triton.language as tl


@triton.jit
def falcon_absmax(x_ptr, y_ptr, N: tl.constexpr, NP: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    m = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(pid.to(tl.int64) * BLOCK, N, NP * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.abs(tl.load(x_ptr + offs, mask=offs < N, other=0.0).to(tl.float32))
        m = tl.maximum(m, tl.where(x <= 3.4028234663852886e38, x, 0.0))  # finite values only (inf, NaN: 0)
    tl.store(y_ptr + pid, tl.max(m, axis=0))
'''

#: Triton helpers the scaled combine kernels add to their prelude: the exponent of a matrix's largest
#: finite magnitude from its partials, 2^e as f32 built from its bits (exact), and x * 2^n for exponents
#: past f32's normal range (A near bf16's largest values times a tiny B still has a finite product).
SCALE_HELPERS = '''
@triton.jit
def _max_exponent(s_ptr, NP: tl.constexpr):
    """e with max(partials) = f 2^e, f in [0.5, 1): -126 .. 128 (zero and subnormal maxima: -126)."""
    m = tl.max(tl.load(s_ptr + tl.arange(0, NP)), axis=0)
    e = ((m.to(tl.int32, bitcast=True) >> 23) & 255) - 126
    return tl.minimum(tl.maximum(e, -126), 128)


@triton.jit
def _pow2(e):
    """2^e as f32 (|e| <= 126), exact."""
    return ((e + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _mul_pow2(x, n):
    """x * 2^n (|n| <= 300), exact unless the result over- or underflows: three factors of n's sign, each
    a normal f32, applied in turn, so every partial product lies between x and the result."""
    p1 = tl.minimum(tl.maximum(n, -100), 100)
    r = n - p1
    p2 = tl.minimum(tl.maximum(r, -100), 100)
    return x * _pow2(p1) * _pow2(p2) * _pow2(r - p2)

'''


@dataclass(frozen=True)
class AbsmaxSpec:
    """The absmax kernel on one ``rows x cols`` matrix of ``dtype``: ``NP`` f32 partial maxima of ``|x|``."""

    rows: int
    cols: int
    dtype: str
    role: str = "absmax"

    @property
    def in_shape(self) -> tuple:
        return (self.rows, self.cols)

    @property
    def out_shape(self) -> tuple:
        return (NP,)

    def constexprs(self) -> dict:
        return {"N": self.rows * self.cols, "NP": NP, "BLOCK": ABSMAX_BLOCK}

    def traffic_bytes(self) -> dict:
        """Bytes read (the matrix once) and written (the partials)."""
        from ..spec import DTYPE_BYTES
        return {"read": self.rows * self.cols * DTYPE_BYTES[self.dtype], "written": NP * 4}


@dataclass(frozen=True)
class AbsmaxConfig:
    """The absmax kernel's launch: ``NP`` programs of ``num_warps`` warps."""

    num_warps: int = 8

    @property
    def label(self) -> str:
        return f"np{NP},b{ABSMAX_BLOCK},w{self.num_warps}"


def _max_abs_row_sum(T) -> Fraction:
    """``max_r sum |T[r]|`` of a factor (U or V, ``R x a x b``)."""
    import numpy as np
    return max(sum(abs(Fraction(x)) for x in np.asarray(T[r], dtype=object).reshape(-1)) for r in range(len(T)))


def operand_shifts(scheme, bk: int) -> tuple:
    """``(s_A, s_B)``: the extra powers of two (>= 0) by which combine A and B scale down their operands so
    that every product of a scaled plan stays within ``2^PRODUCT_LIMIT_LOG2`` (see the module docstring):
    ``p = max(0, ceil(log2(u v bk)) - 15)`` split as ``s_A = ceil(p/2)``, ``s_B = floor(p/2)``.

    Args:
        scheme: a :class:`~falcon_mlir.catalog.Scheme` (U, V of ``R`` rows).
        bk: the products' inner dimension (elements).
    """
    u, v = _max_abs_row_sum(scheme.U), _max_abs_row_sum(scheme.V)
    p = max(0, math.ceil(math.log2(float(u * v) * bk)) - PRODUCT_LIMIT_LOG2)
    return (p + 1) // 2, p // 2


def max_exponent(x) -> int:
    """``e`` with ``max|x| = f 2^e``, ``f`` in [0.5, 1), over the finite elements of ``x``, as the kernels
    compute it (numpy reference; -126 when that maximum is zero or subnormal)."""
    import numpy as np
    a = np.abs(np.asarray(x, dtype=np.float32))
    m = float(np.max(a[np.isfinite(a)], initial=0.0))
    return max(-126, min(128, math.frexp(m)[1] if m >= 2.0**-126 else -126))
