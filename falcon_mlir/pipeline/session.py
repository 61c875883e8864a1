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

Diagnostics: each invocation gets a ctypes callback through
``ireeCompilerInvocationEnableCallbackDiagnostics`` (the Python ``Invocation``
only offers console diagnostics); IREE formats each diagnostic with its
location (``file:line:col: message``, notes appended).  Diagnostics that the
Python side emits during the rewrite are captured with the context's own
diagnostic handler.  Every failure is raised as :class:`CompileError`
(``str(err)`` = the error diagnostics, ``err.summary`` = a one-line form).

The compile phases (``ireeCompilerInvocationSetCompileToPhase`` /
``...SetCompileFromPhase``) are exported by ``libIREECompiler.so`` but not
wrapped by the Python API; they are bound here with ctypes.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence, Union

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

#: IREE's compile phases, in pipeline order (``iree-compile --compile-to``).
PHASES: tuple[str, ...] = (
    "start",
    "input",
    "abi",
    "preprocessing",
    "global-optimization",
    "dispatch-creation",
    "flow",
    "stream",
    "executable-sources",
    "executable-configurations",
    "executable-targets",
    "hal",
    "vm",
    "end",
)

#: Phase after which the rewrite runs by default.  After ``input`` every
#: frontend (linalg, StableHLO, torch, ONNX) is plain linalg on tensors with
#: contractions as named ops (``linalg.matmul`` / ``linalg.batch_matmul``),
#: and all of global optimization (const-eval of weight combines, hoisting,
#: dispatch formation) still runs on the rewritten IR.  Rewriting after
#: ``global-optimization`` instead makes llvm-cpu codegen fail on the
#: rewrite's insert_slice assembly ("write affecting operations on global
#: resources are restricted to workgroup distributed contexts", seen with
#: IREE 3.13), so that phase is only an option.
DEFAULT_REWRITE_PHASE = "input"

Source = Union[str, bytes, bytearray, memoryview, "os.PathLike[str]"]
RewriteFn = Callable[[Any], Optional[Sequence[dict]]]

_SEVERITIES = {0: "note", 1: "warning", 2: "error", 3: "remark"}
_LOC_RE = re.compile(r"^(?P<loc>[^\n]*?:\d+:\d+): ")
_MLIR_BYTECODE_MAGIC = b"ML\xefR"


# --------------------------------------------------------------------------
# Diagnostics and errors
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Diagnostic:
    """One diagnostic that IREE (or MLIR) emitted.

    Attributes:
        severity: ``"error"``, ``"warning"``, ``"note"`` or ``"remark"``.
        message: the formatted text, starting with the location
            (``file:line:col: ...``) when the diagnostic has one; attached
            notes follow on further lines.
    """

    severity: str
    message: str

    @property
    def location(self) -> Optional[str]:
        """``file:line:col`` of the diagnostic, or None when it has none."""
        m = _LOC_RE.match(self.message)
        return m.group("loc") if m else None

    @property
    def first_line(self) -> str:
        """The message's headline on one line (location included): its first
        non-empty line, joined with the next one when it ends with ':'
        (IREE's "while creating CPU target:" style)."""
        lines = [l.strip() for l in self.message.splitlines() if l.strip()]
        if not lines:
            return ""
        head = lines[0]
        if head.endswith(":") and len(lines) > 1:
            head = f"{head} {lines[1]}"
        return head

    def __str__(self) -> str:
        return self.message


