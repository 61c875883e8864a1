"""falcon-kernels with ``arch=x86-avx512`` or ``x86-avx2``: classical f32 GEMMs and kernel-form LCMA plans as falcon's CPU kernel.

:func:`run_cpu` is the pass on an llvm-cpu module: which contractions the kernel takes
(:func:`choose_cpu`; :mod:`.serve_cpu` for the shape and a kernel-form plan the contraction carries,
then for classical ones: a constant B (:func:`falcon_mlir.ir.builders.derives_from_constants`) is left
to IREE, whose data tiling packs it once at module load, where that is predicted faster
(:func:`_kernel_for_constant_b`), and the ``classical``, ``min-flops`` and
``min-intensity`` options), the executable's object key (:func:`cpu_target`: the llvm-cpu target
of ``cpu-flags``), the kernel's object per blocking (:func:`falcon_mlir.kernels.cpu_source.compile_object`,
cached on disk), and the splice (:meth:`.splice.Splicer.cpu_function`, or
:meth:`~.splice.Splicer.cpu_plan_function` for a plan: :mod:`falcon_mlir.kernels.cpu_plan`'s 2R dispatches
with the combines inside the kernel, R where each product packs its B inside; then the call in place of
the contraction, plus ``C0 +`` for a live accumulator).
"""

from __future__ import annotations

from falcon_mlir.ir.builders import derives_from_constants
from falcon_mlir.passes import PassError

from .attached import kernel_plan
from .options import CPU_PROFILES, KernelsOptions
from .report import entry as report_entry, left
from .serve_cpu import serve_cpu
from .splice import module_splicer

__all__ = ["choose_cpu", "cpu_target", "run_cpu"]


def choose_cpu(contractions, options: KernelsOptions) -> list:
    """``(contraction, CpuServed or None, entry)`` for each contraction (a CPU ``arch``)."""
    out = []
    for c in contractions:
        entry = report_entry(c, options)
        plan, why = kernel_plan(c)
        served, why = serve_cpu(c, plan, options.isa) if why is None else (None, why)
        if served is None:
            left(entry, why)
        elif why == "plan" or plan is not None:  # a kernel-form plan: served whatever its size
            entry["kernel"] = why
            entry["reason"] = served.note or "kernel-form plan on falcon's CPU kernel (combines inside it)"
        elif derives_from_constants(c.op.operands[1]) and not _kernel_for_constant_b(c, options):
            served = None
            left(entry, "constant B: IREE's data tiling packs it once, at module load (falcon's kernel "
                        "would pack it on every call; predicted slower)")
        elif not options.classical:
            served = None
            left(entry, "classical=false")
        elif served.flops < options.flops_threshold():
            left(entry, f"{served.flops:.3g} FLOP < min-flops {options.flops_threshold():.3g}")
            served = None
        elif served.intensity < options.intensity_threshold():
            left(entry, f"memory-bound ({served.intensity:.0f} FLOP/byte < min-intensity "
                         f"{options.intensity_threshold():.0f})")
            served = None
        else:
            entry["kernel"] = why
            entry["reason"] = "falcon's CPU GEMM kernel"
        out.append((c, served, entry))
    return out


def _kernel_for_constant_b(c, options: KernelsOptions) -> bool:
    """Whether falcon's kernel should take a classical contraction whose B is a module constant:
    predicted faster, packing B every call, than IREE's code packing it at load
    (:func:`falcon_mlir.decision.kernel_serves_constant_b` on the profile falcon-compile implies for
    this arch, as lcma-rewrite decides it). Products of an lcma-rewrite plan (B a combine or block of
    the weight) are IREE's: the plan was decided on IREE's code."""
    from falcon_mlir import decision
    from falcon_mlir.ir.builders import defining_op_name
    from falcon_mlir.passes.lcma_rewrite.planning import problem_of

    if defining_op_name(c.op.operands[1]) not in _WEIGHT_VIEWS:
        return False
    profile = decision.load_profile(CPU_PROFILES[options.arch])
    return decision.kernel_serves_constant_b(problem_of(c), profile, decision.decide)


