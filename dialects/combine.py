"""The combine tag: ``falcon.combine`` on the combine ops the rewrite emits.

Meaning: the op is a combine of an LCMA plan (combine A or B forming
combined operands, or combine C accumulating products into C), and its value
is the list of loop dims whose whole extent one GPU thread should form::

    linalg.generic {..., falcon.combine = array<i64: 2>} ...   // grouped combine A: r loop
    linalg.generic {..., falcon.combine = array<i64: 0, 2>} ... // fused combine C: block loops
    linalg.generic {..., falcon.combine = array<i64>} ...       // plain elementwise combine

* Written by ``lcma-rewrite`` (:mod:`falcon_mlir.passes.lcma_rewrite`) on every
  combine ``linalg.generic`` it emits (:func:`mark_combine`).
* Read by ``falcon-tiles`` (:mod:`falcon_mlir.passes.falcon_tiles`), which
  turns it into a ``compilation_info`` tile choice for CUDA
  (:func:`combine_group_dims`); a malformed tag is ignored there.

It is a discardable attribute: IREE ignores it, so IR that still carries it
compiles like any other upstream IR.
"""

from __future__ import annotations

from iree.compiler import ir

__all__ = ["COMBINE_ATTR", "mark_combine", "is_combine", "combine_group_dims"]

#: Name of the discardable attribute on every combine op the rewrite emits.
COMBINE_ATTR = "falcon.combine"


def mark_combine(v: ir.Value, group_dims=()) -> ir.Value:
    """Tag the op defining ``v`` with :data:`COMBINE_ATTR` = ``group_dims``
    (loop dims formed whole by one thread); returns ``v``."""
    v.owner.attributes[COMBINE_ATTR] = ir.DenseI64ArrayAttr.get([int(g) for g in group_dims])
    return v


def is_combine(op) -> bool:
    """Whether ``op`` is a ``linalg.generic`` carrying the combine tag."""
    op = op.operation if hasattr(op, "operation") else op
    return op.name == "linalg.generic" and COMBINE_ATTR in op.attributes


def combine_group_dims(op) -> list:
    """The group dims of a tagged op, as ints.

    Raises:
        ValueError, TypeError: the tag is not an ``array<i64: ...>``.
    """
    op = op.operation if hasattr(op, "operation") else op
    return [int(x) for x in ir.DenseI64ArrayAttr(op.attributes[COMBINE_ATTR])]
