"""Which kernel serves a contraction: its :class:`~falcon_mlir.kernels.GemmSpec`
(or :class:`~falcon_mlir.kernels.PlanSpec` for a kernel-form plan), or why none does.

The kernels compute ``C = op(A) @ op(B)`` with f32 accumulation for f32, f16
and bf16 operands of one type, C in f32 or in the operands' type (an op
whose operands are rounded to a narrower or another type before the multiply,
e.g. f32 x f32 -> f16, is not the kernels' product), A and/or B read
transposed in place, one batch dimension shared by A, B and C. A contraction
is served when it matches that shape exactly: static sizes, the body of a
plain multiply-accumulate, maps of the forms

    A: (b,) m, k  or  (b,) k, m        B: (b,) k, n  or  (b,) n, k        C: (b,) m, n

and operands whose row strides TMA can read (:func:`falcon_mlir.kernels.supports`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional, Union

from iree.compiler import ir

from falcon_mlir.ir.builders import defining_op_name
from falcon_mlir.ir.contraction import Contraction
from falcon_mlir.kernels import GemmSpec, PlanSpec, supports

from falcon_mlir.ir.transposed import find_transposed

__all__ = ["Served", "serve", "zero_init", "intensity", "iree_cannot", "TYPES"]

#: Element types the kernels read and write.
TYPES = ("f32", "f16", "bf16")


@dataclass(frozen=True)
class Served:
    """How one contraction is served.

    Attributes:
        spec: the kernel's :class:`GemmSpec`, or the plan's :class:`PlanSpec`.
        accumulate: C's initial value is not zero: the kernel's result is
            added to it (an elementwise op IREE fuses with its consumers).
        note: what was changed from what was asked (e.g. a kernel-form plan
            served by the classical kernel), or ``""``.
        reads: for A and B, the :class:`~.transposed.Transposed` source the
            kernel reads in place of the op's operand (its transpose), or None.
    """

    spec: Union[GemmSpec, PlanSpec]
    accumulate: bool
    note: str = ""
    reads: tuple = (None, None)


def zero_init(v: ir.Value) -> bool:
    """Whether ``v`` is ``linalg.fill`` of a constant zero (C starts at 0)."""
    if defining_op_name(v) != "linalg.fill":
        return False
    fill = v.owner
    scalar = fill.operands[0]
    if defining_op_name(scalar) != "arith.constant":
        return False
    attr = scalar.owner.attributes["value"]
    try:
        return float(ir.FloatAttr(attr).value) == 0.0
    except (ValueError, TypeError):
        try:
            return int(ir.IntegerAttr(attr).value) == 0
        except (ValueError, TypeError):
            return False


def intensity(spec: GemmSpec) -> float:
    """Arithmetic intensity of ``spec``: FLOP per byte of A, B and C moved once."""
    from falcon_mlir.kernels.spec import DTYPE_BYTES

    moved = spec.batch * (spec.M * spec.K * DTYPE_BYTES[spec.a_dtype]
                          + spec.K * spec.N * DTYPE_BYTES[spec.b_dtype]
                          + spec.M * spec.N * DTYPE_BYTES[spec.out_dtype])
    return spec.flops / max(moved, 1)


def iree_cannot(c: Contraction) -> bool:
    """Whether IREE 3.13 fails to compile ``c`` for CUDA: bf16 x bf16 -> bf16
    ("failed to distribute", iree-notes.md), so the kernel serves it whatever
    its intensity."""
    return str(c.lhs_type) == "bf16" and str(c.acc_type) == "bf16"


def _layout(c: Contraction) -> Optional[tuple]:
    """``(trans_a, trans_b)`` when the maps are of the served forms, else None."""
    b = list(c.batch_dims)
    if len(b) > 1:
        return None
    m, n, k = c.m_dim, c.n_dim, c.k_dim
    if list(c.out_dims) != b + [m, n]:
        return None
    if list(c.lhs_dims) == b + [m, k]:
        ta = False
    elif list(c.lhs_dims) == b + [k, m]:
        ta = True
    else:
        return None
    if list(c.rhs_dims) == b + [k, n]:
        tb = False
    elif list(c.rhs_dims) == b + [n, k]:
        tb = True
    else:
        return None
    return ta, tb


def serve(c: Contraction, f32_mode: str = "ieee", plan=None) -> tuple:
    """``(Served or None, reason)`` for contraction ``c``; ``plan``: its
    kernel-form :class:`~falcon_mlir.dialects.plan.Plan`, if it carries one
    (served as a :class:`PlanSpec` with the plan's ``operands``, or the
    kernels' default operand type where it names none: scaled f16 for bf16)."""
    if c.unsupported:
        return None, c.unsupported
    if c.dynamic:
        return None, f"dynamic {', '.join(c.dynamic)}: the kernels are built for static sizes"
    lhs, rhs, acc = str(c.lhs_type), str(c.rhs_type), str(c.acc_type)
    if lhs not in TYPES or rhs not in TYPES or acc not in TYPES:
        return None, f"{lhs} x {rhs} -> {acc}: the kernels take f32, f16 or bf16"
    if lhs != rhs:
        return None, f"{lhs} x {rhs}: the kernels take one input type"
    if acc not in (lhs, "f32"):
        # The op rounds each operand to the accumulator type before it
        # multiplies (f32 x f32 -> f16: an operand over 65504 is inf there);
        # the kernels multiply the operands as stored.
        return None, (f"{lhs} x {rhs} -> {acc}: the op rounds its operands to {acc} before the "
                      "multiply, the kernels multiply them as stored")
    layout = _layout(c)
    if layout is None:
        return None, "indexing maps other than (b,)m,k x (b,)k,n -> (b,)m,n (or A, B transposed)"
    ta, tb = layout
    batch = math.prod(c.batch) if c.batch else 1
    accumulate = not zero_init(c.op.operands[2])
    note = ""
    if plan is not None:
        from falcon_mlir.catalog import UnknownSchemeError, get_scheme

        name = "*".join(plan.schemes)
        try:
            get_scheme(name)
        except UnknownSchemeError as e:
            return None, f"{e} (falcon.plan)"
        if batch == 1 and not ta:
            try:  # the plan's operand type (lcma-rewrite's operands=; absent: the kernels' default)
                spec = PlanSpec(c.M, c.N, c.K, scheme=name, dtype=lhs, out_dtype=acc, f32_mode=f32_mode,
                                trans_b=tb, operand_dtype=getattr(plan, "operands", None))
            except ValueError as e:
                return None, f"{e} (falcon.plan)"
            return Served(spec, accumulate), "plan"
        note = "kernel-form plans take A @ B or A @ B^T without batch or a transposed A; classical kernel"
    spec = GemmSpec(c.M, c.N, c.K, a_dtype=lhs, b_dtype=rhs, out_dtype=acc, batch=batch,
                    trans_a=ta, trans_b=tb, f32_mode=f32_mode)
    reads = [find_transposed(c.op.operands[0]), find_transposed(c.op.operands[1])]
    for a, b in ((True, True), (True, False), (False, True)):  # read through both transposes if the kernel can
        if (a and not reads[0]) or (b and not reads[1]) or not (a or b):
            continue
        through = replace(spec, trans_a=spec.trans_a ^ a, trans_b=spec.trans_b ^ b)
        if supports(through) is None:
            return Served(through, accumulate, note, (reads[0] if a else None, reads[1] if b else None)), \
                "classical"
    why = supports(spec)
    if why:
        return None, why
    return Served(spec, accumulate, note), "classical"
