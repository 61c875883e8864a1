"""falcon-bench: time falcon-mlir's LCMA candidates against classical IREE GEMM.

    falcon-bench [--shapes MxNxK,... | --workloads FILE [--model NAME] --m 512,1024,2048]
                 [--dtype f32|f16|bf16] [--acc same|f32]
                 [--candidates "classical,auto,scheme=strassen levels=1,..."]
                 [--flags best|default] [--iree-flag FLAG ...] [--const-weights] [--parameter-weights] [--external-transients]
                 [--repeat 5] [--warmup 1] [--interleave] [--no-peers] [--numpy] [--torch] [--seed 0]
                 [--csv out.csv] [--md out.md] [--plot out.png] [--append]
                 [--title TEXT] [--device local-task]

For every shape (M, N, K) it builds ``C = A @ B`` (A: M x K, B: K x N, C: M x N,
``linalg.matmul`` on a zero-filled C) and compiles it once per candidate with
:func:`falcon_mlir.compile_str` and the same IREE flags:

* ``classical``: the rewrite off (``lcma=None``); always run, since every
  ratio is taken against it. On a host with AVX-512 and a C compiler
  falcon-kernels still runs (its default there), so this is falcon's own
  classical CPU kernel above its min-flops (the report's plan says
  ``classical (falcon's kernel)``), IREE's code elsewhere;
* ``iree``: plain IREE (``lcma=None, kernels=None``): IREE's own GEMM;
* ``auto``: falcon's decision rule (``lcma="auto"``);
* ``scheme=S levels=L ...``: any ``lcma-rewrite`` option string, as is;
* ``numpy``: ``numpy.matmul`` (OpenBLAS) on the host arrays, as a peer.
  For f16/bf16 the numpy peer multiplies the float32 upcast.
* ``torch``: ``torch.matmul`` on CPU tensors sharing the host arrays
  (oneDNN/MKL), as a peer, in the inputs' own type (bf16, f16 with
  ``--acc same``; with ``--acc f32`` the float32 upcast: torch has no f32
  result for them on the CPU).

On a CPU device (``local-task``, ``local-sync``) both peers are added by
default (torch where it is installed; ``--no-peers`` leaves them out,
``--numpy``/``--torch`` or the names in ``--candidates`` add one back). They
run with their libraries' own thread counts (every core here), which the
environment paragraph states with the OpenBLAS/OpenMP/MKL variables set or
unset.
* ``top``: per shape, the cost model's best plans (``--top N``, default 2,
  the choice's runners-up on the profile ``auto`` decides on, ``x86-falcon``
  where falcon's CPU kernel runs, else the host profile; or the best ones when
  the choice is classical) as forced option strings, so falcon's choice is
  compared with the other top candidates in the same run.
* ``blocked``: per shape, the cost model's best classical blocking plan
  (``scheme=MxKxN:R``, R = M*K*N block products accumulating into C, no
  algebra) where it is predicted to beat IREE's GEMM, so that ``auto`` is
  measured against the best classical plan (the algebra's own gain); left
  out where none is.

``--quality`` adds the decision-quality table: per shape, the best measured
candidate (IREE candidates only), falcon's choice (``auto``) against it and
against classical, whether it is within 3% of the best, and each peer's
median / auto's; and the summary: the share of shapes within 3%, the worst
slowdown of ``auto`` against classical and the geometric means of classical
/ auto and of each peer / auto. The same comparisons paired round by round
(the median of the per-round ratio of two calls made in the same round, with
its interquartile range) sit beside them: they say which verdicts a drift of a
shared machine between calls could have made. The CSV's ``times_s`` holds every
timed call's seconds in round order, ``interleave`` whether the run had ``--interleave``
(1) or not (0); runs appended to one CSV are compared only within themselves.

Candidates are separated by commas (option strings hold spaces, not commas).

Flags (``--flags``): ``default`` = llvm-cpu for the host CPU
(``--iree-llvmcpu-target-cpu=host``); ``best`` = that plus data tiling and
microkernels (``--iree-opt-data-tiling=true --iree-llvmcpu-enable-ukernels=all``).
``--iree-flag`` appends further iree-compile flags.

``--const-weights`` makes B a module constant (``dense_resource`` blob built
from the same random array, handed to IREE as MLIR bytecode, so no hex text is
made) and the function takes A only; IREE's constant evaluation then folds the
rewrite's combines of B (B11 + B22, ...) at compile time into module globals.
``--parameter-weights`` makes B a module global read from an IREE parameter
(``model::B``) served from the same array when the module loads, as
``tools/run_model.py`` serves a model's weights: IREE hoists its pack of B and
the combines into the module's initializer, run at load and not timed, and
compiles without evaluating them (no constant folding of large weights).

Inputs are random normal (seeded, ``--seed``), never zeros or ones.  Each
candidate's result is checked against a float64 numpy reference and against
the classical result: relative error = max|C - R| / max|R| (max norm,
dimensionless).  Timing: ``--warmup`` calls per candidate, then ``--repeat``
rounds in which every IREE candidate is called once (round-robin, so drift of
the shared machine spreads over all; each peer is timed after them in a block
of its own, as OpenBLAS's and OpenMP's spinning threads would slow the next
call; ``--interleave`` puts the peers into the rounds too, each peer call
followed by 0.3 s of idle, and starts each round one candidate further
along: on a shared machine whose speed drifts within a run, falcon against
numpy is then compared call by call); inputs are already on the device; each call
waits for the result and maps it to the host (``runner.Module`` semantics).

Output, one row per (shape, candidate): median and min seconds, effective
GFLOP/s = 2*M*N*K / median / 1e9 (counts classical flops, so a scheme that
multiplies less can exceed the machine's peak), speedup vs classical =
classical median / candidate median (> 1: faster), auto speed-up = candidate
median / auto's median (falcon auto against this row, the peers included;
> 1: auto faster; ``-`` without an ``auto`` candidate), relative errors, compile
seconds, the plan from falcon's report.  Written as CSV (``--csv``), markdown
(``--md``, the exact command line at the top), and a PNG plot (``--plot``,
matplotlib): effective GFLOP/s vs M per weight shape (K x N), one line per
candidate.  ``--append`` adds to existing CSV/markdown files (the plot is
redrawn from the whole CSV; a CSV with other columns, written by an older
falcon-bench, is refused).  The markdown table is printed at the end.

Exit status: 0 all ran (individual compile/run failures are rows with a
status); 2 bad arguments or an output that cannot be written (``-`` among
them: stdout holds the table, so ``--csv -`` is refused, not a file named
``-``; one line
``falcon-bench: error: ...`` on stderr, checked before measuring); 1 nothing
could be measured, or writing an output failed; 128 + N where IREE (or a
peer's native code) crashed of signal N: the work runs in a child process
(:func:`falcon_mlir.cli.run_tool_guarded`) and the line says so, e.g.
``falcon-bench: error: IREE crashed (SIGSEGV) while benchmarking 512x512x512;
the rows measured so far are in out.csv`` (the CSV is written shape by
shape) or ``nothing was written``. FALCON_NO_FORK=1 keeps it in one process.

The work is done by :mod:`falcon_mlir.bench`; this file is the command line.

For a fair numpy peer, unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE in the
benchmark's own command (``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE
falcon-bench ...``); the OpenBLAS core and thread count in use are printed
and recorded.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import sys
import time
from typing import Optional, Sequence

from falcon_mlir.bench import (BenchConfig, Shape, bench_shape, parse_candidates, parse_int_list,
                               parse_shapes, parse_workloads)
from falcon_mlir.bench.measure import FLAG_SETS, PEERS, openblas_core
from falcon_mlir.bench.report import (command_line, csv_mismatch, decision_quality, environment_text,
                                      markdown_table, plot, read_csv, rows_of, write_csv, write_md)
from falcon_mlir.cli import ArgumentParser, ToolError, run_tool_guarded
from falcon_mlir.files import unwritable_reason

PROG = "falcon-bench"
#: IREE HAL drivers on the CPU: the peers are on by default there.
CPU_DEVICES = ("local-task", "local-sync")
#: What the body imports that loads native code (IREE): imported first, with Ctrl-C held
#: (:func:`falcon_mlir.cli.run_tool`), so that an interrupt while they load is one line, 130.
_NATIVE = ("falcon_mlir.api", "falcon_mlir.pipeline.assemble", "iree.runtime")


def _log(msg: str) -> None:
    print(f"[{PROG}] {msg}", file=sys.stderr, flush=True)


def _usage(msg: str) -> ToolError:
    return ToolError(f"{PROG}: error: {msg}", 2)


def build_parser() -> argparse.ArgumentParser:
    """falcon-bench's command line (bad arguments: one line, exit status 2)."""
    p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n", 2)[0], usage_status=2,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--shapes", help="comma-separated MxNxK (C: MxN, A: MxK, B: KxN)")
    src.add_argument("--workloads", metavar="FILE", help="weight shapes (workloads.md table or 'K N' lines)")
    p.add_argument("--model", help="with --workloads: keep rows whose model contains this text")
    p.add_argument("--m", default="512,1024,2048", help="with --workloads: comma-separated M (tokens)")
    p.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32", help="element type of A and B")
    p.add_argument("--acc", choices=["same", "f32"], default="same", help="element type of C (default: as A, B)")
    p.add_argument("--candidates", default="classical,auto,scheme=strassen levels=1",
                   help="comma-separated: classical, auto, numpy, torch, top, blocked, or lcma option strings")
    p.add_argument("--flags", choices=sorted(FLAG_SETS), default="best", help="IREE CPU flag set")
    p.add_argument("--iree-flag", action="append", metavar="FLAG", help="extra iree-compile flag (repeatable)")
    p.add_argument("--const-weights", action="store_true", help="B as a module constant (dense_resource)")
    p.add_argument("--parameter-weights", action="store_true",
                   help="B as a module global read from an IREE parameter when the module loads, as "
                        "tools/run_model.py serves its weights (a constant B for the decision; implies "
                        "--const-weights)")
    p.add_argument("--external-transients", action="store_true",
                   help="IREE candidates with IREE's external transients: each call's transient memory one buffer "
                        "allocated once, not mapped fresh every call (page faults)")
    p.add_argument("--repeat", type=int, default=5, help="timed calls per candidate (median reported)")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls per candidate first (>= 1)")
    p.add_argument("--interleave", action="store_true",
                   help="time the peers (numpy, torch) in the same rounds as falcon's candidates, "
                        "each call followed by a pause while their threads stop spinning (for a noisy, "
                        "shared machine; default: each peer in a block of its own after them)")
    p.add_argument("--no-peers", dest="peers", action="store_false",
                   help="leave out the CPU peers numpy and torch (on by default on a CPU device)")
    p.add_argument("--numpy", action="store_true", help="add numpy.matmul (OpenBLAS) as a peer")
    p.add_argument("--torch", action="store_true", help="add torch.matmul (oneDNN/MKL, CPU) as a peer")
    p.add_argument("--top", type=int, default=2, help="with candidate 'top': how many model plans")
    p.add_argument("--quality", action="store_true",
                   help="add the decision-quality table (auto vs the best measured candidate)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the inputs")
    p.add_argument("--csv", metavar="FILE",
                   help="write rows as CSV to FILE (a file: - is refused, the table goes to stdout)")
    p.add_argument("--md", metavar="FILE",
                   help="write a markdown report to FILE (a file: - is refused, the table goes to stdout)")
    p.add_argument("--plot", metavar="FILE",
                   help="write a PNG plot (matplotlib) to FILE (a file: - is refused, the table goes to stdout)")
    p.add_argument("--append", action="store_true", help="append to --csv/--md; plot the whole CSV")
    p.add_argument("--title", help="heading of this run's markdown section")
    p.add_argument("--device", default="local-task", help="IREE HAL driver (default local-task)")
    return p


