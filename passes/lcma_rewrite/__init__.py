"""lcma-rewrite: rewrite contractions with lower-complexity schemes <m,k,n;R>.

For each contraction the pass finds (:func:`falcon_mlir.ir.contraction.find_contractions`)
it takes a plan (:mod:`.planning`: a ``falcon.plan`` attribute if one is
attached, else a scheme forced by the options, else the cost-model decision
on the options' profile) and replaces the op by combine A, combine B, R
products (recursively for further levels) and combine C (:mod:`.emit`,
:mod:`.grouped`); a plan in the ``kernel`` form stays on the op for the
``falcon-kernels`` pass (falcon's generated CUDA kernels). Contractions with a dynamic M (or one dynamic batch
dimension) and static N, K get a run-time dispatch (:mod:`.dispatch`).
A contraction with several loop dimensions in one role that fold into one
(a ``batch_matmul`` whose B has no batch dimension: a matmul over batch x M)
is planned and rewritten through its folded view (:mod:`.fold`).
A contraction whose reduction (K) has the static size 0 is replaced by its
init under every option (:func:`passes.empty_reduction.replace_by_init`: the
sum over no terms; IREE 3.13 crashes compiling the op).
Everything emitted is upstream ``linalg``/``tensor``/``arith``/``scf`` (plus
``iree_tensor_ext.compute_barrier.start`` with ``barriers=true``).

Integer contractions are rewritten only with integer-coefficient schemes and
only where :func:`falcon_mlir.decision.integer_bounds.integer_bound_ok` proves that no
intermediate can overflow the accumulator type.

The scheme convention (U: R x m x k, V: R x k x n, W: R x m x n, C not
transposed) is the catalog's; see :mod:`falcon_mlir.catalog`.

Options: :class:`LcmaOptions` (``--lcma-rewrite="scheme=NAME levels=L ..."``,
``falcon-opt --help`` lists them).

Public names: :func:`run_lcma_rewrite`, :class:`LcmaOptions`,
:func:`plan_for`, :class:`OptionError`, :class:`RewriteError`,
:data:`DYNAMIC_CHUNK_CANDIDATES`.
"""

from __future__ import annotations

import math
from typing import Optional

from iree.compiler import ir

from falcon_mlir import decision
from falcon_mlir.decision.scheme_stats import has_blocking
from falcon_mlir.dialects.plan import PLAN_ATTR, REWRITTEN_ATTR
from falcon_mlir.ir.contraction import FOLD_REASON, analyze, find_contractions, format_location
from falcon_mlir.pipeline.diagnostics import RewriteError

from ..empty_reduction import replace_by_init
from .dispatch import DYNAMIC_CHUNK_CANDIDATES, DYNAMIC_CHUNK_M, dynamic_choice, dynamic_entry, \
    emit_dispatch
from .emit import Emitter
from .fold import Folded
from .options import MAX_LEVELS, LcmaOptions, OptionError
from .planning import (operands_entry, plan_for, predicted_errors, predicted_time, problem_of, products_type,
                       rounding_entry, sums_type)
from .through import read_through_transposes

__all__ = ["run_lcma_rewrite", "LcmaOptions", "plan_for", "report_entry", "OptionError", "RewriteError",
           "DYNAMIC_CHUNK_M", "DYNAMIC_CHUNK_CANDIDATES", "MAX_LEVELS"]

# RewriteError (re-exported from falcon_mlir.pipeline.diagnostics) is what
# compile_str/compile_file raise when this pass fails inside IREE's pipeline;
# the pass's own exception is its __cause__.


def _strip_stray_plans(root, report: list, options: LcmaOptions) -> None:
    """Remove ``falcon.plan`` from ops that are not contractions, with a remark entry."""
    stray = []

    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        if PLAN_ATTR in op.attributes and analyze(op) is None:
            stray.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    for op in stray:
        del op.attributes[PLAN_ATTR]
        report.append({"location": format_location(op.location, options.filename), "op": op.name,
                       "kind": "not a contraction", "M": None, "N": None, "K": None,
                       "batch": [], "element_types": None, "plan": "classical",
                       "reason": f"{PLAN_ATTR} on an op that is not a contraction; removed",
                       "remark": True})


