"""In-process IREE compilation with a Python rewrite between two phases.

The IREE compiler (``iree-base-compiler`` 3.13) is driven through its C
embedding API (``iree.compiler.api``) in this process: no subprocess and no
textual round trip through files.  One compile is:

1. a :class:`CompilerSession` (one IREE ``Session``, i.e. one MLIRContext and
   one set of flags; flags freeze after the first compile, so use one session
   per target) parses the source (MLIR text or MLIR bytecode, StableHLO
   included) into an invocation;
2. the invocation compiles up to the *rewrite phase* (default
   ``global-optimization``) and hands the module over
   (``export_module``);
3. the Python ``rewrite(module_op)`` callback runs on it, inside the session's
   own context, and returns its report (a list of dicts);
4. a second invocation takes the module over
   (``ireeCompilerInvocationImportStealModule``; IREE verifies it, and frees
   it with the invocation) and compiles from the rewrite phase to
   ``compile_to`` (default ``end``);
5. the output is VM bytecode (a ``.vmfb``) when compiling to ``end``, else the
   module as MLIR text (or MLIR bytecode when asked).

Diagnostics and errors (:class:`CompileError`, :class:`RewriteError`) are
in :mod:`.diagnostics`; the ctypes bindings of what the Python API does not
wrap (phases, callback diagnostics, module import) in :mod:`.capi`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence, Union

from .capi import compiler_dylib, erase_module, import_steal, set_phases
from .diagnostics import CompileError, Diagnostic, DiagnosticSink, RewriteError
from .phases import DEFAULT_REWRITE_PHASE, PHASES, ToolOptions, phase_index, split_tool_flags

__all__ = [
    "PHASES",
    "DEFAULT_REWRITE_PHASE",
    "Diagnostic",
    "CompileError",
    "RewriteError",
    "CompileResult",
    "CompilerSession",
    "ToolOptions",
    "split_tool_flags",
    "compile_module",
]

Source = Union[str, bytes, bytearray, memoryview, "os.PathLike[str]"]
RewriteFn = Callable[[Any], Optional[Sequence[dict]]]

_MLIR_BYTECODE_MAGIC = b"ML\xefR"


@dataclass
class CompileResult:
    """What :meth:`CompilerSession.compile` returns.

    Attributes:
        output: the compiled program: VM bytecode (``.vmfb``) when compiling
            to ``end``, else the module as MLIR text (UTF-8) or MLIR bytecode.
        output_kind: ``"vmfb"``, ``"mlir"`` or ``"mlirbc"``.
        report: the rewrite's report (one dict per contraction), empty when
            no rewrite ran.
        rewrite_phase: the phase after which the rewrite ran, or None.
        diagnostics: non-fatal diagnostics (warnings, remarks) IREE emitted.
    """

    output: bytes
    output_kind: str
    report: list = field(default_factory=list)
    rewrite_phase: Optional[str] = None
    diagnostics: tuple[Diagnostic, ...] = ()

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "warning")


def _is_mlir_bytecode(data) -> bool:
    return bytes(data[:4]) == _MLIR_BYTECODE_MAGIC


# --------------------------------------------------------------------------
# The session
# --------------------------------------------------------------------------


class CompilerSession:
    """One IREE compiler session: one MLIRContext, one set of flags (one
    target).  Flags take effect for every compile in the session and freeze
    after the first one, so make one session per target.

    Args:
        flags: IREE session flags in ``--name=value`` form (e.g.
            ``--iree-hal-target-device=local``,
            ``--iree-hal-local-target-device-backends=llvm-cpu``,
            ``--iree-input-type=stablehlo``).  Tool-level flags
            (``--compile-to`` ...) are not accepted here; see
            :func:`split_tool_flags`.

    Raises:
        CompileError: IREE rejected a flag (``stage == "flags"``; the message
            is IREE's, e.g. ``option not found: iree-bogus``).

    Use as a context manager or call :meth:`close`.  Not thread-safe.
    """

    def __init__(self, flags: Sequence[str] = ()):
        from iree.compiler.api import Session

        compiler_dylib()
        self._session = Session()
        # The session keeps owning its MLIRContext (Session.context would
        # steal it, and a context wrapped from a capsule is never destroyed
        # by Python: that leaks a few MB per compile).
        self._context = None
        self.flags = [str(f) for f in flags]
        if self.flags:
            try:
                self._session.set_flags(*self.flags)
            except ValueError as e:
                reason = " ".join(str(e).split())
                self.close()
                raise CompileError(reason, stage="flags") from None

    # -- lifetime --------------------------------------------------------
    def close(self) -> None:
        """Destroys the IREE session and its MLIRContext (idempotent); IR
        objects from this session must not be used afterwards."""
        s = getattr(self, "_session", None)
        if s is not None:
            s.close()
            self._session = None
            self._context = None

    @property
    def context(self):
        """The session's MLIRContext as an ``ir.Context`` (borrowed: the
        session owns it and destroys it in :meth:`close`).  Every dialect
        IREE knows is available in it (StableHLO, linalg, util, ...)."""
        if self._session is None:
            raise CompileError("session is closed", stage="flags")
        if self._context is None:
            from iree.compiler import ir
            from iree.compiler.api import ctypes_dl

            ptr = compiler_dylib().ireeCompilerSessionBorrowContext(self._session._session_p)
            capsule = ctypes_dl.PyCapsule_New(ptr, ctypes_dl.MLIR_PYTHON_CAPSULE_CONTEXT, None)
            self._context = ir.Context._CAPICreate(capsule)
        return self._context

    def __enter__(self) -> "CompilerSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def get_flags(self, non_default_only: bool = True) -> list[str]:
        """The session's flags as IREE sees them."""
        return list(self._session.get_flags(non_default_only))

    # -- helpers ---------------------------------------------------------
    def _new_invocation(self, sink: DiagnosticSink):
        inv = self._session.invocation()
        sink.attach(inv)
        return inv

    def _open_source(self, source: Source, input_name: Optional[str]):
        from iree.compiler.api import Source as IreeSource

        try:
            if isinstance(source, os.PathLike):
                path = os.fspath(source)
                if not os.path.isfile(path):
                    raise CompileError(f"cannot open input file '{path}'", stage="source")
                if input_name is None:
                    return IreeSource.open_file(self._session, path)
                with open(path, "rb") as f:
                    source = f.read()
            if isinstance(source, str):
                data = source.encode("utf-8")
            elif isinstance(source, (bytes, bytearray, memoryview)):
                data = bytes(source)
            else:
                raise TypeError(
                    f"source must be str, bytes or os.PathLike, not {type(source).__name__}"
                )
            if not _is_mlir_bytecode(data) and not data.endswith(b"\0"):
                # The MLIR lexer stops at a NUL; give text one.
                data += b"\0"
            return IreeSource.wrap_buffer(
                self._session, data, buffer_name=input_name or "<source>"
            )
        except CompileError:
            raise
        except (OSError, ValueError) as e:
            raise CompileError(f"cannot open input: {e}", stage="source") from None

    @staticmethod
    def _output(inv, kind: str, sink, mark) -> bytes:
        from iree.compiler.api import Output

        out = Output.open_membuffer()
        try:
            if kind == "vmfb":
                inv.output_vm_bytecode(out)
            elif kind == "mlirbc":
                inv.output_ir_bytecode(out)
            else:
                inv.output_ir(out)
            return bytes(out.map_memory())
        except ValueError as e:
            raise CompileError(
                f"cannot write output: {e}", sink.since(mark), stage="output"
            ) from None
        finally:
            out.close()

    # -- the compile -----------------------------------------------------
    def compile(
        self,
        source: Source,
        *,
        rewrite: Optional[RewriteFn] = None,
        phase: str = DEFAULT_REWRITE_PHASE,
        compile_to: str = "end",
        compile_from: str = "start",
        emit_mlir_bytecode: bool = False,
        input_name: Optional[str] = None,
    ) -> CompileResult:
        """Compiles ``source`` with this session's flags, running ``rewrite``
        after ``phase``.

        Args:
            source: ``os.PathLike`` (a file to read), ``str`` (MLIR text) or
                ``bytes`` (MLIR text or MLIR bytecode, e.g. StableHLO
                bytecode).  A plain ``str`` is always MLIR text, never a path.
            rewrite: ``rewrite(module_op) -> report``: called exactly once,
                with the ``builtin.module`` ``ir.Operation`` at ``phase``
                and the session's context current (no default
                ``ir.Location``: pass ``loc=``); it mutates the module in
                place and returns a list of dicts (or None).  Handles to
                the module's ops are invalid once it returns.  None: plain
                IREE compile, one invocation, no export.
            phase: IREE phase after which the rewrite runs (``input`` ..
                ``vm``).  It is clamped into ``[compile_from, compile_to]``:
                with ``compile_to`` earlier than ``phase`` the rewrite runs
                at ``compile_to`` (so the MLIR output shows it).
            compile_to: last phase to run; ``end`` produces VM bytecode,
                anything else MLIR.
            compile_from: phase the input is already at (``start`` for
                ordinary input).
            emit_mlir_bytecode: MLIR bytecode rather than text when
                ``compile_to`` is not ``end``.
            input_name: buffer name used in diagnostic locations for
                in-memory sources (default ``<source>``); for a path source,
                the path is used.

        Returns:
            CompileResult.

        Raises:
            CompileError: the source cannot be read or parsed, a phase name
                is unknown, an IREE pass fails, the module does not verify
                after the rewrite, or output fails; the message carries
                IREE's diagnostics with their locations.
            RewriteError: the rewrite callback raised (a CompileError).
        """
        if self._session is None:
            raise CompileError("session is closed", stage="flags")
        i_from, i_to, out_kind = self._span(compile_from, compile_to, emit_mlir_bytecode)
        sink = DiagnosticSink()
        src = self._open_source(source, input_name)

        inv = self._new_invocation(sink)
        try:
            mark = sink.mark()
            if not inv.parse_source(src):
                raise CompileError("failed to parse the input", sink.since(mark), stage="parse")
            if rewrite is None:
                output = self._run_phases(inv, sink, compile_from, compile_to, out_kind)
                return CompileResult(output, out_kind, [], None, sink.non_fatal())
            stop = self._rewrite_phase(phase, i_from, i_to)
            module_op = self._export_at(inv, sink, mark, compile_from, stop)
        finally:
            # Drops this invocation's diagnostic handler from the context;
            # the exported module is ours now.
            inv.close()

        try:
            report = self._run_rewrite(rewrite, module_op, sink)
        except BaseException:
            erase_module(module_op)
            raise
        output = self._resume(module_op, sink, stop, compile_to, out_kind)
        return CompileResult(output, out_kind, report, stop, sink.non_fatal())

    @staticmethod
    def _span(compile_from: str, compile_to: str, emit_mlir_bytecode: bool) -> tuple:
        """(index of ``compile_from``, index of ``compile_to``, output kind: ``vmfb``, ``mlirbc`` or
        ``mlir``); the phases checked (known, in order)."""
        i_from = phase_index(compile_from, "compile-from")
        i_to = phase_index(compile_to, "compile-to")
        if i_from >= i_to:
            raise CompileError(
                f"compile-from phase '{compile_from}' must precede compile-to phase '{compile_to}'",
                stage="flags",
            )
        return i_from, i_to, "vmfb" if compile_to == "end" else ("mlirbc" if emit_mlir_bytecode else "mlir")

    def _run_phases(self, inv, sink, compile_from: str, compile_to: str, out_kind: str) -> bytes:
        """A plain compile of the parsed ``inv`` from ``compile_from`` to ``compile_to``."""
        set_phases(inv, compile_from, compile_to)
        mark = sink.mark()
        if not inv.execute():
            raise CompileError("compilation failed", sink.since(mark), stage="compile")
        mark = sink.mark()
        return self._output(inv, out_kind, sink, mark)

    @staticmethod
    def _rewrite_phase(phase: str, i_from: int, i_to: int) -> str:
        """The phase after which the rewrite runs: ``phase`` clamped into
        ``[compile_from, compile_to]``.

        Raises:
            CompileError: ``phase`` is unknown or outside ``input`` ..
                ``global-optimization``.
        """
        i_rw = phase_index(phase, "rewrite")
        if i_rw <= PHASES.index("start") or i_rw > PHASES.index("global-optimization"):
            # Later phases hold contractions inside dispatch regions and
            # executables, where a rewrite cannot be bufferized.
            raise CompileError(
                f"the rewrite phase must lie between 'input' and 'global-optimization', "
                f"not '{phase}'",
                stage="flags",
            )
        return PHASES[min(max(i_rw, i_from), i_to)]

    def _export_at(self, inv, sink, mark: int, compile_from: str, stop: str):
        """Run the parsed ``inv`` to phase ``stop`` and take its module over."""
        if PHASES.index(stop) > PHASES.index(compile_from):
            set_phases(inv, compile_from, stop)
            mark = sink.mark()
            if not inv.execute():
                raise CompileError("compilation failed", sink.since(mark), stage="compile")
        try:
            return inv.export_module()
        except RuntimeError as e:
            raise CompileError(str(e), sink.since(mark), stage="compile") from None

    def _resume(self, module_op, sink, stop: str, compile_to: str, out_kind: str) -> bytes:
        """A second invocation takes ``module_op`` over (verifying it) and
        compiles from ``stop`` to ``compile_to``; returns the output."""
        inv2 = self._new_invocation(sink)
        try:
            mark = sink.mark()
            # The invocation takes the module over (and erases it when it is
            # destroyed, even when the import fails); the Python handle is
            # invalidated so it cannot be used after that.
            ok = import_steal(inv2, module_op)
            if not ok:
                raise CompileError(
                    "the module does not verify after the rewrite",
                    sink.since(mark),
                    stage="import",
                )
            if PHASES.index(stop) < PHASES.index(compile_to):
                set_phases(inv2, stop, compile_to)
                mark = sink.mark()
                if not inv2.execute():
                    raise CompileError("compilation failed", sink.since(mark), stage="compile")
            mark = sink.mark()
            return self._output(inv2, out_kind, sink, mark)
        finally:
            inv2.close()

    def _run_rewrite(self, rewrite: RewriteFn, module_op, sink: DiagnosticSink) -> list:
        ctx = module_op.context
        mark = sink.mark()
        handler = ctx.attach_diagnostic_handler(sink.python_handler)
        try:
            with ctx:
                result = rewrite(module_op)
        except CompileError:
            raise
        except Exception as e:
            from falcon_mlir.passes import PassError

            reason = e.line() if isinstance(e, PassError) else \
                f"lcma rewrite failed: {type(e).__name__}: {e}"
            raise RewriteError(reason, sink.since(mark), stage="rewrite") from e
        finally:
            handler.detach()
        if result is None:
            return []
        try:
            return list(result)
        except TypeError:
            raise RewriteError(
                f"the rewrite returned {type(result).__name__}, expected a list of dicts",
                stage="rewrite",
            ) from None