class CompileError(Exception):
    """A compilation failed: bad flags, bad input, a failing IREE pass, a
    module that does not verify after the rewrite, or a rewrite that raised.

    Attributes:
        diagnostics: every diagnostic captured during the failing step
            (errors, warnings and notes), in emission order.
        stage: which step failed: ``"flags"``, ``"source"``, ``"parse"``,
            ``"compile"``, ``"rewrite"``, ``"import"``, ``"output"``.

    ``str(err)`` is the error diagnostics with their locations (or the
    plain reason when IREE gave no diagnostic); :attr:`summary` is one line.
    """

    def __init__(
        self,
        reason: str,
        diagnostics: Iterable[Diagnostic] = (),
        *,
        stage: str = "compile",
    ):
        self.reason = reason
        self.diagnostics: tuple[Diagnostic, ...] = tuple(diagnostics)
        self.stage = stage
        errors = [d.message for d in self.diagnostics if d.severity == "error"]
        super().__init__("\n".join(errors) if errors else reason)

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "error")

    @property
    def summary(self) -> str:
        """One line: the first error diagnostic's first line (which starts
        with its location), else the reason."""
        errors = self.errors
        if errors:
            return errors[0].first_line
        return " ".join(self.reason.split())


class RewriteError(CompileError):
    """The Python rewrite callback raised; ``__cause__`` is its exception."""


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


# --------------------------------------------------------------------------
# ctypes bindings for what iree.compiler.api does not wrap
# --------------------------------------------------------------------------

_DIAG_CALLBACK = ctypes.CFUNCTYPE(
    None, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p
)
_bind_lock = threading.Lock()
_bound_dylib = None


def _dylib():
    """libIREECompiler.so as loaded by iree.compiler.api, with the extra
    entry points given signatures."""
    global _bound_dylib
    if _bound_dylib is not None:
        return _bound_dylib
    with _bind_lock:
        if _bound_dylib is None:
            from iree.compiler.api import ctypes_dl

            lib = ctypes_dl._dylib
            if lib is None:  # pragma: no cover - the package initializes it
                ctypes_dl._init_dylib()
                lib = ctypes_dl._dylib
            for name in (
                "ireeCompilerInvocationSetCompileToPhase",
                "ireeCompilerInvocationSetCompileFromPhase",
            ):
                fn = getattr(lib, name)
                fn.restype = None
                fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
            fn = lib.ireeCompilerInvocationEnableCallbackDiagnostics
            fn.restype = None
            fn.argtypes = [ctypes.c_void_p, ctypes.c_int, _DIAG_CALLBACK, ctypes.c_void_p]
            fn = lib.ireeCompilerInvocationImportStealModule
            fn.restype = ctypes.c_bool
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            fn = lib.ireeCompilerSessionBorrowContext
            fn.restype = ctypes.c_void_p
            fn.argtypes = [ctypes.c_void_p]
            _bound_dylib = lib
    return _bound_dylib


class _DiagnosticSink:
    """Collects diagnostics from IREE invocations (C callback) and from the
    Python-side MLIR context (during the rewrite)."""

    def __init__(self):
        self.items: list[Diagnostic] = []

        def _cb(severity, message, size, _user):
            try:
                text = ctypes.string_at(message, size).decode("utf-8", "replace")
                self.items.append(Diagnostic(_SEVERITIES.get(severity, "error"), text))
            except BaseException:  # never let an exception cross into C++
                pass

        # Keep the ctypes thunk alive as long as the sink.
        self.c_callback = _DIAG_CALLBACK(_cb)

    def attach(self, invocation) -> None:
        _dylib().ireeCompilerInvocationEnableCallbackDiagnostics(
            invocation._inv_p, 0, self.c_callback, None
        )

    def python_handler(self, diag) -> bool:
        """Handler for ``ir.Context.attach_diagnostic_handler``."""
        try:
            sev = str(diag.severity).rsplit(".", 1)[-1].lower()
            loc = str(diag.location)
            m = re.match(r'^loc\("?(.*?)"?:(\d+):(\d+)\)$', loc)
            prefix = f"{m.group(1)}:{m.group(2)}:{m.group(3)}: " if m else ""
            text = prefix + str(diag.message)
            for note in diag.notes:
                text += "\n" + str(note.message)
            self.items.append(Diagnostic(sev, text))
        except BaseException:
            return False
        return True

    def mark(self) -> int:
        return len(self.items)

    def since(self, mark: int) -> list[Diagnostic]:
        return self.items[mark:]

    def non_fatal(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.items if d.severity != "error")