#: Input dialects IREE converts to linalg in its ``input`` phase; falcon-opt
#: does not, so the rewrite finds no contraction in them.
_FRONTEND_DIALECTS = {"stablehlo": "StableHLO", "chlo": "StableHLO", "mhlo": "MHLO",
                      "vhlo": "StableHLO", "tosa": "TOSA", "torch": "torch"}


def _none_found(root, options: LcmaOptions) -> Optional[dict]:
    """The entry that says why nothing was rewritten in a module without
    contractions that holds ops of a frontend dialect (StableHLO, TOSA,
    torch): falcon-opt does not convert them to linalg (falcon-compile does,
    in IREE's ``input`` phase, before the rewrite). ``None`` otherwise."""
    frontend = []

    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        if op.name.split(".", 1)[0] in _FRONTEND_DIALECTS:
            frontend.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    if not frontend:
        return None
    dots = [o for o in frontend if any(w in o.name for w in ("dot", "matmul", "mm", "conv"))]
    first = (dots or frontend)[0]
    dialect = _FRONTEND_DIALECTS[first.name.split(".", 1)[0]]
    return {"location": format_location(first.location, options.filename), "op": None,
            "kind": "no contraction", "M": None, "N": None, "K": None, "batch": [],
            "element_types": None, "plan": "classical",
            "reason": (f"no contraction found: the input holds {dialect} ops ({first.name}), "
                       "which falcon-opt does not convert to linalg; use falcon-compile "
                       "--lcma-rewrite=..., which converts the input first"),
            "remark": True}


def _rewritten_before(root, options: LcmaOptions) -> dict:
    """The one entry of a module lcma-rewrite has rewritten before (``falcon.lcma_rewritten``): left as it
    is. Rewriting it again would take the plans' products for new contractions and add a level to them
    (and count them as found); a plan of more levels is ``levels=``, on the original input. Its
    contractions over an empty reduction are replaced by their init all the same (their entries follow
    this one)."""
    return {"location": format_location(root.location, options.filename), "op": root.name,
            "kind": "rewritten before", "M": None, "N": None, "K": None, "batch": [],
            "element_types": None, "plan": "classical",
            "reason": (f"the module was rewritten by lcma-rewrite before ({REWRITTEN_ATTR}): left as it is; "
                       "to rewrite with other options run on the original input (levels= for more levels)"),
            "remark": True}


def report_entry(c, plan, reason: str, options: LcmaOptions) -> dict:
    """The report entry of contraction ``c`` (a ``Contraction``) for ``plan`` (a
    ``Plan`` or ``None``: classical) before it is rewritten: location, kind,
    sizes, element types, plan, reason, predicted error and time, and for a
    bf16/f16 result where the plan rounds."""
    entry = {
        "location": format_location(c.op.location, options.filename),
        "op": c.op.name,
        "kind": c.describe_kind(),
        "M": c.M, "N": c.N, "K": c.K, "batch": list(c.batch),
        "element_types": {"lhs": str(c.lhs_type), "rhs": str(c.rhs_type),
                          "acc": str(c.acc_type)},
        "plan": plan.to_json() if plan else "classical",
        "reason": reason,
        "predicted_error": predicted_errors(c, plan, sums_type(c, plan, options)),
        "predicted_time": predicted_time(c, options, plan),
    }
    ops = operands_entry(c, plan, options)
    if ops is not None:  # a kernel-form plan: its operand type (scaled f16 for bf16) and why
        entry["operands"] = ops
    sums = sums_type(c, plan, options)
    if sums is not None:  # a bf16/f16 result: where the plan rounds, what its products multiply
        entry["rounding"] = rounding_entry(c, sums, products_type(c, plan, options, sums))
    if c.group_sizes:  # several loop dims in one role: the sizes each is made of
        marker = ir.ShapedType.get_dynamic_size()
        entry["dims"] = {r: [None if x == marker else x for x in xs]
                         for r, xs in c.group_sizes.items()}
    # A remark is due when the user asked for something we did not do, or
    # when the op is a contraction we cannot serve at all.
    entry["remark"] = plan is None and (c.unsupported is not None
                                        or options.forced_schemes() is not None
                                        or PLAN_ATTR in c.op.attributes)
    return entry


