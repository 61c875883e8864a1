"""falcon-compile: iree-compile with the LCMA rewrite in the middle.

    falcon-compile INPUT -o OUT.vmfb [iree-compile flags]
                   [--lcma-rewrite[=OPTIONS]] [--lcma-report=FILE] [--no-lcma]
                   [--lcma-phase=PHASE] [--falcon-tiles=auto|none|cuda-sm80]

INPUT is an MLIR file (text or bytecode, StableHLO included) or ``-`` for
stdin.  Every flag that is not one of ours goes to IREE unchanged, in
``--name=value`` form (``--iree-hal-target-device=local``,
``--iree-hal-local-target-device-backends=llvm-cpu``, ``--iree-input-type=``,
``--iree-opt-data-tiling``, ``--compile-to=PHASE`` ...).  Without ``-o`` (or
with ``-o -``) the output goes to stdout.

Ours:
  --lcma-rewrite[=OPTIONS]  run the rewrite with OPTIONS ("scheme=S levels=L";
                            the default, without this flag, is "auto")
  --no-lcma                 do not rewrite (plain iree-compile)
  --lcma-report=FILE        write the rewrite's report as JSON (a list of
                            entries, one per contraction)
  --lcma-phase=PHASE        IREE phase after which the rewrite runs
                            (default: input)
  --falcon-tiles=VALUE      tile choices for contractions (falcon-tiles pass,
                            after the rewrite, on products and on contractions
                            left classical): auto (default: cuda-sm80 when
                            --iree-hal-target-device=cuda), none (IREE's own
                            choices), cuda-sm80 (or target=cuda-sm80); add
                            prefer=CHOICE (e.g. "cuda-sm80 prefer=simt64x64")
                            to try one table entry first

Outputs are written atomically.  On error: one line
``falcon-compile: error: ...`` on stderr, exit status 1, no output file.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Optional, Sequence

PROG = "falcon-compile"


class UsageError(Exception):
    pass


def _take_value(argv: Sequence[str], i: int, arg: str, name: str) -> tuple[str, int]:
    """Value of ``NAME=V`` or ``NAME V``; returns (value, next index)."""
    if "=" in arg:
        return arg.split("=", 1)[1], i + 1
    if i + 1 >= len(argv):
        raise UsageError(f"{name} requires a value")
    return argv[i + 1], i + 2


def parse_args(argv: Sequence[str]) -> dict:
    """Splits the command line into ours and IREE's.

    Raises:
        UsageError: missing input, several inputs, a flag without value.
    """
    inputs: list[str] = []
    iree_flags: list[str] = []
    output: Optional[str] = None
    lcma: Optional[str] = "auto"
    report_file: Optional[str] = None
    phase: Optional[str] = None
    tiles = "auto"
    help_ = False
    i = 0
    only_positional = False
    while i < len(argv):
        arg = argv[i]
        if only_positional or arg == "-" or not arg.startswith("-"):
            inputs.append(arg)
            i += 1
            continue
        if arg == "--":
            only_positional = True
            i += 1
            continue
        name = arg.split("=", 1)[0]
        if name in ("-h", "--help", "-help"):
            help_ = True
            i += 1
        elif name in ("-o", "--o", "--output"):
            output, i = _take_value(argv, i, arg, name)
        elif name in ("--lcma-rewrite", "-lcma-rewrite"):
            lcma = arg.split("=", 1)[1] if "=" in arg else "auto"
            i += 1
        elif name in ("--no-lcma", "-no-lcma"):
            lcma = None
            i += 1
        elif name in ("--lcma-report", "-lcma-report"):
            report_file, i = _take_value(argv, i, arg, name)
        elif name in ("--lcma-phase", "-lcma-phase"):
            phase, i = _take_value(argv, i, arg, name)
        elif name in ("--falcon-tiles", "-falcon-tiles"):
            tiles, i = _take_value(argv, i, arg, name)
        else:
            iree_flags.append(arg)
            i += 1
    if help_:
        return {"help": True}
    if not inputs:
        raise UsageError("no input file (give a path, or - for stdin)")
    if len(inputs) > 1:
        raise UsageError(
            "more than one input: "
            + ", ".join(repr(x) for x in inputs)
            + " (IREE flags take their value as --flag=value)"
        )
    return {
        "help": False,
        "input": inputs[0],
        "output": output,
        "iree_flags": iree_flags,
        "lcma": lcma,
        "report_file": report_file,
        "phase": phase,
        "tiles": tiles,
    }


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _check_writable(path: str, what: str) -> Optional[str]:
    """Why ``path`` cannot be written (checked before compiling), or None."""
    if path == "":
        return f"{what} needs a file name"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"cannot write '{path}': no such directory"
    if os.path.isdir(path):
        return f"cannot write '{path}': is a directory"
    if not os.access(folder, os.W_OK):
        return f"cannot write '{path}': permission denied"
    return None


class _WriteError(OSError):
    pass


def _write_outputs(files: list[tuple[str, bytes]]) -> None:
    """Writes every (path, data) through a temp file in the same folder,
    then renames them all; on failure nothing is left behind (files already
    renamed into place are removed again).

    Raises:
        OSError: a file cannot be written; the message names the file.
    """
    import tempfile

    temps: list[tuple[str, str]] = []
    done: list[str] = []
    current = ""
    try:
        umask = os.umask(0)
        os.umask(umask)
        for path, data in files:
            current = path
            directory = os.path.dirname(os.path.abspath(path))
            fd, tmp = tempfile.mkstemp(
                dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp"
            )
            temps.append((tmp, path))
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~umask)
        for tmp, path in temps:
            current = path
            os.replace(tmp, path)
            done.append(path)
    except BaseException as e:
        for tmp, _ in temps:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        for path in done:
            try:
                os.unlink(path)
            except OSError:
                pass
        if isinstance(e, OSError):
            raise _WriteError(f"cannot write '{current}': {e.strerror or e}") from None
        raise


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs falcon-compile; returns the exit status (0 ok, 1 on any error)."""
    argv = list(sys.argv[1:] if argv is None else argv)

    def error(msg: str, status: int = 1) -> int:
        sys.stderr.write(f"{PROG}: error: {_one_line(msg)}\n")
        sys.stderr.flush()
        return status

    try:
        args = parse_args(argv)
    except UsageError as e:
        return error(str(e))
    if args["help"]:
        sys.stdout.write((__doc__ or "").strip() + "\n")
        return 0

    out = args["output"]
    for path, what in ((out, "-o"), (args["report_file"], "--lcma-report")):
        if path is not None and path != "-":
            why = _check_writable(path, what)
            if why:
                return error(why)

    try:
        from falcon_mlir.api import (_for_cuda, _parse_lcma, _tiles_options, _with_tiles,
                                     make_lcma_rewrite, targets_cuda)
        from falcon_mlir.pipeline.session import DEFAULT_REWRITE_PHASE, CompileError, compile_module

        try:
            if args["lcma"] is not None and args["lcma"].strip() != "auto":
                from falcon_mlir.passes.registry import parse_lcma_options

                parse_lcma_options(args["lcma"])  # the checks the API leaves to the pass
            lcma = args["lcma"]
            if lcma is not None and targets_cuda(args["iree_flags"]):
                lcma = _for_cuda(_parse_lcma(lcma))
            rewrite = make_lcma_rewrite(lcma)
        except ValueError as e:  # OptionError
            return error(f"--lcma-rewrite: {e}")
        try:
            tiles_options = _tiles_options(args["tiles"], args["iree_flags"])
        except ValueError as e:  # OptionError
            return error(f"--falcon-tiles: {e}")
        if tiles_options is not None:
            rewrite = _with_tiles(rewrite, tiles_options, None)

        src = args["input"]
        if src == "-":
            source = sys.stdin.buffer.read()
            input_name = "<stdin>"
        else:
            import pathlib

            if not os.path.isfile(src):
                return error(f"cannot open input file '{src}'")
            source = pathlib.Path(src)
            input_name = None

        try:
            res = compile_module(
                source,
                flags=args["iree_flags"],
                rewrite=rewrite,
                phase=args["phase"] or DEFAULT_REWRITE_PHASE,
                input_name=input_name,
                result=True,
            )
        except CompileError as e:
            return error(e.summary)

        for w in res.warnings:
            sys.stderr.write(f"{PROG}: warning: {w.first_line}\n")

        files: list[tuple[str, bytes]] = []
        if args["report_file"] is not None:
            text = json.dumps(res.report, indent=2, default=str) + "\n"
            files.append((args["report_file"], text.encode("utf-8")))
        out = args["output"]
        to_stdout = out is None or out == "-"
        if not to_stdout:
            files.append((out, res.output))
        try:
            _write_outputs(files)
        except _WriteError as e:
            return error(str(e))
        except OSError as e:
            return error(f"cannot write output: {e}")
        if to_stdout:
            from falcon_mlir.tools.falcon_opt import _silence_stdout, write_stdout

            try:
                write_stdout(res.output)
            except BrokenPipeError:  # the reader went away
                _silence_stdout()
                return 1
            except OSError as e:
                return error(f"cannot write to stdout: {e.strerror or e}")
        return 0
    except KeyboardInterrupt:
        return error("interrupted", 130)
    except Exception as e:  # never a traceback
        return error(f"internal error: {type(e).__name__}: {e}")


if __name__ == "__main__":
    sys.exit(main())
