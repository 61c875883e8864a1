"""falcon-opt: mlir-opt for falcon's passes (IR in, IR out).

Usage::

    falcon-opt INPUT.mlir --lcma-rewrite="scheme=strassen levels=1" -o OUT.mlir
    falcon-opt - --pass-pipeline="builtin.module(lcma-rewrite{scheme=auto},canonicalize)"
    falcon-opt in.mlir --canonicalize --lcma-rewrite --cse --lcma-report=report.json
    falcon-opt in.mlir --lcma-rewrite -o out.mlir --lcma-report=- | jq .   # the report on stdout

Passes run in command-line order; ``--NAME[=OPTIONS]`` for any upstream or
IREE pass works as in mlir-opt. Errors are one line ``file:line:col: error:
message`` on stderr, exit status 1, and no output file is written. The
passes run in a child process of falcon-opt: if IREE or MLIR crashes, one
line ``falcon-opt: error: IREE crashed (SIGSEGV) while running passes on
FILE; nothing was written``, exit status 128 + the signal's number;
FALCON_NO_FORK=1 keeps it in one process (for a debugger).
"""

from __future__ import annotations

import json
import sys

from falcon_mlir.cli import ArgumentParser, ToolError, emit_stdout, read_stdin, run_tool_guarded
from falcon_mlir.files import same_destination, unwritable_reason, write_files_atomic

TOOL = "falcon-opt"

#: What the body imports that loads native code (IREE, numpy): imported first, with Ctrl-C held
#: (:func:`falcon_mlir.cli.run_tool`), so that an interrupt while they load is one line, 130.
_NATIVE = ("falcon_mlir.passes.registry", "falcon_mlir.pipeline.opt")

_AUTO_NOTE = """\
auto: the cost model (falcon_mlir.decision) predicts the time of classical GEMM
and of every fitting plan on the target profile and rewrites only where a plan
within the error budget is predicted faster by the profile's margin (3% unless
the profile says otherwise: 20% for host); memory-bound and decode-sized
products stay classical. --lcma-explain says why, per contraction.
"""


def _epilog() -> str:
    """The pass flags and their options (generated from the passes' declarations)."""
    from falcon_mlir.passes.registry import pass_help

    lines = ["pass flags (run in command-line order):"] + pass_help() + [
        "  --NAME[=OPTIONS]          any upstream MLIR or IREE pass, e.g. --canonicalize, --cse",
        ""]
    return "\n".join(lines) + "\n" + _AUTO_NOTE


def _parser(epilog: bool = True) -> ArgumentParser:
    """falcon-opt's parser; ``epilog=False`` leaves out the pass list (which imports the passes)."""
    import argparse

    p = ArgumentParser(
        prog=TOOL, description="Run falcon-mlir passes (and upstream MLIR/IREE passes) on MLIR.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_epilog() if epilog else None)
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
                        "element types, plan or classical, and why); - = stdout (then give -o FILE: "
                        "the module and the report cannot both go to stdout)")
    p.add_argument("--lcma-explain", action="store_true",
                   help="print, for each contraction, the decision and why: predicted times of "
                        "classical, the plan and the next best alternatives (cost model), and "
                        "predicted errors (to stderr)")
    p.add_argument("--emit-bytecode", action="store_true", help="write MLIR bytecode instead of text")
    return p


_OWN_FLAGS = {"-o", "--pass-pipeline", "--split-input-file", "--verify-each", "--mlir-print-ir-after-all",
              "--mlir-print-ir-before-all", "--mlir-print-debuginfo", "--allow-unregistered-dialect",
              "--lcma-report", "--lcma-explain", "--emit-bytecode", "-h", "--help", "--version"}
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


def _read_input(path: str) -> bytes:
    if path == "-":
        return read_stdin(TOOL)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ToolError(f"{TOOL}: error: cannot read '{path}': {e.strerror}") from None


def _write_files(files: list) -> None:
    """Write every ``(path, data)`` or none (:func:`falcon_mlir.files.write_files_atomic`).

    Raises:
        ToolError: a folder is missing or not writable, or the disk is full.
    """
    try:
        write_files_atomic(files)
    except OSError as e:
        raise ToolError(f"{TOOL}: error: cannot write '{e.filename}': {e.strerror}") from None


def _check_output_writable(path: str) -> None:
    why = None if path == "-" else unwritable_reason(path)
    if why:
        raise ToolError(f"{TOOL}: error: cannot write '{path}': {why}")


def _remarks(report: list) -> list:
    from falcon_mlir.decision.explain import remark_lines

    return remark_lines(report)


