#!/usr/bin/env python3
"""falcon-calibrate: measure a hardware profile with IREE micro-benchmarks.

    falcon-calibrate [--device local-task|cuda] -o PROFILE.json
                     [--dtypes f32 f16 bf16 f64 i8] [--sizes N ...] [--quick]
                     [--seconds S] [--bandwidth-mb MB] [--name NAME] [--raw RAW.json]
    falcon-calibrate --device cuda --prepare DIR [same measurement options]
    python3 DIR/calibrate_run.py DIR -o PROFILE.json [--raw RAW.json]   # on the GPU machine
    falcon-calibrate --refit PROFILE --bench RUN.csv [RUN.csv ...] -o PROFILE.json [--name NAME]

It writes a profile in the format of :mod:`falcon_mlir.decision.profile`
(``source: "measured"``), validated by ``Profile.from_dict`` and written
atomically (a failed run leaves no file). What is measured, on the IREE HAL
driver ``--device``, each with modules compiled here exactly as falcon
compiles them for the target (``falcon_mlir.compile_str(lcma=None)``: on CPU
llvm-cpu for the host with ``--iree-opt-data-tiling=true
--iree-llvmcpu-enable-ukernels=all``, falcon-bench's ``best`` flags; on CUDA
``--iree-hal-target-device=cuda --iree-cuda-target=sm_80``, with falcon's
tile choices where falcon attaches them):

* ``dtypes[T].gemm``: ``C = A @ B`` (``linalg.matmul``, zero-filled C),
  square n in ``--sizes`` (CPU: 128 ... 4096, ``--quick`` 128 ... 1024; CUDA:
  512 ... 8192), random inputs; FLOP/s = 2 n^3 / median call time. Element
  types: f32, f16 (f16 accumulator), bf16 (f32 accumulator), f64, i8 (i32
  accumulator; compiled with ``--iree-input-demote-f64-to-f32=false``, as
  falcon's f64 tests do, since IREE otherwise runs f64 as f32). The first call's result is checked against a float64 numpy
  product of 64 rows (a wrong module is an error, not a profile).
* ``dtypes[T].add``: compute-bound throughput of the combines'
  multiply-adds: a chain of elementwise generics (64 on CPU, 256 on CUDA),
  step k adding ``c1k X1 + c2k X2 + c3k X3 + c4k X4`` to the previous step's
  result (X in T, arithmetic in the accumulator type as the rewrite does;
  fresh coefficients per step, so nothing is shared between steps; only the
  one add on the running result is serial; for integers that op is a max,
  since LLVM reassociates a chain of integer adds into one combine), over
  vectors that stay in cache. IREE fuses the chain into
  one dispatch that reads each input once, so the time is arithmetic, not
  memory or call overhead (a single 4-input generic on in-cache data takes a
  few microseconds, about the cost of the call itself, and would measure
  nothing). FLOP/s = 2 * 4 * elements * chain / median.
* ``bandwidth``: ``C = A + B`` over f32 vectors of ``--bandwidth-mb`` MB each
  (CPU 64, CUDA 256): (2 read + 1 written) * bytes / median.
* ``dispatch_overhead``: a module of 1 tiny dispatch and one of 65, the tiny
  elementwise ops chained through ``util.optimization_barrier`` so that
  nothing fuses (the dispatch counts are checked in IREE's ``flow`` output);
  (median_65 - median_1) / (dispatches_65 - dispatches_1), the two modules
  timed alternately.
* ``forms``: the two kinds of combine the rewrite emits, on blocks of
  ``--bandwidth-mb`` MB (f32) sliced out of a 2b x 2b matrix, as
  ``passes/lcma_rewrite.py`` builds them: ``per_product_combine`` is one
  generic adding two blocks (A11 + A22; bytes = 2 blocks read + 1 written);
  ``grouped_combine`` is Strassen's combine of A, one generic writing R = 7
  blocks from the 4 blocks with 1-D f32 coefficient tables indexed by r
  (bytes = R * 4 blocks read, each r re-reading its blocks, + R written).
  Each is reported as achieved bytes/s / ``bandwidth``.
* ``cores``, ``caches`` (/sys on CPU; SMs and L2 from the CUDA driver on a
  GPU), ``name`` (``--name``, default the output file's stem), ``provenance``
  (CPU model or GPU name, IREE versions, flags, date), ``kind``, ``device``.

Timing: ``--seconds`` per measurement (default 0.75, ``--quick`` 0.25): after
one checked call and one warm-up call, the call is repeated enough times to
fill that time (at least 3) and the median is taken. Inputs are on the device
before timing; a call returns when the device is done (IREE's synchronous
function ABI); results stay on the device. Small GEMMs therefore include one
call's overhead (the 1-dispatch module's time, printed in the summary).

The CUDA split (no GPU here, no compiler there): ``--prepare DIR`` compiles
every module here and writes ``DIR/manifest.json``, the ``.vmfb`` files,
``DIR/calibrate_run.py`` (a copy of :mod:`falcon_mlir.calibration.measure`,
the measuring half, which needs only the standard library, numpy and
``iree.runtime``) and copies of the few standalone library modules it
imports (:mod:`falcon_mlir.bundles`). On the GPU machine
``python3 DIR/calibrate_run.py DIR -o PROFILE.json`` measures and writes the
profile JSON; validate it here with ``Profile.from_dict``.

``--refit PROFILE --bench CSV ...`` measures nothing: it refits PROFILE's ``forms.kernel_products`` (a
CPU profile with falcon's kernel form, such as ``x86-falcon``) to falcon-bench ``--csv`` runs of the
machine at hand (:func:`falcon_mlir.calibration.fit.fit_kernel_products`), writes the profile to ``-o``
(its provenance naming the runs) and prints the factor before and after with the measured / predicted
gain of the plans.

Exit status: 0 profile written (or bundle prepared); 2 bad arguments (``-o -``
or ``--raw -`` among them: stdout holds the summary; one line
``falcon-calibrate: error: ...`` on stderr, nothing measured); 1 a compile or
run failed (one line, no file written); 128 + N where IREE crashed of
signal N: the work runs in a child process
(:func:`falcon_mlir.cli.run_tool_guarded`) and the line says so, e.g.
``falcon-calibrate: error: IREE crashed (SIGSEGV) while calibrating
local-task; nothing was written`` (``--prepare DIR``: ``DIR holds an
incomplete bundle`` where it had begun). FALCON_NO_FORK=1 keeps it in one
process.

The work is done by :mod:`falcon_mlir.calibration` (``microbench``: the
modules' MLIR; ``bundle``: compiling them; ``measure``: running and timing
them; ``assemble``: the profile; ``fit``: the form factors); this file is
the command line.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from falcon_mlir.calibration import fit
from falcon_mlir.calibration.assemble import CalibrationError, summary
from falcon_mlir.calibration.bundle import (DEFAULT_BANDWIDTH_MB, DEFAULT_DTYPES, DEFAULT_SIZES, DEVICE_FLAGS,
                                            DTYPES, QUICK_BANDWIDTH_MB, QUICK_SIZES, prepare_bundle)
from falcon_mlir.calibration.measure import (MANIFEST, PROG, RUNNER, Progress, check_device, check_output, run_bundle,
                                             write_json)
from falcon_mlir.cli import ArgumentParser, ToolError, run_tool_guarded

__all__ = ["main", "build_parser", "MANIFEST", "RUNNER", "CalibrationError"]


def _usage(msg: str) -> ToolError:
    return ToolError(f"{PROG}: error: {msg}", 2)


def build_parser() -> argparse.ArgumentParser:
    """falcon-calibrate's command line (bad arguments: one line, exit status 2)."""
    p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n", 2)[0], usage_status=2,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=sorted(DEVICE_FLAGS), default="local-task",
                   help="IREE HAL driver to calibrate (default local-task)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="profile JSON to write (a file: - is refused, the summary goes to stdout)")
    p.add_argument("--prepare", metavar="DIR",
                   help="compile the modules into DIR with calibrate_run.py, measure nothing")
    p.add_argument("--dtypes", nargs="+", metavar="T",
                   help=f"input element types ({', '.join(DTYPES)}; default f32 on CPU, f32 f16 on CUDA)")
    p.add_argument("--sizes", nargs="+", metavar="N", help="square GEMM sizes n")
    p.add_argument("--quick", action="store_true", help="fewer sizes, smaller vectors, shorter timing")
    p.add_argument("--seconds", type=float, help="time per measurement (default 0.75, --quick 0.25)")
    p.add_argument("--bandwidth-mb", type=int, metavar="MB",
                   help="MB per vector of the bandwidth test and per block of the combine forms")
    p.add_argument("--name", help="profile name (default: the output file's stem)")
    p.add_argument("--raw", metavar="FILE", help="also write the raw measurements (JSON) to FILE (not -)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or step lines")
    p.add_argument("--no-fit", action="store_true",
                   help="CPU: skip fitting the form factors to measured Strassen plans "
                        "(falcon_mlir.calibration.fit)")
    p.add_argument("--refit", metavar="PROFILE",
                   help="measure nothing: refit the kernel form's products factor of PROFILE (a preset name "
                        "or a .json) to the falcon-bench runs of --bench and write the profile to -o")
    p.add_argument("--bench", nargs="+", metavar="CSV",
                   help="with --refit: falcon-bench --csv files of this machine, each timing classical and "
                        "a one-level kernel-form plan (auto's) on the same shapes")
    return p


