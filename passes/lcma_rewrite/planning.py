"""Planning: which plan (if any) one contraction gets, and what is predicted for it.

The plan comes from, in this order: a ``falcon.plan`` attribute on the op
(:mod:`falcon_mlir.dialects.plan`), a scheme forced by the options, or the
cost-model decision (:mod:`falcon_mlir.decision`) on the options' profile.
Every plan is checked against the shape (the first level's blocks must fit
M, K, N) and numerics (integers: no overflow anywhere; floats: predicted
error within the budget) before it is taken.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

from falcon_mlir import decision
from falcon_mlir.decision.cost import MAX_GROUPED_TERMS, MAX_PRODUCTS
from falcon_mlir.decision.integer_bounds import integer_bound_ok
from falcon_mlir.decision.rules import sum_roundings
from falcon_mlir.decision.scheme_stats import scheme_stats
from falcon_mlir.dialects.plan import OPERAND_TYPES, PLAN_ATTR, Plan, PlanError
from falcon_mlir.ir.builders import bit_width, derives_from_constants
from falcon_mlir.ir.contraction import Contraction

from .options import LcmaOptions

__all__ = ["plan_for", "decision_for", "problem_of", "schemes_fit", "numerics_check",
           "predicted_time", "predicted_errors", "grouped_terms", "default_budget", "sums_type",
           "plan_error", "rounding_entry", "sum_roundings", "products_type", "operands_of",
           "operands_entry", "transposed_operands"]


def schemes_fit(c: Contraction, schemes: tuple, form: str = "per-product") -> Optional[str]:
    """Why ``schemes`` cannot serve ``c`` in ``form`` (``None`` if they can).

    The first level's blocks must fit in (M, K, N); in the grouped form all
    levels are applied at once, so the composed scheme's blocks must fit.
    """
    from falcon_mlir.catalog import UnknownSchemeError, get_scheme

    total = 1
    for name in schemes:
        try:
            s = get_scheme(name)
        except UnknownSchemeError as e:
            return f"{e}; kept classical"
        total *= s.R
        if total > MAX_PRODUCTS:
            return (f"plan {'+'.join(schemes)} has over {MAX_PRODUCTS} products "
                    f"({total} and counting); kept classical")
        if c.is_integer and not s.is_integral:
            return (f"scheme {name} has non-integer coefficients and {c.acc_type} is an integer "
                    "type; kept classical")
    s = get_scheme("*".join(schemes) if form in ("grouped", "kernel") else schemes[0])
    if c.M < s.m or c.K < s.k or c.N < s.n:
        return (f"M x K x N = {c.M} x {c.K} x {c.N} is smaller than the scheme's "
                f"{s.m}x{s.k}x{s.n} blocks; kept classical")
    return None


def numerics_check(c: Contraction, schemes: tuple, budget: Optional[float],
                   form: str = "per-product", sums: Optional[str] = None,
                   operands: Optional[str] = None) -> Optional[str]:
    """Why ``schemes`` are numerically unfit for ``c`` (``None`` if fit).

    Integers: exactness (no overflow anywhere, worst case over all inputs).
    Floats: the predicted error (of ``form``; a bf16/f16 result with its
    combined operands in ``sums``; a kernel-form plan with its operands in
    ``operands``) against ``budget`` (no budget: always fit).
    """
    if c.is_integer:
        ok, why = integer_bound_ok(list(schemes), c.K, bit_width(c.lhs_type),
                                   bit_width(c.acc_type), rhs_bits=bit_width(c.rhs_type))
        return None if ok else f"{why}; kept classical"
    if budget is None or c.K < 1:
        return None
    pred = plan_error(c, schemes, form, sums, operands)
    if pred > budget:
        return (f"predicted error {pred:.1e} of {'+'.join(schemes)} exceeds max-error "
                f"{budget:.1e}; kept classical")
    return None


def problem_of(c: Contraction, options: Optional[LcmaOptions] = None) -> "decision.Problem":
    """The cost model's view of contraction ``c`` (sizes, element types, constant B, transposed
    operands; with ``options`` their ``sums`` and ``products`` for a bf16/f16 result)."""
    const_rhs = derives_from_constants(c.op.operands[1])
    extra = {} if options is None else {"sums": options.sums, "products": options.products,
                                        "operands": options.operands}
    return decision.Problem(M=c.M, N=c.N, K=c.K, batch=math.prod(c.batch) if c.batch else 1,
                            lhs=str(c.lhs_type), rhs=str(c.rhs_type), acc=str(c.acc_type),
                            const_rhs=const_rhs, transposed=transposed_operands(c), **extra)


def transposed_operands(c: Contraction) -> tuple:
    """The operands of ``c`` stored transposed: ``"lhs"`` (A as K x M), ``"rhs"`` (B as N x K),
    ``"out"`` (C as N x M); and ``"batch"`` where its batch dimensions are not the first dimensions of
    A, B and C in one order (:attr:`falcon_mlir.decision.Problem.transposed`)."""
    out = c.m_dim >= 0 and c.n_dim in c.out_dims and c.out_dims.index(c.m_dim) > c.out_dims.index(c.n_dim)
    lead = c.out_dims[:len(c.batch_dims)]
    batch = bool(c.batch_dims) and (sorted(lead) != sorted(c.batch_dims) or
                                    any(ds[:len(lead)] != lead for ds in (c.lhs_dims, c.rhs_dims)))
    return tuple(c.transposed) + (("out",) if out else ()) + (("batch",) if batch else ())


def decision_for(c: Contraction, options: LcmaOptions, forced: Optional[tuple] = None,
                 form: Optional[str] = None, edge: Optional[str] = None,
                 operands: Optional[str] = None) -> "decision.Decision":
    """The cost-model decision for ``c`` under ``options`` (see :func:`falcon_mlir.decision.decide`).

    ``forced``/``form``/``edge``/``operands`` (a kernel-form plan's operand
    type) evaluate a given plan instead of choosing one.

    Raises:
        ProfileError: the options' profile does not load.
    """
    from falcon_mlir.decision import numerics

    profile = decision.load_profile(options.profile)
    pb = problem_of(c, options)
    wanted = form if forced is not None else (None if options.form == "auto" else options.form)
    const_b = decision.constant_b_profile(profile) if wanted not in (None, "kernel") and pb.const_rhs else None
    if const_b:  # a given IREE form: priced on IREE's code (decide_constant_b below for auto)
        profile = const_b
    if forced is not None:
        # the sums this plan is emitted with (sums_type: under the default budget for auto)
        sums = sums_type(c, Plan(tuple(forced), edge=edge or "peel", form=form or "per-product"),
                         options)
        if sums is not None:
            pb = dataclasses.replace(pb, sums="f32" if sums == "f32" else "input")
        if operands is not None:
            pb = dataclasses.replace(pb, operands="input" if operands == str(c.lhs_type) else operands)
        return decision.decide(pb, profile, forced=forced, forms=(form or "per-product",),
                               edges=(edge or "peel",))
    budget = options.max_error if options.max_error is not None else default_budget(c)
    kernel_budget = options.max_error if options.max_error is not None else \
        numerics.kernel_max_error(str(c.acc_type))
    edges = decision.EDGES if options.edge == "auto" else (options.edge,)
    if options.form == "auto":  # a constant B under falcon's kernel profile: the faster of both sides
        d = decision.decide_constant_b(pb, profile, decision.decide, levels=options.levels, edges=edges,
                                       budget=budget, kernel_budget=kernel_budget)
        if d is not None:
            return d
    forms = profile.plan_forms if options.form == "auto" else (options.form,)
    d = decision.decide(pb, profile, levels=options.levels, forms=forms, edges=edges,
                        budget=budget, kernel_budget=kernel_budget)
    if const_b:
        d = dataclasses.replace(d, reason=f"constant B: decided on IREE's code (profile {profile.name}), "
                                          f"which packs and combines B once, at module load; {d.reason}")
    return d


def default_budget(c: Contraction) -> Optional[float]:
    """The error budget of auto plans on ``c`` without ``max-error``: for a
    bf16/f16 result 1.5 times classical's predicted error on the same contraction
    (:func:`falcon_mlir.decision.numerics.narrow_max_error`), else the
    per-type default (:func:`~falcon_mlir.decision.numerics.default_max_error`)."""
    from falcon_mlir.decision import numerics

    acc = str(c.acc_type)
    if c.is_float and numerics.is_narrow_result(acc) and c.K >= 1:
        return numerics.narrow_max_error(c.K, acc)
    return numerics.default_max_error(acc)


def sums_type(c: Contraction, plan: Optional[Plan], options: LcmaOptions) -> Optional[str]:
    """The type the combined operands of ``plan`` on ``c`` are formed in, for a
    bf16/f16 result (per-product or grouped form): ``options.sums`` (``f32`` or
    ``input``), or with ``auto`` the input type where its
    rounding keeps the plan within the budget (``max-error``, else
    :func:`default_budget`), else ``"f32"``
    (:func:`falcon_mlir.decision.numerics.narrow_sums_type`).  ``None`` where
    the plan is not emitted with an f32 accumulator (no plan, the kernel
    form, a result that is not narrow).  A contraction whose inputs are not
    both of one bf16/f16 type forms them in f32."""
    from falcon_mlir.decision import numerics

    if plan is None or plan.form == "kernel" or not c.is_float \
            or not numerics.is_narrow_result(str(c.acc_type)) or c.K < 1:
        return None
    if str(c.lhs_type) != str(c.rhs_type) \
            or not numerics.is_narrow_result(str(c.lhs_type)) or options.sums == "f32":
        return "f32"
    if options.sums == "input":
        return str(c.lhs_type)
    budget = options.max_error if options.max_error is not None else default_budget(c)
    return numerics.narrow_sums_type(list(plan.schemes), c.K, str(c.lhs_type),
                                     str(c.acc_type), budget, sum_roundings(plan.schemes, plan.form))


def products_type(c: Contraction, plan: Optional[Plan], options: LcmaOptions,
                  sums: Optional[str]) -> Optional[str]:
    """The operands of ``plan``'s products on a bf16/f16 result whose combined
    operands are formed in ``sums`` (:func:`sums_type`): ``"input"`` (input-type
    sums: every product reads two input-type operands), ``"f32"`` (every
    product f32 x f32: blocks read alone extended to f32 once; the grouped and
    stacked forms form all operands in f32) or ``"mixed"`` (blocks read alone
    stay in the input type). ``options.products`` or, with ``auto``, the
    profile's faster GEMM (:func:`falcon_mlir.decision.product_operands`).
    ``None`` where ``sums`` is."""
    if sums is None or plan is None:
        return None
    if sums != "f32":
        return "input"
    lhs, rhs = str(c.lhs_type), str(c.rhs_type)
    if lhs == "f32" and rhs == "f32":
        return "f32"
    if plan.form != "per-product" or len(plan.schemes) > 1:
        return "f32"
    if options.products != "auto":
        return options.products
    from falcon_mlir.catalog import get_scheme

    try:
        profile = decision.load_profile(options.profile)
    except decision.ProfileError:
        return "mixed"
    s = get_scheme(plan.schemes[0])
    return decision.product_operands(profile, lhs, max(c.M // s.m, 1), max(c.N // s.n, 1),
                                     max(c.K // s.k, 1))


def rounding_entry(c: Contraction, sums: str, products: Optional[str] = None) -> dict:
    """The report's ``rounding`` of a plan on a bf16/f16 result: where it rounds
    (``products``: the products accumulate and are kept in f32) and, as
    ``product_operands``, what its products multiply (:func:`products_type`)."""
    lhs, rhs = str(c.lhs_type), str(c.rhs_type)
    operands = {"input": f"{lhs} x {rhs}",
                "f32": "f32 x f32" + (" (operands extended)" if "f32" not in (lhs, rhs)
                                      or lhs != rhs else ""),
                "mixed": f"f32 x f32 where both are combined, f32 x {lhs} (mixed) where one "
                         "block is read alone"}.get(products or "", None)
    entry = {"sums": sums, "products": "f32", "combine_c": "f32",
             "result": f"{c.acc_type}, once at the end"}
    if operands:
        entry["product_operands"] = operands
    return entry


def grouped_terms(schemes: tuple) -> int:
    """Most blocks a grouped combine (A, B or one C block) of the composed scheme reads."""
    return scheme_stats("*".join(schemes)).max_terms


def plan_for(c: Contraction, options: LcmaOptions) -> tuple:
    """The plan for one contraction: ``(Plan or None, reason)``.

    ``None`` means classical; the reason says why either way (one line).
    """
    if c.unsupported:
        return None, c.unsupported
    if PLAN_ATTR in c.op.attributes:
        try:
            plan = Plan.from_attribute(c.op.attributes[PLAN_ATTR])
        except PlanError as e:
            return None, str(e)
        if plan.form == "kernel":
            from falcon_mlir.decision import numerics

            why = kernel_inputs_unserved(c) or (
                plan.operands is not None and numerics.kernel_operands_unserved(str(c.lhs_type), plan.operands))
            if why:  # falcon-kernels would leave it to IREE without a word (i8, f64: a PlanError before)
                return None, why
            if plan.operands is None:
                plan = dataclasses.replace(plan, operands=operands_of(c, options)[0])
        why = schemes_fit(c, plan.schemes, plan.form) or \
            numerics_check(c, plan.schemes, options.max_error, plan.form,
                           sums_type(c, plan, options), plan.operands)
        return (None, why) if why else (plan, f"plan attached by {PLAN_ATTR}")
    if options.keeps_classical():
        return None, "scheme=classical: IREE's one GEMM (no blocking, no LCMA)"
    forced = options.forced_schemes()
    form = "per-product" if options.form == "auto" else options.form
    edge = options.edge_strategy()
    if forced is None:
        if min(c.M, c.N, c.K) < 1:  # (the pass replaces a K = 0 op by its init before asking)
            return None, ("auto: an empty reduction (K = 0) has no plan (lcma-rewrite replaces the op by "
                          "its init)" if c.empty_reduction else "auto: an empty result (M or N = 0) stays classical")
        d = decision_for(c, options)
        if d.choice.is_classical:
            return None, d.reason
        schemes, why = d.choice.schemes, d.reason
        form, edge = d.choice.form, d.choice.edge
    else:
        schemes, why = forced, f"scheme forced by option ({', '.join(forced)})"
    if form == "grouped" and grouped_terms(schemes) > MAX_GROUPED_TERMS:
        form = "per-product"
        why += (f"; per-product form: the grouped combines of {'*'.join(schemes)} would read "
                f"{grouped_terms(schemes)} blocks (at most {MAX_GROUPED_TERMS})")
    if form == "kernel" and (unserved := kernel_inputs_unserved(c)):
        return None, unserved
    operands = operands_of(c, options)[0] if form == "kernel" else None
    unfit = schemes_fit(c, schemes, form) or numerics_check(
        c, schemes, options.max_error if forced is not None else None, form,
        sums_type(c, Plan(tuple(schemes), edge=edge, form=form), options), operands)
    if unfit:
        return None, unfit
    if form == "kernel":
        edge = "pad"  # the generated kernels pad the blocks (falcon_mlir.kernels.lcma); nothing is peeled
    return Plan(tuple(schemes), edge=edge, form=form, operands=operands), why


def kernel_inputs_unserved(c: Contraction) -> Optional[str]:
    """``None`` where a kernel-form plan on ``c`` can name its operand type (f32,
    f16 or bf16 inputs of one type, what falcon's kernels take), else one line
    saying why not (i8, f64, two input types)."""
    lhs, rhs = str(c.lhs_type), str(c.rhs_type)
    if lhs == rhs and lhs in OPERAND_TYPES:
        return None
    return (f"{lhs} x {rhs} -> {c.acc_type}: a kernel-form plan needs f32, f16 or bf16 inputs of one type "
            "(what falcon's kernels take)")


def operands_of(c: Contraction, options: LcmaOptions) -> tuple:
    """``(type, why)``: the operand type of a kernel-form plan on ``c`` under the
    ``operands`` option (:func:`falcon_mlir.decision.numerics.kernel_operands`:
    auto is scaled f16 for bf16 inputs). Inputs of two types (which the kernels
    do not serve) keep the input type."""
    from falcon_mlir.decision import numerics

    lhs = str(c.lhs_type)
    if lhs != str(c.rhs_type) or not c.is_float:
        return lhs, "the input type"
    return numerics.kernel_operands(lhs, options.operands)


def operands_entry(c: Contraction, plan: Optional[Plan], options: LcmaOptions) -> Optional[dict]:
    """The report's ``operands`` of a kernel-form plan: ``{"type", "scaled", "why"}``
    (``scaled``: f16 operands of bf16 inputs, two absmax dispatches first);
    ``None`` for other plans."""
    if plan is None or plan.form != "kernel":
        return None
    lhs = str(c.lhs_type)
    t = plan.operands or operands_of(c, options)[0]
    try:
        named = PLAN_ATTR in c.op.attributes and \
            Plan.from_attribute(c.op.attributes[PLAN_ATTR]).operands is not None
    except PlanError:
        named = False
    why = f"{PLAN_ATTR} names operands = {t}" if named else operands_of(c, options)[1]
    return {"type": t, "scaled": t != lhs and lhs == "bf16", "why": why}


def predicted_time(c: Contraction, options: LcmaOptions, plan: Optional[Plan]) -> Optional[dict]:
    """Predicted seconds of classical, of the plan taken and of the next best
    alternatives (the report's ``predicted_time``; ``None`` where unsupported).
    Where a classical blocking plan beats IREE's GEMM (CPU profiles) also
    ``best_classical`` (``{"plan", "seconds"}``), ``blocking_gain`` (IREE's
    GEMM / best classical plan) and ``algebra_gain`` (best classical plan /
    the plan taken; 1.0 for the blocking plan itself)."""
    if c.unsupported or min(c.M, c.N, c.K) < 1:
        return None
    try:
        if plan is None or options.forced_schemes() is None and PLAN_ATTR not in c.op.attributes:
            d = decision_for(c, options)
            if plan is not None and d.choice.schemes != tuple(plan.schemes):
                d = decision_for(c, options, forced=plan.schemes, form=plan.form, edge=plan.edge,
                                 operands=plan.operands)
        else:
            d = decision_for(c, options, forced=plan.schemes, form=plan.form, edge=plan.edge,
                             operands=plan.operands)
    except Exception:  # the model must never break the rewrite
        return None
    out = {"profile": d.profile, "classical": d.classical.seconds,
           "plan": d.choice.seconds if plan is not None else d.classical.seconds,
           "alternatives": [{"plan": a.label(), "seconds": a.seconds} for a in d.alternatives
                            if plan is None or a.schemes != tuple(plan.schemes)
                            or a.form != plan.form or a.edge != plan.edge][:3]}
    if d.blocked is not None:  # the best classical plan is blocking: the gains apart
        out["best_classical"] = {"plan": d.blocked.label(), "seconds": d.blocked.seconds}
        out["blocking_gain"] = d.blocking_gain
        out["algebra_gain"] = d.best_classical.seconds / out["plan"] if out["plan"] else 1.0
    if plan is not None:
        out["dispatches"] = d.choice.dispatches
        out["temp_bytes"] = int(d.choice.temp_bytes)
        out["parts"] = {k: v for k, v in d.choice.parts.items() if v}
        out["compile_seconds"] = round(d.choice.compile_seconds, 1)
    return out


def predicted_errors(c: Contraction, plan: Optional[Plan],
                     sums: Optional[str] = None) -> Optional[dict]:
    """Predicted max-norm relative errors of classical and of the plan (floats
    only; the report's ``predicted_error``).  For a bf16/f16 result classical
    is an f32 accumulation rounded once and the plan's combined operands are
    in ``sums`` (:func:`sums_type`; ``None``: f32)."""
    from falcon_mlir.decision import numerics

    if not c.is_float or c.unsupported or min(c.M, c.N, c.K) < 1:
        return None
    acc = str(c.acc_type)
    narrow = numerics.is_narrow_result(acc)
    out = {"classical": numerics.rounded_plan_error([], c.K, acc) if narrow
           else numerics.classical_error(c.K, acc)}
    if plan is not None:
        out["plan"] = plan_error(c, plan.schemes, plan.form, sums, plan.operands)
        if plan.form == "kernel":  # falcon's classical kernel is the baseline there
            out["classical"] = numerics.kernel_plan_error([], c.K, str(c.lhs_type), str(c.acc_type))
    return out


def plan_error(c: Contraction, schemes, form: str = "per-product",
               sums: Optional[str] = None, operands: Optional[str] = None) -> float:
    """The predicted error of ``schemes`` on ``c`` in ``form`` (the kernel form's
    roundings differ: :func:`falcon_mlir.decision.numerics.kernel_plan_error`,
    its combined operands in ``operands``, default the kernels' default;
    a bf16/f16 result accumulates in f32 with its combined operands in
    ``sums``, default f32: :func:`~falcon_mlir.decision.numerics.rounded_plan_error`)."""
    from falcon_mlir.decision import numerics

    acc = str(c.acc_type)
    if form == "kernel":
        return numerics.kernel_plan_error(list(schemes), c.K, str(c.lhs_type), acc, operands=operands)
    if numerics.is_narrow_result(acc):
        return numerics.rounded_plan_error(list(schemes), c.K, acc, sums=sums or "f32",
                                           sum_roundings=sum_roundings(schemes, form))
    return numerics.predicted_error(list(schemes), c.K, acc)
