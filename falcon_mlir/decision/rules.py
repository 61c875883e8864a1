"""The rules a plan must meet on a contraction, and how its operands are formed.

Which plans the decision admits (:func:`fits`, :func:`fits_all`, :func:`aligned_blocks`: every
level's blocks exact multiples of the profile's ``align``; :func:`grouped_ok`), their predicted
error (:func:`plan_error`), and, for a bf16/f16 result, the type of the combined operands and of the
products (:func:`plan_rounding`, :func:`product_operands`), which the cost model prices.
"""

from __future__ import annotations

from typing import Optional, Sequence

from .cost import MAX_GROUPED_TERMS, MAX_PRODUCTS, Problem
from .profile import Profile
from .scheme_stats import scheme_stats

__all__ = ["fits", "fits_all", "aligned_blocks", "follows_block_rules", "grouped_ok", "plan_error",
           "sum_roundings", "product_operands", "plan_rounding"]


def fits(pb: Problem, schemes: Sequence[str]) -> bool:
    """Whether the first level's format fits the sizes (M >= m, N >= n, K >= k)."""
    st = scheme_stats(schemes[0])
    return pb.M >= st.m and pb.N >= st.n and pb.K >= st.k


def aligned_blocks(pb: Problem, schemes: Sequence[str], align: int, pow2: bool = False,
             min_k: int = 1, min_m: int = 1, min_m_deep: int = 1) -> bool:
    """Whether every level divides the sizes exactly into blocks that are multiples
    of ``align`` (powers of two with ``pow2``; K blocks at least ``min_k``, M
    blocks at least ``min_m``, and at least ``min_m_deep`` where the level's K
    block is at least its N block)."""
    if align <= 1 and not pow2 and min_k <= 1 and min_m <= 1 and min_m_deep <= 1:
        return True
    M, N, K = pb.M, pb.N, pb.K
    for nm in schemes:
        st = scheme_stats(nm)
        if M % st.m or N % st.n or K % st.k:
            return False
        M, N, K = M // st.m, N // st.n, K // st.k
        if M % align or N % align or K % align or K < min_k or M < min_m:
            return False
        if K >= N and M < min_m_deep:
            return False
        if pow2 and any(x & (x - 1) for x in (M, N, K)):
            return False
    return True


def follows_block_rules(pb: Problem, schemes: Sequence[str], profile: Profile) -> bool:
    """:func:`aligned_blocks` under ``profile``'s block rules (``align``, ``pow2_blocks``,
    ``min_block_k``, ``min_block_m``, ``min_block_m_deep``)."""
    return aligned_blocks(pb, schemes, profile.align, profile.pow2_blocks, profile.min_block_k,
                          profile.min_block_m, profile.min_block_m_deep)


def fits_all(pb: Problem, schemes) -> bool:
    """Whether every level's blocks fit the sizes left by the levels above."""
    M, N, K = pb.M, pb.N, pb.K
    for nm in schemes:
        st = scheme_stats(nm)
        if M < st.m or N < st.n or K < st.k:
            return False
        M, N, K = M // st.m, N // st.n, K // st.k
    return True


def grouped_ok(schemes: Sequence[str]) -> bool:
    """Whether the levels composed stay within :data:`~.cost.MAX_PRODUCTS` products and
    :data:`~.cost.MAX_GROUPED_TERMS` blocks per combine (the grouped form's limits)."""
    st = scheme_stats("*".join(schemes))
    return st.R <= MAX_PRODUCTS and st.max_terms <= MAX_GROUPED_TERMS


