#!/usr/bin/env python3
"""Check and time classical vs falcon (Strassen) matmuls on a GPU from a bundle.

Two halves:

* ``prepare_gpu_bundle(outdir)`` runs HERE (where falcon-mlir and the IREE
  compiler are installed): it compiles ``C = A @ B`` (A: M x K, B: K x N,
  zero-filled accumulator C: M x N) for ``cuda-sm80`` in f32 and f16,
  classical (``lcma=None``) and rewritten with ``scheme=strassen levels=1`` and
  ``levels=2``, writes the ``.vmfb`` files, a ``manifest.json`` and a copy of
  this script. Shapes: square ``--sizes n`` (the default 2048 4096 8192),
  ``--shapes MxNxK`` (falcon-bench's spelling) and ``--workloads FILE --m M``
  (the LLM weight shapes (K, N) of ``workloads.md``, read by
  :func:`falcon_mlir.bench.shapes.parse_workloads`, with each given M; entries get a ``label`` such as ``Llama-3-8B q /
  o``; identical shapes are compiled once, labels joined by ``"; "``). Files:
  ``{dtype}_{n}_{variant}.vmfb`` (square), ``{dtype}_{M}x{N}x{K}_{variant}.vmfb``,
  and the GPU half: this script, ``gpu_check_run.py`` and copies of the
  standalone library modules it imports (:mod:`falcon_mlir.bundles`).
  Inputs are NOT shipped for large shapes (8192^2 f32 is 256 MB per operand):
  the manifest gives a seed and the GPU side generates them. Shapes with
  max(M, N, K) up to ``ship_inputs_max`` get ``.npy`` inputs in the bundle.

* ``main()`` (``python gpu_check.py run BUNDLE``) runs ON the GPU machine and
  needs only numpy and the ``iree-base-runtime`` wheel (no compiler, no
  falcon-mlir; Python 3.12 there is fine); the work is in ``gpu_check_run.py``. For each (dtype, M, N, K) it makes
  the inputs, puts them on the device once (``iree.runtime.asdevicearray``),
  runs every variant, checks

    - relative error (max-norm, ``max|x - ref| / max|ref|``) against a float64
      reference: the full product when M <= ``--full-ref-max`` and M*N*K <=
      ``--full-ref-max``**3, else a random subset of ``--check-rows`` rows of C
      (cheap: rows x N x K flops);
    - each falcon variant against the classical output (whole matrix);

  and times the median of ``--repeat`` calls after ``--warmup`` calls
  (``--budget-s``: stop timing a module after that many seconds, at least 3
  calls). Calls block until the GPU is done: IREE's default execution model
  (``async-internal``) exports functions as synchronous, waiting on the
  device fence before returning; results stay on the device while timing.
  Effective GFLOP/s = 2*M*N*K / median time (classical flops). On ``cuda``
  torch.matmul (cuBLAS) is timed too, as the peer. ``--allocator caching``
  creates the device with IREE's caching allocator (pooled buffers; trimmed
  after each shape). It prints a markdown table and writes ``gpu_check.md``
  and ``gpu_check.json`` to ``$OUT`` if set, else ``--out``, else the bundle.
  Manifests made before M/N/K (entries with ``n`` only) run as square.

* ``plot RESULTS.json -o PNG`` (matplotlib) and ``table RESULTS.json``
  (markdown: per shape, each variant's ms, TFLOP/s and speedup over
  ``classical_t`` or ``classical``) read one or more ``gpu_check.json``.

Variants (``prepare --variant NAME=OPTIONS``, repeatable; ``classical``, plain
IREE with its own tile choices, is always compiled as the baseline).
OPTIONS are space-separated tokens:

* ``lcma-rewrite`` options (``scheme=strassen levels=2 form=grouped``), or
  ``classical`` (or nothing but tile tokens) for no rewrite;
* ``tiles`` or ``tiles=TARGET`` (``cuda-sm80``, ``auto``, ``none``): run the
  ``falcon-tiles`` pass (tile choices on every contraction, products and
  classical ones, :mod:`falcon_mlir.passes.falcon_tiles`); ``prefer=CHOICE`` (e.g.
  ``simt64x64``) tries one table entry first. Without a tile token a variant
  keeps IREE's default tile choices (``tiles=none``), so bundles made before
  falcon-tiles mean the same.

e.g. ``--variant "classical_t=classical tiles" --variant "grouped2_t=scheme=strassen
levels=2 form=grouped tiles=cuda-sm80" --variant "grouped1_t64=scheme=strassen
form=grouped tiles prefer=simt64x64"``. The manifest records each module's
tile options and the choices made (``tiles``, ``tile_choices``).

Usage::

    # here: build the bundle (cuda-sm80, n = 2048 4096 8192)
    python scripts/gpu_check.py prepare gpu_bundle
    # rectangular shapes, and the Llama-3-8B weight shapes at two M
    python scripts/gpu_check.py prepare gpu_bundle --shapes 8192x4096x4096 4096x14336x4096
    python scripts/gpu_check.py prepare gpu_bundle --workloads ../shared/workloads.md \
        --model Llama-3-8B --m 2048 --m 8192 [--max-mib 60]
    # GPU machine (bundle folder carried there):
    pip install iree_base_runtime-3.13.0-cp312-...whl   # if not installed
    python gpu_bundle/gpu_check.py run gpu_bundle --driver cuda [--allocator caching]
        [--sizes 8192] [--shapes 8192x4096x4096] [--dtypes f16] [--variants classical ...]
    # results:
    python scripts/gpu_check.py table gpu_check.json
    python scripts/gpu_check.py plot gpu_check.json -o tflops.png
    # dry run here on the CPU, small sizes (and one non-square shape):
    python scripts/gpu_check.py dry-run
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from gpu_check_run import (CUDA_RUNTIME_FLAGS, FORMAT, MANIFEST, TOLERANCE, cli, entry_mnk, load_rows,  # noqa: F401
                           make_inputs, markdown, plot_results, run_bundle, shape_str, shapes,
                           summary_table, write_results)

PROG = "gpu_check"
#: Variants compiled by default: name -> lcma option (None: plain IREE).
VARIANTS = {
    "classical": None,
    "strassen1": "scheme=strassen levels=1",
    "strassen2": "scheme=strassen levels=2",
}
#: What a bundle carries besides the modules: the GPU half (this script and
#: gpu_check_run.py) and the standalone library modules they import.
BUNDLED_SCRIPTS = ("gpu_check.py", "gpu_check_run.py")
BUNDLED_LIBRARY = ("falcon_mlir.cli", "falcon_mlir.compare", "falcon_mlir.dtypes", "falcon_mlir.files",
                   "falcon_mlir.bench.shapes")


def parse_shapes(tokens) -> list:
    """``["8192x4096x4096", "64x96x32,128x128x128"]`` (falcon-bench's MxNxK
    spelling, comma- or space-separated) -> ``[(M, N, K), ...]`` (``[]`` for none).

    Raises:
        ValueError: a token that is not three positive integers joined by ``x``.
    """
    text = ",".join([tokens] if isinstance(tokens, str) else tokens)
    return [s.mnk for s in shapes.parse_shapes(text)] if text.replace(",", "").strip() else []


def _stem(dtype: str, M: int, N: int, K: int) -> str:
    return f"{dtype}_{M}" if M == N == K else f"{dtype}_{M}x{N}x{K}"


# --------------------------------------------------------------------------
# Bundle preparation (this machine: needs falcon_mlir and iree-base-compiler).

def workload_shapes(path, ms, models=None) -> list:
    """GEMM shapes of the LLM weight shapes in ``path`` (``workloads.md``).

    Reads the file with :func:`falcon_mlir.bench.shapes.parse_workloads`
    (weight shapes (K, N) with labels such as ``"Llama-3-8B q / o"``), once
    per ``models`` entry (a substring of the model cell; None: all models),
    and pairs every weight shape with every M in ``ms``.

    Returns:
        ``[(M, N, K, label), ...]``, identical (M, N, K) merged (labels joined
        by ``"; "``), in file order then ``ms`` order.

    Raises:
        ValueError: unreadable file, no shape found.
    """
    found = []
    for model in (list(models) if models else [None]):
        for label, K, N in shapes.parse_workloads(str(path), model):
            found += [(M, N, K, label) for M in ms]
    return _merge_shapes(found)

def _merge_shapes(shapes) -> list:
    """``(M, N, K[, label])`` items -> ``[(M, N, K, label or None)]``, one per
    (M, N, K), labels joined by ``"; "``."""
    merged = {}
    for s in shapes:
        key, label = tuple(int(x) for x in s[:3]), (s[3] if len(s) > 3 else None)
        labels = merged.setdefault(key, [])
        if label and label not in labels:
            labels.append(label)
    return [(*k, "; ".join(v) or None) for k, v in merged.items()]


def split_variant(options):
    """``(lcma, tiles)`` of a variant's OPTIONS (see the module docstring):
    the lcma option string or None (classical), and the falcon-tiles options
    string (``"none"``: IREE's default tile choices)."""
    if options is None:
        return None, "target=none"
    lcma, tiles = [], []
    target = None
    for tok in str(options).split():
        key, eq, val = tok.partition("=")
        if key == "tiles":
            target = val if eq else "auto"
        elif key in ("prefer", "combine-max"):
            tiles.append(tok)
        elif tok != "classical":
            lcma.append(tok)
    if target is None:
        target = "auto" if tiles else "none"
    return (" ".join(lcma) or None), " ".join([f"target={target}"] + tiles)


def prepare_gpu_bundle(outdir, *, sizes=None, shapes=(), dtypes=("f32", "f16"),
                       variants=None, target="cuda-sm80", seed=0, ship_inputs_max=1024,
                       max_bytes=30 * 2**20, log=print) -> dict:
    """Compiles the modules into ``outdir`` (atomically: built in a temporary
    folder beside it, then moved in place; a failure leaves ``outdir`` as it
    was) and writes ``manifest.json``. See :func:`_prepare_in` for the arguments.

    Raises:
        ValueError: ``outdir`` is an existing file; the bundle passes ``max_bytes``.
        falcon_mlir.CompileError: a module failed to compile.
        AssertionError: a forced falcon variant was not rewritten.
    """
    final = Path(outdir)
    if final.exists() and not final.is_dir():
        raise ValueError(f"{final} exists and is not a folder")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    kwargs = dict(locals())
    for k in ("outdir", "final", "tmp"):
        kwargs.pop(k)
    try:
        manifest = _prepare_in(tmp, display=final, **kwargs)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    return manifest


def _prepare_in(outdir, *, sizes=None, shapes=(), dtypes=("f32", "f16"),
                variants=None, target="cuda-sm80", seed=0, ship_inputs_max=1024,
                max_bytes=30 * 2**20, log=print, display=None) -> dict:
    """Compiles the modules into ``outdir`` and writes ``manifest.json``.

    Args:
        outdir: folder (created; files of the same names are replaced).
        sizes: square sizes n (M = N = K = n). None: 2048 4096 8192 when
            ``shapes`` is empty, else none.
        shapes: ``(M, N, K)`` or ``(M, N, K, label)`` items (C = A @ B, A: M x K,
            B: K x N); label e.g. from :func:`workload_shapes`. Identical
            shapes (also with ``sizes``) are compiled once, labels joined by "; ".
        dtypes: element types (``f32``, ``f16``); accumulation in the same type.
        variants: name -> OPTIONS (lcma options and tile tokens, see
            :func:`split_variant`; None: classical; default :data:`VARIANTS`).
        target: a :mod:`falcon_mlir.targets` name (``cuda-sm80``; ``host``
            for a CPU dry run).
        seed: base seed; each (dtype, shape) uses ``seed + n`` (square) or
            ``seed + M + N + K``, +1 for f16.
        ship_inputs_max: shapes with max(M, N, K) up to this get ``.npy`` inputs.
        max_bytes: the bundle must stay below this size in bytes (ValueError if not).

    Returns:
        The manifest (dict); entries have ``M``, ``N``, ``K`` (and ``n`` when
        square, ``label`` when given).

    Raises:
        falcon_mlir.CompileError: a module failed to compile.
        AssertionError: a falcon variant was not rewritten.
    """
    from falcon_mlir import targets
    from falcon_mlir.bundles import copy_standalone
    from falcon_mlir.ir.matmul_text import matmul_mlir

    if sizes is None:
        sizes = () if shapes else (2048, 4096, 8192)
    all_shapes = _merge_shapes([(n, n, n) for n in sizes] + list(shapes))
    variants = dict(VARIANTS if variants is None else variants)
    tgt = targets.get_target(target)
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    for dtype in dtypes:
        for M, N, K, label in all_shapes:
            square = M == N == K
            stem = _stem(dtype, M, N, K)
            case_seed = seed + (M if square else M + N + K) + (1 if dtype == "f16" else 0)
            inputs = None
            if max(M, N, K) <= ship_inputs_max:
                a, b = make_inputs(M, N, K, dtype, case_seed)
                inputs = []
                for name, x in (("a", a), ("b", b)):
                    fn = f"{stem}_{name}.npy"
                    np.save(out / fn, x)
                    inputs.append(fn)
            text = matmul_mlir(M, N, K, dtype, func="matmul")
            base = {"dtype": dtype, **({"n": M} if square else {}), "M": M, "N": N, "K": K,
                    **({"label": label} if label else {})}
            for vname, voptions in variants.items():
                entry = _compile_variant(out, tgt, text, f"{stem}_{vname}.vmfb", vname, voptions, base, log)
                entry.update(seed=case_seed, inputs=inputs)
                entries.append({k: entry[k] for k in _ENTRY_KEYS if k in entry})
    manifest = {"format": FORMAT, "target": tgt.name, "flags": list(tgt.flags),
                "driver": tgt.driver, "tolerance": TOLERANCE, "entries": entries}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    here = Path(__file__).resolve().parent
    if here != out.resolve():
        for name in BUNDLED_SCRIPTS:
            shutil.copyfile(here / name, out / name)
    copy_standalone(out, BUNDLED_LIBRARY)
    total = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    if total >= max_bytes:
        raise ValueError(f"bundle {out} is {total} bytes (limit {max_bytes}; prepare --max-mib)")
    log(f"bundle {display or out}: {len(entries)} modules, {total / 2**20:.2f} MiB")
    manifest["bundle_bytes"] = total
    return manifest


#: Manifest entry keys, in the order the manifest lists them.
_ENTRY_KEYS = ("file", "sha256", "bytes", "dtype", "n", "M", "N", "K", "label", "variant", "lcma",
               "function", "seed", "inputs", "rewritten", "plan", "products", "tiles", "tile_choices")


def _compile_variant(out: Path, tgt, text: str, fn: str, vname: str, voptions, base: dict, log) -> dict:
    """Compile one variant of one shape into ``out/fn``; its manifest entry
    (without seed and inputs).

    Raises:
        falcon_mlir.CompileError: the module failed to compile.
        AssertionError: a forced scheme was not applied.
    """
    from falcon_mlir import targets

    lcma, tiles = split_variant(voptions)
    tiles_report = []
    t0 = time.perf_counter()
    vmfb, report = targets.compile_for(tgt, text, lcma=lcma, return_report=True,
                                       tiles=tiles, tiles_report=tiles_report)
    dt = time.perf_counter() - t0
    plans = [r.get("plan") for r in report]
    rewritten = any(p not in (None, "classical") for p in plans)
    if lcma is not None and "scheme=" in lcma:  # auto may keep it classical
        assert rewritten, f"{base['dtype']} {shape_str(base['M'], base['N'], base['K'])} {vname}: " \
                          f"not rewritten: {report}"
    (out / fn).write_bytes(vmfb)
    entry = {"file": fn, "sha256": hashlib.sha256(vmfb).hexdigest(), "bytes": len(vmfb), **base,
             "variant": vname, "lcma": lcma, "function": "matmul", "rewritten": rewritten,
             "plan": next((p for p in plans if p not in (None, "classical")), None),
             "products": sum(int(r.get("products") or 0) for r in report),
             "tiles": None if tiles == "target=none" else tiles,
             "tile_choices": sorted({(r["tiles"] or {}).get("name", "iree-default") for r in tiles_report})}
    log(f"compiled {fn}: {len(vmfb)} bytes in {dt:.1f} s"
        + (f", products={entry['products']}" if rewritten else "")
        + (f", tiles {entry['tile_choices']}" if tiles_report else ""))
    return entry

# --------------------------------------------------------------------------
# The command line.

def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} is not a positive size")
    return v


