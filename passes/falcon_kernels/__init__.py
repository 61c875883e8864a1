"""falcon-kernels: contractions run by falcon's own generated CUDA kernels.

IREE 3.13's CUDA code generation has no Hopper target (no wgmma, no TMA):
its GEMMs run at 0.36-0.71x of cuBLAS on the H200. This pass replaces each
contraction it can serve by a dispatch of a kernel that
:mod:`falcon_mlir.kernels` generates (Triton, compiled ahead of time for
sm_90a, embedded in the module as an external ``hal.executable.source``), so
the module needs nothing but IREE's runtime:

* a contraction carrying a ``falcon.plan`` in the ``kernel`` form (attached by
  lcma-rewrite's decision, or by hand) becomes the plan's four dispatches:
  combine A, combine B, the R products as one batched GEMM, combine C
  (:mod:`falcon_mlir.kernels.lcma`), six for scaled f16 operands of bf16
  inputs (the plan's ``operands``, default for bf16: two absmax dispatches first);
* any other contraction the kernels serve (:mod:`.serve`: f32/f16/bf16, one
  batch dim, A and/or B transposed, static sizes, TMA-readable strides) and
  of at least ``min-flops`` becomes one dispatch of the classical GEMM kernel:
  for IEEE f32 in whole 128 x 128 tiles the CUDA C FMA kernel
  (:mod:`falcon_mlir.kernels.fma_gemm`), else the Triton kernel with its tile
  configuration from the measured table (:mod:`falcon_mlir.kernels.configs`).

With ``arch=x86-avx512`` or ``x86-avx2`` (an llvm-cpu module) the pass serves f32 GEMMs with
falcon's own CPU kernel instead (:mod:`falcon_mlir.kernels.cpu_gemm`:
generated AVX-512 or AVX2 C compiled by gcc, embedded by
:mod:`falcon_mlir.kernels.cpu_embed`): which ones, :mod:`.serve_cpu`
(row-major f32, batch 1, static; classical ones of at least ``min-flops``,
auto 2 x 256^3; kernel-form plans as ``2 R`` dispatches with the combines
inside the kernel, or ``R`` where each product packs its B inside,
:mod:`falcon_mlir.kernels.cpu_plan`; :mod:`.cpu`);
the executable's object key is the llvm-cpu target of ``cpu-flags``.

Everything else stays IREE's. A C operand that is not a zero fill is added to
the kernel's result by an elementwise op. All kernels of a module are
compiled in one Triton child process (cached on disk by content hash; Triton
is never imported here: after TensorFlow it aborts the process).

Options: :class:`KernelsOptions` (``--falcon-kernels="arch=sm_90a ..."``).
sm_90a needs the ``cuda`` extra (Triton), x86-avx512 and x86-avx2 a C compiler; without
it the pass reports every contraction as left to IREE. Report entries: ``location``, ``op``, ``M``,
``N``, ``K``, ``batch``, ``element_types``, ``kernel`` (``"classical"``,
``"plan"`` or ``None``), ``config``/``plan`` details, ``reason``; on the CPU a classical entry's
``dispatches``: 1 where B is packed inside the GEMM (``@fgemm``), else 2; a plan's ``plan.dispatches``:
``R`` where its products pack B inside (``@lcma_fgemm``), else ``2 R``.
"""

from __future__ import annotations

from typing import Optional

from iree.compiler import ir

from falcon_mlir.dialects.plan import PLAN_ATTR, Plan, PlanError
from falcon_mlir.ir.contraction import find_contractions
from falcon_mlir.options import OptionError
from falcon_mlir.passes import PassError

from .options import ARCHS, KernelsOptions
from .attached import kernel_plan as _kernel_plan
from .report import entry as _entry
from .serve import Served, intensity, iree_cannot, serve

__all__ = ["KernelsOptions", "run_falcon_kernels", "OptionError", "PassError", "ARCHS", "triton_available"]


def triton_available() -> bool:
    """Whether Triton is installed (its package metadata; Triton is not imported)."""
    from falcon_mlir.kernels.aot import triton_version

    try:
        triton_version()
    except ImportError:
        return False
    return True


def _choose(contractions, options: KernelsOptions) -> list:
    """``(contraction, Served or None, entry)`` for each contraction."""
    out = []
    for c in contractions:
        entry = _entry(c, options)
        plan, why = _kernel_plan(c)
        if why:
            entry["reason"] = f"left to IREE: {why}"
            out.append((c, None, entry))
            continue
        served, kind = serve(c, options.f32_mode, plan)
        if served is None:
            entry["reason"] = f"left to IREE: {kind}"
        elif kind == "classical" and plan is None and not options.classical:
            served, entry["reason"] = None, "left to IREE: classical=false"
        elif kind == "classical" and plan is None and served.spec.flops < options.flops_threshold():
            entry["reason"] = (f"left to IREE: {served.spec.flops:.3g} FLOP < min-flops "
                               f"{options.flops_threshold():.3g}")
            served = None
        elif kind == "classical" and plan is None and not iree_cannot(c) and \
                intensity(served.spec) < options.intensity_threshold():
            entry["reason"] = (f"left to IREE: memory-bound ({intensity(served.spec):.0f} FLOP/byte "
                               f"< min-intensity {options.intensity_threshold():.0f}); IREE fuses its "
                               "elementwise neighbours")
            served = None
        else:
            entry["kernel"] = kind
            entry["reason"] = served.note or ("kernel-form plan" if kind == "plan"
                                              else "falcon's classical GEMM kernel")
            through = [r for r, t in zip("AB", served.reads) if t is not None]
            if through:
                entry["reason"] += f"; {' and '.join(through)} read through the transpose that made " \
                                   f"{'it' if len(through) == 1 else 'them'}"
        out.append((c, served, entry))
    return out


