"""ctypes bindings for what ``iree.compiler.api`` does not wrap (IREE 3.13).

``libIREECompiler.so`` exports the compile phases
(``ireeCompilerInvocationSetCompileToPhase`` / ``...SetCompileFromPhase``),
callback diagnostics, module import and the session's context, but the
Python ``Invocation`` offers none of them; they are bound here once.
"""

from __future__ import annotations

import ctypes
import threading

__all__ = ["DIAG_CALLBACK", "compiler_dylib", "set_phases", "import_steal", "erase_module",
           "set_global_flags", "global_flags", "GlobalFlagsError"]

#: ``void (*)(severity, const char *message, size_t size, void *user)``
DIAG_CALLBACK = ctypes.CFUNCTYPE(
    None, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p
)
_bind_lock = threading.Lock()
_bound_dylib = None


def compiler_dylib():
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
            fn.argtypes = [ctypes.c_void_p, ctypes.c_int, DIAG_CALLBACK, ctypes.c_void_p]
            fn = lib.ireeCompilerInvocationImportStealModule
            fn.restype = ctypes.c_bool
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            fn = lib.ireeCompilerSessionBorrowContext
            fn.restype = ctypes.c_void_p
            fn.argtypes = [ctypes.c_void_p]
            _bound_dylib = lib
    return _bound_dylib


class GlobalFlagsError(RuntimeError):
    """Process-wide IREE options were already set to other values."""


_global_flags = None


def set_global_flags(flags) -> None:
    """Set IREE's process-wide (global LLVM command-line) options, e.g.
    ``--iree-stream-resource-min-offset-alignment=128``, which a session's
    flags cannot carry ("option not found"). IREE parses them once per process
    (a second parse is a fatal error), so the first set stays: asking again
    for the same flags does nothing.

    Raises:
        GlobalFlagsError: other global flags were set earlier in this process.
    """
    global _global_flags
    flags = tuple(str(f) for f in flags)
    compiler_dylib()  # loads the library (takes the lock itself)
    with _bind_lock:
        if _global_flags is None:
            from iree.compiler.api import ctypes_dl

            ctypes_dl._initializeGlobalCL("falcon", *flags)
            _global_flags = flags
        elif _global_flags != flags:
            raise GlobalFlagsError(f"IREE's process-wide options are already {list(_global_flags)}; "
                                   f"{list(flags)} needs a new process")


def global_flags():
    """The process-wide options :func:`set_global_flags` set in this process
    (tuple of str), or None when none were set."""
    return _global_flags


def set_phases(inv, compile_from: str, compile_to: str) -> None:
    """Make invocation ``inv`` start at phase ``compile_from`` and stop after ``compile_to``."""
    lib = compiler_dylib()
    lib.ireeCompilerInvocationSetCompileFromPhase(inv._inv_p, compile_from.encode())
    lib.ireeCompilerInvocationSetCompileToPhase(inv._inv_p, compile_to.encode())


def import_steal(invocation, module_op) -> bool:
    """Hands ``module_op`` (a top-level builtin.module) over to
    ``invocation``; invalidates the Python handle."""
    from iree.compiler.api import ctypes_dl

    ptr = ctypes_dl.PyCapsule_GetPointer(
        module_op._CAPIPtr, ctypes_dl.MLIR_PYTHON_CAPSULE_OPERATION
    )
    module_op._set_invalid()
    return bool(compiler_dylib().ireeCompilerInvocationImportStealModule(invocation._inv_p, ptr))


def erase_module(module_op) -> None:
    """Frees an exported module that will not be imported again."""
    try:
        module_op.erase()
    except Exception:
        pass