def main(argv=None) -> int:
    """The command line (see the module docstring). Errors from bad input
    (missing or malformed files, bad options, failed compiles) print one line
    ``gpu_check: error: ...`` and return 2 (set GPU_CHECK_TRACEBACK=1 for the
    traceback); a run with a failed or out-of-tolerance module returns 1."""
    if os.environ.get("GPU_CHECK_TRACEBACK"):
        return _main(list(sys.argv[1:] if argv is None else argv))
    return cli.run_tool(PROG, _main, argv)


def _main(argv: list) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.cmd in ("plot", "table"):
            return _results(args)
        try:
            shapes_ = parse_shapes(args.shapes) if args.shapes else []
        except ValueError as exc:
            raise _usage(f"--shapes: {exc}") from None
        if args.cmd == "prepare":
            return _prepare(args, shapes_)
        return _run(args, shapes_)
    except cli.ToolError:
        raise
    except Exception as exc:  # one line, no traceback (unless GPU_CHECK_TRACEBACK is set)
        if os.environ.get("GPU_CHECK_TRACEBACK"):
            raise
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise cli.ToolError(f"{PROG}: error: {type(exc).__name__}: {msg[:300]}", 2) from None


def _usage(msg: str):
    return cli.ToolError(f"{PROG}: error: {msg}", 2)


