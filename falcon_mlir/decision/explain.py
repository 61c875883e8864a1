"""Human-readable explanation of the lcma-rewrite report (``--lcma-explain``)."""

from __future__ import annotations

from typing import List


def _ms(seconds) -> str:
    if seconds is None:
        return "?"
    if seconds >= 1.0:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"


def _ratio(classical, seconds) -> str:
    """Predicted speedup ``classical / seconds`` as ``1.83x``; a plan more than
    10x slower reads ``240x slower`` (3 significant digits, whole numbers from
    1000x; two decimals would show ``0.00x``)."""
    if not classical or not seconds:
        return "?x"
    sp = classical / seconds
    if sp >= 0.1:
        return f"{sp:.2f}x"
    slower = 1 / sp
    return f"{slower:.3g}x slower" if slower < 1000 else f"{slower:.0f}x slower"


def _mib(nbytes) -> str:
    return f"{nbytes / 2 ** 20:.1f} MiB"


def edges_text(e: dict) -> str:
    """What a report entry's plan does at the edges, short: ``M edge padded``, ``N and K edges peeled``;
    ``""`` where its blocks divide M, N and K (the edge policy has nothing to do), the entry is not a
    plan, it has no sizes, or its scheme is unknown (a hand-written report). For tables (falcon-bench's
    plan column, the main job's); :func:`explain_entry` says also why."""
    from falcon_mlir.decision.cost import edge_text, ragged_dims

    plan = e.get("plan")
    if not isinstance(plan, dict) or not any(d in e for d in ("M", "N", "K")):
        return ""
    try:
        ragged = ragged_dims(e.get("M"), e.get("N"), e.get("K"), plan.get("schemes") or ())
    except Exception:  # an unknown scheme name
        return ""
    return edge_text(plan.get("edge", "peel"), ragged)


def _edges_of(e: dict, plan: dict) -> str:
    """``, M edge padded (500 is not a multiple of 2)`` for a plan whose blocks do not
    divide the entry's M, N or K (what its edge policy does there); ``""`` where they
    divide all three: the edge policy (``plan["edge"]``, kept in the JSON) has
    nothing to do, so naming it would read as if something were padded."""
    from falcon_mlir.decision.cost import edge_text, ragged_dims

    try:
        ragged = ragged_dims(e.get("M"), e.get("N"), e.get("K"), plan["schemes"])
        from falcon_mlir.catalog import composed_format

        comp = composed_format(tuple(plan["schemes"]))
    except Exception:  # an unknown scheme name: say the policy, as before
        return f", {plan.get('edge', 'peel')} edges where the blocks do not divide"
    if not ragged:
        return ""
    block = {"M": comp.m, "N": comp.n, "K": comp.k}
    why = "; ".join(f"{d}={e.get(d)} is not a multiple of {block[d]}" if e.get(d) is not None
                    else f"{d} is dynamic" for d in ragged)
    return f", {edge_text(plan.get('edge', 'peel'), ragged)} ({why})"


def _products_text(e: dict, plan: dict) -> str:
    """``7 products``; for a plan emitted stacked (``emission``), whose block products are one batched
    contraction (plus any edge strips), ``3 contraction ops (49 block products stacked in one)``: the
    report's ``products`` counts the contraction ops emitted."""
    n = e["products"]
    if e.get("emission") != "stacked":
        return f"{n} products"
    try:
        from falcon_mlir.decision.scheme_stats import scheme_stats

        total = 1
        for name in plan["schemes"]:
            total *= scheme_stats(name).R
    except Exception:  # an unknown scheme name (a hand-written report): the count as it is
        return f"{n} products"
    return f"{n} contraction op{'s' if n != 1 else ''} ({total} block products stacked in one)"