def _stages(args, pass_flags: list, filename: str) -> list:
    """The stages of ``--pass-pipeline`` or of the pass flags, in order; an lcma-rewrite before a
    falcon-kernels that runs kernels decides on their profile, as in falcon-compile
    (:func:`falcon_mlir.pipeline.assemble.imply_kernel_defaults`).

    Raises:
        ToolError: a pipeline or an option that does not parse (one line).
    """
    from falcon_mlir.pipeline.stages import PipelineError, parse_element, parse_pipeline

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
    from falcon_mlir.pipeline.assemble import imply_kernel_defaults

    return imply_kernel_defaults(stages)


def _input_chunks(args, filename: str) -> list:
    """The input as one module (text or bytecode), or its ``// -----`` chunks.

    Raises:
        ToolError: unreadable input, or neither UTF-8 text nor MLIR bytecode.
    """
    data = _read_input(args.input)
    if data.startswith(b"ML\xefR"):  # MLIR bytecode
        return [data]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ToolError(f"{filename}: error: input is neither MLIR text (invalid UTF-8 at byte "
                        f"{e.start}) nor MLIR bytecode") from None
    if "\x00" in text:
        raise ToolError(f"{filename}: error: input is neither MLIR text (NUL byte) nor MLIR bytecode")
    from falcon_mlir.pipeline.opt import split_input_file

    return split_input_file(text) if args.split_input_file else [text]


def run(argv: list) -> int:
    """falcon-opt's body; returns the exit status (raises ToolError for one-line errors)."""
    own, pass_flags = _split_argv(argv)
    args = _parser().parse_args(own)
    filename = "<stdin>" if args.input == "-" else args.input
    stages = _stages(args, pass_flags, filename)
    if args.emit_bytecode and args.split_input_file:
        raise ToolError(f"{TOOL}: error: --emit-bytecode cannot be combined with --split-input-file "
                        "(bytecode holds one module)")
    if args.output == "":
        raise ToolError(f"{TOOL}: error: -o needs a file name (or - for stdout)")
    if args.lcma_report == "":
        raise ToolError(f"{TOOL}: error: --lcma-report needs a file name (or - for stdout)")
    if args.lcma_report == "-" and args.output == "-":
        raise ToolError(f"{TOOL}: error: --lcma-report=- and the output both go to stdout "
                        "(give -o FILE, or a file name to --lcma-report)")
    clash = same_destination([("-o", args.output), ("--lcma-report", args.lcma_report)])
    if clash:
        raise ToolError(f"{TOOL}: error: {clash}")
    _check_output_writable(args.output)
    if args.lcma_report:
        _check_output_writable(args.lcma_report)
    chunks = _input_chunks(args, filename)
    from falcon_mlir.pipeline.opt import run_on_source

    outputs, report, failed = [], [], False
    for chunk in chunks:
        ok, out, errs = run_on_source(
            chunk, filename, stages, report, verify_each=args.verify_each in ("true", "1"),
            print_after_all=args.mlir_print_ir_after_all,
            print_before_all=args.mlir_print_ir_before_all,
            allow_unregistered=args.allow_unregistered_dialect,
            debug_info=args.mlir_print_debuginfo, bytecode=args.emit_bytecode)
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
    elif args.lcma_explain and any(st.name == "lcma-rewrite" and st.options is None for st in stages):
        from falcon_mlir.decision.explain import off_line  # --lcma-rewrite=none: say so

        print(off_line("--lcma-rewrite=none"), file=sys.stderr)
    if failed:
        return 1
    if args.emit_bytecode:
        payload = outputs[0]
    else:
        payload = "// -----\n".join(o if o.endswith("\n") else o + "\n" for o in outputs).encode()
    report_json = (json.dumps(report, indent=2) + "\n").encode()
    files = []
    if args.lcma_report and args.lcma_report != "-":
        files.append((args.lcma_report, report_json))
    if args.output != "-":
        files.append((args.output, payload))
    _write_files(files)  # the files first: an error there leaves stdout empty
    if args.output == "-":
        emit_stdout(TOOL, payload)
    elif args.lcma_report == "-":  # (not both: refused above)
        emit_stdout(TOOL, report_json)
    return 0


def _paths(argv: list) -> tuple:
    """``(input, [output, report])`` of a command line, for the line after a crash.

    Raises:
        ToolError: a command line that does not parse (the child said why).
    """
    args = _parser(epilog=False).parse_args(_split_argv(argv)[0])
    return args.input, [args.output, args.lcma_report]


def main(argv=None) -> int:
    """Console entry point: ``falcon-opt [options] [input]``; returns the exit status (0 ok,
    1 on an error, 128 + N when IREE or MLIR crashed of signal N:
    :func:`falcon_mlir.cli.run_tool_guarded`, in a child process when ``argv`` is None)."""
    return run_tool_guarded(TOOL, run, argv, doing="running passes on", paths=_paths, preload=_NATIVE)


if __name__ == "__main__":
    sys.exit(main())