def _warn_long_compile(plan, entry: dict, options: LcmaOptions) -> None:
    """Warn up front (stderr, one line, before IREE compiles anything) when a
    plan the user forced (option or attached ``falcon.plan``; ``auto`` never
    picks one) is predicted to compile for long
    (:mod:`falcon_mlir.decision.compile_cost`); the line is also the entry's
    ``warning``."""
    import sys

    from falcon_mlir.decision.compile_cost import (emitted_ops, kernel_compile_seconds, kernel_source_size,
                                                   long_compile_seconds, recursive_ops)

    pt = entry.get("predicted_time") or {}
    secs = pt.get("compile_seconds")
    limit = long_compile_seconds(plan.form)
    if secs is None or secs <= limit:
        return
    if plan.form == "kernel":
        entry["warning"] = (f"{entry['location']}: warning: lcma-rewrite: plan {'+'.join(plan.schemes)} "
                            f"(kernel) has generated combine kernels of size {kernel_source_size(plan.schemes)} "
                            f"(coefficients and block loads); Triton is predicted to compile them for about "
                            f"{kernel_compile_seconds(plan.schemes):.0f} s (over {limit:.0f} s; cached afterwards)")
        print(entry["warning"], file=sys.stderr, flush=True)
        return
    if entry.get("emission") == "recursive":
        ops = recursive_ops(plan.schemes, bool((pt.get("parts") or {}).get("edges")))
    else:
        ops = emitted_ops(plan.schemes, plan.form)
    entry["warning"] = (f"{entry['location']}: warning: lcma-rewrite: plan "
                        f"{'+'.join(plan.schemes)} ({plan.form}) emits {ops.contractions} "
                        f"contractions and {ops.combines} combine ops; IREE is predicted to compile "
                        f"them for about {secs:.0f} s (over {limit:.0f} s)")
    print(entry["warning"], file=sys.stderr, flush=True)


def _warn_device_memory(c, plan, entry: dict, options: LcmaOptions) -> None:
    """Warn up front (stderr, one line; the entry's ``memory_warning``) when a plan
    the user forced (option or attached ``falcon.plan``) is predicted to need
    more than ``decision.MEMORY_FRACTION`` of the profile's ``memory`` with its
    temporaries beside A, B and C (``auto`` never picks one; profiles without
    ``memory``, the CPU ones, are not checked)."""
    import sys

    temp = (entry.get("predicted_time") or {}).get("temp_bytes")
    try:
        profile = decision.load_profile(options.profile)
    except Exception:  # the profile's own error is reported where the decision is made
        return
    if temp is None or profile.memory is None:
        return
    pb = problem_of(c, options)
    if temp <= decision.memory_room(profile, pb):
        return
    ops = pb.operand_bytes
    gib = 2.0 ** 30
    entry["memory_warning"] = (f"{entry['location']}: warning: lcma-rewrite: plan {'+'.join(plan.schemes)} "
                               f"({plan.form}) needs {temp / gib:.3g} GiB of temporaries beside "
                               f"{ops / gib:.3g} GiB of A, B and C, over {decision.MEMORY_FRACTION:.0%} of "
                               f"the {profile.memory / gib:.3g} GiB of {profile.name}: it may run out of "
                               f"device memory")
    print(entry["memory_warning"], file=sys.stderr, flush=True)


