"""Compile cost of a plan: how many ops the rewrite emits, and roughly how long IREE takes.

IREE compiles every dispatch on its own; its time grows with the number of
contractions and combine ops the rewrite emits, not with their sizes. The
estimate counts them per form as :mod:`falcon_mlir.passes.lcma_rewrite`
emits them (one-level per-product: R contractions, one combine per
combined operand, one combine-C op per output block; several per-product
levels: stacked, one batched contraction and per level one combine per
operand and one combine-C op, or on CPU where that compiles fast by
recursion, :func:`recursive_ops`; grouped: the composed scheme's combines and
one batched contraction; kernel: four dispatches; counted as on CPU, where
one-level plans combine C per output block) and
weighs them with seconds per op measured on the 2-core x86 development
machine (llvm-cpu, IREE 3.13; docs/compile-time.md). It is an order of
magnitude, meant to warn before a forced plan compiles for minutes and to
keep ``auto`` from choosing such plans, not a prediction to the second.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple, Sequence

from .scheme_stats import has_blocking, kernel_combine_loads, scheme_stats

__all__ = ["EmittedOps", "emitted_ops", "compile_seconds", "compile_cost", "kernel_source_size",
           "kernel_compile_seconds", "long_compile_seconds", "LONG_KERNEL_COMPILE_SECONDS",
           "SECONDS_PER_CONTRACTION", "SECONDS_PER_COMBINE", "SECONDS_PER_TABLE_COMBINE",
           "LONG_COMPILE_SECONDS", "LONG_MODULE_SECONDS", "recursive_ops",
           "recursive_compile_seconds", "RECURSIVE_SECONDS", "RECURSIVE_MODULE_SECONDS", "STACKED_BYTES", "stacked_bytes"]

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
#: A multi-level per-product plan is emitted by recursion (R^L contractions)
#: instead of stacked on CPU profiles when recursion is predicted to compile
#: in at most this many seconds (:func:`recursive_compile_seconds`; in
#: practice the 7-product schemes at two levels), and ...
RECURSIVE_SECONDS = 20.0
#: ... while the recursive plans of one module add at most this much to its
#: predicted compile time over their stacked form (so a Llama-3-8B block
#: with a 7-product scheme forced at two levels takes recursion for its first
#: contraction only, and stays under a minute; docs/compile-time.md).
RECURSIVE_MODULE_SECONDS = 15.0
#: ... and only where the stacked form's combined operands take at least this
#: many bytes (:func:`stacked_bytes`): above glibc's largest mmap threshold
#: (32 MiB) IREE's transients are mapped fresh on every call, and the page
#: faults, not the arithmetic, make the stacked form slow on CPU; under it
#: the stacked form's few dispatches run faster than the R^L of recursion
#: (strassen^2 on 256 x 512 x 512: 5.4 ms stacked, 9.7 ms recursive).
STACKED_BYTES = 32 * 2 ** 20
#: Triton's time for a kernel-form plan's three generated combine kernels (each coefficient a literal, each
#: output group's block loads written out; :mod:`falcon_mlir.kernels.lcma.source`) grows faster than their
#: size: CPU seconds ``KERNEL_SECONDS_REF * (size / KERNEL_SIZE_REF) ** KERNEL_POWER``, size = coefficient
#: terms of U, V and W plus the block loads of all output groups (:func:`kernel_source_size`). Measured on the
#: 2-core x86 host, sm_90a, Triton's cache empty, 2026-12-02 (docs/compile-time.md): Strassen^2 (size 513)
#: 3.1 s with the products' GEMM, Strassen^3 (7125) 43 s, Winograd^3 (11601) 70 s, 2x4x4:26^2 (16288)
#: 375 s, Strassen^4 (90359) over 23 min for the first of its three kernels (stopped). The power is fitted
#: to Strassen^3 and 2x4x4:26^2 (it over-predicts Winograd^3 2x).
KERNEL_SIZE_REF = 7125
KERNEL_SECONDS_REF = 43.0
KERNEL_POWER = 2.5
#: A kernel-form plan whose kernels are predicted to compile for longer than this is never chosen by
#: ``auto``, and a forced one gets a warning. Higher than :data:`LONG_COMPILE_SECONDS`: the kernels are
#: cached on disk by content, so it is paid once per plan and shape, not per compile (Strassen^3, 43 s,
#: is auto's f32 plan on the H200).
LONG_KERNEL_COMPILE_SECONDS = 180.0


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
    from .cost import MAX_GROUPED_TERMS

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
        return EmittedOps(st.R + strips, len(st.comb_a) + len(st.comb_b) + st.combine_c_ops)

    if form == "per-product" and has_blocking(schemes):  # emitted by recursion, never stacked
        return recursive_ops(schemes, edges)
    combines = 0
    for name in schemes:  # stacked: per level one combine per operand (chunked), one combine C
        st = scheme_stats(name)
        combines += _chunks(st.used_a, MAX_GROUPED_TERMS) + _chunks(st.used_b, MAX_GROUPED_TERMS)
        combines += 1
    return EmittedOps(1 + strips, combines, combines)


def recursive_ops(schemes: Sequence[str], edges: bool = False) -> EmittedOps:
    """Ops the recursive emission of a per-product plan emits: R_1 * ... * R_L
    contractions, and at every node of the recursion one combine per combined
    operand and one combine-C op per output block (each level peels its own
    edges: up to three strips per node where ``edges``)."""

    schemes = tuple(schemes)
    nodes, combines, strips = 1, 0, 0
    for name in schemes:
        st = scheme_stats(name)
        combines += nodes * (len(st.comb_a) + len(st.comb_b) + st.combine_c_ops)
        strips += nodes * (3 if edges else 0)
        nodes *= st.R
    return EmittedOps(nodes + strips, combines)


def stacked_bytes(schemes: Sequence[str], M: int, N: int, K: int, batch: int = 1,
                  elem_bytes: int = 4) -> int:
    """Bytes of the combined operands the stacked form materialises for an
    ``M x K`` by ``K x N`` contraction (``batch`` copies): at every level l,
    ``R_1 * ... * R_l`` blocks of A and of B of that level (the sizes rounded
    down to the composed blocks, as the peeled core)."""

    total, S, mb, kb, nb = 0, 1, M, K, N
    for name in schemes:
        st = scheme_stats(name)
        S, mb, kb, nb = S * st.R, mb // st.m, kb // st.k, nb // st.n
        total += S * (mb * kb + kb * nb)
    return total * batch * elem_bytes


def recursive_compile_seconds(schemes: Sequence[str], edges: bool = False) -> float:
    """Rough seconds IREE spends compiling the recursive emission of a
    per-product plan (:func:`recursive_ops`) for one contraction."""
    ops = recursive_ops(schemes, edges)
    return ops.contractions * SECONDS_PER_CONTRACTION + ops.combines * SECONDS_PER_COMBINE


def kernel_source_size(schemes: Sequence[str]) -> int:
    """Size of a kernel-form plan's generated combine kernels: the nonzero coefficients of the composed
    U, V and W plus the block loads of their output groups
    (:func:`falcon_mlir.decision.scheme_stats.kernel_combine_loads`).

    Raises:
        falcon_mlir.catalog.UnknownSchemeError: unknown scheme name.
    """
    return _source_size("*".join(schemes))


@lru_cache(maxsize=256)
def _source_size(name: str) -> int:
    from falcon_mlir.catalog import get_scheme


    s = get_scheme(name)
    return s.nnz_u + s.nnz_v + s.nnz_w + sum(kernel_combine_loads(name))


def kernel_compile_seconds(schemes: Sequence[str]) -> float:
    """Rough CPU seconds Triton spends on a kernel-form plan's combine kernels (uncached; see
    :data:`KERNEL_POWER` for the measurements); 0 for classical."""
    if not schemes:
        return 0.0
    return KERNEL_SECONDS_REF * (kernel_source_size(schemes) / KERNEL_SIZE_REF) ** KERNEL_POWER


def long_compile_seconds(form: str) -> float:
    """The compile time over which ``auto`` leaves a plan of ``form`` out and a forced one is warned about."""
    return LONG_KERNEL_COMPILE_SECONDS if form == "kernel" else LONG_COMPILE_SECONDS


def compile_seconds(schemes: Sequence[str], form: str = "per-product",
                    edges: bool = False) -> float:
    """Rough seconds IREE (and, for the kernel form, Triton: :func:`kernel_compile_seconds`) spends
    compiling what the plan emits for one contraction."""
    ops = emitted_ops(schemes, form, edges)
    return (ops.contractions * SECONDS_PER_CONTRACTION
            + (ops.combines - ops.tables) * SECONDS_PER_COMBINE
            + ops.tables * SECONDS_PER_TABLE_COMBINE
            + (kernel_compile_seconds(schemes) if form == "kernel" else 0.0))


def compile_cost(schemes: Sequence[str], form: str = "per-product", edges: bool = False) -> float:
    """Alias of :func:`compile_seconds` (the report's ``compile_seconds``)."""
    return compile_seconds(schemes, form, edges)