def _sizes(tokens) -> list:
    out = []
    for tok in tokens:
        if not tok.isdigit() or int(tok) <= 0:
            raise _usage(f"--sizes: {tok!r} is not a positive integer")
        out.append(int(tok))
    return sorted(set(out))


def _parse(argv) -> tuple:
    """``(args, options of prepare_bundle)``, checked before any work.

    Raises:
        ToolError: status 2, one line.
    """
    args = build_parser().parse_args(argv)
    if args.name is not None and any(ord(ch) < 32 or ord(ch) == 127 for ch in args.name):
        raise _usage(f"--name {args.name!r}: a control character (the name is printed inside one-line "
                     "remarks and --lcma-explain lines)")
    if args.refit or args.bench:
        return _parse_refit(args), None
    if args.prepare and args.output:
        raise _usage("--prepare compiles a bundle only: -o belongs to calibrate_run.py there")
    if not args.prepare and not args.output:
        raise _usage("-o PROFILE.json is required (or --prepare DIR)")
    dev = args.device
    sizes = _sizes(args.sizes) if args.sizes else (QUICK_SIZES if args.quick else DEFAULT_SIZES)[dev]
    dtypes = args.dtypes or DEFAULT_DTYPES[dev]
    for dt in dtypes:
        if dt not in DTYPES:
            raise _usage(f"--dtypes: unknown element type {dt!r} (choose from {', '.join(DTYPES)})")
    dtypes = list(dict.fromkeys(dtypes))
    if dev == "cuda" and "bf16" in dtypes:
        raise _usage("--dtypes bf16 is not measured on cuda (numpy there has no bfloat16)")
    seconds = args.seconds if args.seconds is not None else (0.25 if args.quick else 0.75)
    if not seconds > 0 or not math.isfinite(seconds):
        raise _usage("--seconds must be a positive number")
    mb = args.bandwidth_mb if args.bandwidth_mb is not None else \
        (QUICK_BANDWIDTH_MB if args.quick else DEFAULT_BANDWIDTH_MB)[dev]
    if not 1 <= mb <= 4096:
        raise _usage("--bandwidth-mb must be between 1 and 4096")
    if args.output:
        check_output("-o", args.output)
    if args.raw:
        check_output("--raw", args.raw)
    if args.prepare and Path(args.prepare).exists() and not Path(args.prepare).is_dir():
        raise _usage(f"--prepare {args.prepare}: exists and is not a folder")
    return args, dict(device=dev, dtypes=dtypes, sizes=sizes, bandwidth_mb=mb, seconds=seconds,
                      quick=args.quick)