def explain_entry(e: dict) -> str:
    """Explain one report entry (see ``run_lcma_rewrite``) in a few indented lines.

    The first line is ``LOCATION: OP M x N x K [batch] (lhs x rhs -> acc): DECISION``
    (rewritten with its plan, classical, or replaced by its init: an empty reduction);
    then the reason, the defaults falcon-compile or the target implied (if
    any), the predicted times (classical, the plan, the next best
    alternatives, with the profile used) and the predicted errors.
    """
    et = e.get("element_types") or {}
    folded = e.get("dims") or {}  # several loop dims in one role, e.g. M = batch x M
    dim = lambda k: ("?" if e.get(k) is None else str(e.get(k))) + (
        f" ({' x '.join('?' if s is None else str(s) for s in folded[k])})" if k in folded else "")
    shape = (f"M={dim('M')} N={dim('N')} K={dim('K')}"
             + (f" batch={e['batch']}" if e.get("batch") else ""))
    types = f" ({et.get('lhs')} x {et.get('rhs')} -> {et.get('acc')})" if et else ""
    if "kernel" in e and "kind" not in e:  # falcon-kernels' own entry (no lcma-rewrite entry to join)
        return "\n".join([f"{e.get('location')}: {e.get('op')} {shape}{types}: "
                           + ("falcon's kernels" if e.get("kernel") else "IREE's code"),
                           _kernel_line(e)])
    plan = e.get("plan")
    if isinstance(plan, dict):
        what = (f"rewritten: {'+'.join(plan['schemes'])}, {len(plan['schemes'])} level(s), "
                f"{plan.get('form', 'per-product')} form{_edges_of(e, plan)}")
        if e.get("handoff"):
            what += f"; {e.get('products')} products, handed to {e['handoff']}"
            if not served(e):
                what += " (not built there: the op stays classical)"
        elif "products" in e:
            what += f"; {_products_text(e, plan)}, {e.get('combines', 0)} combines emitted"
    elif e.get("replaced_by"):  # an empty reduction (K = 0): no op left
        what = f"replaced by its {e['replaced_by']}"
    else:
        what = "classical"
    lines = [f"{e.get('location')}: {e.get('op')} {shape}{types}: {what}",
             f"  why: {e.get('reason')}"]
    if e.get("defaults") and not e.get("replaced_by"):  # what falcon-compile / the API / the target implied
        lines.append("  defaults: " + "; ".join(f"{k}={v}" for k, v in e["defaults"].items()))
    pt = e.get("predicted_time")
    if pt:
        line = f"  predicted on {pt['profile']}: classical {_ms(pt['classical'])}"
        if isinstance(plan, dict):
            line += f", this plan {_ms(pt['plan'])} ({_ratio(pt['classical'], pt.get('plan'))})"
            if pt.get("dispatches"):
                line += f", {pt['dispatches']} dispatches"
            if pt.get("temp_bytes"):
                line += f", temporaries {_mib(pt['temp_bytes'])}"
        lines.append(line)
        bc = pt.get("best_classical")
        if bc:  # a blocking plan beats IREE's GEMM: the blocking and the algebra gains apart
            lines.append(f"  best classical plan: blocking {bc['plan']} {_ms(bc['seconds'])} "
                         f"(blocking gain {_ratio(pt['classical'], bc['seconds'])} over IREE's GEMM); "
                         f"algebra gain of this plan {_ratio(bc['seconds'], pt.get('plan'))}")
        if pt.get("parts"):
            lines.append("  time by part: " + ", ".join(f"{k} {_ms(v)}" for k, v in
                                                        sorted(pt["parts"].items())))
        for a in pt.get("alternatives", []):
            lines.append(f"  alternative: {a['plan']}: {_ms(a['seconds'])} "
                         f"({_ratio(pt['classical'], a['seconds'])})")
    lines += [_kernel_line(k) for k in e.get("kernels", [])]
    if e.get("handoff") and not e.get("kernels"):
        lines.append(f"  kernels: {e['handoff']} did not run: the op keeps its falcon.plan and is "
                     "classical until that pass runs")
    pe = e.get("predicted_error")
    if pe:
        line = f"  predicted error: classical {pe['classical']:.1e}"
        if "plan" in pe:
            line += f", this plan {pe['plan']:.1e}"
        lines.append(line)
    ops = e.get("operands")
    if ops and isinstance(plan, dict):
        lines.append(f"  operands: {ops['type']}"
                     + (" scaled by powers of two (two absmax dispatches first)" if ops.get("scaled") else "")
                     + f"; {ops['why']}")
    rd = e.get("rounding")
    if rd and isinstance(plan, dict):
        lines.append(f"  rounding: sums in {rd['sums']}, products and combine C in "
                     f"{rd['products']}, result rounded to {rd['result']}"
                     + (f"; products multiply {rd['product_operands']}"
                        if rd.get("product_operands") else ""))
    return "\n".join(lines)


