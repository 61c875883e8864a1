"""falcon-compile: iree-compile with the LCMA rewrite in the middle.

    falcon-compile INPUT -o OUT.vmfb [iree-compile flags]
                   [--lcma-rewrite[=OPTIONS]] [--lcma-report=FILE] [--lcma-explain]
                   [--no-lcma] [--lcma-phase=PHASE] [--falcon-tiles[=auto|none|cuda-sm80]]
                   [--falcon-kernels[=auto|none|OPTIONS]]

INPUT is an MLIR file (text or bytecode, StableHLO included) or ``-`` for
stdin.  Every flag that is not one of ours goes to IREE unchanged, in
``--name=value`` form (``--iree-hal-target-device=local``,
``--iree-hal-local-target-device-backends=llvm-cpu``, ``--iree-input-type=``,
``--iree-opt-data-tiling``, ``--compile-to=PHASE`` ...).  Without a device
flag (``--iree-hal-target-device`` / ``--iree-hal-target-backends``) the
target is this machine's CPU: llvm-cpu with ``--iree-llvmcpu-target-cpu=host``.
Without ``-o`` (or with ``-o -``) the output goes to stdout.

Ours:
  --lcma-rewrite[=OPTIONS]  run the rewrite with OPTIONS ("scheme=S levels=L";
                            the default, without this flag, is "auto"; see
                            falcon-opt --help for the keys)
  --no-lcma                 do not rewrite (plain iree-compile, but for
                            contractions whose K is 0: replaced by their init,
                            as always, since IREE 3.13 crashes on them); an
                            error together with --lcma-rewrite
  --lcma-report=FILE        write the rewrite's report as JSON (a list of
                            entries, one per contraction; "defaults" lists
                            what falcon-compile or the target implied);
                            FILE - is stdout (then give -o FILE: the output
                            and the report cannot both go to stdout)
  --lcma-explain            print, per contraction, the decision and why (to
                            stderr), with those defaults
  --lcma-phase=PHASE        IREE phase after which the rewrite runs
                            (default: input)
  --falcon-tiles=VALUE      tile choices for contractions (falcon-tiles pass,
                            after the rewrite, on products and on contractions
                            left classical): auto (default: cuda-sm80 when
                            --iree-hal-target-device=cuda), none (IREE's own
                            choices), cuda-sm80 (or table=cuda-sm80); add
                            prefer=CHOICE (e.g. "cuda-sm80 prefer=simt64x64")
                            to try one table entry first
  --falcon-kernels=VALUE    falcon's own kernels (falcon-kernels pass, after
                            the rewrite): auto (default: sm_90a for
                            --iree-hal-target-device=cuda when Triton is
                            installed, the cuda extra; x86-avx512, falcon's
                            CPU f32 GEMM, for an llvm-cpu target CPU with
                            AVX-512 when gcc or $FALCON_CC is found;
                            x86-avx2, its AVX2 build, for one with AVX2
                            and FMA only), none
                            (IREE's code for every contraction), or options
                            such as "arch=sm_90a f32-mode=ieee min-flops=0";
                            the report lists each contraction's kernel.
                            --falcon-tiles and --falcon-kernels alone mean auto
  --version                 print the versions of falcon-mlir and IREE and exit

Defaults inside IREE's pipeline (barriers=true), for a cuda target (the
h200-iree profile, or h200-falcon with falcon's kernels, padding for a forced
scheme, no run-time dispatch, the cuda-sm80 tile table, the kernels' sm_90a)
and for an llvm-cpu target (the kernels' x86-avx512 where the CPU has AVX-512,
x86-avx2 where it has AVX2 and FMA only)
apply to options left at auto and are listed in the report
(falcon_mlir.pipeline.assemble).

Contractions the rewrite was asked for and did not serve (a forced scheme
declined, e.g. a rational scheme on integers; a contraction it cannot serve;
a forced scheme that found no contraction; a kernel-form plan falcon-kernels
did not build) get one line each on stderr, as
in falcon-opt: ``FILE:LINE:COL: remark: lcma-rewrite: REASON``; the exit
status stays 0.

Outputs are written atomically.  On error: one line
``falcon-compile: error: ...`` on stderr, exit status 1, no output file.
An input without operations (0 bytes, only whitespace or comments) is such
an error: ``falcon-compile: error: FILE: the input is empty (no operations);
nothing was written`` (iree-compile fails on it too, status 1, with ``outer
module does not contain a vm.module op``).
IREE runs in a child process of falcon-compile: if it crashes, one line
``falcon-compile: error: IREE crashed (SIGFPE) while compiling FILE; nothing
was written``, exit status 128 + the signal's number (136 for SIGFPE), no
output file; FALCON_NO_FORK=1 in the environment keeps it in one process
(for a debugger).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Optional, Sequence

from falcon_mlir.cli import ToolError, emit_stdout, one_line, print_version, read_stdin, run_tool_guarded
from falcon_mlir.files import same_destination, unwritable_reason, write_files_atomic

PROG = "falcon-compile"

#: What the body imports that loads native code (IREE, numpy): imported first, with Ctrl-C held
#: (:func:`falcon_mlir.cli.run_tool`), so that an interrupt while they load is one line, 130.
_NATIVE = ("falcon_mlir.pipeline.assemble",)


def _fail(msg: str, status: int = 1) -> ToolError:
    """The one-line error ``falcon-compile: error: MSG``."""
    return ToolError(f"{PROG}: error: {one_line(msg)}", status)


def _take_value(argv: Sequence[str], i: int, arg: str, name: str) -> tuple:
    """Value of ``NAME=V`` or ``NAME V``; returns (value, next index)."""
    if "=" in arg:
        return arg.split("=", 1)[1], i + 1
    if i + 1 >= len(argv):
        raise _fail(f"{name} requires a value")
    return argv[i + 1], i + 2


#: Our flags that take a value (``--NAME=V`` or ``--NAME V``) -> key in parse_args' dict.
_VALUE_FLAGS = {"lcma-report": "report_file", "lcma-phase": "phase", "falcon-tiles": "tiles",
                "falcon-kernels": "kernels"}
#: Those of them that may stand alone (``--falcon-kernels``: ``auto``), as the README's
#: ``[--falcon-kernels[=OPTIONS]]`` says; a value then needs ``=`` or must not start with ``-``.
_OPTIONAL_VALUE_FLAGS = ("falcon-tiles", "falcon-kernels")


def parse_args(argv: Sequence[str]) -> dict:
    """Splits the command line into ours and IREE's.

    Returns:
        ``{"help": True, "version": False}``, ``{"help": False, "version": True}``
        (``--version``), or a dict with ``input``, ``output``,
        ``iree_flags``, ``lcma`` (option text, ``"auto"``, or None for
        ``--no-lcma``), ``report_file``, ``explain``, ``phase``, ``tiles``, ``kernels``.

    Raises:
        ToolError: missing input, several inputs, a flag without value,
            ``--no-lcma`` together with ``--lcma-rewrite``.
    """
    inputs, iree_flags = [], []
    a = {"help": False, "output": None, "lcma": "auto", "report_file": None, "explain": False,
         "phase": None, "tiles": "auto", "kernels": "auto"}
    i, only_positional = 0, False
    given: dict = {}  # the first --lcma-rewrite and --no-lcma seen
    while i < len(argv):
        arg = argv[i]
        if only_positional or arg == "-" or not arg.startswith("-"):
            inputs.append(arg)
            i += 1
            continue
        if arg == "--":
            only_positional, i = True, i + 1
            continue
        name = arg.split("=", 1)[0]
        if name in ("-h", "--help", "-help"):
            a["help"], i = True, i + 1
        elif arg in ("--version", "-version"):
            return {"help": False, "version": True}
        elif name in ("-o", "--o", "--output"):
            a["output"], i = _take_value(argv, i, arg, name)
        elif name in ("--lcma-rewrite", "-lcma-rewrite"):
            a["lcma"], i = (arg.split("=", 1)[1] if "=" in arg else "auto"), i + 1
            given.setdefault("rewrite", arg)
        elif name in ("--no-lcma", "-no-lcma"):
            a["lcma"], i = None, i + 1
            given.setdefault("off", arg)
        elif name in ("--lcma-explain", "-lcma-explain"):
            a["explain"], i = True, i + 1
        elif name.lstrip("-") in _OPTIONAL_VALUE_FLAGS and "=" not in arg and \
                (i + 1 >= len(argv) or argv[i + 1].startswith("-")):
            # bare, as in falcon-opt (--falcon-kernels --lcma-report=r.json took the report flag as its options)
            a[_VALUE_FLAGS[name.lstrip("-")]], i = "auto", i + 1
        elif name.lstrip("-") in _VALUE_FLAGS and name in ("-" + name.lstrip("-"),
                                                           "--" + name.lstrip("-")):
            a[_VALUE_FLAGS[name.lstrip("-")]], i = _take_value(argv, i, arg, name)
        else:
            iree_flags.append(arg)
            i += 1
    if a["help"]:
        return {"help": True, "version": False}
    if len(given) == 2:
        raise _fail(f"{given['off']} and {given['rewrite']} contradict each other: give one "
                    "(--no-lcma turns the rewrite off, as --lcma-rewrite=none does)")
    if not inputs:
        raise _fail("no input file (give a path, or - for stdin)")
    if len(inputs) > 1:
        raise _fail("more than one input: " + ", ".join(repr(x) for x in inputs)
                    + " (IREE flags take their value as --flag=value)")
    return dict(a, input=inputs[0], iree_flags=iree_flags)


def _check_outputs(args: dict) -> None:
    """Fail before compiling when an output cannot be written, or when the
    report (``--lcma-report=-``) and the output would both go to stdout."""
    if args["report_file"] == "-" and args["output"] in (None, "-"):
        raise _fail("--lcma-report=- and the output both go to stdout (give -o FILE, or a file name to "
                    "--lcma-report)")
    clash = same_destination([("-o", "-" if args["output"] is None else args["output"]),
                              ("--lcma-report", args["report_file"])])
    if clash:
        raise _fail(clash)
    for path, what in ((args["output"], "-o"), (args["report_file"], "--lcma-report")):
        if path is None or path == "-":
            continue
        if path == "":
            raise _fail(f"{what} needs a file name (or - for stdout)")
        why = unwritable_reason(path)
        if why:
            why = f"cannot write '{path}': {why}"
        if why:
            raise _fail(why)


def _check_options(args: dict) -> None:
    """Parse the rewrite's and the tiles' options before compiling (one-line errors)."""
    from falcon_mlir.pipeline import assemble

    try:
        assemble.lcma_options(args["lcma"])
    except ValueError as e:  # OptionError
        raise _fail(f"--lcma-rewrite: {e}") from None
    try:
        assemble.tiles_options(args["tiles"], args["iree_flags"])
    except ValueError as e:  # OptionError
        raise _fail(f"--falcon-tiles: {e}") from None
    try:
        assemble.kernels_options(args["kernels"], args["iree_flags"])
    except ValueError as e:  # OptionError
        raise _fail(f"--falcon-kernels: {e}") from None
    try:  # what the options mean together for this target (e.g. form=kernel without falcon-kernels)
        assemble.rewrite_stages(args["lcma"], args["tiles"], assemble.with_default_target(args["iree_flags"]),
                                args["kernels"])
    except ValueError as e:  # OptionError
        raise _fail(f"--lcma-rewrite: {e}") from None


def _no_operations(lines) -> bool:
    """Whether MLIR text given as byte ``lines`` holds nothing but whitespace and
    ``//`` comments (MLIR has no other comments, and a string never spans lines,
    so what is left of a line before its first ``//`` is blank only on such a
    line). Stops at the first line with anything else: a real input is not read
    through; bytecode (``ML\\xefR``) is never empty."""
    return all(not line.split(b"//", 1)[0].strip() for line in lines)


def _source(src: str) -> tuple:
    """``(source, input name)`` for ``compile_source``: stdin bytes or a path.

    Raises:
        ToolError: a missing input, or one without operations (0 bytes,
            whitespace, comments): ``falcon-compile: error: NAME: the input is
            empty (no operations); nothing was written`` (iree-compile fails on
            it too, with ``outer module does not contain a vm.module op``).
    """
    if src == "-":
        data, name = read_stdin(PROG), "<stdin>"
        empty = _no_operations(data.splitlines())
    else:
        if not os.path.isfile(src):
            raise _fail(f"cannot open input file '{src}'")
        import pathlib

        data, name = pathlib.Path(src), None
        try:
            with open(src, "rb") as f:
                empty = _no_operations(f)
        except OSError as e:
            raise _fail(f"cannot read '{src}': {e.strerror}") from None
    if empty:
        raise _fail(f"{name or src}: the input is empty (no operations); nothing was written")
    return data, name


def _compile(args: dict) -> int:
    from falcon_mlir.pipeline import DEFAULT_REWRITE_PHASE, CompileError, assemble

    _check_outputs(args)
    _check_options(args)
    source, input_name = _source(args["input"])
    try:
        res = assemble.compile_source(source, flags=args["iree_flags"], lcma=args["lcma"],
                                      tiles=args["tiles"], phase=args["phase"] or DEFAULT_REWRITE_PHASE,
                                      input_name=input_name, kernels=args["kernels"])
    except CompileError as e:
        raise _fail(e.summary) from None
    for w in res.warnings:
        sys.stderr.write(f"{PROG}: warning: {w.first_line}\n")
    from falcon_mlir.decision.explain import explain, remark_lines

    for line in remark_lines(res.report or []):  # as falcon-opt: what was asked and not done
        print(line, file=sys.stderr)
    if args["explain"] and res.report:
        print(explain(res.report), file=sys.stderr)
    elif args["explain"] and args["lcma"] in (None, "none"):  # off, nothing else reported: say so
        from falcon_mlir.decision.explain import off_line

        print(off_line("--no-lcma or --lcma-rewrite=none"), file=sys.stderr)
    files, report_json = [], None
    if args["report_file"] is not None:
        report_json = (json.dumps(res.report, indent=2, default=str) + "\n").encode("utf-8")
        if args["report_file"] != "-":
            files.append((args["report_file"], report_json))
    to_stdout = args["output"] in (None, "-")
    if not to_stdout:
        files.append((args["output"], res.output))
    try:
        write_files_atomic(files)  # the files first: an error there leaves stdout empty
    except OSError as e:
        raise _fail(f"cannot write '{e.filename}': {e.strerror or e}") from None
    if to_stdout:
        emit_stdout(PROG, res.output)  # a reader gone away: nothing said, status 1 (run_tool)
    elif args["report_file"] == "-":  # (not both: refused by _check_outputs)
        emit_stdout(PROG, report_json)
    return 0


def _body(argv: list) -> int:
    """falcon-compile's body: one-line errors with exit status 1 (an interrupt goes on to
    :func:`falcon_mlir.cli.run_tool`: ``falcon-compile: interrupted``, 130, as in every tool)."""
    try:
        args = parse_args(argv)
        if args["help"]:
            emit_stdout(PROG, ((__doc__ or "").strip() + "\n").encode())  # a full stdout: one line
            return 0
        if args.get("version"):
            print_version(PROG)
            return 0
        return _compile(args)
    except (ToolError, BrokenPipeError):
        raise
    except Exception as e:  # never a traceback
        raise _fail(f"internal error: {type(e).__name__}: {e}") from None


def _paths(argv: list) -> tuple:
    """``(input, [output, report])`` of a command line, for the line after a crash.

    Raises:
        ToolError, KeyError: a command line without an input (the child said why).
    """
    args = parse_args(argv)
    return args["input"], [args["output"], args["report_file"]]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs falcon-compile; returns the exit status (0 ok, 1 on any error, 128 + N when IREE
    crashed of signal N: :func:`falcon_mlir.cli.run_tool_guarded`, in a child process when
    ``argv`` is None)."""
    return run_tool_guarded(PROG, _body, argv, doing="compiling", paths=_paths, preload=_NATIVE)


if __name__ == "__main__":
    sys.exit(main())