def _parser():
    p = cli.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0], usage_status=2)
    sub = p.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("prepare", help="compile a bundle (needs falcon-mlir)")
    pp.add_argument("outdir")
    pp.add_argument("--sizes", type=_positive_int, nargs="+", default=None,
                    help="square n (default 2048 4096 8192 without --shapes/--workloads)")
    pp.add_argument("--shapes", nargs="+", default=None, metavar="MxNxK",
                    help="GEMM shapes C[MxN] = A[MxK] @ B[KxN], e.g. 8192x4096x4096")
    pp.add_argument("--workloads", metavar="PATH", help="workloads.md: LLM weight shapes (K, N)")
    pp.add_argument("--m", action="append", default=[], metavar="M",
                    help="with --workloads: M (tokens); repeatable or comma-separated")
    pp.add_argument("--model", action="extend", nargs="+", default=None, metavar="NAME",
                    help="with --workloads: keep models whose name contains NAME (several: union)")
    pp.add_argument("--dtypes", nargs="+", default=["f32", "f16"])
    pp.add_argument("--target", default="cuda-sm80")
    pp.add_argument("--seed", type=int, default=0)
    pp.add_argument("--max-mib", type=float, default=30.0, help="bundle size limit (MiB)")
    pp.add_argument("--variant", action="append", default=[], metavar="NAME=OPTIONS",
                    help="variant to compile besides classical, e.g. "
                         "'grouped1=scheme=strassen form=grouped' or "
                         "'classical_t=classical tiles=cuda-sm80' (repeatable; replaces the "
                         "default strassen1/strassen2 set; see the module docstring)")
    for name in ("run", "dry-run"):
        _run_options(sub, name)
    pl = sub.add_parser("plot", help="PNG: effective TFLOP/s vs M per weight shape")
    pl.add_argument("results", nargs="+", help="gpu_check.json file(s)")
    pl.add_argument("-o", "--output", required=True, help="PNG path")
    pl.add_argument("--title", default=None)
    tb = sub.add_parser("table", help="markdown: per shape, each variant's ms, TFLOP/s, speedup")
    tb.add_argument("results", nargs="+", help="gpu_check.json file(s)")
    return p