def _parse(argv) -> tuple:
    """``(args, shapes, candidates)`` from the command line, checked before any work.

    Raises:
        ToolError: status 2, one line.
    """
    args = build_parser().parse_args(argv)
    if args.repeat < 1:
        raise _usage("--repeat must be >= 1")
    if args.top < 1:
        raise _usage("--top must be >= 1")
    if args.warmup < 1:
        raise _usage("--warmup must be >= 1 (the first call also checks the result)")
    if args.shapes:
        shapes = _option("--shapes", parse_shapes, args.shapes)
    else:
        ms = _option("--m", parse_int_list, args.m)
        shapes = [Shape(M, N, K, label) for label, K, N in
                  _option("--workloads", parse_workloads, args.workloads, args.model) for M in ms]
    cpu = args.device in CPU_DEVICES
    torch_peer = args.torch or (args.peers and cpu and importlib.util.find_spec("torch") is not None)
    # Checked against the compile's own flags: form=kernel needs falcon's kernels, which the llvm-cpu
    # target has on an AVX-512 host (were: checked without a target, so refused there).
    flags = BenchConfig(flags=args.flags, iree_flags=tuple(args.iree_flag or ())).target_flags()
    cands = _option("--candidates", parse_candidates, args.candidates, args.numpy or (args.peers and cpu),
                    torch_peer, flags)
    if args.csv and args.append:
        why = csv_mismatch(args.csv)
        if why:
            raise _usage(f"--csv {args.csv}: {why}")
    if args.plot and args.append and not args.csv:
        raise _usage("--plot with --append needs --csv (the plot is drawn from it)")
    for opt in ("csv", "md", "plot"):
        path = getattr(args, opt)
        if path == "-":  # was: a file named '-'; stdout holds the command line and the table
            raise _usage(f"--{opt} -: stdout is not an output file here (the table goes there); give a file name")
        why = path and unwritable_reason(path)
        if why:
            raise _usage(f"--{opt} {path}: {why}")
    return args, shapes, cands


