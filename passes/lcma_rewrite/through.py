"""Reading a matmul's operand through the transpose that made it.

IREE's StableHLO import writes a ``dot_general`` whose operand is contracted
over its last dimension on the B side (``dX = dY W^T`` of a training step)
or its first on the A side (``dW = X^T dY``) as a materialized permutation
(``linalg.transpose`` or a copying ``linalg.generic``) feeding a plain
``linalg.matmul``. IREE's global optimization folds that permutation into
the matmul's loads again, so the classical build never copies the operand.
A plan emitted on the matmul as it stands slices the permutation's result
instead: the permutation is then materialized in full (or fused into every
combine and barrier, reading across rows), each call, since a weight of a
training step is an argument, not a constant. Measured at the training
step's shapes (256 x 4096 x 4096 f32, Strassen, x86 host): 0.81x of
classical through the transpose, against 1.10x for the forward form.

So, for a plan of a 2-D matmul, an operand that is the transpose of a
static value (:func:`falcon_mlir.ir.transposed.find_transposed`: a
permutation, optionally collapsed, whose source viewed as a matrix is the
operand transposed) is read in place: the matmul is rebuilt on the transpose's
source with that operand's indexing map transposed (the layout the
emitter's transposed forms already serve: blocks are sliced from the source,
products keep the transposed map), before the plan is emitted.
"""

from __future__ import annotations

from typing import List, Tuple

from iree.compiler import ir
from iree.compiler.dialects import linalg

from falcon_mlir.ir.contraction import Contraction, analyze
from falcon_mlir.ir.transposed import find_transposed, materialize

__all__ = ["read_through_transposes"]


def read_through_transposes(c: Contraction) -> Tuple[Contraction, List[str]]:
    """``(c2, names)``: for a 2-D ``linalg.matmul`` ``c`` whose A and/or B is
    the transpose of a static value, a new ``linalg.matmul`` on the
    transposes' sources (viewed as matrices) with those operands' maps transposed replaces the op
    (same sizes, same result), analyzed as ``c2``; ``names`` lists the
    operands read through (``"lhs"``, ``"rhs"``). Anything else: ``(c, [])``
    and nothing changes. A transpose (and its collapse) left without users is erased.

    The caller's insertion point and location are not used: the new op goes
    right before ``c.op`` with its location.
    """
    if c.kind != "matmul" or c.batch_dims or c.groups or c.dynamic or c.unsupported:
        return c, []
    a, b, init = c.op.operands
    found = [find_transposed(a), find_transposed(b)]
    if all(f is None for f in found):
        return c, []
    names = [n for n, f in zip(("lhs", "rhs"), found) if f is not None]
    dims = [list(reversed(c.lhs_dims)) if found[0] is not None else list(c.lhs_dims),
            list(reversed(c.rhs_dims)) if found[1] is not None else list(c.rhs_dims),
            list(c.out_dims)]
    maps = [ir.AffineMap.get(3, 0, [ir.AffineDimExpr.get(d) for d in ds]) for ds in dims]
    old = [v for v, f in zip((a, b), found) if f is not None]
    with c.op.location, ir.InsertionPoint(c.op):
        ins = [materialize(f) if f is not None else v for v, f in zip((a, b), found)]
        new = linalg.matmul(ins[0], ins[1], outs=[init], indexing_maps=maps)
    c.op.results[0].replace_all_uses_with(new)
    c.op.erase()
    for v in old:  # the collapse_shape and the permutation, where nothing else reads them
        while not isinstance(v.owner, ir.Block) and not list(v.uses):
            op = v.owner.operation
            if op.name not in ("tensor.collapse_shape", "linalg.transpose", "linalg.generic"):
                break
            v = op.operands[0]
            op.erase()
    c2 = analyze(new.owner.operation)
    return c2, names