def _compile(chosen: list, arch: str) -> list:
    """Compiled kernel (or plan, or exception) per chosen item, one Triton child for all.

    Raises:
        PassError: the Triton child failed as a whole (crashed, timed out), or a compiler is missing
            (``$FALCON_NVRTC`` naming a file that is not NVRTC).
    """
    from falcon_mlir.kernels import compile_kernels, compile_plans
    from falcon_mlir.kernels._worker import WorkerError
    from falcon_mlir.kernels.lcma import PlanSpec

    # No config: compile_kernels picks (the FMA kernel where it serves, else the table's Triton config).
    gemms = [(s.spec, None) for _, s, _ in chosen if not isinstance(s.spec, PlanSpec)]
    plans = [s.spec for _, s, _ in chosen if isinstance(s.spec, PlanSpec)]
    try:
        done_g = iter(compile_kernels(gemms, arch=arch, errors="return") if gemms else [])
        done_p = iter(compile_plans(plans, arch=arch, errors="return") if plans else [])
    except (WorkerError, ImportError) as e:  # ImportError: a compiler the kernels need is missing or broken
        raise PassError(f"falcon-kernels: {e}") from None
    return [next(done_p) if isinstance(s.spec, PlanSpec) else next(done_g) for _, s, _ in chosen]


def run_falcon_kernels(module_op, options: Optional[KernelsOptions] = None) -> list:
    """Run the falcon-kernels pass on ``module_op`` in place (its context current).

    Returns:
        One report dict per contraction found (see the module docstring).

    Raises:
        PassError: Triton failed to compile a kernel (one line naming it and
            the contraction), IREE rejects the ``cuda-target``, or the module
            holds another op under a kernel's symbol.
    """
    options = options or KernelsOptions()
    root = module_op.operation if hasattr(module_op, "operation") else module_op
    contractions = find_contractions(root)
    if options.arch == "none":
        return []
    if options.on_cpu:
        from .cpu import run_cpu

        return run_cpu(root, contractions, options)
    arch = "sm_90a" if options.arch == "auto" else options.arch
    if not triton_available():
        report = []
        for c in contractions:
            e = _entry(c, options)
            e["reason"] = "left to IREE: Triton is not installed (pip install 'falcon-mlir[cuda]')"
            report.append(e)
        return report
    items = _choose(contractions, options)
    chosen = [it for it in items if it[1] is not None]
    if chosen:
        _splice(root, chosen, _compile(chosen, arch), options, arch)
    return [entry for _, _, entry in items]


def _splice(root, chosen: list, compiled: list, options: KernelsOptions, arch: str) -> None:
    from falcon_mlir.kernels.embed import cuda_target_attribute

    from falcon_mlir.ir.transposed import find_transposed, materialize

    from .splice import module_splicer

    flags = ("--iree-hal-target-device=cuda",) + (
        (f"--iree-cuda-target={options.cuda_target}",) if options.cuda_target else ())
    try:
        target = cuda_target_attribute(flags)
    except Exception as e:  # IREE's CompilerToolError (a crash of its tool) or no CUDA target in its output
        lines = [ln.strip() for ln in str(e).splitlines() if "error:" in ln]
        why = lines[0].split("error:", 1)[1].strip() if lines else " ".join(str(e).split())[:200]
        raise PassError(f"falcon-kernels: IREE rejects cuda-target={options.cuda_target or '(its default)'}"
                        f": {why}") from None
    splicers: dict = {}
    for (c, served, entry), k in zip(chosen, compiled):
        if isinstance(k, Exception):
            raise PassError(f"falcon-kernels: {k}", location=entry["location"])
        sp = module_splicer(c.op, root, splicers, target)
        # The call takes A, B and C as the op holds them (a batch of 1 keeps its
        # unit dimension there, which the kernel's spec drops: same buffers), or
        # an operand's transpose source viewed as the kernel reads it.
        # The sources are found again on the op as it is now: one found by serve() may be the result
        # of a contraction replaced (erased) above, its Value gone; the permutation still reads its
        # replacement, of the same type, so the view is the same.
        reads = [find_transposed(v) if r is not None else None for r, v in zip(served.reads, c.op.operands[:2])]
        assert [r and r.shape for r in reads] == [r and r.shape for r in served.reads], entry["location"]
        with c.op.location, ir.InsertionPoint(c.op):
            a, b = (materialize(r) if r is not None else v for r, v in zip(reads, c.op.operands[:2]))
        types = tuple(str(v.type) for v in (a, b, c.op.results[0]))
        if entry["kernel"] == "plan":
            fn = sp.plan_function(k, types)
            entry["plan"] = {"scheme": k.scheme_name, "R": k.geometry.R,
                             "operands": k.spec.operand_dtype + (" (scaled)" if k.spec.scaled else ""),
                             "products": k.spec.product_dtype,
                             "gemm_config": k.products.config.label}
        else:
            fn = sp.gemm_function(k, types)
            entry["config"] = k.config.label
            entry["shared_bytes"] = k.shared
            entry["programs"] = k.num_programs
        entry["arch"] = arch
        entry["accumulate"] = served.accumulate
        sp.replace(c.op, fn, served.accumulate, operands=(a, b))
