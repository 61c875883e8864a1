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
  (the LLM weight shapes (K, N) of ``workloads.md``, read by falcon-bench's
  parser, with each given M; entries get a ``label`` such as ``Llama-3-8B q /
  o``; identical shapes are compiled once, labels joined by ``"; "``). Files:
  ``{dtype}_{n}_{variant}.vmfb`` (square), ``{dtype}_{M}x{N}x{K}_{variant}.vmfb``.
  Inputs are NOT shipped for large shapes (8192^2 f32 is 256 MB per operand):
  the manifest gives a seed and the GPU side generates them. Shapes with
  max(M, N, K) up to ``ship_inputs_max`` get ``.npy`` inputs in the bundle.

* ``main()`` (``python gpu_check.py run BUNDLE``) runs ON the GPU machine and
  needs only numpy and the ``iree-base-runtime`` wheel (no compiler, no
  falcon-mlir; Python 3.12 there is fine). For each (dtype, M, N, K) it makes
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
import platform
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np

MANIFEST = "manifest.json"
#: 2: entries carry M, N, K (and ``n`` for squares only); 1: ``n`` only.
FORMAT = 2

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
#: IREE runtime flags of falcon's CUDA runtime settings (the same as
#: falcon_mlir.runner.CUDA_RUNTIME_FLAGS; with the caching allocator).
CUDA_RUNTIME_FLAGS = ("--cuda_async_allocations=false",)
NP_DTYPE = {"f32": np.float32, "f16": np.float16}
TORCH_VARIANT = "torch (cuBLAS)"


# --------------------------------------------------------------------------
# Shapes (both machines).

def parse_shapes(tokens) -> list:
    """``["8192x4096x4096", "64x96x32,128x128x128"]`` (falcon-bench's MxNxK
    spelling, comma- or space-separated) -> ``[(M, N, K), ...]``.

    Raises:
        ValueError: a token that is not three positive integers joined by ``x``.
    """
    out = []
    for tok in ",".join([tokens] if isinstance(tokens, str) else tokens).split(","):
        tok = tok.strip()
        if not tok:
            continue
        m = re.fullmatch(r"([0-9]+)[xX]([0-9]+)[xX]([0-9]+)", tok)
        if not m or 0 in (int(g) for g in m.groups()):
            raise ValueError(f"{tok!r} is not MxNxK with positive integers")
        out.append(tuple(int(g) for g in m.groups()))
    return out


def shape_str(M: int, N: int, K: int) -> str:
    """``"MxNxK"``."""
    return f"{M}x{N}x{K}"


def entry_mnk(e: dict) -> tuple:
    """``(M, N, K)`` of a manifest entry or result row; ``n`` (format 1) for
    whatever is missing."""
    n = e.get("n")
    return tuple(int(e[k] if e.get(k) is not None else n) for k in ("M", "N", "K"))


def _stem(dtype: str, M: int, N: int, K: int) -> str:
    return f"{dtype}_{M}" if M == N == K else f"{dtype}_{M}x{N}x{K}"


# --------------------------------------------------------------------------
# Bundle preparation (this machine: needs falcon_mlir and iree-base-compiler).

def matmul_mlir(M: int, N=None, K=None, dtype: str = "f32", func: str = "matmul") -> str:
    """MLIR text of ``@func(A: M x K, B: K x N) -> A @ B`` (C: M x N, accumulator
    in ``dtype``, zero-filled). ``matmul_mlir(n, dtype[, func])`` (square, the
    old form) still works."""
    if isinstance(N, str):                      # old form: (n, dtype[, func])
        dtype, func, N, K = N, (K if isinstance(K, str) else func), None, None
    N = M if N is None else N
    K = M if K is None else K
    at, bt, ct = (f"tensor<{M}x{K}x{dtype}>", f"tensor<{K}x{N}x{dtype}>",
                  f"tensor<{M}x{N}x{dtype}>")
    return (f"func.func @{func}(%a: {at}, %b: {bt}) -> {ct} {{\n"
            f"  %zero = arith.constant 0.0 : {dtype}\n"
            f"  %e = tensor.empty() : {ct}\n"
            f"  %c = linalg.fill ins(%zero : {dtype}) outs(%e : {ct}) -> {ct}\n"
            f"  %r = linalg.matmul ins(%a, %b : {at}, {bt}) outs(%c : {ct}) -> {ct}\n"
            f"  return %r : {ct}\n}}\n")


