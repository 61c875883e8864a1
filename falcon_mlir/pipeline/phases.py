"""IREE's compile phases and the iree-compile flags that belong to the tool
rather than to a session (``--compile-to``, ``--compile-from``,
``--emit-mlir-bytecode``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .diagnostics import CompileError

__all__ = ["PHASES", "DEFAULT_REWRITE_PHASE", "ToolOptions", "split_tool_flags", "phase_index"]

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


def phase_index(phase: str, what: str) -> int:
    try:
        return PHASES.index(phase)
    except ValueError:
        raise CompileError(
            f"unknown {what} phase '{phase}' (expected one of: {', '.join(PHASES)})",
            stage="flags",
        ) from None