def _run_options(sub, name: str) -> None:
    run = name == "run"
    rp = sub.add_parser(name, help="run a bundle" if run else
                        "prepare a host bundle at small sizes and run it on local-task")
    if run:
        rp.add_argument("bundle")
    rp.add_argument("--driver", default="cuda" if run else "local-task")
    rp.add_argument("--allocator", choices=["none", "caching"], default=None,
                    help="IREE device allocator (caching: buffers reused across calls); "
                         "default: caching on cuda, none elsewhere")
    rp.add_argument("--runtime-flag", action="append", default=None, metavar="FLAG",
                    help="IREE runtime flag parsed before the device is made (repeatable); "
                         f"default on cuda: {' '.join(CUDA_RUNTIME_FLAGS)}")
    rp.add_argument("--iree-runtime-defaults", action="store_true",
                    help="IREE's own runtime settings (no caching allocator, no flags)")
    rp.add_argument("--repeat", type=int, default=10)
    rp.add_argument("--warmup", type=int, default=2)
    rp.add_argument("--check-rows", type=int, default=256)
    rp.add_argument("--full-ref-max", type=int, default=2048 if run else 256)
    rp.add_argument("--sizes", type=int, nargs="+", default=None if run else [256, 512])
    rp.add_argument("--shapes", nargs="+" if run else "*", metavar="MxNxK",
                    default=None if run else ["256x384x128"],
                    help="keep these shapes (with --sizes: either)" if run else
                    "non-square shapes to compile and run")
    rp.add_argument("--dtypes", nargs="+", default=None)
    rp.add_argument("--variants", nargs="+", default=None)
    rp.add_argument("--budget-s", type=float, default=30.0,
                    help="stop timing a module after this many seconds (min 3 reps)")
    rp.add_argument("--out", default=None, help="results folder ($OUT wins if set)")


