"""falcon-opt: mlir-opt for falcon's passes (IR in, IR out).

Usage::

    falcon-opt INPUT.mlir --lcma-rewrite="scheme=strassen levels=1" -o OUT.mlir
    falcon-opt - --pass-pipeline="builtin.module(lcma-rewrite{scheme=auto},canonicalize)"
    falcon-opt in.mlir --canonicalize --lcma-rewrite --cse --lcma-report=report.json

Passes run in command-line order; ``--NAME[=OPTIONS]`` for any upstream or
IREE pass works as in mlir-opt. Errors are one line ``file:line:col: error:
message`` on stderr, exit status 1, and no output file is written.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile

TOOL = "falcon-opt"

_HELP_EPILOG = """\
pass flags (run in command-line order):
  --lcma-rewrite[=OPTIONS]  rewrite contractions with LCMA schemes; OPTIONS is a
                            space-separated list of key=value:
                              scheme=auto|NAME|NAME,NAME,...  (catalog names:
                                      `falcon-catalog list`; default auto)
                              levels=auto|L   (L in 1..4; default auto)
                              edge=auto|peel|pad (default auto: the model picks)
                              form=auto|per-product|grouped (default auto)
                              max-error=auto|E  (relative error budget)
                              target=host|h200|a100|...|PROFILE.json (cost
                                      model's hardware profile; default host)
                              barriers=false|true
                              dispatch=true|false (run-time dispatch, dynamic M)
                              chunk=auto|ROWS  (rows per chunk of that dispatch)
  --falcon-tiles[=OPTIONS]  attach CUDA tile choices (compilation_info) to
                            contractions and to the rewrite's combines:
                              target=cuda-sm80|none|auto  prefer=NAME,...
                              combine-max=N (elements per combine thread)
  --NAME[=OPTIONS]          any upstream MLIR or IREE pass, e.g. --canonicalize, --cse

auto: the cost model (falcon_mlir.decision) predicts the time of classical GEMM
and of every fitting plan on the target profile and rewrites only where a plan
within the error budget is predicted faster by the profile's margin (3% unless
the profile says otherwise: 20% for host); memory-bound and decode-sized
products stay classical. --lcma-explain says why, per contraction.
"""


class ToolError(Exception):
    """A user-facing error: printed as one line, exit status 1."""


class _ArgumentParser(argparse.ArgumentParser):
    """argparse without the usage dump: a bad command line is one error line."""

    def error(self, message):
        raise ToolError(f"{TOOL}: error: {message} (see {TOOL} --help)")


def _parser() -> argparse.ArgumentParser:
    p = _ArgumentParser(
        prog=TOOL, description="Run falcon-mlir passes (and upstream MLIR/IREE passes) on MLIR.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_HELP_EPILOG)
    p.add_argument("input", nargs="?", default="-", help="input file (MLIR text or bytecode; - = stdin)")
    p.add_argument("-o", dest="output", default="-", help="output file (default: stdout); written atomically")
    p.add_argument("--pass-pipeline", help="textual pipeline, e.g. "
                   "'builtin.module(lcma-rewrite{scheme=strassen levels=1},canonicalize)'")
    p.add_argument("--split-input-file", action="store_true",
                   help="split the input at '// -----' lines and process each chunk separately")
    p.add_argument("--verify-each", default="true", choices=["true", "false", "1", "0"],
                   help="verify the IR after each pass (default: true)")
    p.add_argument("--mlir-print-ir-after-all", action="store_true", help="print the IR after every pass")
    p.add_argument("--mlir-print-ir-before-all", action="store_true", help="print the IR before every pass")
    p.add_argument("--mlir-print-debuginfo", action="store_true", help="print locations in the output")
    p.add_argument("--allow-unregistered-dialect", action="store_true", help="accept ops of unknown dialects")
    p.add_argument("--lcma-report", metavar="FILE",
                   help="write a JSON report: one entry per contraction (location, kind, M, N, K, batch, "
                        "element types, plan or classical, and why)")
    p.add_argument("--lcma-explain", action="store_true",
                   help="print, for each contraction, the decision and why: predicted times of "
                        "classical, the plan and the next best alternatives (cost model), and "
                        "predicted errors (to stderr)")
    p.add_argument("--emit-bytecode", action="store_true", help="write MLIR bytecode instead of text")
    return p


_OWN_FLAGS = {"-o", "--pass-pipeline", "--split-input-file", "--verify-each", "--mlir-print-ir-after-all",
              "--mlir-print-ir-before-all", "--mlir-print-debuginfo", "--allow-unregistered-dialect",
              "--lcma-report", "--lcma-explain", "--emit-bytecode", "-h", "--help"}
_TAKES_VALUE = {"-o", "--pass-pipeline", "--lcma-report", "--verify-each"}


def _split_argv(argv: list) -> tuple:
    """Separate pass flags (kept in order) from the tool's own arguments."""
    own, passes = [], []
    i = 0
    while i < len(argv):
        a = argv[i]
        name = a.split("=", 1)[0]
        if a == "-" or not a.startswith("-") or name in _OWN_FLAGS:
            own.append(a)
            if name in _TAKES_VALUE and "=" not in a and i + 1 < len(argv):
                own.append(argv[i + 1])
                i += 1
        elif a.startswith("--"):
            passes.append(a[2:])
        else:
            own.append(a)  # let argparse reject unknown short options
        i += 1
    return own, passes


