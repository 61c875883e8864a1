"""Running falcon's stages on MLIR text or bytecode, as falcon-opt does: the
library half of the tool (parse, run the stages, print or write bytecode,
one ``file:line:col: error: message`` line per diagnostic)."""

from __future__ import annotations

import re
from typing import Optional

from iree.compiler import ir

from falcon_mlir.ir.contraction import format_location

from .stages import Pipeline

__all__ = ["split_input_file", "diagnostic_lines", "run_on_source"]


def split_input_file(text: str) -> list:
    """Split at ``// -----`` lines; each chunk is padded with newlines so its
    line numbers are those of the whole text."""
    out, start, cur = [], 0, []
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if re.match(r"^// -----\s*$", line):
            out.append("\n" * start + "".join(cur))
            start, cur = i + 1, []
        else:
            cur.append(line)
    out.append("\n" * start + "".join(cur))
    return out


def diagnostic_lines(err, filename: str) -> list:
    """One ``file:line:col: error: message`` line per MLIR diagnostic of
    ``err`` (an ``ir.MLIRError``; notes as ``note:`` lines), or one
    ``file: error: ...`` line when it carries none."""
    lines = []
    diags = getattr(err, "error_diagnostics", None) or []
    for d in diags:
        lines.append(f"{format_location(d.location, filename)}: error: {d.message}")
        for n in d.notes:
            lines.append(f"{format_location(n.location, filename)}: note: {n.message}")
    if not lines:
        msg = str(err).strip().splitlines()
        lines.append(f"{filename}: error: {msg[0] if msg else type(err).__name__}")
    return lines


def run_on_source(source, filename: str, stages: list, report: list, *, verify_each: bool = True,
                  print_after_all: bool = False, print_before_all: bool = False,
                  allow_unregistered: bool = False, debug_info: bool = False,
                  bytecode: bool = False) -> tuple:
    """Parse ``source`` (MLIR text as str, or bytecode as bytes) in a fresh
    context, run ``stages`` (:class:`.stages.Stage`) on it and append the
    passes' report entries to ``report``.

    Returns:
        ``(ok, output, error lines)``: the module as text (locations with
        ``debug_info``) or bytecode (``bytecode``), or ``None`` and the
        error lines (parse errors, failing passes, verifier) when not ok.
    """
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = allow_unregistered
        try:
            module = ir.Module.parse(source)
        except ir.MLIRError as e:
            return False, None, diagnostic_lines(e, filename)
        pipe = Pipeline(stages)
        try:
            pipe.run(module.operation, verify_each=verify_each, print_after_all=print_after_all,
                     print_before_all=print_before_all)
        except ir.MLIRError as e:
            lines = [f"{loc or filename}: error: {m}" for m, loc in zip(pipe.errors, pipe.error_locations)]
            if lines and not getattr(e, "error_diagnostics", None):
                return False, None, lines
            return False, None, lines + diagnostic_lines(e, filename)
        report.extend(pipe.joined_report())
        if bytecode:
            import io

            buf = io.BytesIO()
            module.operation.write_bytecode(buf)
            return True, buf.getvalue(), []
        return True, module.operation.get_asm(enable_debug_info=debug_info), []
