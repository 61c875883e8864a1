"""Run-time dispatch for contractions with one dynamic size (M, or one batch dimension).

A contraction with a dynamic M and static N, K becomes::

    %n = tensor.dim %A, <pos of the dynamic dim>
    %use = arith.cmpi sge, %n, %threshold
    %r = scf.if %use -> (type of C) {
      %full = (%n / chunk) * chunk
      %p = scf.for %o = 0 to %full step chunk iter_args(%acc = %C) {
        chunk of A, B (batch), C at %o, static -> the plan (static emitter) -> insert
      }
      the %n - %full remaining rows (may be 0): classical on dynamic slices, insert
    } else { the original op }

A single dynamic batch dimension with static M, N, K gets the same loop with
chunk = threshold = 1 (each batch element through the plan). Anything else
dynamic stays classical, with the reason in the report.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

from iree.compiler import ir
from iree.compiler.dialects import arith, linalg, scf, tensor

from falcon_mlir.dialects.plan import PLAN_ATTR, Plan
from falcon_mlir.ir.builders import (defining_op_name, dynamic_insert, dynamic_slice, index,
                                     tensor_type)
from falcon_mlir.ir.contraction import DYNAMIC_REASON, Contraction

from .emit import Emitter
from .options import LcmaOptions
from .planning import (decision_for, plan_for, predicted_errors, products_type, rounding_entry,
                       sums_type)

__all__ = ["DYNAMIC_CHUNK_M", "DYNAMIC_CHUNK_CANDIDATES", "Dispatch", "dynamic_choice",
           "not_dispatchable", "emit_dispatch", "dynamic_entry"]

#: Rows per chunk of the run-time dispatch on a dynamic M for a forced scheme
#: (and the M from which the chunked path is taken); under ``scheme=auto``
#: the cost model picks the chunk from :data:`DYNAMIC_CHUNK_CANDIDATES`.
DYNAMIC_CHUNK_M = 2048
#: Chunk sizes the cost model considers for a dynamic M.
DYNAMIC_CHUNK_CANDIDATES = (256, 512, 1024, 2048, 4096, 8192)


class Dispatch(NamedTuple):
    """A run-time dispatch for a contraction with one dynamic size.

    ``chunk``: static size of the chunks along the dynamic dimension (rows
    for M); ``plan``: the plan for one chunk (a static view of the
    contraction, ``view``); ``threshold``: the smallest run-time size that
    takes the chunked LCMA path (below it the original op runs); ``dim``:
    ``"M"`` or ``"batch"``.
    """

    chunk: int
    plan: Plan
    threshold: int
    dim: str = "M"
    view: Optional[Contraction] = None

    def to_json(self) -> dict:
        """The report's ``dispatch`` entry, e.g. ``{"threshold_M": 2048, "chunk_M": 2048}``."""
        return {f"threshold_{self.dim}": self.threshold, f"chunk_{self.dim}": self.chunk}


def auto_chunk(c: Contraction, options: LcmaOptions) -> Optional[int]:
    """The chunk rows for a dynamic M under ``scheme=auto`` (``None``: no chunk wins).

    For each candidate chunk Mc the decision is taken on a static view with
    M = Mc; of those where a plan wins, the smallest whose predicted saving
    (the fraction of classical's time it saves, ``1 - 1/speedup``) is at
    least 90% of the best one's is taken (a smaller chunk is also the
    run-time threshold, so more sizes get the faster path). The saving, not
    the gain ``speedup - 1``: where plans win by tens of times (bf16 on a
    target without native bf16: 45x at 512 rows, 82x at 8192) the gain rule
    took 8192, and every M below it ran the emulated classical op (M = 700:
    2.05 s against 0.014 s for the plan; break-it review of issue 13).
    """
    wins = []
    for mc in DYNAMIC_CHUNK_CANDIDATES:
        view = dataclasses.replace(c, M=mc, unsupported=None, dynamic=[])
        d = decision_for(view, options)
        if not d.choice.is_classical:
            wins.append((mc, d.speedup))
    if not wins:
        return None
    best = max(sp for _, sp in wins)
    return next(mc for mc, sp in wins if 1.0 - 1.0 / sp >= 0.9 * (1.0 - 1.0 / best))