def make_inputs(M: int, N, K=None, dtype=None, seed=None):
    """The operands A (M x K) and B (K x N), standard normal, drawn in float32
    from ``numpy.random.default_rng(seed)`` (A first) then cast to ``dtype``
    (``f32``/``f16``). The same on both machines (numpy's PCG64 stream does not
    depend on the platform). ``make_inputs(n, dtype, seed)`` (square, the old
    form) still works and draws the same arrays as before."""
    if isinstance(N, str):                      # old form: (n, dtype, seed)
        dtype, seed, N, K = N, K, M, M
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K), dtype=np.float32).astype(NP_DTYPE[dtype])
    b = rng.standard_normal((K, N), dtype=np.float32).astype(NP_DTYPE[dtype])
    return a, b


def workload_shapes(path, ms, models=None) -> list:
    """GEMM shapes of the LLM weight shapes in ``path`` (``workloads.md``).

    Reads the file with falcon-bench's parser
    (:func:`falcon_mlir.tools.falcon_bench.parse_workloads`: weight shapes (K, N)
    with labels such as ``"Llama-3-8B q / o"``), once per ``models`` entry (a
    substring of the model cell; None: all models), and pairs every weight
    shape with every M in ``ms``.

    Returns:
        ``[(M, N, K, label), ...]``, identical (M, N, K) merged (labels joined
        by ``"; "``), in file order then ``ms`` order.

    Raises:
        falcon_mlir.tools.falcon_bench.UsageError: unreadable file, no shape found.
    """
    from falcon_mlir.tools.falcon_bench import parse_workloads

    found = []
    for model in (list(models) if models else [None]):
        for label, K, N in parse_workloads(str(path), model):
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
            text = matmul_mlir(M, N, K, dtype)
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
                    assert rewritten, f"{dtype} {shape_str(M, N, K)} {vname}: not rewritten: {report}"
                fn = f"{stem}_{vname}.vmfb"
                (out / fn).write_bytes(vmfb)
                entry = {"file": fn, "sha256": hashlib.sha256(vmfb).hexdigest(), "bytes": len(vmfb),
                         "dtype": dtype}
                if square:
                    entry["n"] = M
                entry.update(M=M, N=N, K=K)
                if label:
                    entry["label"] = label
                entry.update({
                    "variant": vname, "lcma": lcma,
                    "function": "matmul", "seed": case_seed, "inputs": inputs,
                    "rewritten": rewritten,
                    "plan": next((p for p in plans if p not in (None, "classical")), None),
                    "products": sum(int(r.get("products") or 0) for r in report),
                    "tiles": None if tiles == "target=none" else tiles,
                    "tile_choices": sorted({(r["tiles"] or {}).get("name", "iree-default")
                                            for r in tiles_report}),
                })
                entries.append(entry)
                log(f"compiled {fn}: {len(vmfb)} bytes in {dt:.1f} s"
                    + (f", products={entry['products']}" if rewritten else "")
                    + (f", tiles {entry['tile_choices']}" if tiles_report else ""))
    manifest = {"format": FORMAT, "target": tgt.name, "flags": list(tgt.flags),
                "driver": tgt.driver, "tolerance": TOLERANCE, "entries": entries}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    here = Path(__file__).resolve()
    if here.parent != out.resolve():
        shutil.copyfile(here, out / "gpu_check.py")
    total = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    if total >= max_bytes:
        raise ValueError(f"bundle {out} is {total} bytes (limit {max_bytes}; prepare --max-mib)")
    log(f"bundle {display or out}: {len(entries)} modules, {total / 2**20:.2f} MiB")
    manifest["bundle_bytes"] = total
    return manifest


