"""falcon-mlir's Python front door, shaped like ``iree.compiler``'s.

    import falcon_mlir
    vmfb = falcon_mlir.compile_str(mlir_text)                      # this machine's CPU
    vmfb = falcon_mlir.compile_str(mlir_text, target_backends=["cuda"])
    vmfb, report = falcon_mlir.compile_str(mlir_text, return_report=True)
    falcon_mlir.compile_file("model.mlir", output_file="model.vmfb")

Both compile in this process (see :mod:`falcon_mlir.pipeline.session`): IREE
runs to the rewrite phase, the stages that
:mod:`falcon_mlir.pipeline.assemble` builds run (``lcma-rewrite`` on the
matrix multiplications, ``falcon-tiles`` when the target device is ``cuda``),
and IREE compiles the result to the end. ``lcma=None`` is a plain IREE
compile but for contractions over an empty reduction (K = 0), which are
replaced by their init (the ``empty-reduction`` pass; IREE 3.13 crashes on them). What the target implies for the options (e.g. cuda: the
``h200-iree`` profile) is listed in each report entry's ``defaults``.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence, Union

from .pipeline.session import DEFAULT_REWRITE_PHASE, CompileError

__all__ = [
    "compile_str",
    "compile_file",
    "backend_flags",
    "make_lcma_rewrite",
    "CompileError",
]

# Backends that run on IREE's `local` HAL device.
_LOCAL_BACKENDS = {"llvm-cpu", "vmvx"}

# None/False/"none": off; "auto"/True: defaults; "scheme=S levels=L"; an
# LcmaOptions; or a callable ``rewrite(module_op) -> list[dict]`` used as is.
LcmaSpec = Union[None, bool, str, Any]

# "auto": falcon-tiles for cuda-sm80 when the flags select the cuda device;
# None/False/"none": off; falcon-tiles options ("cuda-sm80", "table=NAME prefer=CHOICE").
TilesSpec = Union[None, bool, str, Any]

# "auto": falcon-kernels (sm_90a) when the flags select the cuda device and Triton
# is installed, (x86-avx512) for an llvm-cpu target CPU with AVX-512 and a C compiler, (x86-avx2)
# for one with AVX2 and FMA but not AVX-512;
# None/False/"none": off; falcon-kernels options ("arch=sm_90a f32-mode=ieee").
KernelsSpec = Union[None, bool, str, Any]


def backend_flags(target_backends: Sequence[str]) -> list:
    """IREE flags that select ``target_backends``.

    ``llvm-cpu`` and ``vmvx`` become ``--iree-hal-target-device=local`` with
    ``--iree-hal-local-target-device-backends=...``; any other name (``cuda``,
    ``rocm``, ``vulkan-spirv`` ...) becomes ``--iree-hal-target-device=NAME``.
    (Named compile targets with their CPU/GPU flags: :func:`falcon_mlir.targets.target_flags`.)
    """
    if isinstance(target_backends, str):
        target_backends = [target_backends]
    flags: list = []
    local = [b for b in target_backends if b in _LOCAL_BACKENDS]
    devices = [b for b in target_backends if b not in _LOCAL_BACKENDS]
    if local:
        flags.append("--iree-hal-target-device=local")
        flags.append("--iree-hal-local-target-device-backends=" + ",".join(local))
    for d in devices:
        flags.append(f"--iree-hal-target-device={d}")
    return flags


def make_lcma_rewrite(lcma: LcmaSpec = "auto"):
    """The lcma-rewrite callback (``module_op -> report``) as it runs inside
    IREE's pipeline with no target flags (so only the pipeline's own defaults,
    e.g. ``barriers``), or None when ``lcma`` turns the rewrite off. Options
    are parsed here, before any compilation. A callable ``lcma`` is returned
    unchanged (a custom rewrite, e.g. for tests or experiments).

    Raises:
        OptionError (a ValueError): bad option text.
    """
    from .pipeline.assemble import make_rewrite

    return make_rewrite(lcma, tiles=None, flags=())


def _joined(args: Sequence[str]) -> list:
    """``args`` with each ``--name value`` pair (a flag without ``=`` followed
    by an item that does not start with ``-``) written ``--name=value``, the
    only form IREE's session takes ("requires a value!") and the form the
    pipeline reads the target from (``--iree-llvmcpu-target-cpu``,
    ``--iree-hal-target-device``)."""
    out: list = []
    i = 0
    while i < len(args):
        a = args[i]
        if (a.startswith("-") and "=" not in a and i + 1 < len(args)
                and not args[i + 1].startswith("-")):
            out.append(f"{a}={args[i + 1]}")
            i += 2
        else:
            out.append(a)
            i += 1
    return out


def _flags(target_backends, input_type, extra_args) -> list:
    flags = backend_flags(target_backends or ())
    if input_type is not None:
        flags.append(f"--iree-input-type={input_type}")
    if isinstance(extra_args, str):
        extra_args = [extra_args]
    flags.extend(_joined([str(a) for a in extra_args]))
    return flags


def _compile(source, *, target_backends, extra_args, input_type, lcma, lcma_phase, output_file,
             report, return_report, input_name, tiles, tiles_report, kernels):
    from .files import write_atomic
    from .pipeline.assemble import compile_source

    res = compile_source(source, flags=_flags(target_backends, input_type, extra_args),
                         lcma=lcma, tiles=tiles, phase=lcma_phase, input_name=input_name,
                         tiles_report=tiles_report, kernels=kernels)
    if report is not None:
        report.extend(res.report)
    out: Optional[bytes] = res.output
    if output_file is not None:
        write_atomic(os.fspath(output_file), res.output)
        out = None
    return (out, list(res.report)) if return_report else out


def compile_str(
    source: Union[str, bytes],
    *,
    target_backends: Optional[Sequence[str]] = None,
    extra_args: Sequence[str] = (),
    input_type: Optional[str] = None,
    lcma: LcmaSpec = "auto",
    lcma_phase: str = DEFAULT_REWRITE_PHASE,
    output_file: Optional[Union[str, "os.PathLike[str]"]] = None,
    report: Optional[list] = None,
    return_report: bool = False,
    input_name: Optional[str] = None,
    tiles: TilesSpec = "auto",
    tiles_report: Optional[list] = None,
    kernels: KernelsSpec = "auto",
):
    """Compiles MLIR given in memory.

    Args:
        source: MLIR text (``str`` or ``bytes``) or MLIR bytecode (``bytes``;
            StableHLO bytecode included).  A ``str`` is never a path.
        target_backends: e.g. ``("llvm-cpu",)`` or ``("cuda",)``; see
            :func:`backend_flags`.  ``None`` or empty: the device comes from
            ``extra_args``, and when they name none either, the default
            target: this machine's CPU (llvm-cpu with
            ``--iree-llvmcpu-target-cpu=host``;
            :data:`falcon_mlir.pipeline.assemble.DEFAULT_TARGET`).
        extra_args: any further iree-compile flags (``--name=value``, or
            ``--name`` and ``value`` as two items), e.g.
            ``--iree-opt-data-tiling``, ``--compile-to=global-optimization``
            (then the output is MLIR text, not a vmfb).
        input_type: ``--iree-input-type`` (``auto`` by default in IREE;
            ``stablehlo`` is added automatically for VHLO bytecode).
        lcma: ``"auto"`` (default: rewrite with default options), an option
            string such as ``"scheme=strassen levels=1"``, an
            ``LcmaOptions``, None to turn the rewrite off, or a callable
            ``rewrite(module_op) -> list[dict]`` run in place of
            lcma-rewrite (called once, with the session's context current).
            Options left at auto get the pipeline's and the target's
            defaults (:mod:`falcon_mlir.pipeline.assemble`; listed in each
            report entry's ``defaults``).
        lcma_phase: IREE phase after which the rewrite runs.
        output_file: when given, the output is written there atomically and
            the function returns None.
        report: when given, a list that gets the rewrite's report entries
            (one dict per contraction found) appended.
        return_report: return ``(output, report)`` instead of ``output``.
        input_name: name used for the source in diagnostic locations.
        tiles: ``"auto"`` (default: the ``falcon-tiles`` pass for
            ``cuda-sm80`` runs after the rewrite when the target device is
            ``cuda``, on products and on contractions left classical),
            ``"none"``/None to keep IREE's default tile choices, or
            falcon-tiles options (``"cuda-sm80"``, ``"table=cuda-sm80
            prefer=simt64x64"``).
        tiles_report: when given, a list that gets falcon-tiles' entries
            (one dict per contraction: tile choice or why none).
        kernels: ``"auto"`` (default: the ``falcon-kernels`` pass runs for a
            ``cuda`` target when Triton is installed: contractions and
            kernel-form plans become falcon's generated sm_90a kernels; and
            for an llvm-cpu target whose CPU has AVX-512 F/BW/DQ/VL when a C
            compiler is found: classical f32 GEMMs become falcon's CPU
            kernel, ``arch=x86-avx512`` (``x86-avx2`` where the CPU has AVX2 and FMA only); each report entry lists them under
            ``kernels``), ``"none"``/None to keep IREE's code (with
            ``lcma=None``: plain IREE), or falcon-kernels options
            (``"arch=sm_90a f32-mode=ieee"``, ``"min-flops=0"``).

    Returns:
        The vmfb bytes (or MLIR text bytes with ``--compile-to``), None when
        ``output_file`` is given; ``(that, report)`` with ``return_report``.

    Raises:
        CompileError: IREE rejected a flag, the input, or failed; or the
            rewrite failed (``RewriteError``).  The message holds IREE's
            diagnostics with locations.
        OptionError (ValueError): bad ``lcma``, ``tiles`` or ``kernels`` option
            text, or one of them of another type (``lcma=0``: an
            ``OptionTypeError``, also a ``TypeError``).
        OSError: ``output_file`` cannot be written.
    """
    if not isinstance(source, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"compile_str takes str or bytes, not {type(source).__name__}")
    return _compile(source, target_backends=target_backends, extra_args=extra_args,
                    input_type=input_type, lcma=lcma, lcma_phase=lcma_phase,
                    output_file=output_file, report=report, return_report=return_report,
                    input_name=input_name, tiles=tiles, tiles_report=tiles_report,
                    kernels=kernels)


def compile_file(
    path: Union[str, "os.PathLike[str]"],
    *,
    target_backends: Optional[Sequence[str]] = None,
    extra_args: Sequence[str] = (),
    input_type: Optional[str] = None,
    lcma: LcmaSpec = "auto",
    lcma_phase: str = DEFAULT_REWRITE_PHASE,
    output_file: Optional[Union[str, "os.PathLike[str]"]] = None,
    report: Optional[list] = None,
    return_report: bool = False,
    tiles: TilesSpec = "auto",
    tiles_report: Optional[list] = None,
    kernels: KernelsSpec = "auto",
):
    """Compiles the MLIR file at ``path`` (text or bytecode); diagnostics name
    the file.  Arguments, return value and errors as :func:`compile_str`.
    """
    import pathlib

    return _compile(pathlib.Path(os.fspath(path)), target_backends=target_backends,
                    extra_args=extra_args, input_type=input_type, lcma=lcma,
                    lcma_phase=lcma_phase, output_file=output_file, report=report,
                    return_report=return_report, input_name=None, tiles=tiles,
                    tiles_report=tiles_report, kernels=kernels)