def _kernel_line(k: dict) -> str:
    """One line for a falcon-kernels entry joined to the contraction (``kernels``)."""
    layout = f", {k['layout']}" if k.get("layout") else ""  # the CPU kernel: transposed operands, a batch
    if k.get("kernel") == "plan" and "dispatches" in (k.get("plan") or {}):  # the CPU kernel's plan
        p = k["plan"]
        return (f"  kernels: plan {p.get('scheme')} (R = {p.get('R')}) on falcon's CPU kernel {k.get('config')} "
                f"as {p.get('dispatches')} {k.get('arch')} dispatches (per product: pack B with combine B, GEMM "
                f"with combine A and C{layout}){', C added' if k.get('accumulate') else ''}")
    if k.get("kernel") == "plan":
        p = k.get("plan") or {}
        scaled = "(scaled)" in str(p.get("operands", ""))
        return (f"  kernels: plan {p.get('scheme')} (R = {p.get('R')}, operands {p.get('operands')}, products in "
                f"{p.get('products')}, GEMM {p.get('gemm_config')}) as {6 if scaled else 4} {k.get('arch')} "
                "dispatches")
    if k.get("kernel") == "classical" and "programs" not in k:  # the CPU kernel: pack B, then the GEMM (or fgemm)
        reason = k.get("reason", "")  # other than the plain kernel's: why a kernel-form plan runs classically
        note = f"; {reason}" if reason and reason != "falcon's CPU GEMM kernel" else ""
        form = "one dispatch, B packed inside the GEMM" if k.get("dispatches") == 1 else "pack B and GEMM dispatches"
        return (f"  kernels: falcon's CPU GEMM {k.get('config')} ({k.get('arch')}, {form}"
                f"{layout}{', C added' if k.get('accumulate') else ''}){note}")
    if k.get("kernel") == "classical":
        # What the reason adds to the plain kernel: a kernel-form plan served classically, an
        # operand read through the transpose that made it.
        plain, reason = "falcon's classical GEMM kernel", k.get("reason", "")
        note = reason[len(plain) + 2:] if reason.startswith(plain + "; ") else "" if reason == plain else reason
        extra = f"; {note}" if note else ""
        return (f"  kernels: falcon's classical GEMM {k.get('config')} ({k.get('arch')}, "
                f"{k.get('programs')} programs){extra}")
    return f"  kernels: none ({k.get('reason')})"


def remark_lines(report: List[dict]) -> List[str]:
    """One ``LOCATION: remark: lcma-rewrite: REASON`` line per entry the user
    should be told about (``remark``: a forced scheme or attached plan not
    applied, a contraction that cannot be served, nothing found to rewrite;
    and a kernel-form plan handed to falcon-kernels that the pass ran on and
    did not build: the op stays classical, under an entry whose plan says
    rewritten); falcon-opt and falcon-compile print them on stderr.

    The handed-over plan's line was missing: ``--lcma-rewrite="scheme=strassen
    form=kernel"`` on a contraction falcon's CPU kernel does not take (C stored
    N x M, a batch that does not lead, bf16, sizes the format does not divide)
    compiled classical without a word unless ``--lcma-explain`` was given.
    """
    lines = []
    for e in report:
        if e.get("remark"):
            lines.append(f"{e['location']}: remark: lcma-rewrite: {e['reason']}")
        elif e.get("handoff") and e.get("kernels") and not served(e):
            plan = e.get("plan")
            name = "+".join(plan["schemes"]) if isinstance(plan, dict) and plan.get("schemes") else "the plan"
            why = next((k["reason"] for k in e["kernels"] if k.get("reason")), "not built")
            lines.append(f"{e['location']}: remark: lcma-rewrite: {name} (kernel form) handed to "
                         f"{e['handoff']}, which did not build it ({why}); kept classical")
    return lines