# --------------------------------------------------------------------------
# One-call convenience
# --------------------------------------------------------------------------


def _guess_input_type(source: Source, flags: Sequence[str]) -> list[str]:
    """StableHLO portable artifacts (``jax.export``, VHLO bytecode) are not
    recognized by ``--iree-input-type=auto``; add ``stablehlo`` for them when
    the caller chose no input type."""
    if any(str(f).lstrip("-").startswith("iree-input-type") for f in flags):
        return []
    data = None
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    elif isinstance(source, os.PathLike):
        try:
            with open(os.fspath(source), "rb") as f:
                data = f.read()
        except OSError:
            return []
    if data is not None and _is_mlir_bytecode(data) and b"vhlo" in data:
        return ["--iree-input-type=stablehlo"]
    return []


def compile_module(
    source: Source,
    *,
    flags: Sequence[str] = (),
    rewrite: Optional[RewriteFn] = None,
    phase: str = DEFAULT_REWRITE_PHASE,
    input_name: Optional[str] = None,
    result: bool = False,
) -> Union[bytes, CompileResult]:
    """Compiles ``source`` in a fresh session, with iree-compile flags.

    Args:
        source: see :meth:`CompilerSession.compile`.
        flags: iree-compile flags (``--name=value``): session flags and the
            tool flags ``--compile-to``, ``--compile-from``,
            ``--emit-mlir-bytecode``.
        rewrite: ``rewrite(module_op) -> report`` or None (plain IREE).
        phase: IREE phase after which the rewrite runs.
        input_name: name used in diagnostic locations for in-memory input.
        result: return the whole :class:`CompileResult` instead of bytes.

    Returns:
        The output bytes (vmfb, or MLIR text when ``--compile-to`` stops
        before ``end``), or a CompileResult when ``result`` is true.

    Raises:
        CompileError: see :meth:`CompilerSession.compile`; also for a flag
            IREE does not know (``stage == "flags"``).
    """
    session_flags, tool = split_tool_flags(flags)
    session_flags += _guess_input_type(source, session_flags)
    with CompilerSession(session_flags) as session:
        res = session.compile(
            source,
            rewrite=rewrite,
            phase=phase,
            compile_to=tool.compile_to,
            compile_from=tool.compile_from,
            emit_mlir_bytecode=tool.emit_mlir_bytecode,
            input_name=input_name,
        )
    return res if result else res.output
