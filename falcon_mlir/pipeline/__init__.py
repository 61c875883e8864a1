"""IREE sessions and phases: in-process compile with a Python rewrite
between two IREE phases (see :mod:`falcon_mlir.pipeline.session`)."""

from .session import (
    DEFAULT_REWRITE_PHASE,
    PHASES,
    CompileError,
    CompileResult,
    CompilerSession,
    Diagnostic,
    RewriteError,
    ToolOptions,
    compile_module,
    split_tool_flags,
)

__all__ = [
    "DEFAULT_REWRITE_PHASE",
    "PHASES",
    "CompileError",
    "CompileResult",
    "CompilerSession",
    "Diagnostic",
    "RewriteError",
    "ToolOptions",
    "compile_module",
    "split_tool_flags",
]
