"""falcon-mlir's Python front door, shaped like ``iree.compiler``'s.

    import falcon_mlir
    vmfb = falcon_mlir.compile_str(mlir_text, target_backends=["llvm-cpu"])
    vmfb, report = falcon_mlir.compile_str(mlir_text, return_report=True)
    falcon_mlir.compile_file("model.mlir", output_file="model.vmfb")

Both compile in this process (see :mod:`falcon_mlir.pipeline.session`): IREE
runs to the rewrite phase, the LCMA rewrite (``lcma-rewrite``, from
:mod:`falcon_mlir.passes.lcma_rewrite`) rewrites the matrix multiplications it
chooses, and IREE compiles the result to the end.  ``lcma=None`` is a plain
IREE compile.  When the IREE target device is ``cuda``, the ``falcon-tiles``
pass (:mod:`falcon_mlir.passes.falcon_tiles`) then attaches tile choices to every
contraction, rewritten or not (``tiles="none"`` turns it off).
"""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence, Union

from .pipeline.session import (
    DEFAULT_REWRITE_PHASE,
    CompileError,
    CompileResult,
    compile_module,
)

__all__ = [
    "compile_str",
    "compile_file",
    "target_flags",
    "make_lcma_rewrite",
    "CompileError",
]

# Backends that run on IREE's `local` HAL device.
_LOCAL_BACKENDS = {"llvm-cpu", "vmvx"}

# None/False: off; "auto"/True: defaults; "scheme=S levels=L"; an
# LcmaOptions; or a callable ``rewrite(module_op) -> list[dict]`` used as is.
LcmaSpec = Union[None, bool, str, Any]

# "auto": falcon-tiles for cuda-sm80 when the flags select the cuda device;
# None/False/"none": off; falcon-tiles options ("cuda-sm80", "target=NAME prefer=CHOICE").
TilesSpec = Union[None, bool, str]


def target_flags(target_backends: Sequence[str]) -> list[str]:
    """IREE flags that select ``target_backends``.

    ``llvm-cpu`` and ``vmvx`` become ``--iree-hal-target-device=local`` with
    ``--iree-hal-local-target-device-backends=...``; any other name (``cuda``,
    ``rocm``, ``vulkan-spirv`` ...) becomes ``--iree-hal-target-device=NAME``.
    """
    if isinstance(target_backends, str):
        target_backends = [target_backends]
    flags: list[str] = []
    local = [b for b in target_backends if b in _LOCAL_BACKENDS]
    devices = [b for b in target_backends if b not in _LOCAL_BACKENDS]
    if local:
        flags.append("--iree-hal-target-device=local")
        flags.append("--iree-hal-local-target-device-backends=" + ",".join(local))
    for d in devices:
        flags.append(f"--iree-hal-target-device={d}")
    return flags


def _parse_lcma(lcma: LcmaSpec):
    """LcmaOptions for ``lcma``, or None when the rewrite is off.

    Raises:
        OptionError (a ValueError): bad option text.
    """
    if lcma is None or lcma is False:
        return None
    from .passes.lcma_rewrite import LcmaOptions

    if lcma is True:
        return LcmaOptions.parse("barriers=true")
    if isinstance(lcma, LcmaOptions):
        return lcma
    if isinstance(lcma, str):
        text = lcma.strip()
        if text == "auto":
            text = ""
        # Inside IREE's pipeline, bare block operands go behind
        # util.optimization_barrier unless the user says otherwise (data
        # tiling on llvm-cpu needs it; see LcmaOptions.barriers).
        if "barriers=" not in text:
            text = (text + " barriers=true").strip()
        return LcmaOptions.parse(text)
    raise TypeError(
        f"lcma must be None, 'auto', an option string or LcmaOptions, not {type(lcma).__name__}"
    )


def _for_cuda(options):
    """Options adjusted for a CUDA target (IREE 3.13): the measured ``h200-iree``
    profile unless ``target=`` was given, padding instead of peeling for a forced
    scheme (peeled strips fail to bufferize on CUDA), and no run-time dispatch
    (its dynamic slices fail the same way)."""
    if options is None:
        return None
    import dataclasses

    return dataclasses.replace(
        options, target=options.target or "h200-iree",
        edge="pad" if options.edge == "auto" and options.forced_schemes() else options.edge,
        dispatch=False)


