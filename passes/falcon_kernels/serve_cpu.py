"""Which contractions falcon's CPU kernel serves (``arch=x86-avx512`` or ``x86-avx2``), or why not.

The kernel (:mod:`falcon_mlir.kernels.cpu_gemm`) computes ``C = A @ B`` for
f32 A (``M x K``, or stored ``K x M``), B (``K x N``, or stored ``N x K``) and
C (``M x N``), all row-major, optionally a batch of them (a leading dimension
of all three), with run-time sizes; its blocking follows the shape
(:func:`~falcon_mlir.kernels.cpu_gemm.classical_config`, per ISA). A contraction is
served when its buffers are exactly that: f32 x f32 -> f32, static sizes, the
body of a plain multiply-accumulate, and maps that read

    A: b.., m, k  or  b.., k, m      B: b.., k, n  or  b.., n, k      C: b.., m, n

as row-major buffers once the dimensions of size 1 are dropped: the batch
dimensions (in all three operands) leading and in one order (several fold
into one batch), each role's dimensions adjacent and in one order (M folded
from several dimensions, such as ``batch x tokens`` of a 3-D x 2-D projection,
is one row-major M). So ``linalg.matmul`` with the default or transposed maps
(``matmul_transpose_a/b`` and the generics StableHLO's import makes of them),
``linalg.batch_matmul`` and batched generics with B stored ``N x K``
(attention's ``Q K^T``) are served. C stored ``N x M``, batch dimensions that
do not lead, and other element types stay IREE's, with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from iree.compiler import ir

from falcon_mlir.ir.contraction import FOLD_REASON, Contraction
from falcon_mlir.kernels.cpu_gemm import CpuGemmConfig, classical_config

from .serve import zero_init

__all__ = ["CpuServed", "serve_cpu"]


@dataclass(frozen=True)
class CpuServed:
    """How the CPU kernel serves one contraction.

    Attributes:
        M, N, K: the GEMM's sizes (elements; M and N may fold several unit or adjacent dimensions).
        config: the kernel's blocking for this shape.
        trans_a, trans_b: A is stored ``K x M``, B ``N x K`` (the kernel's packs transpose them).
        batch: independent products, a leading dimension of A, B and C (1: none).
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
    trans_a: bool = False
    trans_b: bool = False
    batch: int = 1

    @property
    def flops(self) -> int:
        """``2 batch M N K``."""
        return 2 * self.batch * self.M * self.N * self.K

    @property
    def intensity(self) -> float:
        """FLOP per byte of A, B and C (f32) moved once."""
        return self.flops / (4 * self.batch * (self.M * self.K + self.K * self.N + self.M * self.N))

    @property
    def layout(self) -> str:
        """How the kernel reads the operands, for the report: ``""`` (row-major A and B, no batch), else
        e.g. ``"A stored K x M, batch 32"``."""
        parts = [w for w, on in (("A stored K x M", self.trans_a), ("B stored N x K", self.trans_b)) if on]
        return ", ".join(parts + ([f"batch {self.batch}"] if self.batch > 1 else []))


def _roles(c: Contraction) -> dict:
    """loop dimension -> ``"M"`` (in A and C), ``"N"`` (B and C), ``"K"`` (A and B) or ``"b"`` (all three)."""
    a, b, out = set(c.lhs_dims), set(c.rhs_dims), set(c.out_dims)
    names = {(True, False, True): "M", (False, True, True): "N", (True, True, False): "K", (True, True, True): "b"}
    return {d: names.get((d in a, d in b, d in out), "?") for d in a | b | out}


def _layout(c: Contraction) -> tuple:
    """``((trans_a, trans_b), None)`` where A, B and C, without their dimensions of size 1, are a leading
    batch (the same dimensions in one order in all three), then ``M... K...`` or ``K... M...``,
    ``K... N...`` or ``N... K...`` and ``M... N...``, each role's dimensions in one order (then they are
    the row-major buffers the kernel reads); else ``(None, why)``."""
    roles = _roles(c)
    kept = []
    for v, dims in zip(c.op.operands[:3], (c.lhs_dims, c.rhs_dims, c.out_dims)):
        shape = ir.RankedTensorType(v.type).shape
        kept.append([d for d, n in zip(dims, shape) if n != 1])
    generic = "indexing maps other than (b..,)m,k x (b..,)k,n -> (b..,)m,n up to transposed A or B: " \
              "falcon's CPU kernel reads row-major buffers"
    if any(roles[d] == "?" for ds in kept for d in ds):
        return None, generic
    batch = [d for d in kept[2] if roles[d] == "b"]
    if any(ds[:len(batch)] != batch for ds in kept):
        return None, ("batch dimensions that are not the leading dimensions of A, B and C in one order: "
                      "falcon's CPU kernel reads a leading batch")
    a, b, out = (ds[len(batch):] for ds in kept)

    def read(ds, first, second):
        """``(first's dims, second's dims, swapped)`` where ``ds`` is ``first... second...`` (``swapped``
        False) or ``second... first...`` (True), else None."""
        x, y = [d for d in ds if roles[d] == first], [d for d in ds if roles[d] == second]
        return (x, y, False) if ds == x + y else (x, y, True) if ds == y + x else None

    ra, rb, rc = read(a, "M", "K"), read(b, "K", "N"), read(out, "M", "N")
    if rc is not None and rc[2]:
        return None, "C is transposed (stored N x M): falcon's CPU kernel writes C as M x N, row-major"
    if None in (ra, rb, rc) or (ra[0], ra[1], rb[1]) != (rc[0], rb[0], rc[1]):
        return None, generic
    return (ra[2], rb[2]), None


def serve_cpu(c: Contraction, plan=None, isa: str = "avx512") -> tuple:
    """``(CpuServed, "classical" or "plan")`` when falcon's CPU kernel serves contraction ``c``, else
    ``(None, why)`` (one phrase, as report reasons say it after ``left to IREE:``).

    ``plan``: the kernel-form :class:`~falcon_mlir.dialects.plan.Plan` ``c`` carries, if any: run as a
    :class:`~falcon_mlir.kernels.cpu_plan.CpuPlan` of its schemes composed where the kernel can
    (sizes multiples of the composed format, at most ``MAX_TERMS`` terms), else by the classical
    kernel with a note saying why. ``isa``: the kernel's vector instructions (``avx512``, ``avx2``), which
    fix its blockings (:func:`~falcon_mlir.kernels.cpu_gemm.classical_config`)."""
    if c.dynamic:
        return None, f"dynamic {', '.join(c.dynamic)}: falcon's CPU kernel is built for static sizes"
    if c.unsupported and c.unsupported != FOLD_REASON:
        return None, c.unsupported
    lhs, rhs, acc = str(c.lhs_type), str(c.rhs_type), str(c.acc_type)
    if (lhs, rhs, acc) != ("f32", "f32", "f32"):
        return None, f"{lhs} x {rhs} -> {acc}: falcon's CPU kernel takes f32 x f32 -> f32"
    if min(c.M, c.N, c.K) < 1:
        return None, "empty contraction (a size of 0)"
    flags, why = _layout(c)
    if flags is None:
        return None, why
    layout = dict(trans_a=flags[0], trans_b=flags[1], batch=math.prod(c.batch) if c.batch else 1)
    accumulate = not zero_init(c.op.operands[2])
    if plan is not None:
        from falcon_mlir.catalog import UnknownSchemeError
        from falcon_mlir.kernels.cpu_plan import CpuPlan

        name = "*".join(plan.schemes)
        try:
            p = CpuPlan(c.M, c.N, c.K, name, isa=isa, **layout)
        except UnknownSchemeError as e:
            return None, f"{e} (falcon.plan)"
        except ValueError as e:
            return CpuServed(c.M, c.N, c.K, classical_config(c.M, c.N, c.K, isa=isa, **layout), accumulate,
                             note=f"kernel-form plan {name} does not run on falcon's CPU kernel ({e}); "
                                  "classical kernel", **layout), "classical"
        return CpuServed(c.M, c.N, c.K, p.config, accumulate, plan=p, **layout), "plan"
    return CpuServed(c.M, c.N, c.K, classical_config(c.M, c.N, c.K, isa=isa, **layout), accumulate,
                     **layout), "classical"
