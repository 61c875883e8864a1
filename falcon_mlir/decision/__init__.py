"""The decision: which plan, if any, a contraction gets.

``decide(problem, profile)`` ranks classical GEMM and LCMA plans with the
analytical cost model of :mod:`falcon_mlir.decision.cost` on a hardware
profile (:mod:`falcon_mlir.decision.profile`) and returns the fastest
predicted plan that meets the error budget, or classical:

1. integer accumulators and f64 stay classical unless a scheme is forced;
2. memory-bound contractions stay classical: arithmetic intensity
   ``2MNK / (bytes of A + B + C)`` at most the machine balance
   ``FLOP/s / (bytes/s)`` (the FalconGEMM paper's test, arXiv 2605.06057);
3. candidates: every catalog scheme in every permutation of its format that
   fits the shape, one level; then levels 2 and 3 formed from the best
   :data:`BEAM` schemes of level 1 (mixed schemes per level allowed), in the
   per-product form (each edge strategy) and in the grouped form (levels
   composed; only where the composed combines read at most
   ``MAX_GROUPED_TERMS`` blocks);
4. the predicted error (:func:`falcon_mlir.decision.numerics.predicted_error`, the
   scheme's stability factor and levels; for a bf16/f16 result
   :func:`~falcon_mlir.decision.numerics.rounded_plan_error`, f32 accumulation
   and one rounding) must be within the budget; a plan on a bf16/f16 result
   is priced and checked with its product operands as the rewrite forms them
   (:func:`plan_rounding`: input-type sums where the budget allows them and
   the ``sums`` option does, else f32 sums with the products' operands in f32
   or mixed, whichever the profile's GEMM rates favour);
5. plans whose blocks are not exact multiples of the profile's ``align`` (or,
   where the profile says so, not powers of two, ``pow2_blocks``, or with K
   blocks under ``min_block_k`` or M blocks under ``min_block_m``) at
   every level are not considered (on the x86 host IREE's microkernels lose
   on odd blocks and peeled strips: measured, docs/benchmarks.md); nor are
   kernel-form plans the target's kernels cannot run (CPU profiles: falcon's
   CPU kernel takes f32 only, sizes that are exact multiples of the composed
   format, at most 8 terms per product: :mod:`.cpu_kernel`), and where no plan
   is left the reason says how many were left out and why;
6. plans predicted to add more than ``LONG_COMPILE_SECONDS`` of IREE
   compile time (:mod:`falcon_mlir.decision.compile_cost`, a count of the
   ops the rewrite emits), or kernel-form plans whose generated combine
   kernels are predicted to take Triton more than
   ``LONG_KERNEL_COMPILE_SECONDS``, are not chosen;
7. a plan is chosen only when it is predicted at least the profile's
   ``min_gain`` (default :data:`MIN_GAIN`) faster than IREE's GEMM (the
   model's measured uncertainty on that target, x86 host: 20%) and
   :data:`ALGEBRA_MIN_GAIN` faster than the best classical blocking plan.

Classical plans (CPU profiles whose GEMMs are IREE's, per-product form
allowed, a result of the accumulator's type; not ``x86-falcon``, whose
classical GEMM is falcon's own kernel: :func:`_blocking_ok`): IREE's one GEMM and
classical blocking ``<m,k,n; m*k*n>`` for every format of
:data:`BLOCKING_FORMATS` (R = m*k*n block products accumulating into C, no
combines; :func:`falcon_mlir.catalog.blocking_scheme`), priced with the same
GEMM-rate tables at the block size times the profile's
``forms.blocking_products``, under the same block rules. A blocking plan
becomes the classical reference when it is predicted ``min_gain`` faster
than IREE's GEMM; an LCMA plan must then beat it by
:data:`ALGEBRA_MIN_GAIN`, else the blocking plan is chosen. (x86 host: the
table says IREE's f32 GEMM runs 4096^3 at 0.58x the rate of 2048^3, but
blocked plans measured 0.72-1.04x of IREE's GEMM, so x86-dev's
``blocking_products`` is 1.7 and blocking is seldom the reference there.) LCMA plans are also tried over a blocking base (``strassen`` then ``2x2x2:8``
inside each product; the blocking level does not count towards ``levels``
or the profile's ``max_levels``). The decision reports the blocking gain
(IREE's GEMM / best classical plan) apart from the algebra's own gain (best
classical plan / the chosen plan).

Deciding takes a few milliseconds per contraction after a one-off load of
the catalog's statistics (~0.3 s per process); results are memoized per
(problem, profile, options).

(One file of about 750 lines by choice: it is the one decision, the search
over plans, the classical references and the reason line that must name
what the search left out and why; the prices are in :mod:`.cost`, the errors
in :mod:`.numerics`, the compile times in :mod:`.compile_cost`. Split
candidate: the classical-blocking candidates, ``_blocking_*`` and
``_best_blocked``.)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from falcon_mlir.dialects.plan import EDGES, FORMS  # the plan's edge strategies and forms

from .compile_cost import LONG_COMPILE_SECONDS, long_compile_seconds
from .cost import MAX_GROUPED_TERMS, MAX_PRODUCTS, CostModel, Estimate, Problem
from .constant_b import constant_b_profile, decide_constant_b, kernel_serves_constant_b
from .profile import Profile, ProfileError, load_profile, preset_names
from .scheme_stats import lcma_levels, scheme_stats, single_level_names

__all__ = ["decide", "Decision", "Problem", "Estimate", "Profile", "ProfileError",
           "load_profile", "constant_b_profile", "decide_constant_b", "kernel_serves_constant_b", "preset_names", "CostModel", "MIN_GAIN", "BEAM", "MAX_AUTO_LEVELS",
           "plan_rounding", "product_operands", "MEMORY_FRACTION", "memory_room",
           "BLOCKING_FORMATS", "BASE_FORMATS", "ALGEBRA_MIN_GAIN"]

#: A plan must be predicted this much faster than classical (fraction) to be chosen.
MIN_GAIN = 0.03
#: ``auto`` keeps a plan only if A, B, C and its predicted temporaries fit in
#: this fraction of the profile's ``memory`` (the rest: the allocator's slack and
#: the model's other buffers).
MEMORY_FRACTION = 0.9
#: Schemes of level 1 (and plans of level 2) extended to the next level.
BEAM = 5
#: Most levels ``auto`` considers.
MAX_AUTO_LEVELS = 3
#: The predicted gain (fraction) an LCMA plan needs over the best classical
#: blocking plan, beside the profile's ``min_gain`` over IREE's GEMM. Both are
#: priced from the same GEMM-rate table at the same block sizes, so the
#: model's error on the products (what ``min_gain`` covers: x86 20%) is shared;
#: what the algebra must pay for is its combines, priced from the measured add
#: rate. Measured on the x86 host at 4096^3 f32 (issue 14, under load):
#: Strassen 703-744 ms, 2x2x2 blocks of 2048 772-861 ms, predicted 300 / 318 ms.
ALGEBRA_MIN_GAIN = MIN_GAIN
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


@dataclass
class Decision:
    """The outcome of :func:`decide` for one contraction.

    Attributes:
        choice: the chosen :class:`Estimate` (``choice.is_classical`` for classical).
        classical: the classical estimate (predicted seconds of IREE's one GEMM).
        alternatives: the next best candidates (up to 3, fastest first).
        reason: one line saying why.
        profile: the profile's name.
        candidates: how many plans were evaluated.
        blocked: the fastest classical blocking plan (:attr:`Estimate.is_blocking`)
            predicted the profile's margin faster than IREE's GEMM, or ``None``.
    """

    choice: Estimate
    classical: Estimate
    alternatives: List[Estimate] = field(default_factory=list)
    reason: str = ""
    profile: str = ""
    candidates: int = 0
    blocked: Optional[Estimate] = None

    @property
    def speedup(self) -> float:
        """Predicted classical (IREE's GEMM) seconds / chosen seconds (1.0 for classical)."""
        return self.classical.seconds / self.choice.seconds if self.choice.seconds else 1.0

    @property
    def best_classical(self) -> Estimate:
        """The best classical plan: :attr:`blocked`, else IREE's GEMM (:attr:`classical`)."""
        return self.blocked if self.blocked is not None else self.classical

    @property
    def blocking_gain(self) -> float:
        """Predicted IREE GEMM seconds / best classical plan seconds (1.0 without blocking)."""
        b = self.best_classical.seconds
        return self.classical.seconds / b if b else 1.0

    @property
    def algebra_gain(self) -> float:
        """Predicted best classical plan seconds / chosen seconds: the algebra's
        own gain (1.0 where a classical plan is chosen)."""
        return self.best_classical.seconds / self.choice.seconds if self.choice.seconds else 1.0


def _fits(pb: Problem, schemes: Sequence[str]) -> bool:
    st = scheme_stats(schemes[0])
    return pb.M >= st.m and pb.N >= st.n and pb.K >= st.k


def _aligned(pb: Problem, schemes: Sequence[str], align: int, pow2: bool = False,
             min_k: int = 1, min_m: int = 1) -> bool:
    """Whether every level divides the sizes exactly into blocks that are multiples
    of ``align`` (powers of two with ``pow2``; K blocks at least ``min_k``, M
    blocks at least ``min_m``)."""
    if align <= 1 and not pow2 and min_k <= 1 and min_m <= 1:
        return True
    M, N, K = pb.M, pb.N, pb.K
    for nm in schemes:
        st = scheme_stats(nm)
        if M % st.m or N % st.n or K % st.k:
            return False
        M, N, K = M // st.m, N // st.n, K // st.k
        if M % align or N % align or K % align or K < min_k or M < min_m:
            return False
        if pow2 and any(x & (x - 1) for x in (M, N, K)):
            return False
    return True


def _grouped_ok(schemes: Sequence[str]) -> bool:
    st = scheme_stats("*".join(schemes))
    return st.R <= MAX_PRODUCTS and st.max_terms <= MAX_GROUPED_TERMS


def _error(schemes: Sequence[str], pb: Problem, form: str = "per-product",
           sums: Optional[str] = None) -> Optional[float]:
    from falcon_mlir.decision import numerics

    try:
        if form == "kernel":
            return numerics.kernel_plan_error(list(schemes), pb.K, pb.lhs, pb.acc,
                                              operands=numerics.kernel_operands(pb.lhs, pb.operands)[0])
        if numerics.is_narrow_result(pb.acc):  # f32 products, combine C; one rounding
            return numerics.rounded_plan_error(list(schemes), pb.K, pb.acc, sums=sums or "f32",
                                               sum_roundings=_sum_roundings(schemes, form))
        return numerics.predicted_error(list(schemes), pb.K, pb.acc)
    except ValueError:
        return None


def _sum_roundings(schemes: Sequence[str], form: str) -> int:
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
                                         _sum_roundings(schemes, form))
    if sums != "f32":
        return sums, "input"
    if not narrow_in and pb.lhs == "f32" and pb.rhs == "f32":
        return sums, "f32"
    if form != "per-product" or len(schemes) > 1:
        return sums, "f32"
    st = scheme_stats(schemes[0])
    return sums, product_operands(profile, pb.lhs, pb.M // st.m, pb.N // st.n, pb.K // st.k,
                                  pb.products)


_CACHE: Dict[tuple, Decision] = {}


def decide(pb: Problem, profile: Optional[Profile] = None, *, levels: Optional[int] = None,
           forms: Optional[Sequence[str]] = None, edges: Sequence[str] = EDGES,
           budget: Optional[float] = None, forced: Optional[Sequence[str]] = None,
           min_gain: float = MIN_GAIN, kernel_budget: Optional[float] = None,
           blocking: bool = True) -> Decision:
    """Rank classical and LCMA plans for one contraction and pick one.

    Args:
        pb: the contraction (:class:`Problem`: sizes in elements, element types).
        profile: the target (default: :func:`load_profile` ``("host")``).
        levels: exact number of levels, or ``None`` for 1..:data:`MAX_AUTO_LEVELS`.
        forms: forms allowed (``per-product``, ``grouped``, ``kernel``; ``None``:
            the profile's :attr:`Profile.plan_forms`).
        edges: edge strategies allowed (``peel``, ``pad``).
        budget: max predicted relative error of a float contraction (``None``:
            no limit); plans over it are skipped.
        forced: per-level scheme names the user forced: evaluated and
            returned as the choice (the ranking still fills the alternatives).
        min_gain: required predicted gain over classical (fraction).
        kernel_budget: the error budget of ``kernel``-form plans (their error
            is :func:`falcon_mlir.decision.numerics.kernel_plan_error`; ``None``:
            ``budget``).
        blocking: consider classical blocking plans, alone and under LCMA
            levels (where the profile and the result type allow them);
            ``False``: IREE's GEMM is the only classical plan.

    Returns:
        :class:`Decision` (the chosen estimate, classical's, alternatives, reason).

    Raises:
        falcon_mlir.catalog.UnknownSchemeError: a forced scheme is unknown.
    """
    profile = profile or load_profile("host")
    if forms is None:
        forms = profile.plan_forms
    key = (pb, json.dumps(profile.to_dict(), sort_keys=True), levels, tuple(forms),
           tuple(edges), budget, tuple(forced) if forced else None, min_gain, kernel_budget,
           blocking)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    budgets = {"kernel": budget if kernel_budget is None else kernel_budget}
    d = _decide(pb, profile, levels, tuple(forms), tuple(edges), (budget, budgets), forced, min_gain,
                blocking)
    if len(_CACHE) > 4096:
        _CACHE.clear()
    _CACHE[key] = d
    return d


def _decide(pb, profile, levels, forms, edges, budget, forced, min_gain, blocking=True) -> Decision:
    cm = CostModel(profile)
    classical = cm.classical(pb)
    dec = Decision(classical, classical, profile=profile.name)
    if profile.min_gain is not None and min_gain == MIN_GAIN:
        min_gain = profile.min_gain
    if _settled(dec, cm, pb, profile, forms, edges, forced, min_gain, blocking):
        return dec
    search = _Search(cm, pb, profile, forms, edges, budget[0])
    search.blocking = blocking and _blocking_ok(profile, forms, pb)
    if search.blocking:
        dec.blocked = _best_blocked(cm, pb, profile, min_gain)
    seen = search.run(levels)
    allowed_levels = [levels] if levels else list(range(1, _max_auto(profile) + 1))
    cands = sorted((e for (s, f, _), e in seen.items() if lcma_levels(s) in allowed_levels
                    and f in forms), key=lambda e: (e.seconds, len(e.schemes)))
    dec.candidates = len(seen)
    _pick(dec, cands, pb, profile, budget, min_gain,
          _narrow_sums_left_out(cm, pb, profile, levels, forms, edges, budget[0]),
          _unfit_text(search.unfit, allowed_levels, forms))
    return dec


def _unfit_text(unfit: Dict[tuple, str], allowed_levels, forms) -> Optional[str]:
    """``12 kernel-form plans left out; strassen+strassen: <why>``: the plans of the allowed levels and
    forms that the target's kernels cannot run (:meth:`CostModel.unfit`), with the reason of the one with
    the fewest products (the first found among equals), or ``None`` where there are none."""
    out = [(s, f, why) for (s, f), why in unfit.items() if lcma_levels(s) in allowed_levels and f in forms]
    if not out:
        return None
    s, f, why = min(out, key=lambda t: math.prod(scheme_stats(x).R for x in t[0]))
    return f"{len(out)} {f}-form plan{'s' if len(out) > 1 else ''} left out; {'+'.join(s)}: {why}"


def _narrow_sums_left_out(cm, pb, profile, levels, forms, edges, budget) -> Optional[tuple]:
    """``(estimate, budget)`` of the fastest plan with input-type sums on a
    bf16/f16 result that the budget left out, or ``None``. With ``sums=auto``
    :func:`plan_rounding` prices a plan with f32 sums where its input-type
    sums would exceed the budget, so such plans never reach :func:`_pick`;
    this searches them once more without a budget so that the reason can name
    the faster plan the error budget cost (the x86 host: bf16-sum Strassen
    predicted 1.73x on 1024 x 4096 x 4096, error 8.7e-3 over 5.9e-3)."""
    from falcon_mlir.decision import numerics

    if (budget is None or pb.sums != "auto" or pb.lhs != pb.rhs
            or not numerics.is_narrow_result(pb.acc) or not numerics.is_narrow_result(pb.lhs)):
        return None
    seen = _Search(cm, pb, profile, forms, edges, None).run(levels)
    allowed = [levels] if levels else list(range(1, _max_auto(profile) + 1))
    for e in sorted((e for (s, f, _), e in seen.items() if len(s) in allowed and f in forms
                     and f != "kernel" and e.sums not in (None, "f32")), key=lambda e: e.seconds):
        if e.compile_seconds > long_compile_seconds(e.form):
            continue
        e.error = _error(e.schemes, pb, e.form, e.sums)
        if e.error is None or e.error > budget:
            return e, budget
        return None  # the fastest such plan fits: the search with the budget had it
    return None


def _ms(e: Estimate) -> str:
    return f"{e.seconds * 1e3:.3g} ms"


def _blocking_ok(profile: Profile, forms, pb: Problem) -> bool:
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


def _blocking_formats(pb: Problem, profile: Profile, inner=()) -> list:
    """The blocking formats (:data:`BLOCKING_FORMATS` alone, :data:`BASE_FORMATS`
    under the levels ``inner``) whose blocks fit ``pb`` and follow the
    profile's block rules (:func:`_aligned`)."""
    out = []
    for f in (BASE_FORMATS if inner else BLOCKING_FORMATS):
        name = f"{f[0]}x{f[1]}x{f[2]}:{f[0] * f[1] * f[2]}"
        if _fits_all(pb, tuple(inner) + (name,)) and _aligned(
                pb, tuple(inner) + (name,), profile.align, profile.pow2_blocks,
                profile.min_block_k, profile.min_block_m):
            out.append(f)
    return out


def _fits_all(pb: Problem, schemes) -> bool:
    """Whether every level's blocks fit the sizes left by the levels above."""
    M, N, K = pb.M, pb.N, pb.K
    for nm in schemes:
        st = scheme_stats(nm)
        if M < st.m or N < st.n or K < st.k:
            return False
        M, N, K = M // st.m, N // st.n, K // st.k
    return True


def _best_blocked(cm: CostModel, pb: Problem, profile: Profile,
                  min_gain: float) -> Optional[Estimate]:
    """The fastest classical blocking plan of ``pb`` (alone, one level), if it
    is predicted ``min_gain`` faster than IREE's GEMM and compiles within
    :data:`LONG_COMPILE_SECONDS`; else ``None``. Its error is classical's."""
    budget_free = [e for e in cm.blocking_plans(pb, _blocking_formats(pb, profile))
                   if e.compile_seconds <= LONG_COMPILE_SECONDS]
    if not budget_free:
        return None
    best = min(budget_free, key=lambda e: (e.seconds, scheme_stats(e.schemes[0]).R))
    if best.seconds * (1.0 + min_gain) > cm.classical(pb).seconds:
        return None
    best.error = _error(best.schemes, pb, best.form, best.sums)
    return best


def _blocked_text(dec: Decision) -> str:
    """``blocking 2x2x2:8 318 ms (1.73x IREE's GEMM 548 ms)``: the best classical plan."""
    b = dec.blocked
    return (f"blocking {b.schemes[0]} {_ms(b)} "
            f"({dec.classical.seconds / b.seconds:.2f}x IREE's GEMM {_ms(dec.classical)})")


def _keep_classical(dec: Decision, reason: str) -> None:
    """Settle ``dec`` on the best classical plan: IREE's GEMM, or the blocking
    plan :attr:`Decision.blocked` (then ``reason``, which ends in ``; classical``,
    ends in ``; classical blocking ...`` instead)."""
    if dec.blocked is None:
        dec.reason = reason
        return
    dec.choice = dec.blocked
    base = reason[:-len("; classical")] if reason.endswith("; classical") else reason
    dec.reason = f"{base}; classical {_blocked_text(dec)}"


def _max_auto(profile: Profile) -> int:
    return min(MAX_AUTO_LEVELS, profile.max_levels or MAX_AUTO_LEVELS)


def _settled(dec: Decision, cm: CostModel, pb: Problem, profile: Profile, forms, edges,
             forced, min_gain: float = MIN_GAIN, blocking: bool = True) -> bool:
    """Decide without a search where none is needed (a forced scheme, integer
    or f64 accumulators, a memory-bound contraction); ``dec`` is filled in
    (for a forced float plan also :attr:`Decision.blocked`, the reference of
    its algebra gain)."""
    acc = str(pb.acc)
    is_float = acc.startswith(("f", "bf"))
    classical = dec.classical
    if forced:
        form = forms[0] if len(forms) == 1 else "per-product"
        est = cm.plan(pb, tuple(forced), edges[0], form,
                      plan_rounding(pb, profile, tuple(forced), form, None))
        est.error = _error(forced, pb, form, est.sums) if is_float else None
        dec.choice = est
        if is_float and blocking and _blocking_ok(profile, ("per-product",), pb):
            dec.blocked = _best_blocked(cm, pb, profile, min_gain)
        dec.reason = (f"scheme forced by option ({', '.join(forced)}); predicted {_ms(est)} "
                      f"vs classical {_ms(classical)}" + (f"; {est.unfit}" if est.unfit else ""))
        return True
    if not is_float:
        dec.reason = "auto: integer contractions stay classical unless a scheme is forced"
        return True
    if acc == "f64":
        dec.reason = "auto: f64 stays classical unless a scheme is forced"
        return True
    balance = profile.peak_rate(pb.lhs) / profile.bandwidth
    intensity = pb.intensity()
    if intensity <= balance:
        dec.reason = (f"memory-bound: intensity {intensity:.3g} FLOP/byte <= machine balance "
                      f"{balance:.3g} FLOP/byte on {profile.name}; classical")
        return True
    return False


class _Search:
    """The candidate plans of one contraction: every scheme and order at level
    1, then deeper levels from the best :data:`BEAM` of the level before, in
    the allowed forms and edge strategies (``seen``: (schemes, form, edge) ->
    estimate)."""

    def __init__(self, cm: CostModel, pb: Problem, profile: Profile, forms, edges,
                 budget: Optional[float] = None):
        self.cm, self.pb, self.profile, self.forms, self.edges = cm, pb, profile, forms, edges
        self.budget = budget  # a bf16/f16 result's sums: the input type where it fits
        self.seen: Dict[tuple, Estimate] = {}
        self.best: Dict[tuple, Estimate] = {}   # fastest estimate per scheme tuple
        self.rprod: Dict[tuple, int] = {}       # products of a scheme tuple
        self.blocking = False                    # also LCMA levels over a blocking base
        self.unfit: Dict[tuple, str] = {}        # (schemes, form) the target's kernels cannot run -> why

    def fits(self, schemes: tuple, form: str) -> bool:
        """Whether the target can run ``schemes`` in ``form`` (:meth:`CostModel.unfit`); if not, the
        reason is kept in :attr:`unfit` (the decision names it where nothing else is left)."""
        k = (schemes, form)
        if k not in self.unfit:
            why = self.cm.unfit(self.pb, schemes, form)
            if why is None:
                return True
            self.unfit[k] = why
        return False

    def aligned(self, schemes) -> bool:
        p = self.profile
        return _aligned(self.pb, schemes, p.align, p.pow2_blocks, p.min_block_k, p.min_block_m)

    def consider(self, schemes: tuple, form: str, edge_list=None) -> None:
        if not self.aligned(schemes) or not self.fits(schemes, form):
            return
        for edge in edge_list or self.edges:
            k = (schemes, form, edge)
            if k in self.seen:
                if not self.seen[k].parts.get("edges"):
                    break  # divisible: the other edge strategy would be the same code
                continue
            est = self.cm.plan(self.pb, schemes, edge, form,
                               plan_rounding(self.pb, self.profile, schemes, form, self.budget))
            self.seen[k] = est
            if schemes not in self.best or est.seconds < self.best[schemes].seconds:
                self.best[schemes] = est
            if not est.parts.get("edges"):
                break  # divisible at every level: the other edge strategy is the same plan

    def r_of(self, s: tuple) -> int:
        if s not in self.rprod:
            self.rprod[s] = math.prod(scheme_stats(x).R for x in s)
        return self.rprod[s]

    def level_one(self) -> list:
        """Level 1: every scheme and order with the first edge strategy; the
        other edge strategy and the grouped form for the best ones (returned)."""
        forms = self.forms
        names = [n for n in single_level_names() if _fits(self.pb, (n,))]
        if self.profile.auto_schemes is not None:
            names = [n for n in names if n in self.profile.auto_schemes]
        names = [n for n in names if self.aligned((n,))]
        if "per-product" not in forms and "grouped" not in forms:  # kernel form only: what the kernels run
            names = [n for n in names if self.fits((n,), "kernel")]
        if "per-product" in forms:
            for n in names:
                self.consider((n,), "per-product", self.edges[:1])
            ranked = sorted(names, key=lambda n: self.best[(n,)].seconds)
        else:
            ranked = sorted(names, key=lambda n: scheme_stats(n).R / (scheme_stats(n).m *
                                                                      scheme_stats(n).k *
                                                                      scheme_stats(n).n))
        top = list(dict.fromkeys(ranked[:BEAM] + [n for n in ("strassen", "winograd")
                                                  if n in names]))
        for n in top:
            if "per-product" in forms:
                self.consider((n,), "per-product")
            if "grouped" in forms and _grouped_ok((n,)):
                self.consider((n,), "grouped")
            if "kernel" in forms:
                self.consider((n,), "kernel", ("pad",))
        return top

    def run(self, levels: Optional[int]) -> Dict[tuple, Estimate]:
        """Search up to ``levels`` (or the profile's auto maximum) levels."""
        allowed_levels = [levels] if levels else list(range(1, _max_auto(self.profile) + 1))
        max_l = max(allowed_levels)
        top = self.level_one()
        prefixes = [(n,) for n in top]
        for L in range(2, max_l + 1):
            if not top:
                break
            for pre in prefixes:
                for n in top:
                    s = pre + (n,)
                    if self.r_of(s) > MAX_PRODUCTS:
                        continue
                    if "per-product" in self.forms:
                        self.consider(s, "per-product")
                    if "grouped" in self.forms and _grouped_ok(s):
                        self.consider(s, "grouped")
                    if "kernel" in self.forms:
                        self.consider(s, "kernel", ("pad",))
            min_r = min(scheme_stats(n).R for n in top)
            level_l = sorted((s for s in self.best
                              if len(s) == L and self.r_of(s) * min_r <= MAX_PRODUCTS),
                             key=lambda s: self.best[s].seconds)
            prefixes = level_l[:BEAM]
        if self.blocking:
            self.over_blocking(top)
        return self.seen

    def over_blocking(self, top) -> None:
        """One LCMA level over a classical blocking base: ``(n, "mxkxn:R")`` for
        each scheme ``n`` in ``top`` and each blocking format its blocks take
        (per-product; the blocking runs inside each of the R products). Kept
        only where predicted :data:`BLOCKING_BASE_GAIN` faster than ``n``
        alone (else the alternatives fill with equal plans)."""
        for n in top:
            alone = self.best.get((n,))
            for f in _blocking_formats(self.pb, self.profile, (n,)):
                s = (n, f"{f[0]}x{f[1]}x{f[2]}:{f[0] * f[1] * f[2]}")
                if self.r_of(s) > MAX_PRODUCTS or (s, "per-product", "peel") in self.seen:
                    continue
                est = self.cm.plan(self.pb, s, "peel", "per-product",
                                   plan_rounding(self.pb, self.profile, s, "per-product", self.budget))
                if alone is None or est.seconds * (1.0 + BLOCKING_BASE_GAIN) <= alone.seconds:
                    self.seen[(s, "per-product", "peel")] = est
                    self.best[s] = est


def _sums_text(e: Estimate) -> str:
    """`` with bf16 sums`` (the type of a narrow-result plan's combined operands), or ``""``."""
    return f" with {e.sums} sums" if e.sums else ""


def _over_text(first_over, classical: Estimate, min_gain: float) -> str:
    """The clause a speed verdict adds when a plan that would have been
    chosen (``min_gain`` faster than classical) was left out for its predicted
    error (``first_over``: ``(estimate, budget)`` or ``None``): the verdict then
    holds only within the budget, and the reason gives both numbers (a bf16
    result's plans with bf16 sums on the x86 host: predicted 1.7-2.0x, error
    8.7e-3 to 1.1e-2 over the 5.9e-3 budget)."""
    if first_over is None or first_over[0].seconds * (1.0 + min_gain) > classical.seconds:
        return ""
    e, b = first_over
    err = "unknown" if e.error is None else f"{e.error:.1e}"
    return (f"; over max-error {b:.1e}: {e.label()}{_sums_text(e)} predicted {_ms(e)} "
            f"({classical.seconds / e.seconds:.2f}x), error {err}")


def memory_room(profile: Profile, pb: Problem) -> Optional[float]:
    """Bytes a plan's temporaries may take on ``profile`` beside ``pb``'s A, B
    and C: :data:`MEMORY_FRACTION` of the profile's ``memory`` less the
    operands (negative where they alone do not fit); ``None`` where the
    profile states no memory (CPU profiles)."""
    return None if profile.memory is None else MEMORY_FRACTION * profile.memory - pb.operand_bytes


def _gib(n: float) -> str:
    """Bytes ``n`` as GiB for a reason line (three significant digits: a 1-byte profile is not "0 GiB")."""
    return f"{n / 2**30:.3g} GiB"


def _pick(dec: Decision, cands: list, pb: Problem, profile: Profile, budget, min_gain,
          left_out: Optional[tuple] = None, unfit: Optional[str] = None) -> None:
    """Fill ``dec`` from the candidates (fastest first): the fastest within the
    error budget if it beats classical by the margin, else classical.
    ``left_out``: ``(estimate, budget)`` of a plan the budget left out before
    the candidates were formed (:func:`_narrow_sums_left_out`), named in the
    reason like an over-budget candidate. ``unfit``: the plans the target's
    kernels cannot run (:func:`_unfit_text`), named where no plan is left."""
    classical = dec.classical
    align = profile.align
    ok = []
    over = slow = big = 0
    first_over = left_out  # the fastest plan the budget left out (candidates come fastest first)
    budget, per_form = budget
    room = memory_room(profile, pb)
    if room is not None and room <= 0:  # no plan can fit: say so, not that every plan's temporaries are too big
        dec.reason = (f"auto: A, B and C alone ({_gib(pb.operand_bytes)}) exceed {MEMORY_FRACTION:.0%} of the "
                      f"{_gib(profile.memory)} of {profile.name}; classical")
        return
    for e in cands:
        if e.compile_seconds > long_compile_seconds(e.form):
            slow += 1  # would compile for minutes (compile_cost); never chosen by auto
            continue
        if room is not None and e.temp_bytes > room:
            big += 1  # its temporaries would not fit the device's memory beside A, B and C
            continue
        e.error = _error(e.schemes, pb, e.form, e.sums)
        b = per_form.get(e.form, budget)
        if b is not None and (e.error is None or e.error > b):
            over += 1
            over_budget = b
            if first_over is None or e.seconds < first_over[0].seconds:
                first_over = (e, b)
            continue
        ok.append(e)
        if len(ok) == 4:
            break
    if not ok and big and not over:
        dec.reason = (f"auto: every fitting plan's temporaries exceed the {_gib(profile.memory)} "
                      f"of {profile.name} beside A, B and C ({big} plans); classical")
        return
    if not ok and unfit and not (over or big or slow):
        _keep_classical(dec, f"auto: no plan runs on the kernels of {profile.name} ({unfit}); classical")
        return
    if not ok and slow and not over:
        _keep_classical(dec, f"auto: every fitting plan would compile for over "
                             f"{long_compile_seconds(cands[0].form):.0f} s ({slow} plans); classical")
        return
    if not ok:
        _keep_classical(dec, f"auto: no plan meets max-error {over_budget:.1e} ({over} over it); classical"
                      if over else
                      (f"auto: no plan divides M, N, K into blocks that are multiples of {align}"
                       + (", powers of two" if profile.pow2_blocks else "")
                       + (f", K blocks >= {profile.min_block_k}" if profile.min_block_k > 1 else "")
                       + (f", M blocks >= {profile.min_block_m}" if profile.min_block_m > 1 else "")
                       + f" (the {profile.name} profile's block rules); classical"
                       if align > 1 or profile.pow2_blocks or profile.min_block_k > 1
                       or profile.min_block_m > 1
                       else "auto: no plan fits the shape; classical"))
        return
    best = ok[0]
    if best.seconds * (1.0 + min_gain) > classical.seconds:
        dec.alternatives = ok[:3]
        _keep_classical(dec, f"auto: best plan {best.label()}{_sums_text(best)} predicted {_ms(best)} "
                             f"vs classical {_ms(classical)} on {profile.name} (not {min_gain:.0%} faster)"
                             f"{_over_text(first_over, classical, min_gain)}; classical")
        return
    if dec.blocked is not None and best.seconds * (1.0 + ALGEBRA_MIN_GAIN) > dec.blocked.seconds:
        dec.alternatives = ok[:3]
        _keep_classical(dec, f"auto: best plan {best.label()}{_sums_text(best)} predicted {_ms(best)}, "
                             f"{classical.seconds / best.seconds:.2f}x IREE's GEMM but not "
                             f"{ALGEBRA_MIN_GAIN:.0%} faster than classical blocking "
                             f"{dec.blocked.schemes[0]} {_ms(dec.blocked)} on {profile.name}; classical")
        return
    dec.choice = best
    dec.alternatives = ok[1:4]
    dec.reason = (f"auto: {best.label()} predicted {_ms(best)} vs classical {_ms(classical)} "
                  f"({classical.seconds / best.seconds:.2f}x) on {profile.name}")
    if dec.blocked is not None:
        dec.reason += (f"; best classical plan {_blocked_text(dec)}: algebra gain "
                       f"{dec.blocked.seconds / best.seconds:.2f}x")