def _import_steal(invocation, module_op) -> bool:
    """Hands ``module_op`` (a top-level builtin.module) over to
    ``invocation``; invalidates the Python handle."""
    from iree.compiler.api import ctypes_dl

    ptr = ctypes_dl.PyCapsule_GetPointer(
        module_op._CAPIPtr, ctypes_dl.MLIR_PYTHON_CAPSULE_OPERATION
    )
    module_op._set_invalid()
    return bool(_dylib().ireeCompilerInvocationImportStealModule(invocation._inv_p, ptr))


def _erase(module_op) -> None:
    """Frees an exported module that will not be imported again."""
    try:
        module_op.erase()
    except Exception:
        pass


# --------------------------------------------------------------------------
# Flags that belong to the iree-compile tool rather than to a session
# --------------------------------------------------------------------------


@dataclass
class ToolOptions:
    """iree-compile tool-level options (not session flags).

    Attributes:
        compile_from: phase the input is at (``--compile-from``).
        compile_to: last phase to run (``--compile-to``); ``end`` gives VM
            bytecode, any other phase gives MLIR.
        emit_mlir_bytecode: MLIR bytecode instead of text when stopping
            before ``end`` (``--emit-mlir-bytecode``).
    """

    compile_from: str = "start"
    compile_to: str = "end"
    emit_mlir_bytecode: bool = False


_TOOL_VALUE_FLAGS = {"compile-from": "compile_from", "compile-to": "compile_to"}


def split_tool_flags(flags: Iterable[str]) -> tuple[list[str], ToolOptions]:
    """Separates iree-compile's tool-level flags from session flags.

    Recognized: ``--compile-to=PHASE``, ``--compile-from=PHASE``,
    ``--emit-mlir-bytecode[=true|false]`` (one or two leading dashes).
    Everything else is returned unchanged, in order, for
    ``Session.set_flags`` (which reports unknown flags itself).

    Raises:
        CompileError: a phase name is unknown or a tool flag lacks its value.
    """
    session_flags: list[str] = []
    tool = ToolOptions()
    for flag in flags:
        flag = str(flag)
        name, eq, value = flag.lstrip("-").partition("=")
        if flag.startswith("-") and name in _TOOL_VALUE_FLAGS:
            if not eq or not value:
                raise CompileError(f"--{name} requires a value (--{name}=PHASE)", stage="flags")
            if value not in PHASES:
                raise CompileError(
                    f"unknown phase '{value}' for --{name} (expected one of: {', '.join(PHASES)})",
                    stage="flags",
                )
            setattr(tool, _TOOL_VALUE_FLAGS[name], value)
        elif flag.startswith("-") and name == "emit-mlir-bytecode":
            if value.lower() in ("", "true", "1"):
                tool.emit_mlir_bytecode = True
            elif value.lower() in ("false", "0"):
                tool.emit_mlir_bytecode = False
            else:
                raise CompileError(f"bad value '{value}' for --emit-mlir-bytecode", stage="flags")
        elif flag.startswith("-") and name == "split-input-file":
            raise CompileError("--split-input-file is not supported by falcon-mlir", stage="flags")
        else:
            session_flags.append(flag)
    return session_flags, tool


