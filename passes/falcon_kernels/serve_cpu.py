"""Which contractions falcon's CPU kernel serves (``arch=x86-avx512``), or why not.

The kernel (:mod:`falcon_mlir.kernels.cpu_gemm`) computes ``C = A @ B`` for
f32 A (``M x K``), B (``K x N``) and C (``M x N``), all row-major, with
run-time sizes; its blocking follows the shape
(:func:`~falcon_mlir.kernels.cpu_gemm.choose_config`). A contraction is
served when its buffers are exactly that: f32 x f32 -> f32, static sizes, the
body of a plain multiply-accumulate, and maps that read

    A: (b,) m, k        B: (b,) k, n        C: (b,) m, n

as row-major buffers once the dimensions of size 1 are dropped (a batch of 1,
several unit batch dimensions, or M folded from several adjacent dimensions,
such as ``batch x tokens`` of a 3-D x 2-D projection: the same buffers).
Transposed A or B, a batch above 1 and other element types stay IREE's (the
kernel has no transposed or batched form yet).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from iree.compiler import ir

from falcon_mlir.ir.contraction import FOLD_REASON, Contraction
from falcon_mlir.kernels.cpu_gemm import CpuGemmConfig, choose_config

from .serve import zero_init

__all__ = ["CpuServed", "serve_cpu"]


@dataclass(frozen=True)
class CpuServed:
    """How the CPU kernel serves one contraction.

    Attributes:
        M, N, K: the GEMM's sizes (elements; M and N may fold several unit or adjacent dimensions).
        config: the kernel's blocking for this shape.
        accumulate: C's initial value is not a zero fill: the kernel's result is added to it.
        plan: the kernel-form LCMA plan it runs (:class:`~falcon_mlir.kernels.cpu_plan.CpuPlan`; its
            ``config`` is then the plan's products' blocking), or None: the classical kernel.
        note: what was changed from what was asked (a kernel-form plan the kernel cannot run, served
            by the classical kernel), or ``""``.
    """

    M: int
    N: int
    K: int
    config: CpuGemmConfig
    accumulate: bool
    plan: Optional[object] = None
    note: str = ""

    @property
    def flops(self) -> int:
        """``2 M N K``."""
        return 2 * self.M * self.N * self.K

    @property
    def intensity(self) -> float:
        """FLOP per byte of A, B and C (f32) moved once."""
        return self.flops / (4 * (self.M * self.K + self.K * self.N + self.M * self.N))


def _roles(c: Contraction) -> dict:
    """loop dimension -> ``"M"`` (in A and C), ``"N"`` (B and C), ``"K"`` (A and B) or ``"b"`` (all three)."""
    a, b, out = set(c.lhs_dims), set(c.rhs_dims), set(c.out_dims)
    names = {(True, False, True): "M", (False, True, True): "N", (True, True, False): "K", (True, True, True): "b"}
    return {d: names.get((d in a, d in b, d in out), "?") for d in a | b | out}


def _row_major(c: Contraction) -> bool:
    """Whether A, B and C, without their dimensions of size 1, are ``M... K...``, ``K... N...`` and
    ``M... N...`` with each role's dimensions in one order (then they are the row-major ``M x K``,
    ``K x N`` and ``M x N`` buffers the kernel reads)."""
    roles = _roles(c)
    kept = []
    for v, dims in zip(c.op.operands[:3], (c.lhs_dims, c.rhs_dims, c.out_dims)):
        shape = ir.RankedTensorType(v.type).shape
        kept.append([d for d, n in zip(dims, shape) if n != 1])
    if any(roles[d] not in "MNK" for ds in kept for d in ds):  # a batch dimension above 1
        return False

    def split(ds, first, second):
        a, b = [d for d in ds if roles[d] == first], [d for d in ds if roles[d] == second]
        return (a, b) if ds == a + b else None

    a, b, out = split(kept[0], "M", "K"), split(kept[1], "K", "N"), split(kept[2], "M", "N")
    return None not in (a, b, out) and a[0] == out[0] and a[1] == b[0] and b[1] == out[1]


def _layout_reason(c: Contraction) -> str:
    """Why the maps are not the kernel's (transposed operands named)."""
    trans = [w for w, t in (("A is transposed (stored K x M)", "lhs"), ("B is transposed (stored N x K)", "rhs"))
             if t in c.transposed]
    if trans:
        return (f"{' and '.join(trans)}: falcon's CPU kernel reads A as M x K and B as K x N, "
                "row-major (no transposed form yet)")
    return "indexing maps other than (b,)m,k x (b,)k,n -> (b,)m,n: falcon's CPU kernel reads row-major A, B, C"


def serve_cpu(c: Contraction, plan=None) -> tuple:
    """``(CpuServed, "classical" or "plan")`` when falcon's CPU kernel serves contraction ``c``, else
    ``(None, why)`` (one phrase, as report reasons say it after ``left to IREE:``).

    ``plan``: the kernel-form :class:`~falcon_mlir.dialects.plan.Plan` ``c`` carries, if any: run as a
    :class:`~falcon_mlir.kernels.cpu_plan.CpuPlan` of its schemes composed where the kernel can
    (sizes multiples of the composed format, at most ``MAX_TERMS`` terms), else by the classical
    kernel with a note saying why."""
    if c.dynamic:
        return None, f"dynamic {', '.join(c.dynamic)}: falcon's CPU kernel is built for static sizes"
    if c.unsupported and c.unsupported != FOLD_REASON:
        return None, c.unsupported
    lhs, rhs, acc = str(c.lhs_type), str(c.rhs_type), str(c.acc_type)
    if (lhs, rhs, acc) != ("f32", "f32", "f32"):
        return None, f"{lhs} x {rhs} -> {acc}: falcon's CPU kernel takes f32 x f32 -> f32"
    batch = math.prod(c.batch) if c.batch else 1
    if batch > 1:
        return None, (f"batch {' x '.join(str(b) for b in c.batch)}: falcon's CPU kernel runs one GEMM "
                      "(batch 1 only)")
    if min(c.M, c.N, c.K) < 1:
        return None, "empty contraction (a size of 0)"
    if not _row_major(c):
        return None, _layout_reason(c)
    accumulate = not zero_init(c.op.operands[2])
    if plan is not None:
        from falcon_mlir.catalog import UnknownSchemeError
        from falcon_mlir.kernels.cpu_plan import CpuPlan

        name = "*".join(plan.schemes)
        try:
            p = CpuPlan(c.M, c.N, c.K, name)
        except UnknownSchemeError as e:
            return None, f"{e} (falcon.plan)"
        except ValueError as e:
            return CpuServed(c.M, c.N, c.K, choose_config(c.M, c.N, c.K), accumulate,
                             note=f"kernel-form plan {name} does not run on falcon's CPU kernel ({e}); "
                                  "classical kernel"), "classical"
        return CpuServed(c.M, c.N, c.K, p.config, accumulate, plan=p), "plan"
    return CpuServed(c.M, c.N, c.K, choose_config(c.M, c.N, c.K), accumulate), "classical"