def _parse_refit(args):
    """Check a ``--refit PROFILE --bench CSV ... -o FILE`` command line (measures nothing).

    Raises:
        ToolError: status 2, one line.
    """
    if not args.refit or not args.bench:
        raise _usage("--refit PROFILE and --bench CSV ... go together")
    given = [opt for opt, v in (("--prepare", args.prepare), ("--raw", args.raw), ("--dtypes", args.dtypes),
                                ("--sizes", args.sizes), ("--quick", args.quick), ("--seconds", args.seconds),
                                ("--bandwidth-mb", args.bandwidth_mb), ("--no-fit", args.no_fit),
                                ("--device", args.device != "local-task")) if v]
    if given:
        raise _usage(f"--refit measures nothing: {given[0]} does not apply")
    if not args.output:
        raise _usage("--refit needs -o PROFILE.json")
    check_output("-o", args.output)
    for i, csv_path in enumerate(args.bench):
        if not os.path.isfile(csv_path):  # a missing or odd path: the read's own error, later
            continue
        # the profile written over a run's measurements: a slip, refused
        if os.path.exists(args.output) and os.path.samefile(csv_path, args.output):
            raise _usage(f"-o {args.output}: is the --bench CSV {csv_path} (its measurements would be replaced "
                         "by the profile); give another file")
        # one run given twice would count each of its shapes twice
        if any(os.path.isfile(p) and os.path.samefile(csv_path, p) for p in args.bench[:i]):
            raise _usage(f"--bench {csv_path}: given twice")
    return args