def plan_error(schemes: Sequence[str], pb: Problem, form: str = "per-product",
           sums: Optional[str] = None) -> Optional[float]:
    """The plan's predicted max-norm relative error on ``pb`` in ``form`` (``sums``: a bf16/f16
    result's combined-operand type): :func:`~falcon_mlir.decision.numerics.kernel_plan_error` for the
    kernel form, :func:`~falcon_mlir.decision.numerics.rounded_plan_error` for a narrow result, else
    :func:`~falcon_mlir.decision.numerics.predicted_error`; ``None`` where numerics cannot say."""
    from falcon_mlir.decision import numerics

    try:
        if form == "kernel":
            return numerics.kernel_plan_error(list(schemes), pb.K, pb.lhs, pb.acc,
                                              operands=numerics.kernel_operands(pb.lhs, pb.operands)[0])
        if numerics.is_narrow_result(pb.acc):  # f32 products, combine C; one rounding
            return numerics.rounded_plan_error(list(schemes), pb.K, pb.acc, sums=sums or "f32",
                                               sum_roundings=sum_roundings(schemes, form))
        return numerics.predicted_error(list(schemes), pb.K, pb.acc)
    except ValueError:
        return None


def sum_roundings(schemes: Sequence[str], form: str) -> int:
    """Roundings of a combined operand on its way to a product: one per level
    in the per-product form, one where all levels are composed."""
    return len(schemes) if form == "per-product" else 1


def product_operands(profile: Profile, lhs: str, M: int, N: int, K: int,
                     choice: str = "auto") -> str:
    """The operands of a bf16/f16-result plan's products next to f32 sums:
    ``"f32"`` (blocks a product reads alone are extended to f32 once: every
    product is an f32 GEMM) or ``"mixed"`` (they stay in the input type
    ``lhs``). ``choice`` ``auto``: ``f32`` where the profile's f32 GEMM rate
    at the product size (M x K by K x N) is above its ``lhs`` rate (where f32
    GEMM is the faster one, an f32 x bf16 product is not worth keeping mixed),
    else ``mixed`` (the x86 host: IREE's bf16 GEMM with AVX512-BF16 runs at
    about twice its f32 rate there, and a mixed product reads half the bytes
    of the single block)."""
    if choice != "auto":
        return choice
    try:
        f32, narrow = profile.gemm_rate("f32", M, N, K), profile.gemm_rate(lhs, M, N, K)
    except (KeyError, ValueError):
        return "mixed"
    return "f32" if f32 > narrow else "mixed"


def plan_rounding(pb: Problem, profile: Profile, schemes: Sequence[str], form: str,
                  budget: Optional[float]) -> Optional[tuple]:
    """``(sums, products)`` of a plan on a bf16/f16 result as lcma-rewrite
    emits it (the :class:`Estimate` fields), ``None`` for other results or
    the kernel form. ``sums``: the input type with ``pb.sums == "input"`` or,
    with ``auto``, where :func:`~falcon_mlir.decision.numerics.narrow_sums_type`
    keeps the plan within ``budget``; else ``"f32"``. ``products``: ``input``
    with input-type sums (both operands in the input type), else
    :func:`product_operands` at the first level's block size (the grouped
    and stacked forms form every operand in the sums type: ``f32``)."""
    from falcon_mlir.decision import numerics

    if form == "kernel" or not numerics.is_narrow_result(pb.acc) or pb.K < 1:
        return None
    narrow_in = pb.lhs == pb.rhs and numerics.is_narrow_result(pb.lhs)
    if not narrow_in or pb.sums == "f32":
        sums = "f32"
    elif pb.sums == "input":
        sums = pb.lhs
    else:
        sums = numerics.narrow_sums_type(list(schemes), pb.K, pb.lhs, pb.acc, budget,
                                         sum_roundings(schemes, form))
    if sums != "f32":
        return sums, "input"
    if not narrow_in and pb.lhs == "f32" and pb.rhs == "f32":
        return sums, "f32"
    if form != "per-product" or len(schemes) > 1:
        return sums, "f32"
    st = scheme_stats(schemes[0])
    return sums, product_operands(profile, pb.lhs, pb.M // st.m, pb.N // st.n, pb.K // st.k,
                                  pb.products)