def _warn_gpu_iree_form(c, plan, entry: dict, options: LcmaOptions) -> None:
    """Warn up front (stderr, one line; the entry's ``form_warning``) when a plan
    the user forced in IREE's own forms (per-product, grouped: not ``kernel``)
    on bf16/f16 inputs is taken on a CUDA profile and its products are not
    input-type GEMMs (f32 sums: f32 x f32 or mixed f32 x bf16 products) or the
    model predicts it slower than classical. Such products leave the tensor
    cores; mixed ones (two input types) falcon's kernels do not take, and IREE's
    CUDA code ran a forced bf16 per-product Strassen 1700x slower than cuBLAS
    (349 ms against 0.20 ms at 4096^3 on the H200, docs/benchmarks.md run 23).
    ``auto`` never takes these forms on ``h200-falcon``."""
    import sys

    lhs = str(c.lhs_type)
    if plan.form == "kernel" or lhs not in ("bf16", "f16"):
        return
    try:
        profile = decision.load_profile(options.profile)
    except Exception:  # the profile's own error is reported where the decision is made
        return
    if profile.kind != "gpu" or not str(profile.device).startswith("cuda"):
        return
    sums = sums_type(c, plan, options)
    prods = products_type(c, plan, options, sums)
    pt = entry.get("predicted_time") or {}
    cl, pl = pt.get("classical"), pt.get("plan")
    slower = bool(cl and pl and pl > cl)
    if prods not in ("f32", "mixed") and not slower:
        return
    what = {"mixed": f"f32 x {lhs} (mixed) products, which falcon's kernels do not take and IREE's "
                     f"CUDA code runs off the tensor cores (a forced bf16 per-product Strassen measured "
                     f"1700x slower than cuBLAS at 4096^3 on the H200)",
            "f32": "f32 x f32 products, at the f32 rate rather than on the tensor cores"}.get(
                prods, f"{lhs} products in IREE's forms")
    predicted = (f"; predicted {pl * 1e3:.3g} ms against {cl * 1e3:.3g} ms classical "
                 f"({pl / cl:.3g}x slower)" if slower else "")
    advice = ("scheme=auto takes no such plan, form=kernel runs the plan on falcon's kernels"
              if "kernel" in profile.plan_forms else "scheme=auto takes no such plan")
    entry["form_warning"] = (f"{entry['location']}: warning: lcma-rewrite: plan {'+'.join(plan.schemes)} "
                             f"({plan.form}) on {lhs} inputs on {profile.name} (cuda) forms its products "
                             f"as {what}{predicted}; {advice}")
    print(entry["form_warning"], file=sys.stderr, flush=True)


def _warn_form_changed(plan, entry: dict, options: LcmaOptions) -> None:
    """Warn (stderr, one line; the entry's ``form_warning`` unless it has one) when the user asked for a
    form (``form=grouped``) and the plan was emitted in another (a grouped combine would read more
    blocks than one op may, ``MAX_GROUPED_TERMS``): it was said only in the report's reason."""
    import sys

    if options.form in (None, "auto") or plan.form == options.form or entry.get("form_warning"):
        return
    why = entry.get("reason", "").rpartition("; ")[2]
    entry["form_warning"] = (f"{entry['location']}: warning: lcma-rewrite: form={options.form} asked for, "
                             f"plan {'+'.join(plan.schemes)} emitted in the {plan.form} form ({why})")
    print(entry["form_warning"], file=sys.stderr, flush=True)


def _warn_edge_changed(plan, entry: dict, options: LcmaOptions) -> None:
    """Warn (stderr, one line; the entry's ``edge_warning``) when the user asked for an edge policy
    (``edge=peel``) and the plan handles the edges of this contraction another way: the kernel form
    pads (its only policy), and the plan was shown as padded with nothing saying the option was not
    followed. Silent where the blocks divide every size (the policy does nothing there)."""
    import sys

    from falcon_mlir.decision.explain import edges_text

    if options.edge in (None, "auto") or plan.edge == options.edge:
        return
    done = edges_text(entry)
    if not done:
        return
    entry["edge_warning"] = (f"{entry['location']}: warning: lcma-rewrite: edge={options.edge} asked for, "
                             f"plan {'+'.join(plan.schemes)} in the {plan.form} form: {done}")
    print(entry["edge_warning"], file=sys.stderr, flush=True)


def _warn_narrow_options_unused(options: LcmaOptions, report: list) -> None:
    """Warn once (stderr, one line; the first contraction's entry's ``options_warning`` unless it has
    one) when ``sums=`` or ``products=`` was given but no contraction of the module has a bf16/f16
    result, the only ones they apply to: they were ignored without a word (break-it review of
    issue 13: bf16 x bf16 -> f32 with products=f32)."""
    import sys

    from falcon_mlir.decision import numerics

    given = [f"{k}={getattr(options, k)}" for k in ("sums", "products") if getattr(options, k) != "auto"]
    entries = [e for e in report if e.get("element_types") is not None]
    if not given or not entries or any(numerics.is_narrow_result(str(e["element_types"].get("acc")))
                                       for e in entries):
        return
    line = (f"{entries[0]['location']}: warning: lcma-rewrite: {' '.join(given)} "
            f"{'apply' if len(given) > 1 else 'applies'} to bf16/f16 "
            f"results only (their plans accumulate in f32 and round once); no contraction here has one, "
            f"so it changes nothing")
    entries[0].setdefault("options_warning", line)
    print(line, file=sys.stderr, flush=True)