def make_lcma_rewrite(lcma: LcmaSpec = "auto"):
    """The rewrite callback for ``lcma`` (``module_op -> report``), or None
    when ``lcma`` turns the rewrite off.  Options are parsed here, before any
    compilation.  A callable ``lcma`` is returned unchanged (a custom
    rewrite, e.g. for tests or experiments).

    Raises:
        OptionError (a ValueError): bad option text.
    """
    if callable(lcma) and not isinstance(lcma, (str, bool)):
        return lcma
    options = _parse_lcma(lcma)
    if options is None:
        return None
    from .passes.lcma_rewrite import run_lcma_rewrite

    def rewrite(module_op):
        from iree.compiler import passmanager

        report = run_lcma_rewrite(module_op, options)
        if any(e.get("plan") != "classical" for e in report):
            # Fold the rewrite's slices of fills and share its constants before
            # IREE resumes: without this, llvm-cpu codegen of the products can
            # exceed the stack allocation limit (seen with IREE 3.13 at 2048^3).
            passmanager.PassManager.parse("builtin.module(canonicalize,cse)").run(module_op)
        return report

    rewrite.options = options  # type: ignore[attr-defined]
    return rewrite


def _tiles_options(tiles: TilesSpec, flags: Sequence[str]):
    """falcon-tiles' ``TilesOptions`` for ``tiles`` given the iree-compile
    ``flags``, or None when the pass does not run.  ``auto`` (the default
    target) becomes ``cuda-sm80`` when the flags select the cuda device, else
    the pass does not run.

    Raises:
        OptionError (a ValueError): an unknown target or option.
    """
    from .passes.falcon_tiles import TilesOptions

    if tiles is None or tiles is False:
        return None
    options = TilesOptions.parse("auto" if tiles is True else str(tiles).replace("target=", ""))
    if options.target == "auto":
        options.target = "cuda-sm80" if targets_cuda(flags) else "none"
    return None if options.target == "none" else options


def targets_cuda(flags: Sequence[str]) -> bool:
    """Whether iree-compile ``flags`` select the cuda device (``--iree-hal-target-device``
    or the older ``--iree-hal-target-backends``, comma lists included)."""
    for f in flags:
        name, _, value = str(f).lstrip("-").partition("=")
        if name in ("iree-hal-target-device", "iree-hal-target-backends") and \
                any(v.strip().startswith("cuda") for v in value.split(",")):
            return True
    return False


def _with_tiles(rewrite, options, tiles_report: Optional[list]):
    """``rewrite`` (or nothing) followed by falcon-tiles with ``options``; the
    callback returns the rewrite's report, the tile entries go to ``tiles_report``."""
    from .passes.falcon_tiles import run_falcon_tiles

    def rewrite_and_tile(module_op):
        report = rewrite(module_op) if rewrite is not None else []
        entries = run_falcon_tiles(module_op, options)
        if tiles_report is not None:
            tiles_report.extend(entries)
        return report

    return rewrite_and_tile


def _build_flags(target_backends, input_type, extra_args) -> list[str]:
    flags = target_flags(target_backends or ())
    if input_type is not None:
        flags.append(f"--iree-input-type={input_type}")
    if isinstance(extra_args, str):
        extra_args = [extra_args]
    flags.extend(str(a) for a in extra_args)
    return flags


def _compile(
    source,
    *,
    target_backends,
    extra_args,
    input_type,
    lcma,
    lcma_phase,
    output_file,
    report,
    return_report,
    input_name,
    tiles="auto",
    tiles_report=None,
):
    flags = _build_flags(target_backends, input_type, extra_args)
    if targets_cuda(flags) and not (callable(lcma) and not isinstance(lcma, (str, bool))):
        lcma = _for_cuda(_parse_lcma(lcma))
    rewrite = make_lcma_rewrite(lcma)
    tiles_options = _tiles_options(tiles, flags)
    if tiles_options is not None:
        rewrite = _with_tiles(rewrite, tiles_options, tiles_report)
    res: CompileResult = compile_module(
        source,
        flags=flags,
        rewrite=rewrite,
        phase=lcma_phase,
        input_name=input_name,
        result=True,
    )
    if report is not None:
        report.extend(res.report)
    out: Optional[bytes] = res.output
    if output_file is not None:
        _write_atomic(os.fspath(output_file), res.output)
        out = None
    return (out, list(res.report)) if return_report else out


