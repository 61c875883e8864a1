"""falcon-kernels' report entries: one dict per contraction, for the CUDA and the CPU path alike."""

from __future__ import annotations

from iree.compiler import ir

from falcon_mlir.ir.contraction import Contraction, format_location

__all__ = ["entry", "left"]


def entry(c: Contraction, options) -> dict:
    """The report entry of contraction ``c`` before a kernel is chosen: ``location`` (``options.filename``
    names the ``-`` buffer), ``op``, ``M``, ``N``, ``K``, ``batch`` (dynamic sizes null, as in
    lcma-rewrite's entries), ``element_types``, ``kernel`` None."""
    def size(x):
        return None if x == ir.ShapedType.get_dynamic_size() else x
    return {"location": format_location(c.op.location, options.filename), "op": c.op.name,
            "M": size(c.M), "N": size(c.N), "K": size(c.K), "batch": [size(b) for b in c.batch],
            "element_types": {"lhs": str(c.lhs_type), "rhs": str(c.rhs_type),
                              "acc": str(c.acc_type)},
            "kernel": None}


def left(e: dict, why: str) -> dict:
    """``e`` with ``reason`` ``left to IREE: {why}``."""
    e["reason"] = f"left to IREE: {why}"
    return e