#: Ops through which a contraction reads a weight itself (not an lcma-rewrite block or combine of it).
_WEIGHT_VIEWS = ("util.global.load", "arith.constant", "flow.tensor.constant", "tensor.collapse_shape",
                 "tensor.expand_shape", "flow.tensor.reshape")


def cpu_target(options: KernelsOptions) -> str:
    """The llvm-cpu executable target attribute of ``options.cpu_flags`` (the objects' key).

    Raises:
        PassError: IREE rejects the flags, they give no llvm-cpu target, or the target CPU lacks
            the features the arch's kernel needs (:data:`falcon_mlir.kernels.cpu_object.ISA_FEATURES`).
    """
    from falcon_mlir.kernels import cpu_embed, cpu_object

    flags = options.cpu_flags or cpu_embed.DEFAULT_CPU_FLAGS
    try:
        target = cpu_embed.cpu_target_attribute(flags)
    except Exception as e:  # CompilerToolError (IREE's tool failed), ValueError (no llvm-cpu target)
        lines = [ln.strip() for ln in str(e).splitlines() if "error:" in ln]
        why = lines[0].split("error:", 1)[1].strip() if lines else " ".join(str(e).split())[:200]
        raise PassError(f"falcon-kernels: no llvm-cpu target for cpu-flags={','.join(flags)}: {why}") from None
    isa = options.isa
    missing = cpu_object.missing_target_features(target, isa) if 'cpu_features = "' in target else \
        [f"+{f}" for f in cpu_object.ISA_FEATURES[isa]]
    if missing:
        need = "AVX-512 F/BW/DQ/VL" if isa == "avx512" else cpu_object.ISA_NAMES[isa]
        raise PassError(f"falcon-kernels: arch={options.arch} needs {need} on the target CPU; "
                        f"the llvm-cpu target of cpu-flags={','.join(flags)} lacks {', '.join(missing)}")
    return target


def run_cpu(root, contractions, options: KernelsOptions) -> list:
    """A CPU ``arch`` (``x86-avx512``, ``x86-avx2``): serve the chosen contractions with falcon's CPU kernel
    of that ISA; the report.

    Raises:
        PassError: see :func:`cpu_target`; the C compiler failed on the kernel.
    """
    from falcon_mlir.kernels import cpu_gemm, cpu_object, cpu_source

    try:
        cpu_object.compiler()
    except RuntimeError as e:  # no C compiler: nothing is served, each entry says why
        return [left(report_entry(c, options), str(e)) for c in contractions]
    items = choose_cpu(contractions, options)
    chosen = [it for it in items if it[1] is not None]
    if not chosen:
        return [entry for _, _, entry in items]
    target = cpu_target(options)
    objects: dict = {}
    splicers: dict = {}
    for c, served, entry in chosen:
        config = served.config
        if config not in objects:
            try:
                objects[config] = cpu_source.compile_object(config)
            except RuntimeError as e:
                raise PassError(f"falcon-kernels: {e}", location=entry["location"]) from None
        sp = module_splicer(c.op, root, splicers, target)
        types = tuple(str(v.type) for v in (c.op.operands[0], c.op.operands[1], c.op.results[0]))
        if served.plan is not None:
            p = served.plan
            fn = sp.cpu_plan_function(objects[config], p, types)
            # R: each product sums and packs its B inside its GEMM (lcma_fgemm), else 2R
            entry["plan"] = {"scheme": p.scheme, "R": p.R, "dispatches": p.R if p.b_inside else 2 * p.R,
                             "blocks": [p.Mb, p.Nb, p.Kb]}
        else:
            fn = sp.cpu_function(objects[config], config, served.M, served.N, served.K, types,
                                 trans_a=served.trans_a, trans_b=served.trans_b, batch=served.batch)
            # 1: B packed inside the GEMM (@fgemm), else pack B, then the GEMM
            entry["dispatches"] = 1 if cpu_gemm.b_inside(served.M, served.N, served.K, served.trans_a,
                                                         served.trans_b, served.batch) else 2
        entry.update(config=config.label, arch=options.arch, accumulate=served.accumulate)
        if served.layout:
            entry["layout"] = served.layout
        sp.replace(c.op, fn, served.accumulate)
    return [entry for _, _, entry in items]