def _write_atomic(path: str, data: bytes) -> None:
    """Writes ``data`` to ``path`` via a temporary file in the same folder and
    ``os.replace``: the file is either absent/old or complete."""
    import tempfile

    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def compile_str(
    source: Union[str, bytes],
    *,
    target_backends: Sequence[str] = ("llvm-cpu",),
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
):
    """Compiles MLIR given in memory.

    Args:
        source: MLIR text (``str`` or ``bytes``) or MLIR bytecode (``bytes``;
            StableHLO bytecode included).  A ``str`` is never a path.
        target_backends: e.g. ``("llvm-cpu",)`` or ``("cuda",)``; see
            :func:`target_flags`.  Empty: give the target in ``extra_args``.
        extra_args: any further iree-compile flags (``--name=value``), e.g.
            ``--iree-llvmcpu-target-cpu=host``, ``--iree-opt-data-tiling``,
            ``--compile-to=global-optimization`` (then the output is MLIR
            text, not a vmfb).
        input_type: ``--iree-input-type`` (``auto`` by default in IREE;
            ``stablehlo`` is added automatically for VHLO bytecode).
        lcma: ``"auto"`` (default: rewrite with default options), an option
            string such as ``"scheme=strassen levels=1"``, an
            ``LcmaOptions``, None to turn the rewrite off, or a callable
            ``rewrite(module_op) -> list[dict]`` run in place of
            lcma-rewrite (called once, with the session's context current).
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
            falcon-tiles options (``"cuda-sm80"``, ``"target=cuda-sm80
            prefer=simt64x64"``).
        tiles_report: when given, a list that gets falcon-tiles' entries
            (one dict per contraction: tile choice or why none).

    Returns:
        The vmfb bytes (or MLIR text bytes with ``--compile-to``), None when
        ``output_file`` is given; ``(that, report)`` with ``return_report``.

    Raises:
        CompileError: IREE rejected a flag, the input, or failed; or the
            rewrite failed (``RewriteError``).  The message holds IREE's
            diagnostics with locations.
        OptionError (ValueError): bad ``lcma`` option text.
        OSError: ``output_file`` cannot be written.
    """
    if not isinstance(source, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"compile_str takes str or bytes, not {type(source).__name__}")
    return _compile(
        source,
        target_backends=target_backends,
        extra_args=extra_args,
        input_type=input_type,
        lcma=lcma,
        lcma_phase=lcma_phase,
        output_file=output_file,
        report=report,
        return_report=return_report,
        input_name=input_name,
        tiles=tiles,
        tiles_report=tiles_report,
    )


def compile_file(
    path: Union[str, "os.PathLike[str]"],
    *,
    target_backends: Sequence[str] = ("llvm-cpu",),
    extra_args: Sequence[str] = (),
    input_type: Optional[str] = None,
    lcma: LcmaSpec = "auto",
    lcma_phase: str = DEFAULT_REWRITE_PHASE,
    output_file: Optional[Union[str, "os.PathLike[str]"]] = None,
    report: Optional[list] = None,
    return_report: bool = False,
    tiles: TilesSpec = "auto",
    tiles_report: Optional[list] = None,
):
    """Compiles the MLIR file at ``path`` (text or bytecode); diagnostics name
    the file.  Arguments, return value and errors as :func:`compile_str`.
    """
    import pathlib

    return _compile(
        pathlib.Path(os.fspath(path)),
        target_backends=target_backends,
        extra_args=extra_args,
        input_type=input_type,
        lcma=lcma,
        lcma_phase=lcma_phase,
        output_file=output_file,
        report=report,
        return_report=return_report,
        input_name=None,
        tiles=tiles,
        tiles_report=tiles_report,
    )
