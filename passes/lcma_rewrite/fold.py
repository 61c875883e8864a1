"""Folded views: a contraction with several loop dimensions in one role, as one matmul.

A ``linalg.batch_matmul`` whose B has no batch dimension (the 3-D x 2-D
projection form: ``(b, m, k) x (k, n) -> (b, m, n)``) has two M dimensions,
batch and M: it is a plain matmul over (batch x M). Recognition
(:func:`falcon_mlir.ir.contraction.analyze`) marks such a contraction with
``groups`` (the roles held by several loop dims that fold into one) and
:data:`~falcon_mlir.ir.contraction.FOLD_REASON`; :class:`Folded` builds its
folded view in front of it::

    %a2 = tensor.collapse_shape %a [[0, 1], [2]]       (b, m, k) -> (b*m, k)
    %c2 = tensor.collapse_shape %c [[0, 1], [2]]       (b, m, n) -> (b*m, n)
    %r2 = linalg.matmul ins(%a2, %b) outs(%c2)         one M dimension
    %r  = tensor.expand_shape %r2 [[0, 1], [2]]        back to (b, m, n)

The pass plans and rewrites the view's ``linalg.matmul`` like any other
(run-time dispatch included when the folded M is dynamic); the view replaces
the op when it is rewritten (:meth:`Folded.commit`) and is erased when it
stays classical (:meth:`Folded.discard`), so a classical op is left as it was.
Collapsing and expanding adjacent dimensions are views: no data move.
"""

from __future__ import annotations

from iree.compiler import ir
from iree.compiler.dialects import linalg, tensor

from falcon_mlir.dialects.plan import PLAN_ATTR
from falcon_mlir.ir.builders import index, reassociation_attr, tensor_type
from falcon_mlir.ir.contraction import Contraction, analyze

__all__ = ["Folded"]


def _folded_shape(t: ir.RankedTensorType, groups: list) -> list:
    dyn = ir.ShapedType.get_dynamic_size()
    out = []
    for g in groups:
        sizes = [t.shape[p] for p in g]
        if any(s == dyn for s in sizes):
            out.append(dyn)
        else:
            n = 1
            for s in sizes:
                n *= s
            out.append(n)
    return out


class Folded:
    """The folded view of contraction ``c`` (``c.groups`` non-empty), built in
    front of ``c.op`` (call inside ``with c.op.location, ir.InsertionPoint(c.op)``).

    Attributes:
        original: ``c``.
        view: the :class:`Contraction` of the folded op (one M, N and K loop
            dimension, at most one batch dimension).
    """

    def __init__(self, c: Contraction):
        self.original = c
        self._ops = []
        op = c.op
        dims = linalg.infer_contraction_dimensions(op)
        role = {d: "B" for d in dims.batch}
        for name, ds in (("M", dims.m), ("N", dims.n), ("K", dims.k)):
            role.update({d: name for d in ds})
        nb = len(list(dims.batch))
        new_dim = {"B": 0, "M": nb, "N": nb + 1, "K": nb + 2}
        maps, folded_operands, self._out_groups = [], [], None
        n_loops = nb + 3
        for v, dl in zip(op.operands, (c.lhs_dims, c.rhs_dims, c.out_dims)):
            groups, new = [], []
            p = 0
            while p < len(dl):
                r = role[dl[p]]
                width = len(c.groups[r]) if r in c.groups else 1
                groups.append(list(range(p, p + width)))
                new.append(new_dim[r])
                p += width
            maps.append(ir.AffineMap.get(n_loops, 0, [ir.AffineDimExpr.get(d) for d in new]))
            folded_operands.append(self._collapse(v, groups))
            self._out_groups = groups  # the last operand is the output
        a, b, init = folded_operands
        build = linalg.batch_matmul if nb else linalg.matmul
        self.result = build(a, b, outs=[init], indexing_maps=maps)
        new_op = self.result.owner
        self._ops.append(new_op)
        if PLAN_ATTR in op.attributes:  # the plan goes with the op that is rewritten
            new_op.attributes[PLAN_ATTR] = op.attributes[PLAN_ATTR]
            del op.attributes[PLAN_ATTR]
        self.expanded = self._expand(self.result, op.operands[2])
        self.view = analyze(new_op)

    def _collapse(self, v: ir.Value, groups: list) -> ir.Value:
        if all(len(g) == 1 for g in groups):
            return v
        t = tensor_type(v)
        rt = ir.RankedTensorType.get(_folded_shape(t, groups), t.element_type)
        out = tensor.CollapseShapeOp(rt, v, reassociation_attr(groups)).result
        self._ops.append(out.owner)
        return out

    def _expand(self, v: ir.Value, like: ir.Value) -> ir.Value:
        """``v`` expanded back to the type of ``like`` (the original accumulator)."""
        groups = self._out_groups
        if all(len(g) == 1 for g in groups):
            return v
        t = tensor_type(like)
        dyn = []
        for p in range(t.rank):
            if t.is_dynamic_dim(p):
                d = tensor.DimOp(like, index(p)).result
                self._ops += [d.owner.operands[1].owner, d.owner]
                dyn.append(d)
        out = tensor.ExpandShapeOp(t, v, reassociation_attr(groups), dyn, list(t.shape)).result
        self._ops.append(out.owner)
        return out

    def describe(self, entry: dict) -> None:
        """The report entry (made from the view) names the original op, its kind
        and the sizes each folded role is made of (``dims``, e.g. ``{"M": [4, 64]}``)."""
        c, view = self.original, self.view
        marker = ir.ShapedType.get_dynamic_size()
        entry["op"] = c.op.name
        folds = ", ".join(f"{r} = {' x '.join('?' if s == marker else str(s) for s in sizes)}"
                          for r, sizes in c.group_sizes.items())
        entry["kind"] = f"{c.describe_kind()} as {view.describe_kind()} over {folds}"
        entry["dims"] = {r: [None if s == marker else s for s in sizes]
                         for r, sizes in c.group_sizes.items()}

    def commit(self) -> None:
        """The folded view replaces the original op (which is erased)."""
        self.original.op.results[0].replace_all_uses_with(self.expanded)
        self.original.op.erase()

    def discard(self) -> None:
        """Erase the folded view; the original op stays as it was (its plan attribute removed)."""
        for op in reversed(self._ops):
            op.erase()
