"""Diagnostics and errors of an in-process IREE compile.

Each invocation reports through a C callback (:class:`DiagnosticSink`,
enabled with ``ireeCompilerInvocationEnableCallbackDiagnostics``); IREE
formats each diagnostic with its location (``file:line:col: message``, notes
appended). Diagnostics that the Python side emits during the rewrite are
captured with the context's own handler. Every failure is a
:class:`CompileError` (``str(err)`` = the error diagnostics, ``err.summary``
= one line).
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from typing import Iterable, Optional

from .capi import DIAG_CALLBACK, compiler_dylib

__all__ = ["Diagnostic", "CompileError", "RewriteError", "DiagnosticSink"]

_SEVERITIES = {0: "note", 1: "warning", 2: "error", 3: "remark"}
_LOC_RE = re.compile(r"^(?P<loc>[^\n]*?:\d+:\d+): ")


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


class DiagnosticSink:
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
        self.c_callback = DIAG_CALLBACK(_cb)

    def attach(self, invocation) -> None:
        compiler_dylib().ireeCompilerInvocationEnableCallbackDiagnostics(
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