def _refit(args) -> int:
    """``--refit``: the profile with ``kernel_products`` fitted to the ``--bench`` CSVs, written to ``-o``
    (atomically), and what changed printed."""
    from falcon_mlir.decision.profile import ProfileError, load_profile

    try:
        profile = load_profile(args.refit)
        tables = [fit.read_bench_csv(path) for path in args.bench]
        fitted, r = fit.fit_kernel_products(profile, tables)
    except (ProfileError, ValueError) as e:
        raise ToolError(f"{PROG}: error: {e}") from None
    except OSError as e:
        raise ToolError(f"{PROG}: error: {e.filename or ''}: {e.strerror or e}") from None
    fitted = replace(fitted, name=args.name or Path(args.output).stem, provenance=(
        f"{profile.provenance}; kernel_products refitted {r.before} -> {r.after} by falcon-calibrate --refit "
        f"to {r.used} shapes of the falcon-bench runs {', '.join(os.path.basename(b) for b in args.bench)} "
        f"({datetime.date.today().isoformat()})"))
    try:
        fitted.save(args.output)
    except OSError as e:
        raise ToolError(f"{PROG}: error: {e.filename or args.output}: {e.strerror or e}") from None
    print(f"kernel_products: {r.before} -> {r.after} (fitted to {r.used} shapes from {len(tables)} CSV"
          f"{'s' if len(tables) != 1 else ''}; left out: {r.narrow} with narrow products, {r.other} without "
          "a classical row and a one-level kernel-form plan)")
    print(f"measured / predicted gain over the classical kernel, geomean: {r.resid_before:.3f} before, "
          f"{r.resid_after:.3f} after (spread {r.spread:.3f})")
    print(f"wrote {args.output}")
    return 0


#: What the body imports that loads native code (IREE's runtime; the compiler is imported above):
#: imported first, with Ctrl-C held (:func:`falcon_mlir.cli.run_tool`), so that an interrupt while
#: it loads is one line.
_NATIVE = ("falcon_mlir.api", "iree.runtime")