def _pass_flag_to_element(flag: str) -> str:
    name, eq, opts = flag.partition("=")
    if not eq:
        return name
    opts = opts.strip()
    if len(opts) >= 2 and opts[0] == opts[-1] and opts[0] in "'\"":
        opts = opts[1:-1]
    return f"{name}{{{opts}}}"


def _diag_lines(err, filename: str) -> list:
    """One ``file:line:col: error: message`` line per MLIR diagnostic."""
    from falcon_mlir.ir.contraction import format_location

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


def _read_input(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ToolError(f"{TOOL}: error: cannot read '{path}': {e.strerror}") from None


def write_atomically(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder and ``os.replace``.

    Raises:
        ToolError: the folder is missing or not writable.
    """
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".falcon-", dir=folder)
    except OSError as e:
        raise ToolError(f"{TOOL}: error: cannot write '{path}': {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ToolError(f"{TOOL}: error: cannot write '{path}': {e.strerror}") from None


def write_stdout(data: bytes) -> None:
    """Write all of ``data`` to stdout.

    ``BufferedWriter.write`` returns a short count, without raising, when the
    reader goes away or the disk fills up in the middle of a large write; the
    rest is written again until it raises.

    Raises:
        BrokenPipeError: the reader closed the pipe (not an error of ours).
        OSError: any other write error (disk full, ...).
    """
    out = sys.stdout.buffer
    view = memoryview(data)
    while view:
        n = out.write(view)
        if not n:
            raise OSError(0, "short write to stdout")
        view = view[n:]
    out.flush()


def _check_output_writable(path: str) -> None:
    if path == "-":
        return
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(folder):
        raise ToolError(f"{TOOL}: error: cannot write '{path}': no such directory")
    if os.path.isdir(path):
        raise ToolError(f"{TOOL}: error: cannot write '{path}': is a directory")
    if not os.access(folder, os.W_OK):
        raise ToolError(f"{TOOL}: error: cannot write '{path}': permission denied")


def _chunks(text: str) -> list:
    """Split at ``// -----`` lines; each chunk is padded so line numbers match the file."""
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


def process(source, filename: str, stages: list, args, report: list) -> tuple:
    """Parse ``source`` (str or bytes), run ``stages``; return (ok, output, error lines)."""
    from iree.compiler import ir

    from falcon_mlir.passes.registry import Pipeline

    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = args.allow_unregistered_dialect
        try:
            module = ir.Module.parse(source)
        except ir.MLIRError as e:
            return False, None, _diag_lines(e, filename)
        pipe = Pipeline(stages)
        pm = pipe.build(verify_each=args.verify_each in ("true", "1"),
                        print_after_all=args.mlir_print_ir_after_all,
                        print_before_all=args.mlir_print_ir_before_all)
        try:
            pm.run(module.operation)
        except ir.MLIRError as e:
            lines = [f"{filename}: error: {m}" for m in getattr(pipe, "errors", [])]
            if lines and not getattr(e, "error_diagnostics", None):
                return False, None, lines
            return False, None, lines + _diag_lines(e, filename)
        report.extend(pipe.report)
        if args.emit_bytecode:
            import io

            buf = io.BytesIO()
            module.operation.write_bytecode(buf)
            return True, buf.getvalue(), []
        return True, module.operation.get_asm(enable_debug_info=args.mlir_print_debuginfo), []


def _remarks(report: list) -> list:
    return [f"{e['location']}: remark: lcma-rewrite: {e['reason']}"
            for e in report if e.get("remark")]


def run(argv: list) -> int:
    """falcon-opt's body; returns the exit status (raises ToolError for one-line errors)."""
    from falcon_mlir.passes.registry import PipelineError, parse_element, parse_pipeline

    own, pass_flags = _split_argv(argv)
    args = _parser().parse_args(own)
    filename = "<stdin>" if args.input == "-" else args.input
    stages: list = []
    try:
        if args.pass_pipeline:
            if pass_flags:
                raise PipelineError("--pass-pipeline cannot be mixed with individual pass flags "
                                    f"(--{pass_flags[0]})")
            stages = parse_pipeline(args.pass_pipeline, filename)
        for flag in pass_flags:
            stages.append(parse_element(_pass_flag_to_element(flag), filename))
    except PipelineError as e:
        bad = pass_flags[0] if pass_flags and "does not refer" in str(e) else None
        if bad is not None:
            raise ToolError(f"{TOOL}: error: unknown pass or option '--{bad.split('=')[0]}' "
                            f"(see {TOOL} --help)") from None
        raise ToolError(f"{TOOL}: error: {e}") from None
    if args.emit_bytecode and args.split_input_file:
        raise ToolError(f"{TOOL}: error: --emit-bytecode cannot be combined with --split-input-file "
                        "(bytecode holds one module)")
    if args.output == "":
        raise ToolError(f"{TOOL}: error: -o needs a file name (or - for stdout)")
    if args.lcma_report == "":
        raise ToolError(f"{TOOL}: error: --lcma-report needs a file name")
    _check_output_writable(args.output)
    if args.lcma_report:
        _check_output_writable(args.lcma_report)
    data = _read_input(args.input)
    is_bytecode = data.startswith(b"ML\xefR")
    if is_bytecode:
        chunks = [data]
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ToolError(f"{filename}: error: input is neither MLIR text (invalid UTF-8 at byte "
                            f"{e.start}) nor MLIR bytecode") from None
        if "\x00" in text:
            raise ToolError(f"{filename}: error: input is neither MLIR text (NUL byte) nor MLIR bytecode")
        chunks = _chunks(text) if args.split_input_file else [text]
    outputs, report, failed = [], [], False
    for chunk in chunks:
        ok, out, errs = process(chunk, filename, stages, args, report)
        for line in errs:
            print(line, file=sys.stderr)
        if not ok:
            failed = True
            if not args.split_input_file:
                break
        else:
            outputs.append(out)
    for line in _remarks(report):
        print(line, file=sys.stderr)
    if args.lcma_explain and report:
        from falcon_mlir.decision.explain import explain

        print(explain(report), file=sys.stderr)
    if failed:
        return 1
    if args.emit_bytecode:
        payload = outputs[0]
    else:
        payload = "// -----\n".join(o if o.endswith("\n") else o + "\n" for o in outputs).encode()
    if args.lcma_report:
        write_atomically(args.lcma_report, (json.dumps(report, indent=2) + "\n").encode())
    if args.output == "-":
        try:
            write_stdout(payload)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise ToolError(f"{TOOL}: error: cannot write to stdout: {e.strerror or e}") from None
    else:
        write_atomically(args.output, payload)
    return 0


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null so that Python's final flush of a closed pipe
    does not print "Exception ignored ... BrokenPipeError" at exit."""
    try:
        fd = sys.stdout.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


def main(argv=None) -> int:
    """Console entry point: ``falcon-opt [options] [input]``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return run(argv)
    except ToolError as e:
        print(str(e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{TOOL}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`falcon-opt ... | head`)
        _silence_stdout()
        return 1
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception as e:  # a bug of ours: still one line, never a traceback
        print(f"{TOOL}: internal error: {type(e).__name__}: {' '.join(str(e).split())} "
              "(please report this with the input)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
