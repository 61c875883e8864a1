"""Classical blocking plans ``<m,k,n; m*k*n>``: the classical reference an LCMA plan must beat.

On CPU profiles whose GEMMs are IREE's, IREE's GEMM rate falls at large sizes, so a classical split
into blocks (R = m*k*n block products accumulating into C, no combines;
:func:`falcon_mlir.catalog.blocking_scheme`) can beat IREE's one GEMM; the decision then weighs
an LCMA plan against the best such plan (:func:`best_blocked`), and tries LCMA levels over a
blocking base (:data:`BASE_FORMATS`). See :mod:`falcon_mlir.decision` for how the margins apply.
"""

from __future__ import annotations

from typing import Optional

from .compile_cost import LONG_COMPILE_SECONDS
from .cost import CostModel, Estimate, Problem
from .profile import Profile
from .rules import fits_all, follows_block_rules, plan_error
from .scheme_stats import scheme_stats

__all__ = ["BLOCKING_BASE_GAIN", "BLOCKING_FORMATS", "BASE_FORMATS", "blocking_ok", "blocking_formats",
           "best_blocked"]

#: An LCMA level over a blocking base is kept where predicted this much
#: (fraction) faster than the same level alone.
BLOCKING_BASE_GAIN = 0.01
#: The classical blocking formats ``(m, k, n)`` ``auto`` tries alone on CPU
#: profiles: 1, 2, 3, 4, 6 or 8 blocks per dimension, at most 128 products
#: (IREE compiles them in about 20 s), the profile's block rules permitting.
BLOCKING_FORMATS = tuple((m, k, n) for m in (1, 2, 3, 4, 6, 8) for k in (1, 2, 3, 4, 6, 8)
                         for n in (1, 2, 3, 4, 6, 8) if 1 < m * k * n <= 128)
#: The blocking formats tried under an LCMA level: 1, 2 or 4 blocks per dimension.
BASE_FORMATS = tuple(f for f in BLOCKING_FORMATS if all(x in (1, 2, 4) for x in f))


def blocking_ok(profile: Profile, forms, pb: Problem) -> bool:
    """Whether classical blocking plans are candidates: CPU profiles (where
    IREE's GEMM rate falls at large sizes) that allow the per-product form,
    on a result of the accumulator's type (a bf16/f16 result would take an
    f32 copy of C and a rounding pass, not measured: forced only). Not on
    profiles whose own plan forms are falcon's kernels (``x86-falcon``): their
    GEMM rates are falcon's classical kernel's, which blocks for the caches
    itself and holds its rate at large sizes (339-373 GFLOP/s from 1024^3 to
    8192^3), so blocks of it gain nothing the model can resolve (4096^3 in
    2x2x2 blocks predicted 3% faster, within its error); and a blocking
    scheme in the kernel form, a valid CPU plan, would only add the packs of B."""
    from falcon_mlir.decision import numerics

    return (profile.kind == "cpu" and "per-product" in forms and "kernel" not in profile.plan_forms
            and not numerics.is_narrow_result(pb.acc))


def blocking_formats(pb: Problem, profile: Profile, inner=()) -> list:
    """The blocking formats (:data:`BLOCKING_FORMATS` alone, :data:`BASE_FORMATS`
    under the levels ``inner``) whose blocks fit ``pb`` and follow the
    profile's block rules (:func:`.rules.follows_block_rules`)."""
    out = []
    for f in (BASE_FORMATS if inner else BLOCKING_FORMATS):
        name = f"{f[0]}x{f[1]}x{f[2]}:{f[0] * f[1] * f[2]}"
        if fits_all(pb, tuple(inner) + (name,)) and follows_block_rules(pb, tuple(inner) + (name,), profile):
            out.append(f)
    return out


def best_blocked(cm: CostModel, pb: Problem, profile: Profile,
                  min_gain: float) -> Optional[Estimate]:
    """The fastest classical blocking plan of ``pb`` (alone, one level), if it
    is predicted ``min_gain`` faster than IREE's GEMM and compiles within
    :data:`LONG_COMPILE_SECONDS`; else ``None``. Its error is classical's."""
    budget_free = [e for e in cm.blocking_plans(pb, blocking_formats(pb, profile))
                   if e.compile_seconds <= LONG_COMPILE_SECONDS]
    if not budget_free:
        return None
    best = min(budget_free, key=lambda e: (e.seconds, scheme_stats(e.schemes[0]).R))
    if best.seconds * (1.0 + min_gain) > cm.classical(pb).seconds:
        return None
    best.error = plan_error(best.schemes, pb, best.form, best.sums)
    return best