# --------------------------------------------------------------------------
# GPU side (numpy + iree.runtime only).

def rel_err(x, ref) -> float:
    """``max|x - ref| / max|ref|`` in float64 (dimensionless), computed in row
    blocks so that large matrices need no full float64 copies."""
    x, ref = np.asarray(x), np.asarray(ref)
    if x.shape != ref.shape:
        raise ValueError(f"shape {x.shape} vs reference {ref.shape}")
    x = x.reshape(len(x), -1) if x.ndim > 1 else x.reshape(1, -1)
    ref = ref.reshape(x.shape)
    step = max(1, (1 << 22) // max(1, x.shape[1]))
    num = den = 0.0
    for i in range(0, len(x), step):
        rr = ref[i:i + step].astype(np.float64)
        num = max(num, float(np.abs(x[i:i + step].astype(np.float64) - rr).max(initial=0.0)))
        den = max(den, float(np.abs(rr).max(initial=0.0)))
    return num / den if den else (float("inf") if num else float("nan"))


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


def make_config(driver: str, allocator=None):
    """``iree.runtime.Config`` for ``driver``; ``allocator`` (e.g. ``"caching"``)
    creates the device with ``create_default_device(allocators=[allocator])``.
    None or ``"none"``: the driver's default allocator (``Config(driver)``)."""
    import iree.runtime as rt

    if allocator in (None, "", "none"):
        return rt.Config(driver)
    dev = rt.get_driver(driver).create_default_device(allocators=[allocator])
    return rt.Config(device=dev)


def _wanted(e, sizes, shapes, dtypes, variants) -> bool:
    if dtypes and e["dtype"] not in dtypes or variants and e["variant"] not in variants:
        return False
    if not sizes and not shapes:
        return True
    M, N, K = entry_mnk(e)
    return bool(sizes and M == N == K and M in sizes or shapes and (M, N, K) in shapes)


def run_bundle(bundle, *, driver="cuda", repeat=10, warmup=2, check_rows=256,
               full_ref_max=2048, sizes=None, dtypes=None, variants=None, budget_s=30.0,
               shapes=None, allocator=None, log=print) -> list:
    """Runs the modules of ``bundle`` on ``driver``; returns one row (dict)
    per module (and a torch peer row per shape on ``cuda``). See the module
    docstring.

    Args:
        sizes, shapes: keep square entries with n in ``sizes`` and entries with
            (M, N, K) in ``shapes`` (tuples, see :func:`parse_shapes`); both
            None: all. ``dtypes``, ``variants``: lists of names to keep.
        allocator: None/``"none"`` or ``"caching"`` (see :func:`make_config`).
        budget_s: seconds of timed calls per module (at least 3 calls).

    Rows have ``dtype``, ``M``, ``N``, ``K`` (``n`` too when square, ``label``
    when the entry has one), ``variant``, ``median_ms``/``min_ms`` (ms),
    ``gflops`` (2*M*N*K / median, GFLOP/s), ``rel_err`` (vs float64),
    ``rel_diff_vs_classical``, ``speedup_vs_classical``, ``ok``,
    ``allocator``; or ``error``.
    """
    import iree.runtime as rt

    bundle = Path(bundle)
    manifest = json.loads((bundle / MANIFEST).read_text())
    tol = {**TOLERANCE, **manifest.get("tolerance", {})}
    allocator = allocator or "none"
    config = make_config(driver, allocator)
    shapes = {tuple(s) for s in shapes} if shapes else None
    groups = {}
    for e in manifest["entries"]:
        if _wanted(e, sizes, shapes, dtypes, variants):
            groups.setdefault((e["dtype"], *entry_mnk(e)), []).append(e)
    rows = []
    for (dtype, M, N, K), entries in groups.items():
        entries.sort(key=lambda e: e["variant"] != "classical")  # classical first
        shape = shape_str(M, N, K)
        base = {"dtype": dtype, **({"n": M} if M == N == K else {}), "M": M, "N": N, "K": K}
        label = next((e["label"] for e in entries if e.get("label")), None)
        if label:
            base["label"] = label
        t0 = time.perf_counter()
        if entries[0].get("inputs"):
            a, b = (np.load(bundle / f) for f in entries[0]["inputs"])
        else:
            a, b = make_inputs(M, N, K, dtype, entries[0]["seed"])
        rng = np.random.default_rng(12345 + M)
        if M <= full_ref_max and M * N * K <= full_ref_max ** 3:
            idx = np.arange(M)
        else:
            idx = np.sort(rng.choice(M, size=min(check_rows, M), replace=False))
        ref = a[idx].astype(np.float64) @ b.astype(np.float64)
        log(f"[{dtype} {shape}{f' {label}' if label else ''}] inputs + reference "
            f"({len(idx)} rows): {time.perf_counter() - t0:.1f} s")
        dev = [rt.asdevicearray(config.device, x) for x in (a, b)]
        classical_out = None
        classical_ms = None
        for e in entries:
            row = dict(base)
            row.update({k: e[k] for k in ("variant", "lcma", "file", "products")})
            row.update({k: e[k] for k in ("tiles", "tile_choices") if k in e})
            row.update(driver=driver, allocator=allocator, ref_rows=int(len(idx)))
            fn = out = None
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
                row["gflops"] = 2.0 * M * N * K / (row["median_ms"] * 1e-3) / 1e9
                if e["variant"] == "classical":
                    classical_out, classical_ms = out, row["median_ms"]
                elif classical_ms:
                    row["speedup_vs_classical"] = classical_ms / row["median_ms"]
                row["ok"] = bool(row["rel_err"] <= tol[dtype])
            except Exception as exc:  # keep going: report the failure in the table
                row["ok"] = False
                row["error"] = f"{type(exc).__name__}: {exc}"[:500]
            finally:
                fn = out = None
            rows.append(row)
            log(f"  {e['variant']:<10} " + (
                f"median {row['median_ms']:.3f} ms ({row['reps']} reps), rel_err {row['rel_err']:.2e}"
                + (f", vs classical {row['rel_diff_vs_classical']:.2e}"
                   if "rel_diff_vs_classical" in row else "")
                if "error" not in row else f"FAILED {row['error']}"))
        # free the device buffers before the peer and the next shape
        dev = classical_out = None
        if allocator != "none":
            try:
                config.device.allocator.trim()   # give pooled buffers back
            except Exception:
                pass
        if driver == "cuda":
            peer = _torch_peer(a, b, idx, ref, dtype, M, N, K, repeat, warmup, tol, log)
            rows.append({**base, **peer, "allocator": allocator})
        a = b = ref = None
    return rows


def _torch_peer(a, b, idx, ref, dtype, M, N, K, repeat, warmup, tol, log) -> dict:
    """torch.matmul (cuBLAS) on the same inputs (A: M x K, B: K x N), timed with
    CUDA events (the peer)."""
    row = {"variant": TORCH_VARIANT, "lcma": "-", "file": "-",
           "products": 1, "driver": "cuda", "ref_rows": int(len(idx))}
    ta = tb = out = None
    try:
        import torch

        ta = torch.from_numpy(np.ascontiguousarray(a)).cuda()
        tb = torch.from_numpy(np.ascontiguousarray(b)).cuda()
        out = torch.matmul(ta, tb)
        torch.cuda.synchronize()
        row["rel_err"] = rel_err(out[torch.from_numpy(idx).cuda()].cpu().numpy(), ref)
        out = None
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
        row["gflops"] = 2.0 * M * N * K / (row["median_ms"] * 1e-3) / 1e9
        row["ok"] = bool(row["rel_err"] <= tol[dtype])
        row["note"] = f"torch {torch.__version__}, allow_tf32={torch.backends.cuda.matmul.allow_tf32}"
    except Exception as exc:
        row["ok"] = False
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        ta = tb = out = None
        try:
            import torch

            torch.cuda.empty_cache()
        except Exception:
            pass
    log(f"  {row['variant']:<10} " + (f"median {row['median_ms']:.3f} ms, rel_err {row['rel_err']:.2e}"
                                      if "error" not in row else f"FAILED {row['error']}"))
    return row


def markdown(rows) -> str:
    """The rows as a markdown table (shape column ``MxNxK``)."""
    head = ("| dtype | shape | variant | median ms | speedup vs classical | GFLOP/s | rel err vs f64 "
            "(rows) | rel diff vs classical | ok |\n|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        shape = shape_str(*entry_mnk(r))
        if "error" in r:
            lines.append(f"| {r['dtype']} | {shape} | {r['variant']} | - | - | - | - | - | "
                         f"FAILED: {r['error'][:80]} |")
            continue
        sp = r.get("speedup_vs_classical")
        dv = r.get("rel_diff_vs_classical")
        lines.append(
            f"| {r['dtype']} | {shape} | {r['variant']} | {r['median_ms']:.3f} | "
            f"{f'{sp:.2f}x' if sp else '-'} | {r['gflops']:.0f} | "
            f"{r['rel_err']:.2e} ({r['ref_rows']}) | {f'{dv:.2e}' if dv is not None else '-'} | "
            f"{'yes' if r['ok'] else 'NO'} |")
    return head + "\n".join(lines) + "\n"


def _env_info(driver, allocator="none"):
    info = {"python": sys.version.split()[0], "platform": platform.platform(),
            "numpy": np.__version__, "driver": driver, "allocator": allocator or "none"}
    try:
        from importlib.metadata import version
        info["iree_base_runtime"] = version("iree-base-runtime")
    except Exception:
        pass
    return info


def _write_results(rows, outdir: Path, driver: str, log=print, allocator="none", runtime_flags=()):
    outdir.mkdir(parents=True, exist_ok=True)
    md = markdown(rows)
    (outdir / "gpu_check.md").write_text(md)
    env = _env_info(driver, allocator)
    env["runtime_flags"] = list(runtime_flags)
    (outdir / "gpu_check.json").write_text(json.dumps({"env": env, "rows": rows}, indent=1) + "\n")
    log(md)
    log(f"wrote {outdir / 'gpu_check.md'} and {outdir / 'gpu_check.json'}")


# --------------------------------------------------------------------------
# Results: summary table and plot (numpy; matplotlib for the plot).

def load_rows(paths) -> list:
    """Rows of one or more ``gpu_check.json`` files (``{"env", "rows"}`` or a
    bare list), in order."""
    rows = []
    for p in [paths] if isinstance(paths, (str, Path)) else paths:
        data = json.loads(Path(p).read_text())
        rows += data["rows"] if isinstance(data, dict) else data
    return rows


def _baseline(rows) -> str:
    return "classical_t" if any(r.get("variant") == "classical_t" for r in rows) else "classical"


def summary_table(rows) -> str:
    """Markdown: one row per (dtype, shape), columns dtype, shape (``MxNxK``),
    label, then per variant its median ms, effective TFLOP/s (2*M*N*K / median
    / 1e12) and speedup vs the baseline (``classical_t`` if any row has it,
    else ``classical``): baseline ms / variant ms, > 1 is faster. Failed
    modules read ``FAIL``; results above the error bound get a ``!``."""
    base = _baseline(rows)
    shapes, variants = {}, []
    for r in rows:
        shapes.setdefault((r["dtype"], *entry_mnk(r)), {})[r["variant"]] = r
        if r["variant"] not in variants:
            variants.append(r["variant"])
    variants.sort(key=lambda v: (v != base, v == TORCH_VARIANT))  # baseline first, torch last
    head = ["dtype", "shape", "label"]
    for v in variants:
        head += [f"{v} ms", f"{v} TFLOP/s"] + ([] if v == base else [f"{v} vs {base}"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (dtype, M, N, K), by_v in shapes.items():
        label = next((r["label"] for r in by_v.values() if r.get("label")), "")
        b = by_v.get(base)
        b_ms = b.get("median_ms") if b else None
        cells = [dtype, shape_str(M, N, K), label]
        for v in variants:
            r = by_v.get(v)
            if r is None or "median_ms" not in r:
                cells += ["FAIL" if r is not None else "-", "-"] + ([] if v == base else ["-"])
                continue
            bang = "" if r.get("ok", True) else "!"
            tf = 2.0 * M * N * K / r["median_ms"] / 1e9
            cells += [f"{r['median_ms']:.3f}{bang}", f"{tf:.1f}" if tf >= 1 else f"{tf:.3f}"]
            if v != base:
                cells.append(f"{b_ms / r['median_ms']:.2f}x" if b_ms else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_results(rows, path, title=None) -> None:
    """PNG at ``path``: effective TFLOP/s (2*M*N*K / median) against M (log2
    axis), one panel per (dtype, weight shape N x K) (squares share one
    ``square`` panel per dtype, x = n), panels of a dtype on their own rows;
    one line per variant, same colour in every panel, torch (cuBLAS) dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if "median_ms" in r]
    swept = {(r["dtype"], *entry_mnk(r)[1:]) for r in rows if len(set(entry_mnk(r))) > 1}
    panels, variants = {}, []
    for r in rows:
        M, N, K = entry_mnk(r)
        square = M == N == K and not r.get("label") and (r["dtype"], N, K) not in swept
        key = (r["dtype"], "square" if square else (N, K))
        lines = panels.setdefault(key, {"labels": [], "lines": {}})
        if r.get("label") and r["label"] not in lines["labels"]:
            lines["labels"].append(r["label"])
        lines["lines"].setdefault(r["variant"], {})[M] = 2.0 * M * N * K / r["median_ms"] / 1e9
        if r["variant"] not in variants:
            variants.append(r["variant"])
    if not panels:
        raise ValueError("no timed rows to plot")
    base = _baseline(rows)
    variants.sort(key=lambda v: (v != base, v == TORCH_VARIANT))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {v: palette[i % len(palette)] for i, v in enumerate(variants)}
    dtypes = sorted({d for d, _ in panels})
    per = {d: sorted((k for k in panels if k[0] == d), key=lambda k: (k[1] != "square", str(k[1])))
           for d in dtypes}
    ncols = min(4, max(len(v) for v in per.values()))
    layout = []                                     # (row, col, key)
    row0 = 0
    for d in dtypes:
        for i, key in enumerate(per[d]):
            layout.append((row0 + i // ncols, i % ncols, key))
        row0 += -(-len(per[d]) // ncols)
    fig, axes = plt.subplots(row0, ncols, figsize=(4.3 * ncols, 3.4 * row0), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for r_, c_, key in layout:
        ax = axes[r_][c_]
        ax.axis("on")
        for v in variants:
            pts = panels[key]["lines"].get(v)
            if pts:
                ms = sorted(pts)
                ax.plot(ms, [pts[m] for m in ms], marker="o", ms=3, color=color[v], label=v,
                        linestyle="--" if v == TORCH_VARIANT else "-")
        dtype, wk = key
        labels = "; ".join(panels[key]["labels"])
        head = f"{dtype} square (M=N=K)" if wk == "square" else f"{dtype} N={wk[0]} K={wk[1]}"
        ax.set_title(head + (f"\n{labels[:60]}" if labels else ""), fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("n" if wk == "square" else "M")
        ax.set_ylabel("effective TFLOP/s")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------

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
    ``gpu_check: error: ...`` and return 2."""
    try:
        return _main(argv)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # one line, no traceback (set GPU_CHECK_TRACEBACK=1 to see it)
        if os.environ.get("GPU_CHECK_TRACEBACK"):
            raise
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"gpu_check: error: {type(exc).__name__}: {msg[:300]}", file=sys.stderr)
        return 2


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
        rp = sub.add_parser(name, help="run a bundle" if name == "run" else
                            "prepare a host bundle at small sizes and run it on local-task")
        if name == "run":
            rp.add_argument("bundle")
        rp.add_argument("--driver", default="cuda" if name == "run" else "local-task")
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
        rp.add_argument("--full-ref-max", type=int, default=2048 if name == "run" else 256)
        rp.add_argument("--sizes", type=int, nargs="+",
                        default=None if name == "run" else [256, 512])
        rp.add_argument("--shapes", nargs="+" if name == "run" else "*", metavar="MxNxK",
                        default=None if name == "run" else ["256x384x128"],
                        help="keep these shapes (with --sizes: either)" if name == "run" else
                        "non-square shapes to compile and run")
        rp.add_argument("--dtypes", nargs="+", default=None)
        rp.add_argument("--variants", nargs="+", default=None)
        rp.add_argument("--budget-s", type=float, default=30.0,
                        help="stop timing a module after this many seconds (min 3 reps)")
        rp.add_argument("--out", default=None, help="results folder ($OUT wins if set)")
    pl = sub.add_parser("plot", help="PNG: effective TFLOP/s vs M per weight shape")
    pl.add_argument("results", nargs="+", help="gpu_check.json file(s)")
    pl.add_argument("-o", "--output", required=True, help="PNG path")
    pl.add_argument("--title", default=None)
    tb = sub.add_parser("table", help="markdown: per shape, each variant's ms, TFLOP/s, speedup")
    tb.add_argument("results", nargs="+", help="gpu_check.json file(s)")
    args = p.parse_args(argv)

    if args.cmd in ("plot", "table"):
        rows = load_rows(args.results)
        if args.cmd == "table":
            print(summary_table(rows), end="")
        else:
            plot_results(rows, args.output, title=args.title)
            print(f"wrote {args.output}")
        return 0

    try:
        shapes = parse_shapes(args.shapes) if args.shapes else []
    except ValueError as exc:
        p.error(f"--shapes: {exc}")

    if args.cmd == "prepare":
        variants = None
        if args.variant:
            variants = {"classical": None}
            for v in args.variant:
                name, eq, opts = v.partition("=")
                if not eq or not name or not opts:
                    p.error(f"--variant {v!r}: expected NAME=OPTIONS")
                variants[name] = opts
        if args.workloads:
            try:
                ms = [int(t) for m in args.m for t in m.split(",") if t.strip()]
            except ValueError:
                p.error(f"--m {args.m}: expected integers")
            if not ms or min(ms) < 1:
                p.error("--workloads needs --m M (positive, repeatable)")
            from falcon_mlir.tools.falcon_bench import UsageError
            try:
                shapes += workload_shapes(args.workloads, ms, args.model)
            except UsageError as exc:
                p.error(str(exc))
        elif args.m or args.model:
            p.error("--m and --model go with --workloads")
        prepare_gpu_bundle(args.outdir, sizes=args.sizes, shapes=shapes, dtypes=args.dtypes,
                           variants=variants, target=args.target, seed=args.seed,
                           max_bytes=int(args.max_mib * 2**20))
        return 0

    if args.cmd == "dry-run":
        import tempfile
        tmp = tempfile.mkdtemp(prefix="gpu-bundle-dry-")
        # ship_inputs_max=256: the 256 case reads .npy inputs, larger ones use the seed.
        prepare_gpu_bundle(tmp, sizes=args.sizes or [], shapes=shapes,
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
                      sizes=args.sizes, shapes=shapes, dtypes=args.dtypes, variants=args.variants,
                      budget_s=args.budget_s, allocator=args.allocator)
    outdir = Path(os.environ.get("OUT") or args.out or bundle)
    _write_results(rows, outdir, args.driver, allocator=args.allocator,
                   runtime_flags=args.runtime_flag)
    return 0 if rows and all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