def _warn_operands_unused(options: LcmaOptions, report: list) -> None:
    """Warn once (stderr, one line; the first contraction's entry's
    ``options_warning``) when ``operands=`` was given but can change nothing:
    it applies to kernel-form plans only (falcon's CUDA kernels), and the
    profile's forms hold no kernel form (CPU targets, ``h200-iree``) nor was
    one forced or attached."""
    import sys

    if options.operands == "auto" or options.form == "kernel":
        return
    entries = [e for e in report if e.get("element_types") is not None]
    if not entries or any(isinstance(e.get("plan"), dict) and e["plan"].get("form") == "kernel"
                          for e in entries):
        return
    try:
        profile = decision.load_profile(options.profile)
    except Exception:  # reported where the decision is made
        return
    if "kernel" in profile.plan_forms:
        return
    line = (f"{entries[0]['location']}: warning: lcma-rewrite: operands={options.operands} applies "
            f"to kernel-form plans only (form=kernel: falcon's CUDA kernels, the falcon-kernels pass); "
            f"profile {profile.name} ({profile.kind}) has none, so it changes nothing here")
    entries[0]["options_warning"] = line
    print(line, file=sys.stderr, flush=True)


def _warn_long_module(forced: list) -> None:
    """One more warning line when the forced plans of the whole module
    (``forced``: their report entries) are predicted to add over
    ``LONG_MODULE_SECONDS`` of compile time although no single one was warned
    about (many contractions, each moderately long)."""
    import sys

    from falcon_mlir.decision.compile_cost import LONG_MODULE_SECONDS

    if not forced or any(e.get("warning") for e in forced):
        return
    total = sum((e.get("predicted_time") or {}).get("compile_seconds") or 0 for e in forced)
    if total > LONG_MODULE_SECONDS:
        kernels = any((e.get("plan") or {}).get("form") == "kernel" for e in forced)
        plans = "forced plan of this module is" if len(forced) == 1 else \
            f"{len(forced)} forced plans of this module are"
        line = (f"{forced[0]['location']}: warning: lcma-rewrite: the {plans} predicted to add "
                f"about {total:.0f} s of {'IREE and Triton' if kernels else 'IREE'} compile time "
                f"(over {LONG_MODULE_SECONDS:.0f} s)")
        forced[0]["warning"] = line
        print(line, file=sys.stderr, flush=True)


class _Emission:
    """How each multi-level per-product plan of a module is emitted
    (``LcmaOptions.stack``): stacked, or by recursion where that compiles
    fast (:func:`falcon_mlir.decision.compile_cost.recursive_compile_seconds`
    within ``RECURSIVE_SECONDS``, and the module's recursive plans within
    ``RECURSIVE_MODULE_SECONDS`` more than stacked, in the order the
    contractions come), on profiles without a fused combine C (CPU).

    Why: on llvm-cpu the stacked form materialises all R^L combined operands
    at once (strassen^2 on a 4096 x 4096 B: 49 x 1024 x 1024 f32 = 205 MB,
    its packed copy as much, the level above 117 MB). IREE serves such
    transients from one allocation per call, which glibc maps fresh (page
    faults, zeroing, unmapping: 60% of the stacked module's time in the
    kernel); the recursion's products live a few MB at a time, in cache.
    docs/compile-time.md.
    """

    def __init__(self, options: LcmaOptions, fuse_c: bool):
        self.options, self.fuse_c, self.spent = options, fuse_c, 0.0

    def stacked(self, plan, entry: dict, c) -> bool:
        """Whether ``plan`` is emitted stacked; records the choice in ``entry``
        (``emission``; a recursive plan's ``predicted_time.compile_seconds``)."""
        from falcon_mlir.decision.compile_cost import (RECURSIVE_MODULE_SECONDS,
                                                       RECURSIVE_SECONDS, STACKED_BYTES,
                                                       recursive_compile_seconds, stacked_bytes)

        if plan is None or plan.form != "per-product" or len(plan.schemes) < 2:
            return True
        choice = self.options.stack
        if choice is None and has_blocking(plan.schemes):
            choice = False  # a blocking level stacked would copy its blocks; it has no combines
        if choice is None:
            pt = entry.get("predicted_time") or {}
            edges = bool((pt.get("parts") or {}).get("edges"))
            rec = recursive_compile_seconds(plan.schemes, edges)
            extra = rec - (pt.get("compile_seconds") or 0.0)
            sizes = [c.M, c.N, c.K] + list(c.batch)
            small = any(not isinstance(x, int) or x < 0 for x in sizes) or stacked_bytes(
                plan.schemes, c.M, c.N, c.K, int(math.prod(c.batch))) < STACKED_BYTES
            choice = (self.fuse_c or small or rec > RECURSIVE_SECONDS
                      or self.spent + extra > RECURSIVE_MODULE_SECONDS)
            if not choice:
                self.spent += extra
        if not choice:
            entry["emission"] = "recursive"
            pt = entry.get("predicted_time")
            if pt:
                pt["compile_seconds"] = recursive_compile_seconds(
                    plan.schemes, bool((pt.get("parts") or {}).get("edges")))
        else:
            entry["emission"] = "stacked"
        return choice