def m_blocks(plan: Plan) -> int:
    """How many blocks the plan cuts M into (product over the levels)."""
    from falcon_mlir.catalog import get_scheme

    n = 1
    for name in plan.schemes:
        n *= get_scheme(name).m
    return n


def dynamic_choice(c: Contraction, options: LcmaOptions) -> tuple:
    """The run-time dispatch for a contraction with a dynamic size: ``(Dispatch or None, reason)``.

    Served: a dynamic M with static N, K (batch static), and a single dynamic
    batch dimension with static M, N, K. A dynamic N or K, or several dynamic
    sizes, stay classical (the reason says so).

    Dynamic M: the plan is :func:`plan_for` on a static view of ``c`` with
    M = chunk, where chunk is the ``chunk`` option or :data:`DYNAMIC_CHUNK_M`,
    rounded up to a multiple of the plan's blocks along M; the threshold is
    the chunk (at run time M >= threshold runs floor(M / chunk) chunks
    through the plan and the rest classical; smaller M runs the original op).
    The same holds for a forced scheme and for an attached ``falcon.plan``.
    Dynamic batch: each batch element is a static (M, N, K) contraction, so
    chunk = threshold = 1 and the plan is :func:`plan_for` on the view with
    that batch size 1.

    Under ``scheme=auto`` without ``chunk=`` the chunk (and so the
    threshold) comes from the cost model (:func:`auto_chunk`).
    """
    why_not = not_dispatchable(c)
    if why_not:
        return None, why_not
    marker = ir.ShapedType.get_dynamic_size()
    if c.dynamic == ["batch"]:
        view = dataclasses.replace(c, batch=[1 if x == marker else x for x in c.batch],
                                   unsupported=None, dynamic=[])
        plan, why = plan_for(view, options)
        if plan is None:
            return None, f"dynamic batch, each batch element classical: {why}"
        return Dispatch(1, plan, 1, "batch", view), (
            f"dynamic batch: run-time loop over the batch, each element through the plan ({why})")
    chunk = options.chunk
    if chunk is None and options.forced_schemes() is None and PLAN_ATTR not in c.op.attributes:
        chunk = auto_chunk(c, options)
        if chunk is None:
            return None, (f"dynamic M: auto keeps it classical at every M (no chunk size in "
                          f"{', '.join(map(str, DYNAMIC_CHUNK_CANDIDATES))} is predicted faster "
                          "through a plan)")
    chunk = chunk or DYNAMIC_CHUNK_M
    view = dataclasses.replace(c, M=chunk, unsupported=None, dynamic=[])
    plan, why = plan_for(view, options)
    if plan is not None and chunk % m_blocks(plan):
        chunk += m_blocks(plan) - chunk % m_blocks(plan)
        view = dataclasses.replace(view, M=chunk)
        plan, why = plan_for(view, options)
    if plan is None:
        return None, f"dynamic M, classical at every M (plan for chunks of {chunk} rows: {why})"
    return Dispatch(chunk, plan, chunk, "M", view), (
        f"dynamic M: run-time dispatch, M >= {chunk} in chunks of {chunk} rows through the plan "
        f"({why}), the remaining rows and smaller M classical")


def not_dispatchable(c: Contraction) -> Optional[str]:
    """Why run-time dispatch cannot serve ``c`` at all (``None`` if it can)."""
    if not c.dynamic or c.unsupported != DYNAMIC_REASON:
        return c.unsupported or "static sizes"
    dyn = list(c.dynamic)
    if len(dyn) > 1:
        return (f"dynamic {', '.join(dyn)}: run-time dispatch serves one dynamic size "
                "(M or a batch dimension); stays classical")
    if dyn[0] in ("N", "K"):
        return (f"dynamic {dyn[0]}: run-time dispatch serves a dynamic M or batch "
                "dimension only; stays classical")
    d = _dispatch_dim(c)
    for v, dims in zip(c.op.operands, (c.lhs_dims, c.rhs_dims, c.out_dims)):
        if d in dims and not tensor_type(v).is_dynamic_dim(dims.index(d)):
            return f"{dyn[0]} is dynamic in some operands and static in others; stays classical"
    return None