def _phase_index(phase: str, what: str) -> int:
    try:
        return PHASES.index(phase)
    except ValueError:
        raise CompileError(
            f"unknown {what} phase '{phase}' (expected one of: {', '.join(PHASES)})",
            stage="flags",
        ) from None


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

        _dylib()
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

            ptr = _dylib().ireeCompilerSessionBorrowContext(self._session._session_p)
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
    def _new_invocation(self, sink: _DiagnosticSink):
        inv = self._session.invocation()
        sink.attach(inv)
        return inv

    @staticmethod
    def _set_phases(inv, compile_from: str, compile_to: str) -> None:
        lib = _dylib()
        lib.ireeCompilerInvocationSetCompileFromPhase(inv._inv_p, compile_from.encode())
        lib.ireeCompilerInvocationSetCompileToPhase(inv._inv_p, compile_to.encode())

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
        i_from = _phase_index(compile_from, "compile-from")
        i_to = _phase_index(compile_to, "compile-to")
        if i_from >= i_to:
            raise CompileError(
                f"compile-from phase '{compile_from}' must precede compile-to phase '{compile_to}'",
                stage="flags",
            )
        out_kind = "vmfb" if compile_to == "end" else ("mlirbc" if emit_mlir_bytecode else "mlir")
        sink = _DiagnosticSink()
        src = self._open_source(source, input_name)

        inv = self._new_invocation(sink)
        try:
            mark = sink.mark()
            if not inv.parse_source(src):
                raise CompileError("failed to parse the input", sink.since(mark), stage="parse")

            if rewrite is None:
                self._set_phases(inv, compile_from, compile_to)
                mark = sink.mark()
                if not inv.execute():
                    raise CompileError("compilation failed", sink.since(mark), stage="compile")
                mark = sink.mark()
                output = self._output(inv, out_kind, sink, mark)
                return CompileResult(output, out_kind, [], None, sink.non_fatal())

            i_rw = _phase_index(phase, "rewrite")
            if i_rw <= PHASES.index("start") or i_rw > PHASES.index("global-optimization"):
                # Later phases hold contractions inside dispatch regions and
                # executables, where a rewrite cannot be bufferized.
                raise CompileError(
                    f"the rewrite phase must lie between 'input' and 'global-optimization', "
                    f"not '{phase}'",
                    stage="flags",
                )
            i_rw = min(max(i_rw, i_from), i_to)
            stop = PHASES[i_rw]
            if i_rw > i_from:
                self._set_phases(inv, compile_from, stop)
                mark = sink.mark()
                if not inv.execute():
                    raise CompileError("compilation failed", sink.since(mark), stage="compile")
            try:
                module_op = inv.export_module()
            except RuntimeError as e:
                raise CompileError(str(e), sink.since(mark), stage="compile") from None
        finally:
            # Drops this invocation's diagnostic handler from the context;
            # the exported module is ours now.
            inv.close()

        try:
            report = self._run_rewrite(rewrite, module_op, sink)
        except BaseException:
            _erase(module_op)
            raise

        inv2 = self._new_invocation(sink)
        try:
            mark = sink.mark()
            # The invocation takes the module over (and erases it when it is
            # destroyed, even when the import fails); the Python handle is
            # invalidated so it cannot be used after that.
            ok = _import_steal(inv2, module_op)
            if not ok:
                raise CompileError(
                    "the module does not verify after the rewrite",
                    sink.since(mark),
                    stage="import",
                )
            if i_rw < i_to:
                self._set_phases(inv2, stop, compile_to)
                mark = sink.mark()
                if not inv2.execute():
                    raise CompileError("compilation failed", sink.since(mark), stage="compile")
            mark = sink.mark()
            output = self._output(inv2, out_kind, sink, mark)
        finally:
            inv2.close()
        return CompileResult(output, out_kind, report, stop, sink.non_fatal())

    def _run_rewrite(self, rewrite: RewriteFn, module_op, sink: _DiagnosticSink) -> list:
        ctx = module_op.context
        mark = sink.mark()
        handler = ctx.attach_diagnostic_handler(sink.python_handler)
        try:
            with ctx:
                result = rewrite(module_op)
        except CompileError:
            raise
        except Exception as e:
            err = RewriteError(
                f"lcma rewrite failed: {type(e).__name__}: {e}", sink.since(mark), stage="rewrite"
            )
            raise err from e
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