def _results(args) -> int:
    rows = load_rows(args.results)
    if args.cmd == "table":
        print(summary_table(rows), end="")
    else:
        plot_results(rows, args.output, title=args.title)
        print(f"wrote {args.output}")
    return 0


def _prepare(args, shapes_: list) -> int:
    variants = None
    if args.variant:
        variants = {"classical": None}
        for v in args.variant:
            name, eq, opts = v.partition("=")
            if not eq or not name or not opts:
                raise _usage(f"--variant {v!r}: expected NAME=OPTIONS")
            variants[name] = opts
    if args.workloads:
        try:
            ms = [int(t) for m in args.m for t in m.split(",") if t.strip()]
        except ValueError:
            raise _usage(f"--m {args.m}: expected integers") from None
        if not ms or min(ms) < 1:
            raise _usage("--workloads needs --m M (positive, repeatable)")
        try:
            shapes_ += workload_shapes(args.workloads, ms, args.model)
        except ValueError as exc:
            raise _usage(f"--workloads: {exc}") from None
    elif args.m or args.model:
        raise _usage("--m and --model go with --workloads")
    prepare_gpu_bundle(args.outdir, sizes=args.sizes, shapes=shapes_, dtypes=args.dtypes,
                       variants=variants, target=args.target, seed=args.seed,
                       max_bytes=int(args.max_mib * 2**20))
    return 0