def _hand_off(c, plan, entry: dict) -> None:
    """A ``kernel``-form plan is run by falcon's generated CUDA kernels: the op
    keeps its plan (``falcon.plan``) for the ``falcon-kernels`` pass, which
    replaces it by four dispatches (combine A, combine B, the products,
    combine C)."""
    from falcon_mlir.catalog import get_scheme

    c.op.attributes[PLAN_ATTR] = plan.to_attribute()
    entry["products"] = get_scheme("*".join(plan.schemes)).R
    entry["combines"] = 3
    entry["handoff"] = "falcon-kernels"


def run_lcma_rewrite(module_op, options: LcmaOptions) -> list:
    """Run the lcma-rewrite pass on ``module_op`` in place.

    Args:
        module_op: the ``ir.Operation`` (or OpView) of a module; its context
            must be current. Contractions are found anywhere below it
            (func.func, util.func, inside scf regions).
        options: :class:`LcmaOptions`.

    Returns:
        The report: one dict per contraction found, with ``location``
        (``file:line:col``), ``op``, ``kind``, ``M``, ``N``, ``K``, ``batch``,
        ``element_types`` (lhs, rhs, acc), ``plan`` (dict, or ``"classical"``),
        ``reason``, ``operands`` (a kernel-form plan: ``{"type", "scaled", "why"}``,
        :func:`.planning.operands_entry`), ``predicted_error`` (``{"classical": e, "plan": e}`` for
        float contractions, see :mod:`falcon_mlir.decision.numerics`), ``predicted_time``
        (seconds from the cost model, :mod:`falcon_mlir.decision`:
        ``{"profile", "classical", "plan", "alternatives": [{"plan", "seconds"}],
        "dispatches", "temp_bytes", "parts", "compile_seconds"}``; ``None`` where unsupported),
        ``emission`` (a per-product plan of several levels: ``"stacked"``
        or ``"recursive"``, :class:`_Emission`), ``warning`` (a forced plan predicted to compile for long: the line
        printed on stderr before IREE compiles, :func:`_warn_long_compile`), ``memory_warning``
        (:func:`_warn_device_memory`), ``form_warning`` (a forced bf16/f16 plan in IREE's forms on
        a CUDA profile, :func:`_warn_gpu_iree_form`; a form asked for and not emitted,
        :func:`_warn_form_changed`), ``edge_warning`` (an edge policy asked for and not followed where it
        acts, :func:`_warn_edge_changed`), ``options_warning`` (first entry only:
        ``operands=`` where no kernel-form plan can be, :func:`_warn_operands_unused`), ``remark``
        (whether the user should be told), and for rewritten ones
        ``products`` and ``combines`` (the number of contractions and combine
        ops emitted). Dynamic sizes are ``None``; a contraction with a
        run-time dispatch (:func:`.dispatch.dynamic_choice`) also has ``dispatch``
        (``{"threshold_M": T, "chunk_M": Mc}``, or ``_batch``), its plan is
        the chunk's and ``products`` counts the chunk's plan plus the
        classical remainder op. A contraction with an empty reduction (K = 0)
        replaced by its init has ``replaced_by: "init"``, plan ``"classical"``
        and ``remark`` false (:func:`passes.empty_reduction.entry_of`). A module marked
        ``falcon.lcma_rewritten`` has one entry of kind ``"rewritten before"`` and is left as it is but
        for those (:func:`_rewritten_before`).

    Raises:
        ProfileError: the options' profile does not load (checked by
            :meth:`LcmaOptions.parse` for text options).
    """
    root = module_op.operation if hasattr(module_op, "operation") else module_op
    if REWRITTEN_ATTR in root.attributes:
        # left as it is, but for K = 0 (replaced under every option: where lcma-rewrite runs, falcon-compile
        # runs no empty-reduction pass, and IREE 3.13 crashes on those)
        return [_rewritten_before(root, options)] + [replace_by_init(c, options.filename)
                                                     for c in find_contractions(root) if c.empty_reduction]
    report, forced = [], []
    contractions = find_contractions(root)
    _strip_stray_plans(root, report, options)
    try:  # GPU targets: one combine-C dispatch (Profile.fused_combine_c)
        fuse_c = decision.load_profile(options.profile).fused_combine_c
    except decision.ProfileError:
        fuse_c = False
    emission = _Emission(options, fuse_c)
    for c in contractions:
        if c.empty_reduction:  # K = 0: the sum over no terms is the init, whatever was asked
            report.append(replace_by_init(c, options.filename))
            continue
        folded = None
        if c.unsupported == FOLD_REASON:  # e.g. batch_matmul with a broadcast B: a matmul
            with c.op.location, ir.InsertionPoint(c.op):
                folded = Folded(c)
            c = folded.view
        plan, reason = plan_for(c, options)
        disp = None
        if plan is None and c.dynamic and options.dispatch is not False \
                and not options.keeps_classical():
            disp, reason = dynamic_choice(c, options)
        elif plan is None and c.dynamic:
            reason += " (run-time dispatch off: dispatch=false)"
        entry = report_entry(c, plan, reason, options)
        if folded is not None:
            folded.describe(entry)
        if c.dynamic:
            dynamic_entry(entry, c, disp, options)
        stacked = emission.stacked(disp.plan if disp is not None else plan, entry, c)
        if plan is not None and (options.forced_schemes() is not None
                                 or PLAN_ATTR in c.op.attributes):
            _warn_long_compile(plan, entry, options)
            _warn_device_memory(c, plan, entry, options)
            _warn_gpu_iree_form(c, plan, entry, options)
            forced.append(entry)
        if plan is not None:
            _warn_form_changed(plan, entry, options)
            _warn_edge_changed(plan, entry, options)
        if PLAN_ATTR in c.op.attributes:
            del c.op.attributes[PLAN_ATTR]
        if plan is not None and plan.form == "kernel":
            _hand_off(c, plan, entry)
        elif disp is not None or plan is not None:
            if disp is None and folded is None:
                c, through = read_through_transposes(c)
                if through:
                    entry["through_transpose"] = through
            eplan = disp.plan if disp is not None else plan
            esums = sums_type(c, eplan, options)
            em = Emitter(c, barriers=options.barriers is not False, fuse_c=fuse_c, sums=esums,
                         products=products_type(c, eplan, options, esums), stacked=stacked)
            with c.op.location, ir.InsertionPoint(c.op):
                if disp is not None:
                    emit_dispatch(c, disp, em)
                else:
                    a, b, init = c.op.operands
                    new = em.emit(a, b, init, plan)
            if disp is None:
                c.op.results[0].replace_all_uses_with(new)
                c.op.erase()
            entry["products"] = em.products
            entry["combines"] = em.combines
        if entry.get("products"):  # rewritten here or handed off to falcon-kernels
            root.attributes[REWRITTEN_ATTR] = ir.UnitAttr.get()
        if folded is not None:
            if plan is not None or disp is not None:
                folded.commit()
            else:
                folded.discard()
        report.append(entry)
    _warn_long_module(forced)
    _warn_operands_unused(options, report)
    _warn_narrow_options_unused(options, report)
    if not contractions:
        none = _none_found(root, options)
        if none is not None:
            report.append(none)
    return report
