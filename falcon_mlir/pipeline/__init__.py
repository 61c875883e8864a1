"""IREE sessions and phases: in-process compile with a Python rewrite between
two IREE phases (:mod:`.session`; errors in :mod:`.diagnostics`, phases and
tool flags in :mod:`.phases`), the stages falcon runs there (:mod:`.stages`)
and their assembly for falcon-compile and the API (:mod:`.assemble`; the target
read from iree-compile's flags: :mod:`.target_flags`)."""

from .diagnostics import CompileError, Diagnostic, RewriteError
from .phases import DEFAULT_REWRITE_PHASE, PHASES, ToolOptions, split_tool_flags
from .session import CompileResult, CompilerSession, compile_module

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