def _run(args, shapes_: list) -> int:
    if args.cmd == "dry-run":
        tmp = tempfile.mkdtemp(prefix="gpu-bundle-dry-")
        # ship_inputs_max=256: the 256 case reads .npy inputs, larger ones use the seed.
        prepare_gpu_bundle(tmp, sizes=args.sizes or [], shapes=shapes_,
                           dtypes=args.dtypes or ["f32", "f16"],
                           target="host", ship_inputs_max=256)
        bundle = Path(tmp)
    else:
        bundle = Path(args.bundle)
    # falcon's runtime settings on cuda (falcon_mlir.runner.device_config, kept
    # in step here because this script runs where falcon_mlir is not installed)
    cuda = args.driver == "cuda" and not args.iree_runtime_defaults
    if args.allocator is None:
        args.allocator = "caching" if cuda else "none"
    if args.runtime_flag is None:
        args.runtime_flag = list(CUDA_RUNTIME_FLAGS) if cuda else []
    if args.runtime_flag:
        import iree.runtime as rt

        rt.flags.parse_flags(*args.runtime_flag)
    rows = run_bundle(bundle, driver=args.driver, repeat=args.repeat, warmup=args.warmup,
                      check_rows=args.check_rows, full_ref_max=args.full_ref_max,
                      sizes=args.sizes, shapes=shapes_, dtypes=args.dtypes, variants=args.variants,
                      budget_s=args.budget_s, allocator=args.allocator)
    outdir = Path(os.environ.get("OUT") or args.out or bundle)
    write_results(rows, outdir, args.driver, allocator=args.allocator, runtime_flags=args.runtime_flag)
    return 0 if rows and all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
