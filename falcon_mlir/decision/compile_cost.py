"""Compile cost of a plan: how many ops the rewrite emits, and roughly how long IREE takes.

IREE compiles every dispatch on its own; its time grows with the number of
contractions and combine ops the rewrite emits, not with their sizes. The
estimate counts them per form as :mod:`falcon_mlir.passes.lcma_rewrite`
emits them (one-level per-product: R contractions, one combine per
combined operand, one combine-C op per output block; several per-product
levels: stacked, one batched contraction and per level one combine per
operand and one combine-C op; grouped: the composed scheme's combines and
one batched contraction; kernel: four dispatches; counted as on CPU, where
one-level plans combine C per output block) and
weighs them with seconds per op measured on the 2-core x86 development
machine (llvm-cpu, IREE 3.13; docs/compile-time.md). It is an order of
magnitude, meant to warn before a forced plan compiles for minutes and to
keep ``auto`` from choosing such plans, not a prediction to the second.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

__all__ = ["EmittedOps", "emitted_ops", "compile_seconds", "compile_cost",
           "SECONDS_PER_CONTRACTION", "SECONDS_PER_COMBINE", "SECONDS_PER_TABLE_COMBINE",
           "LONG_COMPILE_SECONDS",
           "LONG_MODULE_SECONDS"]

#: Seconds IREE (llvm-cpu) spends per contraction the rewrite emits (2-core x86 host).
SECONDS_PER_CONTRACTION = 0.15
#: Seconds per combine op (an elementwise dispatch).
SECONDS_PER_COMBINE = 0.08
#: Seconds per table combine (one op forming all R operands of a level, or
#: combine C over all output blocks: many inputs, a larger dispatch).
SECONDS_PER_TABLE_COMBINE = 0.4
#: A forced plan predicted to add more than this to a contraction's compile
#: time gets a warning; ``auto`` does not choose such plans.
LONG_COMPILE_SECONDS = 30.0
#: Forced plans of one module predicted to add more than this in all get one
#: warning line (when none of them was warned about alone).
LONG_MODULE_SECONDS = 120.0


class EmittedOps(NamedTuple):
    """What one contraction's plan emits: ``contractions`` and ``combines`` ops,
    ``tables`` of the combines being table ops (all R operands of a level at
    once, or combine C over all blocks)."""

    contractions: int
    combines: int
    tables: int = 0


def _chunks(n: int, per: int) -> int:
    return max(1, math.ceil(n / per)) if n else 0


def emitted_ops(schemes: Sequence[str], form: str = "per-product",
                edges: bool = False) -> EmittedOps:
    """Ops the rewrite emits for a plan of ``schemes`` (outer level first) in ``form``.

    ``edges``: the sizes are not divisible, so up to three classical strips
    are added. Classical (``()``) is one contraction.

    Raises:
        falcon_mlir.catalog.UnknownSchemeError: unknown scheme name.
    """
    from .cost import MAX_GROUPED_TERMS, scheme_stats

    schemes = tuple(schemes)
    if not schemes:
        return EmittedOps(1, 0)
    strips = 3 if edges else 0
    if form == "kernel":
        return EmittedOps(1, 3, 3)
    if form == "grouped":
        st = scheme_stats("*".join(schemes))
        return EmittedOps(1 + strips, 2 + len(st.comb_c), 2)
    if len(schemes) == 1:
        st = scheme_stats(schemes[0])
        return EmittedOps(st.R + strips, len(st.comb_a) + len(st.comb_b) + len(st.comb_c))
    combines = 0
    for name in schemes:  # stacked: per level one combine per operand (chunked), one combine C
        st = scheme_stats(name)
        combines += _chunks(st.used_a, MAX_GROUPED_TERMS) + _chunks(st.used_b, MAX_GROUPED_TERMS)
        combines += 1
    return EmittedOps(1 + strips, combines, combines)


def compile_seconds(schemes: Sequence[str], form: str = "per-product",
                    edges: bool = False) -> float:
    """Rough seconds IREE spends compiling what the plan emits for one contraction."""
    ops = emitted_ops(schemes, form, edges)
    return (ops.contractions * SECONDS_PER_CONTRACTION
            + (ops.combines - ops.tables) * SECONDS_PER_COMBINE
            + ops.tables * SECONDS_PER_TABLE_COMBINE)


def compile_cost(schemes: Sequence[str], form: str = "per-product", edges: bool = False) -> float:
    """Alias of :func:`compile_seconds` (the report's ``compile_seconds``)."""
    return compile_seconds(schemes, form, edges)
