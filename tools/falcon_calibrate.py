#!/usr/bin/env python3
"""falcon-calibrate: measure a hardware profile with IREE micro-benchmarks.

    falcon-calibrate [--device local-task|cuda] -o PROFILE.json
                     [--dtypes f32 f16 bf16 f64 i8] [--sizes N ...] [--quick]
                     [--seconds S] [--bandwidth-mb MB] [--name NAME] [--raw RAW.json]
    falcon-calibrate --device cuda --prepare DIR [same measurement options]
    python3 DIR/calibrate_run.py DIR -o PROFILE.json [--raw RAW.json]   # on the GPU machine

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
every module here and writes ``DIR/manifest.json``, the ``.vmfb`` files and
``DIR/calibrate_run.py`` (this file: its measuring half needs only the
standard library, numpy and ``iree.runtime``). On the GPU machine
``python3 DIR/calibrate_run.py DIR -o PROFILE.json`` measures and writes the
profile JSON; validate it here with ``Profile.from_dict``.

Exit status: 0 profile written (or bundle prepared); 2 bad arguments (one line
``falcon-calibrate: error: ...`` on stderr, nothing measured); 1 a compile or
run failed (one line, no file written).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PROG = "falcon-calibrate"
RUNNER = "calibrate_run.py"
MANIFEST = "manifest.json"
FORMAT = 1

#: Input element type -> (MLIR input type, MLIR accumulator type).
DTYPES = {
    "f32": ("f32", "f32"),
    "f16": ("f16", "f16"),
    "bf16": ("bf16", "f32"),
    "f64": ("f64", "f64"),
    "i8": ("i8", "i32"),
}

#: iree-compile flags per device (falcon's classical compile for the target).
DEVICE_FLAGS = {
    "local-task": ["--iree-hal-target-device=local",
                   "--iree-hal-local-target-device-backends=llvm-cpu",
                   "--iree-llvmcpu-target-cpu=host",
                   "--iree-opt-data-tiling=true",
                   "--iree-llvmcpu-enable-ukernels=all"],
    "cuda": ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"],
}

#: Defaults per device: (sizes, quick sizes, dtypes allowed, bandwidth MB).
DEFAULT_SIZES = {"local-task": [128, 256, 512, 1024, 2048, 4096], "cuda": [512, 1024, 2048, 4096, 8192]}
QUICK_SIZES = {"local-task": [128, 256, 512, 1024], "cuda": [512, 1024, 2048]}
DEFAULT_DTYPES = {"local-task": ["f32"], "cuda": ["f32", "f16"]}
DEFAULT_BANDWIDTH_MB = {"local-task": 64, "cuda": 256}
QUICK_BANDWIDTH_MB = {"local-task": 32, "cuda": 64}
#: Elements of the in-cache combine chain and its length, per device.
ADD_ELEMENTS = {"local-task": 1 << 18, "cuda": 1 << 22}
ADD_CHAIN = {"local-task": 64, "cuda": 256}
DISPATCH_COUNTS = (1, 65)
DISPATCH_ELEMENTS = 256
#: Strassen's U (coefficients of A11, A12, A21, A22 in each of the R = 7 products).
STRASSEN_U = {
    "a11": [1, 0, 1, 0, 1, -1, 0],
    "a12": [0, 0, 0, 0, 1, 0, 1],
    "a21": [0, 1, 0, 0, 0, 1, 0],
    "a22": [1, 1, 0, 1, 0, 0, -1],
}
#: Relative error (max-norm vs float64) a GEMM's first result must stay under.
GEMM_TOL = {"f32": 1e-3, "f16": 5e-2, "bf16": 5e-2, "f64": 1e-10, "i8": 0.0}


class UsageError(Exception):
    """A bad command line: one line on stderr, exit status 2."""


class CalibrationError(Exception):
    """A compile or run failed: one line on stderr, exit status 1."""


# ============================================================================
# MLIR text of the micro-benchmarks (the compiling side).

def _zero(t: str) -> str:
    return f"arith.constant 0 : {t}" if t.startswith("i") else f"arith.constant 0.0 : {t}"


def _is_int(t: str) -> bool:
    return t.startswith("i")


def _cast(v: str, src: str, dst: str, out: list, name: str) -> str:
    """Append the cast of scalar ``v`` from ``src`` to ``dst`` to ``out`` (as the rewrite's ``_cast``)."""
    if src == dst:
        return v
    op = "arith.extsi" if _is_int(src) else "arith.extf"
    out.append(f"      {name} = {op} {v} : {src} to {dst}")
    return name


def _const(v: float, t: str) -> str:
    return f"arith.constant {int(v)} : {t}" if _is_int(t) else f"arith.constant {float(v)!r} : {t}"


def gemm_mlir(n: int, tin: str, tacc: str) -> str:
    """``@gemm(A: n x n, B: n x n) -> A @ B`` with a zero-filled ``tacc`` accumulator."""
    a = f"tensor<{n}x{n}x{tin}>"
    c = f"tensor<{n}x{n}x{tacc}>"
    return (f"func.func @gemm(%a: {a}, %b: {a}) -> {c} {{\n"
            f"  %z = {_zero(tacc)}\n"
            f"  %e = tensor.empty() : {c}\n"
            f"  %c = linalg.fill ins(%z : {tacc}) outs(%e : {c}) -> {c}\n"
            f"  %r = linalg.matmul ins(%a, %b : {a}, {a}) outs(%c : {c}) -> {c}\n"
            f"  return %r : {c}\n}}\n")


def add_chain_mlir(elements: int, tin: str, tacc: str, chain: int) -> str:
    """``@add(X1..X4: elements x tin) -> elements x tacc``: ``chain`` elementwise generics,
    step k computing ``y_k = y_{k-1} + c1k X1 + c2k X2 + c3k X3 + c4k X4`` (casts to
    ``tacc`` as the rewrite's combines do; coefficients new each step, so no step
    shares work with another; only the one add on y is serial)."""
    ti, ta = f"tensor<{elements}x{tin}>", f"tensor<{elements}x{tacc}>"
    m = "affine_map<(d0) -> (d0)>"
    fl = not _is_int(tacc)
    mul, add = ("arith.mulf", "arith.addf") if fl else ("arith.muli", "arith.addi")
    lines = [f"func.func @add(%x1: {ti}, %x2: {ti}, %x3: {ti}, %x4: {ti}) -> {ta} {{"]
    prev = None
    for k in range(chain):
        if fl:
            coefs = [0.5 + 0.002 * k, 1.0 / (k + 2), -1.0 / (k + 3), 0.25 - 0.001 * k]
        else:
            coefs = [k + 1, -(k + 2), k + 3, 2 * k + 1]
        ins = ["%x1", "%x2", "%x3", "%x4"] + ([prev] if prev else [])
        types = [ti] * 4 + ([ta] if prev else [])
        maps = ", ".join([m] * (len(ins) + 1))
        lines.append(f"  %e{k} = tensor.empty() : {ta}")
        lines.append(f"  %y{k} = linalg.generic {{indexing_maps = [{maps}], iterator_types = [\"parallel\"]}} "
                     f"ins({', '.join(ins)} : {', '.join(types)}) outs(%e{k} : {ta}) {{")
        args = [f"%i{j}: {tin}" for j in range(4)] + ([f"%p: {tacc}"] if prev else []) + [f"%o: {tacc}"]
        lines.append(f"    ^bb0({', '.join(args)}):")
        body: list = []
        total = None
        for j, c in enumerate(coefs):
            v = _cast(f"%i{j}", tin, tacc, body, f"%v{j}")
            body.append(f"      %c{j} = {_const(c, tacc)}")
            body.append(f"      %m{j} = {mul} %c{j}, {v} : {tacc}")
            if total is None:
                total = f"%m{j}"
            else:
                body.append(f"      %s{j} = {add} {total}, %m{j} : {tacc}")
                total = f"%s{j}"
        if prev:  # integers: max, since reassociation would fold a chain of integer adds
            body.append(f"      %acc = {add if fl else 'arith.maxsi'} %p, {total} : {tacc}")
            total = "%acc"
        lines += body
        lines.append(f"      linalg.yield {total} : {tacc}")
        lines.append(f"  }} -> {ta}")
        prev = f"%y{k}"
    lines.append(f"  return {prev} : {ta}\n}}\n")
    return "\n".join(lines)


def ew_add_mlir(elements: int, t: str = "f32") -> str:
    """``@ew_add(A, B) -> A + B`` over vectors of ``elements``."""
    tt = f"tensor<{elements}x{t}>"
    m = "affine_map<(d0) -> (d0)>"
    return (f"func.func @ew_add(%a: {tt}, %b: {tt}) -> {tt} {{\n"
            f"  %e = tensor.empty() : {tt}\n"
            f"  %r = linalg.generic {{indexing_maps = [{m}, {m}, {m}], iterator_types = [\"parallel\"]}} "
            f"ins(%a, %b : {tt}, {tt}) outs(%e : {tt}) {{\n"
            f"    ^bb0(%x: {t}, %y: {t}, %o: {t}):\n"
            f"      %s = arith.addf %x, %y : {t}\n"
            f"      linalg.yield %s : {t}\n"
            f"  }} -> {tt}\n  return %r : {tt}\n}}\n")


def dispatch_chain_mlir(count: int, elements: int = DISPATCH_ELEMENTS) -> str:
    """``@chain(x)``: ``count`` tiny elementwise ops, each behind ``util.optimization_barrier``."""
    tt = f"tensor<{elements}xf32>"
    m = "affine_map<(d0) -> (d0)>"
    lines = [f"func.func @chain(%x: {tt}) -> {tt} {{"]
    prev = "%x"
    for k in range(count):
        lines += [
            f"  %e{k} = tensor.empty() : {tt}",
            f"  %y{k} = linalg.generic {{indexing_maps = [{m}, {m}], iterator_types = [\"parallel\"]}} "
            f"ins({prev} : {tt}) outs(%e{k} : {tt}) {{",
            "    ^bb0(%i: f32, %o: f32):",
            f"      %c = arith.constant {1.0 + 1e-3 * (k + 1)!r} : f32",
            "      %d = arith.constant 0.5 : f32",
            "      %p = arith.mulf %i, %c : f32",
            "      %s = arith.addf %p, %d : f32",
            "      linalg.yield %s : f32",
            f"  }} -> {tt}",
            f"  %b{k} = util.optimization_barrier %y{k} : {tt}",
        ]
        prev = f"%b{k}"
    lines.append(f"  return {prev} : {tt}\n}}\n")
    return "\n".join(lines)


def _block_slices(b: int, names) -> list:
    at = f"tensor<{2 * b}x{2 * b}xf32>"
    bt = f"tensor<{b}x{b}xf32>"
    off = {"a11": (0, 0), "a12": (0, b), "a21": (b, 0), "a22": (b, b)}
    return [f"  %{nm} = tensor.extract_slice %a[{off[nm][0]}, {off[nm][1]}] [{b}, {b}] [1, 1] : "
            f"{at} to {bt}" for nm in names]


def per_product_mlir(b: int) -> str:
    """``@per_product(A: 2b x 2b) -> A11 + A22``: the per-product form's combine
    (``_combine``: one elementwise generic over two blocks)."""
    at, bt = f"tensor<{2 * b}x{2 * b}xf32>", f"tensor<{b}x{b}xf32>"
    m = "affine_map<(d0, d1) -> (d0, d1)>"
    return "\n".join([f"func.func @per_product(%a: {at}) -> {bt} {{"] + _block_slices(b, ["a11", "a22"]) + [
        f"  %e = tensor.empty() : {bt}",
        f"  %r = linalg.generic {{indexing_maps = [{m}, {m}, {m}], iterator_types = [\"parallel\", \"parallel\"]}} "
        f"ins(%a11, %a22 : {bt}, {bt}) outs(%e : {bt}) {{",
        "    ^bb0(%x: f32, %y: f32, %o: f32):",
        "      %s = arith.addf %x, %y : f32",
        "      linalg.yield %s : f32",
        f"  }} -> {bt}",
        f"  return %r : {bt}\n}}\n"])


def grouped_mlir(b: int) -> str:
    """``@grouped(A: 2b x 2b) -> G: 7 x b x b``, ``G[r] = sum_blk U[r, blk] * blk``: the
    grouped form's combine (``_group_combine``: one generic, 1-D coefficient tables indexed by r)."""
    R = len(STRASSEN_U["a11"])
    at, bt, gt = f"tensor<{2 * b}x{2 * b}xf32>", f"tensor<{b}x{b}xf32>", f"tensor<{R}x{b}x{b}xf32>"
    tt = f"tensor<{R}xf32>"
    names = list(STRASSEN_U)
    blk = "affine_map<(d0, d1, d2) -> (d1, d2)>"
    tab = "affine_map<(d0, d1, d2) -> (d0)>"
    out = "affine_map<(d0, d1, d2) -> (d0, d1, d2)>"
    lines = [f"func.func @grouped(%a: {at}) -> {gt} {{"] + _block_slices(b, names)
    for nm in names:
        vals = ", ".join(f"{float(v)!r}" for v in STRASSEN_U[nm])
        lines.append(f"  %t_{nm} = arith.constant dense<[{vals}]> : {tt}")
    ins = ", ".join(f"%{nm}, %t_{nm}" for nm in names)
    types = ", ".join(f"{bt}, {tt}" for _ in names)
    maps = ", ".join([blk, tab] * len(names) + [out])
    lines += [f"  %e = tensor.empty() : {gt}",
              f"  %g = linalg.generic {{indexing_maps = [{maps}], iterator_types = "
              f"[\"parallel\", \"parallel\", \"parallel\"]}} ins({ins} : {types}) outs(%e : {gt}) {{",
              "    ^bb0(" + ", ".join(f"%x{i}: f32, %w{i}: f32" for i in range(len(names))) + ", %o: f32):"]
    total = None
    for i in range(len(names)):
        lines.append(f"      %p{i} = arith.mulf %w{i}, %x{i} : f32")
        if total is None:
            total = f"%p{i}"
        else:
            lines.append(f"      %s{i} = arith.addf {total}, %p{i} : f32")
            total = f"%s{i}"
    lines += [f"      linalg.yield {total} : f32", f"  }} -> {gt}", f"  return %g : {gt}\n}}\n"]
    return "\n".join(lines)


# ============================================================================
# Bundle preparation (needs falcon_mlir and iree-base-compiler).

def _iree_version(dist: str) -> str:
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return "?"


def _count_dispatches(text: str, flags) -> int:
    """Dispatches IREE forms for ``text`` (``flow.dispatch`` ops at ``--compile-to=flow``)."""
    from iree.compiler import compile_str

    flow = compile_str(text, extra_args=list(flags) + ["--compile-to=flow"])
    flow = flow.decode() if isinstance(flow, bytes) else flow
    return sum(1 for ln in flow.splitlines() if "flow.dispatch @" in ln)


def plan_modules(device: str, dtypes, sizes, bandwidth_mb: int) -> list:
    """The modules to compile: dicts with ``role``, parameters and ``text``."""
    mods = []
    for dt in dtypes:
        tin, tacc = DTYPES[dt]
        for n in sizes:
            mods.append({"role": "gemm", "dtype": dt, "in": tin, "acc": tacc, "n": n,
                         "function": "gemm", "text": gemm_mlir(n, tin, tacc)})
        el, ch = ADD_ELEMENTS[device], ADD_CHAIN[device]
        mods.append({"role": "add", "dtype": dt, "in": tin, "acc": tacc, "elements": el, "chain": ch,
                     "function": "add", "text": add_chain_mlir(el, tin, tacc, ch)})
    elements = bandwidth_mb * 2**20 // 4
    mods.append({"role": "bandwidth", "dtype": "f32", "elements": elements, "function": "ew_add",
                 "text": ew_add_mlir(elements)})
    for count in DISPATCH_COUNTS:
        mods.append({"role": "dispatch", "count": count, "elements": DISPATCH_ELEMENTS,
                     "function": "chain", "text": dispatch_chain_mlir(count)})
    b = 1 << int(round(math.log2(math.sqrt(elements))))
    mods.append({"role": "per_product", "block": b, "function": "per_product", "text": per_product_mlir(b)})
    mods.append({"role": "grouped", "block": b, "R": 7, "used": 4, "function": "grouped",
                 "text": grouped_mlir(b)})
    for i, m in enumerate(mods):
        key = {"gemm": f"gemm_{m.get('dtype')}_{m.get('n')}", "add": f"add_{m.get('dtype')}",
               "dispatch": f"dispatch_{m.get('count')}"}.get(m["role"], m["role"])
        m["file"] = f"{i:02d}_{key}.vmfb"
    return mods


def prepare_bundle(outdir, *, device: str, dtypes, sizes, bandwidth_mb: int, seconds: float,
                   name=None, quick=False, progress=None, log=None) -> dict:
    """Compile every module into ``outdir``; write ``manifest.json`` and ``calibrate_run.py``.

    Raises:
        CalibrationError: a module failed to compile or formed the wrong dispatch count.
    """
    import falcon_mlir

    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    flags = DEVICE_FLAGS[device]
    mods = plan_modules(device, dtypes, sizes, bandwidth_mb)
    bar = progress(len(mods), "compile") if progress else None
    entries = []
    for m in mods:
        t0 = time.perf_counter()
        tiles: list = []
        mflags = list(flags)
        if m.get("dtype") == "f64":  # IREE demotes f64 to f32 unless told not to
            mflags.append("--iree-input-demote-f64-to-f32=false")
            m["extra_flags"] = mflags[len(flags):]
        try:
            vmfb = falcon_mlir.compile_str(m["text"], target_backends=[], extra_args=mflags,
                                           lcma=None, tiles_report=tiles)
            if m["role"] in ("dispatch", "add"):
                m["dispatches"] = _count_dispatches(m["text"], mflags)
        except Exception as e:  # CompileError and friends: one line
            raise CalibrationError(f"compiling {m['file'][3:-5]} failed: {_first_line(e)}") from None
        if m["role"] == "dispatch" and m["dispatches"] != m["count"]:
            raise CalibrationError(f"dispatch module of {m['count']} ops formed {m['dispatches']} "
                                   "dispatches (fusion not prevented)")
        (out / m["file"]).write_bytes(vmfb)
        e = {k: v for k, v in m.items() if k != "text"}
        e.update(sha256=hashlib.sha256(vmfb).hexdigest(), bytes=len(vmfb),
                 compile_s=round(time.perf_counter() - t0, 3))
        chosen = [t["tiles"]["name"] for t in tiles if isinstance(t.get("tiles"), dict)]
        if chosen:
            e["tiles"] = chosen
        entries.append(e)
        if bar:
            bar.step(f"compiled {m['file']}")
    if bar:
        bar.close()
    manifest = {
        "format": FORMAT, "tool": PROG, "device": device, "kind": "cpu" if device == "local-task" else "gpu",
        "name": name, "flags": flags, "iree_compiler": _iree_version("iree-base-compiler"),
        "compiled_on": platform.node(), "compiled_at": datetime.date.today().isoformat(),
        "seconds": seconds, "quick": bool(quick), "modules": entries,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    here = Path(__file__).resolve()
    if (out / RUNNER).resolve() != here:
        shutil.copyfile(here, out / RUNNER)
    return manifest


# ============================================================================
# Measuring side: standard library + numpy + iree.runtime only (runs as
# calibrate_run.py on a machine without falcon_mlir).

def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    msg = next((ln for ln in lines if "error" in ln.lower()), lines[0] if lines else type(e).__name__)
    return msg[:300]


class Progress:
    """A progress bar (tqdm when installed and stderr is a terminal), else one line per step."""

    def __init__(self, total: int, desc: str, enabled: bool = True):
        self.total, self.desc, self.i, self.enabled = total, desc, 0, enabled
        self._bar = None
        if enabled and sys.stderr.isatty():
            try:
                from tqdm import tqdm
                size = shutil.get_terminal_size((100, 24))  # a pty may report 0 x 0
                self._bar = tqdm(total=total, desc=f"{PROG} {desc}", unit="step", file=sys.stderr,
                                 ncols=max(60, min(size.columns or 100, 120)), nrows=max(size.lines, 5))
            except ImportError:
                pass

    def step(self, text: str) -> None:
        self.i += 1
        if self._bar is not None:
            self._bar.set_postfix_str(text[:60], refresh=False)
            self._bar.update(1)
        elif self.enabled:
            print(f"[{PROG}] {self.desc} {self.i}/{self.total}: {text}", file=sys.stderr, flush=True)

    def write(self, text: str) -> None:
        if self._bar is not None:
            self._bar.write(f"[{PROG}] {text}", file=sys.stderr)
        elif self.enabled:
            print(f"[{PROG}] {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _np_type(t: str):
    if t == "bf16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i8": np.int8,
            "i32": np.int32}[t]


def _fill(rng, shape, t: str) -> np.ndarray:
    """Random values (never zeros) of MLIR type ``t``; large arrays tile a 1 Mi random pattern."""
    size = int(np.prod(shape))
    k = min(size, 1 << 20)
    if _is_int(t):
        base = rng.integers(-100, 100, size=k, dtype=np.int16)
        base[base == 0] = 7
    else:
        base = (rng.random(k, dtype=np.float32) + 0.5)
        base *= np.where(rng.random(k) < 0.5, -1.0, 1.0).astype(np.float32)
    arr = np.resize(base, size) if size > k else base
    return arr.reshape(shape).astype(_np_type(t))


def _time(fn, args, seconds: float, min_reps: int = 3, max_reps: int = 100000):
    """Median-ready call times: one warm-up call, then enough calls for ``seconds``."""
    res = fn(*args)
    del res
    t0 = time.perf_counter()
    res = fn(*args)
    est = time.perf_counter() - t0
    del res
    reps = int(min(max_reps, max(min_reps, math.ceil(seconds / max(est, 1e-7)))))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        res = fn(*args)
        times.append(time.perf_counter() - t0)
        del res
    return times


def _time_pair(fa, fb, args, seconds: float, min_reps: int = 5):
    """Alternating calls of ``fa`` and ``fb`` (drift hits both): two lists of times."""
    for f in (fa, fb):
        r = f(*args)
        del r
    t0 = time.perf_counter()
    r = fb(*args)
    est = time.perf_counter() - t0
    del r
    reps = int(min(100000, max(min_reps, math.ceil(seconds / 2 / max(est, 1e-7)))))
    ta, tb = [], []
    for _ in range(reps):
        for f, ts in ((fa, ta), (fb, tb)):
            t0 = time.perf_counter()
            r = f(*args)
            ts.append(time.perf_counter() - t0)
            del r
    return ta, tb


def _median(xs) -> float:
    return float(np.median(np.asarray(xs, dtype=np.float64)))


def _rel_err(x, ref) -> float:
    x = np.asarray(x, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        return float("inf")
    den = float(np.max(np.abs(ref))) or 1.0
    return float(np.max(np.abs(x - ref))) / den


def _cpu_info() -> dict:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    model = ln.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    caches = {}
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for idx in sorted(base.glob("index*")):
            if (idx / "type").read_text().strip() == "Instruction":
                continue
            level = (idx / "level").read_text().strip()
            size = (idx / "size").read_text().strip()
            mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(size[-1:], 1)
            caches["l1d" if level == "1" else f"l{level}"] = int(size.rstrip("KMG")) * mult
    except (OSError, ValueError):
        pass
    return {"model": model, "cores": os.cpu_count() or 0, "caches": caches}


def _gpu_info(rt) -> dict:
    """GPU name, SM count and L2 bytes: CUDA driver API through ctypes, else IREE/nvidia-smi."""
    info = {"model": "?", "cores": 0, "caches": {}}
    try:
        import ctypes
        cu = ctypes.CDLL("libcuda.so.1")
        dev = ctypes.c_int()
        if cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0:
            buf = ctypes.create_string_buffer(256)
            if cu.cuDeviceGetName(buf, 256, dev) == 0:
                info["model"] = buf.value.decode()
            val = ctypes.c_int()
            if cu.cuDeviceGetAttribute(ctypes.byref(val), 16, dev) == 0:  # MULTIPROCESSOR_COUNT
                info["cores"] = val.value
            if cu.cuDeviceGetAttribute(ctypes.byref(val), 38, dev) == 0:  # L2_CACHE_SIZE
                info["caches"] = {"l2": val.value}
    except Exception:
        pass
    if info["model"] == "?":
        try:
            devs = rt.get_driver("cuda").query_available_devices()
            info["model"] = devs[0].get("name") or "?"
        except Exception:
            pass
    if info["model"] == "?":
        try:
            import subprocess
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20).stdout.strip()
            info["model"] = out.splitlines()[0] if out else "?"
        except Exception:
            pass
    return info


def _load(rt, config, vmfb: bytes, function: str):
    ctx = rt.SystemContext(config=config)
    vm = rt.VmModule.copy_buffer(ctx.instance, vmfb)
    ctx.add_vm_module(vm)
    return ctx.modules[vm.name][function]


def run_bundle(bundle, *, driver=None, seconds=None, name=None, progress=None) -> tuple:
    """Measure every module of ``bundle``; returns ``(profile dict, raw results dict)``.

    Raises:
        CalibrationError: a module failed to load or run, or computed a wrong result.
    """
    try:
        import iree.runtime as rt
    except ImportError as e:
        raise CalibrationError(f"cannot import iree.runtime (pip install iree-base-runtime): {e}") from None

    bundle = Path(bundle)
    try:
        manifest = json.loads((bundle / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise CalibrationError(f"cannot read {bundle / MANIFEST}: {getattr(e, 'strerror', None) or e}") from None
    if manifest.get("format") != FORMAT or manifest.get("tool") != PROG:
        raise CalibrationError(f"{bundle / MANIFEST} is not a {PROG} bundle of format {FORMAT}")
    driver = driver or manifest["device"]
    seconds = float(seconds if seconds is not None else manifest.get("seconds", 0.75))
    mods = manifest["modules"]
    bar = progress(len(mods), "measure") if progress else None
    try:
        config = rt.Config(driver)
    except Exception as e:
        raise CalibrationError(f"cannot open IREE device '{driver}': {_first_line(e)}") from None
    device = config.device
    rng = np.random.default_rng(20261130)
    raw: dict = {"gemm": {}, "add": {}, "dispatch": {}, "forms": {}}

    def load(m):
        vmfb = (bundle / m["file"]).read_bytes()
        if hashlib.sha256(vmfb).hexdigest() != m["sha256"]:
            raise CalibrationError(f"{m['file']}: sha256 mismatch (bundle damaged)")
        return _load(rt, config, vmfb, m["function"])

    def dev(x):
        return rt.asdevicearray(device, x)

    def host(r):
        return np.asarray(r.to_host())

    def step(m, text):
        if bar:
            bar.step(text)

    try:
        # Bandwidth first: the forms are fractions of it.
        order = sorted(mods, key=lambda m: {"bandwidth": 0, "dispatch": 1}.get(m["role"], 2))
        disp = [m for m in order if m["role"] == "dispatch"]
        for m in order:
            role = m["role"]
            if role == "dispatch":
                continue
            fn = load(m)
            if role == "gemm":
                n, tin = m["n"], m["in"]
                a, b = _fill(rng, (n, n), tin), _fill(rng, (n, n), tin)
                args = [dev(a), dev(b)]
                rows = np.sort(rng.choice(n, size=min(64, n), replace=False))
                out = host(fn(*args))[rows]
                ref = a[rows].astype(np.float64) @ b.astype(np.float64)
                err = _rel_err(out, ref)
                if not err <= GEMM_TOL[m["dtype"]]:
                    raise CalibrationError(f"gemm {m['dtype']} n={n}: wrong result (relative error {err:.2e})")
                del a, b, out, ref
                ts = _time(fn, args, seconds)
                med = _median(ts)
                rate = 2.0 * n ** 3 / med
                raw["gemm"].setdefault(m["dtype"], []).append(
                    {"n": n, "median_s": med, "min_s": min(ts), "reps": len(ts), "flops": rate,
                     "rel_err": err, "tiles": m.get("tiles")})
                step(m, f"gemm {m['dtype']} {n}: {rate / 1e9:.1f} GFLOP/s")
            elif role == "add":
                el, ch = m["elements"], m["chain"]
                xs = [_fill(rng, (el,), m["in"]) for _ in range(4)]
                args = [dev(x) for x in xs]
                out = host(fn(*args))
                if out.shape != (el,) or (not _is_int(m["acc"]) and not np.all(np.isfinite(out.astype(np.float64)))):
                    raise CalibrationError(f"add {m['dtype']}: bad result")
                ts = _time(fn, args, seconds)
                med = _median(ts)
                rate = 2.0 * 4 * el * ch / med
                raw["add"][m["dtype"]] = {"elements": el, "chain": ch, "dispatches": m.get("dispatches"),
                                          "median_s": med, "reps": len(ts), "flops": rate}
                step(m, f"add {m['dtype']}: {rate / 1e9:.1f} GFLOP/s")
            elif role == "bandwidth":
                el = m["elements"]
                a, b = _fill(rng, (el,), "f32"), _fill(rng, (el,), "f32")
                args = [dev(a), dev(b)]
                out = host(fn(*args))
                if not np.array_equal(out, a + b):
                    raise CalibrationError("bandwidth module: wrong result")
                del a, b, out
                ts = _time(fn, args, seconds)
                med = _median(ts)
                bw = 3.0 * 4 * el / med
                raw["bandwidth"] = {"elements": el, "bytes": 12 * el, "median_s": med, "reps": len(ts),
                                    "bytes_per_s": bw}
                step(m, f"bandwidth: {bw / 1e9:.1f} GB/s")
            elif role in ("per_product", "grouped"):
                bsz = m["block"]
                a = _fill(rng, (2 * bsz, 2 * bsz), "f32")
                args = [dev(a)]
                out = host(fn(*args))
                blk = {"a11": a[:bsz, :bsz], "a12": a[:bsz, bsz:], "a21": a[bsz:, :bsz], "a22": a[bsz:, bsz:]}
                if role == "per_product":
                    ok = np.allclose(out, blk["a11"] + blk["a22"], rtol=1e-6, atol=1e-6)
                    nbytes = 3 * 4 * bsz * bsz
                else:
                    R = m["R"]
                    ok = out.shape == (R, bsz, bsz)
                    for r in range(R) if ok else ():
                        ref = sum(STRASSEN_U[k][r] * blk[k][:64].astype(np.float64) for k in STRASSEN_U)
                        ok = ok and np.allclose(out[r, :64], ref, rtol=1e-5, atol=1e-5)
                    nbytes = (R * m["used"] + R) * 4 * bsz * bsz
                if not ok:
                    raise CalibrationError(f"{role} combine module: wrong result")
                del a, out, blk
                ts = _time(fn, args, seconds)
                med = _median(ts)
                raw["forms"][role] = {"block": bsz, "bytes": nbytes, "median_s": med, "reps": len(ts),
                                      "bytes_per_s": nbytes / med}
                step(m, f"{role} combine: {nbytes / med / 1e9:.1f} GB/s")
            del fn, args
        if len(disp) == 2:
            fa, fb = load(disp[0]), load(disp[1])
            x = _fill(rng, (disp[0]["elements"],), "f32")
            args = [dev(x)]
            ta, tb = _time_pair(fa, fb, args, 2 * seconds)
            ma, mb = _median(ta), _median(tb)
            da, db = disp[0].get("dispatches", disp[0]["count"]), disp[1].get("dispatches", disp[1]["count"])
            slope = (mb - ma) / (db - da)
            raw["dispatch"] = {"dispatches": [da, db], "median_s": [ma, mb], "reps": len(ta),
                               "per_dispatch_s": slope, "call_s": ma}
            for m in disp:
                step(m, f"dispatch chain of {m['count']}")
            if slope <= 0:
                raise CalibrationError(f"dispatch overhead not measurable: {db} dispatches took "
                                       f"{mb * 1e6:.1f} us, {da} took {ma * 1e6:.1f} us")
    except CalibrationError:
        raise
    except Exception as e:
        raise CalibrationError(f"running the benchmarks on '{driver}' failed: {_first_line(e)}") from None
    finally:
        if bar:
            bar.close()
    profile = _profile_dict(manifest, raw, driver, name, rt)
    raw["manifest"] = {k: v for k, v in manifest.items() if k != "modules"}
    raw["modules"] = manifest["modules"]
    return profile, raw


def _profile_dict(manifest, raw, driver, name, rt) -> dict:
    kind = "cpu" if driver == "local-task" else "gpu"
    hw = _cpu_info() if kind == "cpu" else _gpu_info(rt)
    rt_version = _iree_version("iree-base-runtime")
    bw = raw["bandwidth"]["bytes_per_s"]
    dtypes = {}
    for dt, pts in raw["gemm"].items():
        dtypes[dt] = {"gemm": [[p["n"], p["flops"]] for p in sorted(pts, key=lambda p: p["n"])]}
        if dt in raw["add"]:
            dtypes[dt]["add"] = raw["add"][dt]["flops"]
    forms = {}
    if "per_product" in raw["forms"]:
        forms["per_product_combine"] = raw["forms"]["per_product"]["bytes_per_s"] / bw
    if "grouped" in raw["forms"]:
        forms["grouped_combine"] = raw["forms"]["grouped"]["bytes_per_s"] / bw
    unit = "SMs" if kind == "gpu" else "cores"
    tiles = sorted({t for m in manifest["modules"] for t in (m.get("tiles") or [])})
    flags = " ".join(f for f in manifest["flags"] if "target-device" not in f and "backends" not in f)
    prov = (f"falcon-calibrate{' --quick' if manifest.get('quick') else ''} on {hw['model']} "
            f"({hw['cores']} {unit}), device {driver}, iree-base-runtime {rt_version}, "
            f"compiled by iree-base-compiler {manifest.get('iree_compiler', '?')} with {flags}"
            + (f" and falcon tile choices ({', '.join(tiles)})" if tiles else "")
            + f", {datetime.date.today().isoformat()}")
    return {
        "format": FORMAT, "name": name or manifest.get("name") or f"{kind}-measured",
        "source": "measured", "provenance": prov, "kind": kind, "device": driver,
        "cores": int(hw["cores"]), "bandwidth": bw,
        "dispatch_overhead": raw["dispatch"]["per_dispatch_s"],
        "caches": hw["caches"], "dtypes": dtypes, "forms": forms,
    }


def check_profile(d: dict) -> None:
    """The checks that matter when falcon_mlir is not importable: positive finite numbers."""
    def pos(v, what):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise CalibrationError(f"measured {what} is not a positive number: {v!r}")
    pos(d["bandwidth"], "bandwidth")
    pos(d["dispatch_overhead"], "dispatch_overhead")
    for dt, e in d["dtypes"].items():
        for n, r in e["gemm"]:
            pos(r, f"dtypes.{dt}.gemm[{n}]")
        if "add" in e:
            pos(e["add"], f"dtypes.{dt}.add")
    for k, v in d["forms"].items():
        pos(v, f"forms.{k}")


def write_json_atomic(path, data: dict) -> None:
    """JSON to ``path`` via a temporary file in the same folder and ``os.replace``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=str(path.parent or "."), prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def summary(profile: dict, raw: dict) -> str:
    """A few lines for humans: the figures of the profile."""
    out = [f"profile {profile['name']} ({profile['device']}): {profile['provenance']}"]
    for dt, e in profile["dtypes"].items():
        pts = ", ".join(f"{int(n)}: {r / 1e9:.1f}" for n, r in e["gemm"])
        out.append(f"  {dt} gemm GFLOP/s  {pts}")
        if "add" in e:
            out.append(f"  {dt} add  {e['add'] / 1e9:.1f} GFLOP/s")
    out.append(f"  bandwidth {profile['bandwidth'] / 1e9:.1f} GB/s")
    d = raw.get("dispatch", {})
    out.append(f"  dispatch overhead {profile['dispatch_overhead'] * 1e6:.2f} us per dispatch "
               f"(one call of 1 dispatch: {d.get('call_s', float('nan')) * 1e6:.1f} us)")
    out.append("  forms " + ", ".join(f"{k} {v:.2f}" for k, v in profile["forms"].items()))
    return "\n".join(out)


def _check_output(path: str) -> None:
    """Fail early (UsageError) when ``path`` cannot be written as a file."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"-o {path}: is a directory")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"-o {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"-o {path}: folder {parent} is not writable")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        raise UsageError(message)


def runner_main(argv=None) -> int:
    """``python3 DIR/calibrate_run.py DIR -o PROFILE.json``: measure a prepared bundle."""
    p = _Parser(prog=RUNNER, description="measure a falcon-calibrate bundle (numpy + iree.runtime only)")
    p.add_argument("bundle")
    p.add_argument("-o", "--output", required=True, help="profile JSON to write")
    p.add_argument("--raw", help="also write the raw measurements (JSON)")
    p.add_argument("--driver", help="IREE HAL driver (default: the bundle's device)")
    p.add_argument("--seconds", type=float, help="time per measurement (default: the bundle's)")
    p.add_argument("--name", help="profile name (default: the bundle's, else the output's stem)")
    try:
        args = p.parse_args(argv)
        if args.seconds is not None and not args.seconds > 0:
            raise UsageError("--seconds must be > 0")
        _check_output(args.output)
        if args.raw:
            _check_output(args.raw)
        name = args.name
        if not name:
            try:
                name = json.loads((Path(args.bundle) / MANIFEST).read_text()).get("name")
            except (OSError, ValueError):
                name = None
        name = name or Path(args.output).stem
        t0 = time.perf_counter()
        profile, raw = run_bundle(args.bundle, driver=args.driver, seconds=args.seconds, name=name,
                                  progress=lambda total, desc: Progress(total, desc))
        check_profile(profile)
        raw["wall_s"] = time.perf_counter() - t0
        if args.raw:
            write_json_atomic(args.raw, raw)
        write_json_atomic(args.output, profile)
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except (CalibrationError, OSError) as e:
        print(f"{PROG}: error: {_first_line(e) if not isinstance(e, OSError) else e}", file=sys.stderr)
        return 1
    print(summary(profile, raw))
    print(f"wrote {args.output} ({raw['wall_s']:.0f} s)")
    return 0


# ============================================================================
# falcon-calibrate (this machine).

def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description=__doc__.split("\n\n", 2)[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=sorted(DEVICE_FLAGS), default="local-task",
                   help="IREE HAL driver to calibrate (default local-task)")
    p.add_argument("-o", "--output", help="profile JSON to write")
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
    p.add_argument("--raw", help="also write the raw measurements (JSON)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or step lines")
    p.add_argument("--no-fit", action="store_true",
                   help="CPU: skip fitting the form factors to measured Strassen plans "
                        "(falcon_mlir.calibration.fit)")
    return p


def _sizes(tokens) -> list:
    out = []
    for tok in tokens:
        if not tok.isdigit() or int(tok) <= 0:
            raise UsageError(f"--sizes: {tok!r} is not a positive integer")
        out.append(int(tok))
    return sorted(set(out))


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        if args.prepare and args.output:
            raise UsageError("--prepare compiles a bundle only: -o belongs to calibrate_run.py there")
        if not args.prepare and not args.output:
            raise UsageError("-o PROFILE.json is required (or --prepare DIR)")
        dev = args.device
        sizes = _sizes(args.sizes) if args.sizes else (QUICK_SIZES if args.quick else DEFAULT_SIZES)[dev]
        dtypes = args.dtypes or DEFAULT_DTYPES[dev]
        for dt in dtypes:
            if dt not in DTYPES:
                raise UsageError(f"--dtypes: unknown element type {dt!r} (choose from {', '.join(DTYPES)})")
        dtypes = list(dict.fromkeys(dtypes))
        if dev == "cuda" and "bf16" in dtypes:
            raise UsageError("--dtypes bf16 is not measured on cuda (numpy there has no bfloat16)")
        seconds = args.seconds if args.seconds is not None else (0.25 if args.quick else 0.75)
        if not seconds > 0 or not math.isfinite(seconds):
            raise UsageError("--seconds must be a positive number")
        mb = args.bandwidth_mb if args.bandwidth_mb is not None else \
            (QUICK_BANDWIDTH_MB if args.quick else DEFAULT_BANDWIDTH_MB)[dev]
        if not 1 <= mb <= 4096:
            raise UsageError("--bandwidth-mb must be between 1 and 4096")
        if args.output:
            _check_output(args.output)
        if args.raw:
            _check_output(args.raw)
        if args.prepare and Path(args.prepare).exists() and not Path(args.prepare).is_dir():
            raise UsageError(f"--prepare {args.prepare}: exists and is not a folder")
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2

    progress = (lambda total, desc: Progress(total, desc)) if not args.no_progress else None
    t0 = time.perf_counter()
    try:
        if args.prepare:
            man = prepare_bundle(args.prepare, device=dev, dtypes=dtypes, sizes=sizes, bandwidth_mb=mb,
                                 seconds=seconds, name=args.name, quick=args.quick, progress=progress)
            total = sum(m["bytes"] for m in man["modules"])
            print(f"prepared {args.prepare}: {len(man['modules'])} modules, {total / 2**20:.1f} MiB, "
                  f"in {time.perf_counter() - t0:.0f} s; run there: python3 {args.prepare}/{RUNNER} "
                  f"{args.prepare} -o PROFILE.json")
            return 0
        from falcon_mlir.decision.profile import Profile, ProfileError

        name = args.name or Path(args.output).stem
        with tempfile.TemporaryDirectory(prefix="falcon-calibrate-") as tmp:
            prepare_bundle(tmp, device=dev, dtypes=dtypes, sizes=sizes, bandwidth_mb=mb, seconds=seconds,
                           name=name, quick=args.quick, progress=progress)
            profile, raw = run_bundle(tmp, driver=dev, seconds=seconds, name=name, progress=progress)
        try:
            prof = Profile.from_dict(profile, where="measured profile")
        except ProfileError as e:
            raise CalibrationError(str(e)) from None
        if dev == "local-task" and not args.no_fit:
            from falcon_mlir.calibration import fit

            bar = progress(4 * len(fit.FIT_SIZES), "fit") if progress else None
            measured = fit.measure_plans(fit.QUICK_FIT_SIZES if args.quick else fit.FIT_SIZES,
                                         seconds=seconds * 2,
                                         step=bar.step if bar else None)
            if bar:
                bar.close()
            prof, forms = fit.fit_forms(prof, measured)
            profile["forms"] = dict(prof.forms)
            raw["fit"] = measured
        raw["wall_s"] = time.perf_counter() - t0
        if args.raw:
            write_json_atomic(args.raw, raw)
        try:
            prof.save(args.output)  # validated above; temp file + rename
        except BaseException:
            out = Path(args.output)
            for tmp in out.parent.glob(f".{out.name}.tmp*"):
                try:
                    tmp.unlink()
                except OSError:
                    pass
            raise
    except CalibrationError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"{PROG}: error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: error: interrupted", file=sys.stderr)
        return 1
    print(summary(profile, raw))
    print(f"wrote {args.output} ({raw['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    if Path(sys.argv[0]).name == RUNNER:
        sys.exit(runner_main())
    sys.exit(main())