def _dispatch_dim(c: Contraction) -> int:
    """The loop dimension of ``c``'s one dynamic size (M or a batch dimension)."""
    if c.dynamic == ["M"]:
        return c.m_dim
    marker = ir.ShapedType.get_dynamic_size()
    return next(bd for bd, x in zip(c.batch_dims, c.batch) if x == marker)


def _chunk_init(init: ir.Value, acc: ir.Value, dims: list, d: int, offset: ir.Value,
                size) -> ir.Value:
    """The accumulator of one chunk: a fresh fill when ``init`` is a ``linalg.fill``
    (so the chunk does not read the loop-carried tensor), else a slice of ``acc``."""
    if defining_op_name(init) == "linalg.fill":
        t = tensor_type(dynamic_slice(acc, dims, d, offset, size))
        sizes = [size if (p == dims.index(d) and not isinstance(size, int)) else x
                 for p, x in enumerate(t.shape)]
        return linalg.fill(init.owner.operands[0], outs=[tensor.empty(sizes, t.element_type)])
    return dynamic_slice(acc, dims, d, offset, size)


def emit_dispatch(c: Contraction, disp: Dispatch, em: Emitter) -> None:
    """Emit the run-time dispatch of ``c`` in front of it (see the module
    docstring), route ``c``'s uses to it and move ``c`` into its else branch.

    Call inside ``with c.op.location, ir.InsertionPoint(c.op)``.
    """
    a, b, init = c.op.operands
    d = _dispatch_dim(c)
    size = tensor.DimOp(a, index(c.lhs_dims.index(d))).result
    use = arith.cmpi(arith.CmpIPredicate.sge, size, index(disp.threshold))
    if_op = scf.IfOp(use, [init.type], has_else=True)
    with ir.InsertionPoint(if_op.then_block):
        step = index(disp.chunk)
        full = arith.muli(arith.divui(size, step), step)
        loop = scf.ForOp(index(0), full, step, [init])
        with ir.InsertionPoint(loop.body):
            off, acc = loop.induction_variable, loop.inner_iter_args[0]
            part = em.emit(dynamic_slice(a, c.lhs_dims, d, off, disp.chunk),
                           dynamic_slice(b, c.rhs_dims, d, off, disp.chunk),
                           _chunk_init(init, acc, c.out_dims, d, off, disp.chunk), disp.plan)
            scf.YieldOp([dynamic_insert(part, acc, c.out_dims, d, off, disp.chunk)])
        done = loop.results[0]
        rest = arith.subi(size, full)
        tail = em.classical(dynamic_slice(a, c.lhs_dims, d, full, rest),
                            dynamic_slice(b, c.rhs_dims, d, full, rest),
                            _chunk_init(init, done, c.out_dims, d, full, rest))
        scf.YieldOp([dynamic_insert(tail, done, c.out_dims, d, full, rest)])
    # The original op moves into the else branch and the if takes its uses.
    c.op.results[0].replace_all_uses_with(if_op.results[0])
    with ir.InsertionPoint(if_op.else_block):
        y = scf.YieldOp([c.op.results[0]])
    c.op.move_before(y)


def dynamic_entry(entry: dict, c: Contraction, disp: Optional[Dispatch],
                  options: LcmaOptions) -> None:
    """Report fields of a contraction with dynamic sizes (in place).

    Dynamic sizes are ``null``; a dispatched one gets its chunk's plan, the
    ``dispatch`` entry and the chunk's predicted errors. No remark when the
    decision (auto) keeps a servable one classical, as for static shapes.
    """
    marker = ir.ShapedType.get_dynamic_size()
    for key in ("M", "N", "K"):
        if entry[key] == marker:
            entry[key] = None
    entry["batch"] = [None if x == marker else x for x in entry["batch"]]
    if disp is not None:
        entry["plan"] = disp.plan.to_json()
        entry["dispatch"] = disp.to_json()
        sums = sums_type(disp.view, disp.plan, options)
        entry["predicted_error"] = predicted_errors(disp.view, disp.plan, sums)
        if sums is not None:  # a bf16/f16 result: where the chunks' plan rounds
            entry["rounding"] = rounding_entry(disp.view, sums,
                                               products_type(disp.view, disp.plan, options, sums))
        entry["remark"] = False
    elif not not_dispatchable(c):  # servable, but the chunk's plan is classical
        entry["remark"] = options.forced_schemes() is not None or PLAN_ATTR in c.op.attributes