def _option(name: str, parse, *values):
    """``parse(*values)``, a ValueError becoming a usage error about ``name``."""
    try:
        return parse(*values)
    except ValueError as e:
        raise _usage(f"{name}: {e}") from None


def _paths(argv: list) -> tuple:
    """``(what is benchmarked, [csv, md, plot])`` of a command line, for the line after a crash.

    Raises:
        ToolError: a command line that does not parse (the child said why).
    """
    args = build_parser().parse_args(argv)
    return args.shapes or f"the workloads of {args.workloads}", [args.csv, args.md, args.plot]


def _left(argv: list, since: float) -> Optional[str]:
    """After a crash: where the rows of the shapes finished before it are (the CSV, written shape
    by shape, replaced since the run started at ``since``, seconds since the epoch), else None."""
    csv = build_parser().parse_args(argv).csv
    if csv and os.path.isfile(csv) and os.stat(csv).st_mtime >= since:
        return f"the rows measured so far are in {csv}"
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``falcon-bench``; returns the exit status (in a child process when ``argv``
    is None: :func:`falcon_mlir.cli.run_tool_guarded`)."""
    return run_tool_guarded(PROG, _main, argv, doing="benchmarking", paths=_paths, left=_left, preload=_NATIVE)


def _main(argv: list) -> int:
    args, shapes, cands = _parse(argv)
    if args.peers and args.device in CPU_DEVICES and not any(c.kind == "torch" for c in cands):
        _log("note: torch is not installed: no torch peer")
    if any(c.kind == "numpy" for c in cands) and os.environ.get("OPENBLAS_CORETYPE"):
        _log(f"note: OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']} is set; numpy may run a slower "
             "kernel (run with env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)")
    config = BenchConfig(dtype=args.dtype, acc=args.acc, flags=args.flags, iree_flags=tuple(args.iree_flag or ()),
                         const_weights=args.const_weights or args.parameter_weights,
                         parameter_weights=args.parameter_weights, repeat=args.repeat, warmup=args.warmup,
                         seed=args.seed, device=args.device, top=args.top, blas_core=openblas_core(),
                         interleave=args.interleave, external_transients=args.external_transients)
    cmd = command_line(PROG, argv)
    print(cmd, flush=True)
    t_start = time.perf_counter()
    env_text = environment_text(config, [c.kind for c in cands if c.kind in PEERS])
    results = []
    try:
        for i, shape in enumerate(shapes):
            t0 = time.perf_counter()
            shape_results = bench_shape(shape, cands, config, log=_log)
            results.extend(shape_results)
            if args.csv:  # written shape by shape: a run cut short keeps what it measured
                write_csv(args.csv, rows_of(shape_results, config), args.append or i > 0)
            gc.collect()  # free the shape's modules and buffers before the next one
            _log(f"{shape.text()} ({shape.label}) done in {time.perf_counter() - t0:.1f} s")
        rows = rows_of(results, config)
        elapsed = time.perf_counter() - t_start
        table = markdown_table(rows)
        if args.quality:
            qtable, _ = decision_quality(read_csv(args.csv) if (args.append and args.csv) else rows)
            table += "\n\n" + qtable
        if args.md:
            title = args.title or f"{args.dtype}, flags {args.flags}" + (
                ", weights as parameters" if args.parameter_weights else ", const weights" if args.const_weights else "")
            section = (f"## {title}\n\n```sh\n{cmd}\n```\n\n{env_text} Wall time of the run: {elapsed:.0f} s.\n\n"
                       "Times in seconds (median and min of the timed calls); effective GFLOP/s = 2MNK / median; "
                       "vs classical = classical median / this median (> 1: faster); auto speed-up = this "
                       "median / auto's median (> 1: falcon auto faster); rel err = max-norm relative "
                       "error vs a float64 numpy product and vs IREE classical.\n\n" + table + "\n")
            write_md(args.md, section, args.append)
        if args.plot:
            try:
                plot(args.plot, read_csv(args.csv) if (args.append and args.csv) else rows)
            except ImportError:
                _log("matplotlib is not installed: no plot")
    except OSError as e:
        raise ToolError(f"{PROG}: error: {e.filename or ''}: {e.strerror or e}") from None
    print(table)
    print(f"({elapsed:.0f} s)")
    return 0 if any(r.times for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
