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
   blocks under ``min_block_k`` or M blocks under ``min_block_m``, or under
   ``min_block_m_deep`` where the K block is at least the N block) at
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
classical GEMM is falcon's own kernel: :func:`.blocking.blocking_ok`): IREE's one GEMM and
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

(Here: the decision and the reason line that names what the search left out
and why. The candidates are formed in :mod:`.search`, the rules a plan must
meet and its operands' types in :mod:`.rules`, the classical blocking
references in :mod:`.blocking`; the prices are in :mod:`.cost`, the errors
in :mod:`.numerics`, the compile times in :mod:`.compile_cost`.)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from falcon_mlir.dialects.plan import EDGES, FORMS  # the plan's edge strategies and forms

from .blocking import BASE_FORMATS, BLOCKING_FORMATS, best_blocked, blocking_ok
from .compile_cost import long_compile_seconds
from .cost import CostModel, Estimate, Problem
from .constant_b import constant_b_profile, decide_constant_b, kernel_serves_constant_b
from .profile import Profile, ProfileError, load_profile, preset_names
from .rules import plan_error, plan_rounding, product_operands
from .scheme_stats import lcma_levels, scheme_stats
from .search import BEAM, MAX_AUTO_LEVELS, PlanSearch, max_auto_levels

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
#: The predicted gain (fraction) an LCMA plan needs over the best classical
#: blocking plan, beside the profile's ``min_gain`` over IREE's GEMM. Both are
#: priced from the same GEMM-rate table at the same block sizes, so the
#: model's error on the products (what ``min_gain`` covers: x86 20%) is shared;
#: what the algebra must pay for is its combines, priced from the measured add
#: rate. Measured on the x86 host at 4096^3 f32 (issue 14, under load):
#: Strassen 703-744 ms, 2x2x2 blocks of 2048 772-861 ms, predicted 300 / 318 ms.
ALGEBRA_MIN_GAIN = MIN_GAIN


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
    search = PlanSearch(cm, pb, profile, forms, edges, budget[0])
    search.blocking = blocking and blocking_ok(profile, forms, pb)
    if search.blocking:
        dec.blocked = best_blocked(cm, pb, profile, min_gain)
    seen = search.run(levels)
    allowed_levels = [levels] if levels else list(range(1, max_auto_levels(profile) + 1))
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
    seen = PlanSearch(cm, pb, profile, forms, edges, None).run(levels)
    allowed = [levels] if levels else list(range(1, max_auto_levels(profile) + 1))
    for e in sorted((e for (s, f, _), e in seen.items() if len(s) in allowed and f in forms
                     and f != "kernel" and e.sums not in (None, "f32")), key=lambda e: e.seconds):
        if e.compile_seconds > long_compile_seconds(e.form):
            continue
        e.error = plan_error(e.schemes, pb, e.form, e.sums)
        if e.error is None or e.error > budget:
            return e, budget
        return None  # the fastest such plan fits: the search with the budget had it
    return None


def _ms(e: Estimate) -> str:
    return f"{e.seconds * 1e3:.3g} ms"


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
        est.error = plan_error(forced, pb, form, est.sums) if is_float else None
        dec.choice = est
        if is_float and blocking and blocking_ok(profile, ("per-product",), pb):
            dec.blocked = best_blocked(cm, pb, profile, min_gain)
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
        e.error = plan_error(e.schemes, pb, e.form, e.sums)
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
                       + (f", M blocks >= {profile.min_block_m_deep} where K blocks >= N blocks"
                          if profile.min_block_m_deep > 1 else "")
                       + f" (the {profile.name} profile's block rules); classical"
                       if align > 1 or profile.pow2_blocks or profile.min_block_k > 1
                       or profile.min_block_m > 1 or profile.min_block_m_deep > 1
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
