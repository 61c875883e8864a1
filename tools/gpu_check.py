#!/usr/bin/env python3
"""Check and time classical vs falcon (Strassen) matmuls on a GPU from a bundle.

Two halves:

* ``prepare_gpu_bundle(outdir)`` runs HERE (where falcon-mlir and the IREE
  compiler are installed): it compiles ``C = A @ B`` (square n, zero-filled
  accumulator) for ``cuda-sm80`` in f32 and f16, classical (``lcma=None``)
  and rewritten with ``scheme=strassen levels=1`` and ``levels=2``, writes the
  ``.vmfb`` files, a ``manifest.json`` and a copy of this script. Inputs are
  NOT shipped for large n (8192^2 f32 is 256 MB per operand): the manifest
  gives a seed and the GPU side generates them. Sizes up to
  ``ship_inputs_max`` get ``.npy`` inputs in the bundle.

* ``main()`` (``python gpu_check.py run BUNDLE``) runs ON the GPU machine and
  needs only numpy and the ``iree-base-runtime`` wheel (no compiler, no
  falcon-mlir; Python 3.12 there is fine). For each (dtype, n) it makes the
  inputs, puts them on the device once (``iree.runtime.asdevicearray``), runs
  every variant, checks

    - relative error (max-norm, ``max|x - ref| / max|ref|``) against a float64
      reference: the full product when n <= ``--full-ref-max``, else a random
      subset of ``--check-rows`` rows (cheap: rows x n x n flops);
    - each falcon variant against the classical output (whole matrix);

  and times the median of ``--repeat`` calls after ``--warmup`` calls. Calls
  block until the GPU is done: IREE's default execution model
  (``async-internal``) exports functions as synchronous, waiting on the
  device fence before returning; results stay on the device while timing.
  It prints a markdown table and writes ``gpu_check.md`` and
  ``gpu_check.json`` to ``$OUT`` if set, else ``--out``, else the bundle.

Variants (``prepare --variant NAME=OPTIONS``, repeatable; ``classical``, plain
IREE with its own tile choices, is always compiled as the baseline).
OPTIONS are space-separated tokens:

* ``lcma-rewrite`` options (``scheme=strassen levels=2 form=grouped``), or
  ``classical`` (or nothing but tile tokens) for no rewrite;
* ``tiles`` or ``tiles=TARGET`` (``cuda-sm80``, ``auto``, ``none``): run the
  ``falcon-tiles`` pass (tile choices on every contraction, products and
  classical ones, :mod:`falcon_mlir.passes.tiles`); ``prefer=CHOICE`` (e.g.
  ``simt64x64``) tries one table entry first. Without a tile token a variant
  keeps IREE's default tile choices (``tiles=none``), so bundles made before
  falcon-tiles mean the same.

e.g. ``--variant "classical_t=classical tiles" --variant "grouped2_t=scheme=strassen
levels=2 form=grouped tiles=cuda-sm80" --variant "grouped1_t64=scheme=strassen
form=grouped tiles prefer=simt64x64"``. The manifest records each module's
tile options and the choices made (``tiles``, ``tile_choices``).

Usage::

    # here: build the bundle (cuda-sm80, n = 2048 4096 8192)
    python tools/gpu_check.py prepare gpu_bundle
    # GPU machine (bundle folder carried there):
    pip install iree_base_runtime-3.13.0-cp312-...whl   # if not installed
    python gpu_bundle/gpu_check.py run gpu_bundle --driver cuda
    # dry run here on the CPU, small sizes:
    python tools/gpu_check.py dry-run
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

import numpy as np

MANIFEST = "manifest.json"
FORMAT = 1

#: Variants compiled by default: name -> lcma option (None: plain IREE).
VARIANTS = {
    "classical": None,
    "strassen1": "scheme=strassen levels=1",
    "strassen2": "scheme=strassen levels=2",
}
#: Pass/fail bounds on the relative error (max-norm), per element type. The
#: H200 measurements in iree-notes.md at 8192: f32 1.6e-6 .. 3.2e-6,
#: f16 3.3e-3 .. 6.8e-3.
TOLERANCE = {"f32": 1e-4, "f16": 3e-2}
NP_DTYPE = {"f32": np.float32, "f16": np.float16}


# --------------------------------------------------------------------------
# Bundle preparation (this machine: needs falcon_mlir and iree-base-compiler).

def matmul_mlir(n: int, dtype: str, func: str = "matmul") -> str:
    """MLIR text of ``@func(A: n x n, B: n x n) -> A @ B`` (accumulator in
    ``dtype``, zero-filled)."""
    t = f"tensor<{n}x{n}x{dtype}>"
    return (f"func.func @{func}(%a: {t}, %b: {t}) -> {t} {{\n"
            f"  %zero = arith.constant 0.0 : {dtype}\n"
            f"  %e = tensor.empty() : {t}\n"
            f"  %c = linalg.fill ins(%zero : {dtype}) outs(%e : {t}) -> {t}\n"
            f"  %r = linalg.matmul ins(%a, %b : {t}, {t}) outs(%c : {t}) -> {t}\n"
            f"  return %r : {t}\n}}\n")


def make_inputs(n: int, dtype: str, seed: int):
    """The two operands, standard normal, drawn in float32 from
    ``numpy.random.default_rng(seed)`` then cast to ``dtype``. The same on
    both machines (numpy's PCG64 stream does not depend on the platform)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n), dtype=np.float32).astype(NP_DTYPE[dtype])
    b = rng.standard_normal((n, n), dtype=np.float32).astype(NP_DTYPE[dtype])
    return a, b


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
        elif key == "prefer":
            tiles.append(tok)
        elif tok != "classical":
            lcma.append(tok)
    if target is None:
        target = "auto" if tiles else "none"
    return (" ".join(lcma) or None), " ".join([f"target={target}"] + tiles)


def prepare_gpu_bundle(outdir, *, sizes=(2048, 4096, 8192), dtypes=("f32", "f16"),
                       variants=None, target="cuda-sm80", seed=0, ship_inputs_max=1024,
                       max_bytes=30 * 2**20, log=print) -> dict:
    """Compiles the modules into ``outdir`` and writes ``manifest.json``.

    Args:
        outdir: folder (created; files of the same names are replaced).
        sizes: square sizes n.
        dtypes: element types (``f32``, ``f16``); accumulation in the same type.
        variants: name -> OPTIONS (lcma options and tile tokens, see
            :func:`split_variant`; None: classical; default :data:`VARIANTS`).
        target: a :mod:`falcon_mlir.targets` name (``cuda-sm80``; ``host``
            for a CPU dry run).
        seed: base seed; each (dtype, n) uses ``seed + n`` (+1 for f16).
        ship_inputs_max: n up to which inputs are written as ``.npy``.
        max_bytes: the bundle must stay below this size (ValueError if not).

    Returns:
        The manifest (dict).

    Raises:
        falcon_mlir.CompileError: a module failed to compile.
        AssertionError: a falcon variant was not rewritten.
    """
    from falcon_mlir import targets

    variants = dict(VARIANTS if variants is None else variants)
    tgt = targets.get_target(target)
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    for dtype in dtypes:
        for n in sizes:
            case_seed = seed + n + (1 if dtype == "f16" else 0)
            inputs = None
            if n <= ship_inputs_max:
                a, b = make_inputs(n, dtype, case_seed)
                inputs = []
                for name, x in (("a", a), ("b", b)):
                    fn = f"{dtype}_{n}_{name}.npy"
                    np.save(out / fn, x)
                    inputs.append(fn)
            text = matmul_mlir(n, dtype)
            for vname, voptions in variants.items():
                lcma, tiles = split_variant(voptions)
                tiles_report = []
                t0 = time.perf_counter()
                vmfb, report = targets.compile_for(tgt, text, lcma=lcma, return_report=True,
                                                   tiles=tiles, tiles_report=tiles_report)
                dt = time.perf_counter() - t0
                plans = [r.get("plan") for r in report]
                rewritten = any(p not in (None, "classical") for p in plans)
                if lcma is not None and "scheme=" in lcma:  # auto may keep it classical
                    assert rewritten, f"{dtype} {n} {vname}: not rewritten: {report}"
                fn = f"{dtype}_{n}_{vname}.vmfb"
                (out / fn).write_bytes(vmfb)
                entries.append({
                    "file": fn, "sha256": hashlib.sha256(vmfb).hexdigest(), "bytes": len(vmfb),
                    "dtype": dtype, "n": n, "variant": vname, "lcma": lcma,
                    "function": "matmul", "seed": case_seed, "inputs": inputs,
                    "rewritten": rewritten,
                    "plan": next((p for p in plans if p not in (None, "classical")), None),
                    "products": sum(int(r.get("products") or 0) for r in report),
                    "tiles": None if tiles == "target=none" else tiles,
                    "tile_choices": sorted({(r["tiles"] or {}).get("name", "iree-default")
                                            for r in tiles_report}),
                })
                log(f"compiled {fn}: {len(vmfb)} bytes in {dt:.1f} s"
                    + (f", products={entries[-1]['products']}" if rewritten else "")
                    + (f", tiles {entries[-1]['tile_choices']}" if tiles_report else ""))
    manifest = {"format": FORMAT, "target": tgt.name, "flags": list(tgt.flags),
                "driver": tgt.driver, "tolerance": TOLERANCE, "entries": entries}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    here = Path(__file__).resolve()
    if here.parent != out.resolve():
        shutil.copyfile(here, out / "gpu_check.py")
    total = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    if total >= max_bytes:
        raise ValueError(f"bundle {out} is {total} bytes (limit {max_bytes})")
    log(f"bundle {out}: {len(entries)} modules, {total / 2**20:.2f} MiB")
    manifest["bundle_bytes"] = total
    return manifest


# --------------------------------------------------------------------------
# GPU side (numpy + iree.runtime only).

def rel_err(x, ref) -> float:
    """``max|x - ref| / max|ref|`` in float64."""
    x = np.asarray(x, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    return float(np.abs(x - ref).max() / np.abs(ref).max())


def _load(config, vmfb: bytes):
    import iree.runtime as rt

    ctx = rt.SystemContext(config=config)
    vm = rt.VmModule.copy_buffer(ctx.instance, vmfb)
    ctx.add_vm_module(vm)
    return ctx.modules[vm.name]


def _time_calls(fn, args, warmup: int, repeat: int, budget_s: float):
    for _ in range(warmup):
        res = fn(*args)
        del res
    times = []
    t_start = time.perf_counter()
    for i in range(repeat):
        t0 = time.perf_counter()
        res = fn(*args)          # synchronous: returns after the device fence
        times.append(time.perf_counter() - t0)
        del res
        if i >= 2 and time.perf_counter() - t_start > budget_s:
            break
    return times


def run_bundle(bundle, *, driver="cuda", repeat=10, warmup=2, check_rows=256,
               full_ref_max=2048, sizes=None, dtypes=None, variants=None, budget_s=30.0,
               log=print) -> list:
    """Runs every module of ``bundle`` on ``driver``; returns one row (dict)
    per module. See the module docstring."""
    import iree.runtime as rt

    bundle = Path(bundle)
    manifest = json.loads((bundle / MANIFEST).read_text())
    tol = {**TOLERANCE, **manifest.get("tolerance", {})}
    config = rt.Config(driver)
    groups = {}
    for e in manifest["entries"]:
        if sizes and e["n"] not in sizes or dtypes and e["dtype"] not in dtypes \
                or variants and e["variant"] not in variants:
            continue
        groups.setdefault((e["dtype"], e["n"]), []).append(e)
    rows = []
    for (dtype, n), entries in groups.items():
        entries.sort(key=lambda e: e["variant"] != "classical")  # classical first
        t0 = time.perf_counter()
        if entries[0].get("inputs"):
            a, b = (np.load(bundle / f) for f in entries[0]["inputs"])
        else:
            a, b = make_inputs(n, dtype, entries[0]["seed"])
        rng = np.random.default_rng(12345 + n)
        if n <= full_ref_max:
            idx = np.arange(n)
        else:
            idx = np.sort(rng.choice(n, size=min(check_rows, n), replace=False))
        ref = a[idx].astype(np.float64) @ b.astype(np.float64)
        log(f"[{dtype} {n}] inputs + reference ({len(idx)} rows): "
            f"{time.perf_counter() - t0:.1f} s")
        dev = [rt.asdevicearray(config.device, x) for x in (a, b)]
        classical_out = None
        classical_ms = None
        for e in entries:
            row = {k: e[k] for k in ("dtype", "n", "variant", "lcma", "file", "products")}
            row.update({k: e[k] for k in ("tiles", "tile_choices") if k in e})
            row.update(driver=driver, ref_rows=int(len(idx)))
            try:
                vmfb = (bundle / e["file"]).read_bytes()
                if hashlib.sha256(vmfb).hexdigest() != e["sha256"]:
                    raise RuntimeError("sha256 mismatch")
                fn = _load(config, vmfb)[e["function"]]
                out = np.asarray(fn(*dev).to_host())
                row["rel_err"] = rel_err(out[idx], ref)
                if classical_out is not None and e["variant"] != "classical":
                    row["rel_diff_vs_classical"] = rel_err(out, classical_out)
                times = _time_calls(fn, dev, warmup, repeat, budget_s)
                row["median_ms"] = float(np.median(times) * 1e3)
                row["min_ms"] = float(np.min(times) * 1e3)
                row["reps"] = len(times)
                row["gflops"] = 2.0 * n ** 3 / (row["median_ms"] * 1e-3) / 1e9
                if e["variant"] == "classical":
                    classical_out, classical_ms = out, row["median_ms"]
                elif classical_ms:
                    row["speedup_vs_classical"] = classical_ms / row["median_ms"]
                row["ok"] = bool(row["rel_err"] <= tol[dtype])
                del out
            except Exception as exc:  # keep going: report the failure in the table
                row["ok"] = False
                row["error"] = f"{type(exc).__name__}: {exc}"[:500]
            rows.append(row)
            log(f"  {e['variant']:<10} " + (
                f"median {row['median_ms']:.3f} ms ({row['reps']} reps), rel_err {row['rel_err']:.2e}"
                + (f", vs classical {row['rel_diff_vs_classical']:.2e}"
                   if "rel_diff_vs_classical" in row else "")
                if "error" not in row else f"FAILED {row['error']}"))
        if driver == "cuda":
            rows.append(_torch_peer(a, b, idx, ref, dtype, n, repeat, warmup, tol, log))
        del dev, classical_out
    return rows


def _torch_peer(a, b, idx, ref, dtype, n, repeat, warmup, tol, log) -> dict:
    """torch.matmul (cuBLAS) on the same inputs, timed with CUDA events (the peer)."""
    row = {"dtype": dtype, "n": n, "variant": "torch (cuBLAS)", "lcma": "-", "file": "-",
           "products": 1, "driver": "cuda", "ref_rows": int(len(idx))}
    try:
        import torch

        ta = torch.from_numpy(np.ascontiguousarray(a)).cuda()
        tb = torch.from_numpy(np.ascontiguousarray(b)).cuda()
        out = torch.matmul(ta, tb)
        torch.cuda.synchronize()
        row["rel_err"] = rel_err(out[torch.from_numpy(idx).cuda()].cpu().numpy(), ref)
        for _ in range(warmup):
            torch.matmul(ta, tb)
        times = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.matmul(ta, tb)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
        row["median_ms"] = float(np.median(times) * 1e3)
        row["min_ms"] = float(np.min(times) * 1e3)
        row["reps"] = len(times)
        row["gflops"] = 2.0 * n ** 3 / (row["median_ms"] * 1e-3) / 1e9
        row["ok"] = bool(row["rel_err"] <= tol[dtype])
        row["note"] = f"torch {torch.__version__}, allow_tf32={torch.backends.cuda.matmul.allow_tf32}"
        del ta, tb, out
        torch.cuda.empty_cache()
    except Exception as exc:
        row["ok"] = False
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
    log(f"  {row['variant']:<10} " + (f"median {row['median_ms']:.3f} ms, rel_err {row['rel_err']:.2e}"
                                      if "error" not in row else f"FAILED {row['error']}"))
    return row


def markdown(rows) -> str:
    """The rows as a markdown table."""
    head = ("| dtype | n | variant | median ms | speedup vs classical | GFLOP/s | rel err vs f64 "
            "(rows) | rel diff vs classical | ok |\n|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['dtype']} | {r['n']} | {r['variant']} | - | - | - | - | - | "
                         f"FAILED: {r['error'][:80]} |")
            continue
        sp = r.get("speedup_vs_classical")
        dv = r.get("rel_diff_vs_classical")
        lines.append(
            f"| {r['dtype']} | {r['n']} | {r['variant']} | {r['median_ms']:.3f} | "
            f"{f'{sp:.2f}x' if sp else '-'} | {r['gflops']:.0f} | "
            f"{r['rel_err']:.2e} ({r['ref_rows']}) | {f'{dv:.2e}' if dv is not None else '-'} | "
            f"{'yes' if r['ok'] else 'NO'} |")
    return head + "\n".join(lines) + "\n"


def _env_info(driver):
    info = {"python": sys.version.split()[0], "platform": platform.platform(),
            "numpy": np.__version__, "driver": driver}
    try:
        from importlib.metadata import version
        info["iree_base_runtime"] = version("iree-base-runtime")
    except Exception:
        pass
    return info


def _write_results(rows, outdir: Path, driver: str, log=print):
    outdir.mkdir(parents=True, exist_ok=True)
    md = markdown(rows)
    (outdir / "gpu_check.md").write_text(md)
    (outdir / "gpu_check.json").write_text(
        json.dumps({"env": _env_info(driver), "rows": rows}, indent=1) + "\n")
    log(md)
    log(f"wrote {outdir / 'gpu_check.md'} and {outdir / 'gpu_check.json'}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("prepare", help="compile a bundle (needs falcon-mlir)")
    pp.add_argument("outdir")
    pp.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192])
    pp.add_argument("--dtypes", nargs="+", default=["f32", "f16"])
    pp.add_argument("--target", default="cuda-sm80")
    pp.add_argument("--seed", type=int, default=0)
    pp.add_argument("--variant", action="append", default=[], metavar="NAME=OPTIONS",
                    help="variant to compile besides classical, e.g. "
                         "'grouped1=scheme=strassen form=grouped' or "
                         "'classical_t=classical tiles=cuda-sm80' (repeatable; replaces the "
                         "default strassen1/strassen2 set; see the module docstring)")
    for name in ("run", "dry-run"):
        rp = sub.add_parser(name, help="run a bundle" if name == "run" else
                            "prepare a host bundle at small sizes and run it on local-task")
        if name == "run":
            rp.add_argument("bundle")
        rp.add_argument("--driver", default="cuda" if name == "run" else "local-task")
        rp.add_argument("--repeat", type=int, default=10)
        rp.add_argument("--warmup", type=int, default=2)
        rp.add_argument("--check-rows", type=int, default=256)
        rp.add_argument("--full-ref-max", type=int, default=2048 if name == "run" else 256)
        rp.add_argument("--sizes", type=int, nargs="+",
                        default=None if name == "run" else [256, 512])
        rp.add_argument("--dtypes", nargs="+", default=None)
        rp.add_argument("--variants", nargs="+", default=None)
        rp.add_argument("--budget-s", type=float, default=30.0,
                        help="stop timing a module after this many seconds (min 3 reps)")
        rp.add_argument("--out", default=None, help="results folder ($OUT wins if set)")
    args = p.parse_args(argv)

    if args.cmd == "prepare":
        variants = None
        if args.variant:
            variants = {"classical": None}
            for v in args.variant:
                name, eq, opts = v.partition("=")
                if not eq or not name or not opts:
                    p.error(f"--variant {v!r}: expected NAME=OPTIONS")
                variants[name] = opts
        prepare_gpu_bundle(args.outdir, sizes=args.sizes, dtypes=args.dtypes,
                           variants=variants, target=args.target, seed=args.seed)
        return 0

    if args.cmd == "dry-run":
        import tempfile
        tmp = tempfile.mkdtemp(prefix="gpu-bundle-dry-")
        # ship_inputs_max=256: the 256 case reads .npy inputs, larger ones use the seed.
        prepare_gpu_bundle(tmp, sizes=args.sizes, dtypes=args.dtypes or ["f32", "f16"],
                           target="host", ship_inputs_max=256)
        bundle = Path(tmp)
    else:
        bundle = Path(args.bundle)
    rows = run_bundle(bundle, driver=args.driver, repeat=args.repeat, warmup=args.warmup,
                      check_rows=args.check_rows, full_ref_max=args.full_ref_max,
                      sizes=args.sizes, dtypes=args.dtypes, variants=args.variants,
                      budget_s=args.budget_s)
    outdir = Path(os.environ.get("OUT") or args.out or bundle)
    _write_results(rows, outdir, args.driver)
    return 0 if rows and all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