#: Report entry kinds that are about the module, not a contraction (lcma-rewrite's remarks): not counted
#: or explained as contractions.
NOT_CONTRACTIONS = ("not a contraction", "no contraction", "rewritten before")


def off_line(how: str) -> str:
    """The one ``--lcma-explain`` line when the rewrite is off (``how``: the
    flags that turn it off, e.g. ``--lcma-rewrite=none``): nothing decided."""
    return f"lcma-explain: lcma-rewrite is off ({how}); nothing decided"


def served(e: dict) -> bool:
    """Whether a report entry's plan is in the compiled code: every plan lcma-rewrite emits itself, and
    a plan handed to falcon-kernels (kernel form) only where that pass ran and built it."""
    if not e.get("handoff"):
        return True
    return any(k.get("kernel") == "plan" for k in e.get("kernels", []))


def explain(report: List[dict]) -> str:
    """Explain a whole report: one block per contraction, and a one-line summary."""
    # falcon-tiles entries (tile choices, not decisions) are left to --lcma-report
    report = [e for e in report if e.get("pass") != "falcon-tiles"]
    blocks = [explain_entry(e) for e in report if e.get("kind") not in NOT_CONTRACTIONS]
    planned = [e for e in report if isinstance(e.get("plan"), dict) and "kind" in e]
    unserved = sum(1 for e in planned if not served(e))
    # falcon-kernels' own entries of plans it built that no lcma-rewrite entry of this run carries: an
    # earlier run planned them (falcon-opt's output given to falcon-compile, the module marked rewritten)
    earlier = sum(1 for e in report if "kind" not in e and e.get("kernel") == "plan")
    rewritten = len(planned) - unserved + earlier
    total_c = sum((e.get("predicted_time") or {}).get("classical", 0) for e in report)
    # a plan handed to falcon-kernels and not built runs classical: its classical time, not none
    total_p = sum((e.get("predicted_time") or {}).get("plan" if served(e) else "classical", 0) for e in report)
    summary = f"lcma-explain: {rewritten} of {len(blocks)} contractions rewritten"
    replaced = sum(1 for e in report if e.get("replaced_by"))
    if replaced:
        summary += f", {replaced} replaced by {'its' if replaced == 1 else 'their'} init (K = 0)"
    if earlier:
        summary += f" ({earlier} planned by an earlier lcma-rewrite run, built here by falcon-kernels)"
    if unserved:
        summary += (f" ({unserved} more handed to falcon-kernels, which left them classical: "
                    "see their 'kernels' lines)")
    if total_p:
        summary += (f"; predicted {_ms(total_p)} vs {_ms(total_c)} classical "
                    f"({_ratio(total_c, total_p)} over these contractions)")
        # the best classical plan per contraction (blocking where it beats IREE's GEMM)
        total_b = sum(((e.get("predicted_time") or {}).get("best_classical") or {}).get(
            "seconds", (e.get("predicted_time") or {}).get("classical", 0)) for e in report)
        if total_b and abs(total_b - total_c) > 1e-12:
            summary += (f"; best classical plans {_ms(total_b)} (blocking gain "
                        f"{_ratio(total_c, total_b)}, algebra gain {_ratio(total_b, total_p)})")
    return "\n".join(blocks + [summary])