def _paths(argv: list) -> tuple:
    """``(the device, [profile, raw])`` of a command line, for the line after a crash.

    Raises:
        ToolError: a command line that does not parse (the child said why).
    """
    args = build_parser().parse_args(argv)
    return args.device, [args.output, args.raw]


def _left(argv: list, since: float):
    """After a crash: ``DIR holds an incomplete bundle`` where ``--prepare DIR`` was made or written
    since the run started (``since``, seconds since the epoch), else None (the profile and the raw
    JSON are written at the end, atomically)."""
    folder = build_parser().parse_args(argv).prepare
    if folder and os.path.isdir(folder):
        with os.scandir(folder) as entries:  # the folder's own time: made, or a file added
            if os.stat(folder).st_mtime >= since or any(e.stat().st_mtime >= since for e in entries):
                return f"{folder} holds an incomplete bundle"
    return None


def main(argv=None) -> int:
    """Entry point of ``falcon-calibrate``; returns the exit status (in a child process when ``argv``
    is None: :func:`falcon_mlir.cli.run_tool_guarded`)."""
    return run_tool_guarded(PROG, _main, argv, doing="calibrating", paths=_paths, left=_left, preload=_NATIVE)


def _main(argv: list) -> int:
    args, opts = _parse(argv)
    if opts is None:
        return _refit(args)
    progress = (lambda total, desc: Progress(total, desc)) if not args.no_progress else None
    t0 = time.perf_counter()
    try:
        if args.prepare:
            man = prepare_bundle(args.prepare, name=args.name, progress=progress, **opts)
            total = sum(m["bytes"] for m in man["modules"])
            print(f"prepared {args.prepare}: {len(man['modules'])} modules, {total / 2**20:.1f} MiB, "
                  f"in {time.perf_counter() - t0:.0f} s; run there: python3 {args.prepare}/{RUNNER} "
                  f"{args.prepare} -o PROFILE.json")
            return 0
        prof, profile, raw = _measure(args, opts, progress)
        raw["wall_s"] = time.perf_counter() - t0
        if args.raw:
            write_json(args.raw, raw)
        prof.save(args.output)  # validated above
    except CalibrationError as e:
        raise ToolError(f"{PROG}: error: {e}") from None
    except OSError as e:
        raise ToolError(f"{PROG}: error: {e.filename or ''}: {e.strerror or e}") from None
    print(summary(profile, raw))
    print(f"wrote {args.output} ({raw['wall_s']:.0f} s)")
    return 0


def _measure(args, opts: dict, progress) -> tuple:
    """Prepare a bundle in a temporary folder, run it here, validate the
    profile (``Profile.from_dict``) and, on the CPU, fit the form factors.
    Returns ``(Profile, profile dict, raw dict)``."""
    from falcon_mlir.decision.profile import Profile, ProfileError

    name = args.name or Path(args.output).stem
    check_device(opts["device"])  # before the compiles (was: 13 modules compiled, then no device)
    with tempfile.TemporaryDirectory(prefix="falcon-calibrate-") as tmp:
        prepare_bundle(tmp, name=name, progress=progress, **opts)
        profile, raw = run_bundle(tmp, driver=opts["device"], seconds=opts["seconds"], name=name,
                                  progress=progress)
    try:
        prof = Profile.from_dict(profile, where="measured profile")
    except ProfileError as e:
        raise CalibrationError(str(e)) from None
    if opts["device"] == "local-task" and not args.no_fit:
        bar = progress(4 * len(fit.FIT_SIZES), "fit") if progress else None
        measured = fit.measure_plans(fit.QUICK_FIT_SIZES if args.quick else fit.FIT_SIZES,
                                     seconds=opts["seconds"] * 2, step=bar.step if bar else None)
        if bar:
            bar.close()
        prof, _ = fit.fit_forms(prof, measured)
        profile["forms"] = dict(prof.forms)
        raw["fit"] = measured
    return prof, profile, raw


if __name__ == "__main__":
    sys.exit(main())
