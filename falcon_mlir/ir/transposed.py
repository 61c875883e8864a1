"""Reading an operand through the transpose that made it: falcon-kernels'
kernel reads the transpose's source with its transposed-layout flag instead,
and lcma-rewrite cuts a plan's blocks from the source with the operand's map
transposed (:mod:`falcon_mlir.passes.lcma_rewrite.through`; the forms of a
training step's dX = dY W^T and dW = X^T dY).

IREE's StableHLO import puts a ``dot_general`` with batch dimensions into the
form ``(b, M, K) x (b, K, N)`` with explicit permutations of the operands
(``linalg.transpose``, or a ``linalg.generic`` that only copies through a
permuted map, then a ``tensor.collapse_shape`` of the batch dimensions). IREE's
own matmul absorbs such a permutation into its operand loads; an external
dispatch cannot, so IREE fuses it into the producer instead, whose stores
then stride across rows. In attention that producer is the softmax over the
``heads x tokens x tokens`` scores: P·V read P transposed, and the softmax
writing P transposed took 9.1 of the 14.1 ms of the Llama-3-8B block in bf16
on the H200 (docs/benchmarks.md, 2026-12-01).

The kernels read A as ``(b,) M x K`` or ``(b,) K x M`` and B as ``(b,) K x N``
or ``(b,) N x K`` in place (:class:`falcon_mlir.kernels.GemmSpec`). So when
an operand ``X`` (rows ``r``, columns ``c``, optional batch) is
``collapse_shape(permute(S))`` and ``S``'s non-unit dimensions, in ``S``'s
order, run batch, then columns, then rows (each group's dimensions in ``X``'s
order), ``S`` viewed as ``(b,) c x r`` (one ``collapse_shape``: no data moves)
is ``X`` transposed, and the kernel reads it with the flag flipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from iree.compiler import ir
from iree.compiler.dialects import tensor

from falcon_mlir.ir.builders import permutation_source, reassociation_attr

__all__ = ["Transposed", "find_transposed", "materialize"]


@dataclass(frozen=True)
class Transposed:
    """An operand read as the transpose of another value.

    Attributes:
        source: the permutation's input ``S``.
        groups: ``S``'s dimensions per dimension of the view (``(b,) c, r``);
            ``None`` when ``S`` already has exactly that shape.
        shape: the view's shape, ``(b,) c, r``.
    """

    source: ir.Value
    groups: Optional[List[List[int]]]
    shape: tuple


def _defining(v: ir.Value) -> Optional[ir.Operation]:
    """The op defining ``v`` (None for a block argument)."""
    owner = v.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def _collapse_groups(v: ir.Value) -> tuple:
    """``(T, groups)``: ``v = collapse_shape(T, groups)``, or ``(v, one group per dimension)``."""
    owner = _defining(v)
    if owner is not None and owner.name == "tensor.collapse_shape":
        groups = [[ir.IntegerAttr(p).value for p in ir.ArrayAttr(g)]
                  for g in ir.ArrayAttr(owner.attributes["reassociation"])]
        return owner.operands[0], groups
    return v, [[i] for i in range(ir.RankedTensorType(v.type).rank)]


def find_transposed(operand: ir.Value) -> Optional[Transposed]:
    """The source ``operand`` is the transpose of, viewed as ``(b,) c x r``, or None.

    ``operand`` is a contraction's A or B as the op holds it, of rank 2
    (``r x c``) or 3 (``b x r x c``). Unit dimensions of the source may sit
    anywhere; the other dimensions must follow batch, columns, rows.
    """
    t, groups = _collapse_groups(operand)
    if len(groups) not in (2, 3):
        return None
    found = permutation_source(t)
    if found is None:
        return None
    source, where = found
    shape = ir.RankedTensorType(source.type).shape
    if any(d == ir.ShapedType.get_dynamic_size() for d in shape):
        return None  # a generic may copy a dynamic-size tensor into a static one: no static view of it
    group_of = {d: gi for gi, g in enumerate(groups) for d in g}
    order = [0, 2, 1] if len(groups) == 3 else [1, 0]  # view position -> operand group
    position = {g: p for p, g in enumerate(order)}
    assign, last = [], None  # view position of each source dimension (None: unit, placed later)
    for j, tdim in enumerate(where):
        if shape[j] == 1:
            assign.append(None)
            continue
        p, d = position[group_of[tdim]], tdim
        if last is not None and (p < last[0] or (p == last[0] and d < last[1])):
            return None  # out of order: not a plain view of the source
        assign.append(p)
        last = (p, d)
    # Unit dimensions join the next group (the last one at the end); every group needs a dimension.
    nxt = None
    for j in reversed(range(len(assign))):
        if assign[j] is None:
            assign[j] = nxt if nxt is not None else len(order) - 1
        nxt = assign[j]
    view_groups = [[j for j, p in enumerate(assign) if p == q] for q in range(len(order))]
    if any(not g for g in view_groups) or any(b - a != 1 for g in view_groups for a, b in zip(g, g[1:])):
        return None
    view_shape = tuple(int(_prod(shape[j] for j in g)) for g in view_groups)
    same = all(len(g) == 1 for g in view_groups)
    return Transposed(source=source, groups=None if same else view_groups, shape=view_shape)


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


def materialize(tr: Transposed) -> ir.Value:
    """The view of ``tr.source`` as ``(b,) c x r`` (a ``tensor.collapse_shape``
    at the current insertion point, or the source itself)."""
    if tr.groups is None:
        return tr.source
    st = ir.RankedTensorType(tr.source.type)
    rt = ir.RankedTensorType.get(list(tr.shape), st.element_type)
    return tensor.CollapseShapeOp(rt, tr.source, reassociation_attr(tr.groups)).result
