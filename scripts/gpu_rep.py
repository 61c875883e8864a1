#!/usr/bin/env python3
"""GEMMs through falcon-compile and plain IREE on a GPU, timed inside one module call.

Each module runs the product R times in one call (an ``scf.for`` whose A
goes through ``util.optimization_barrier`` each trip, so no trip is folded
away), and the per-trip time is ``(t(R) - t(1)) / (R - 1)``. Measured on the
H200 (2026-12-01): the barrier on a device resource makes IREE wait for it on
the host every trip, so a trip costs about what a synchronous call costs
(the kernel plus 0.1-0.6 ms); it compares falcon's module with plain IREE's
under the same conditions, not the kernel with cuBLAS. For the kernel's own
time inside a falcon-compiled module use a profiler on one call:
``ncu --csv --clock-control none --metrics gpu__time_duration.sum python3
DIR/gpu_rep_run.py DIR --once FILE.vmfb`` (docs/kernels.md).

The trip's barrier stays ``util.optimization_barrier``, not the rewrite's
``iree_tensor_ext.compute_barrier.start`` (falcon-calibrate's dispatch chain
switched): here it keeps each trip from being folded into the one before, it
is not a fence between a plan's dispatches, both modules carry the same one,
and the numbers in docs/benchmarks.md were taken with it. Checked on the x86
host (256^3 f32, 21 trips, plain IREE, load 4.5): with the compute barrier the
trips are not folded either, but a trip took 620 us against 382 us, for reasons
not looked into; the GPU was not re-measured.

* ``prepare DIR [--shapes MxNxK ...] [--dtypes bf16 f16 f32] [--reps 21]`` HERE:
  for each shape and dtype (A, B in the dtype, C in the dtype, f32
  accumulation) compiles the same MLIR with plain IREE
  (``iree.compiler.compile_str``, ``--iree-hal-target-device=cuda
  --iree-cuda-target=sm_80``) and with falcon (:func:`falcon_mlir.compile_str`
  with the same flags: falcon-kernels, falcon-tiles, lcma-rewrite on the
  h200-falcon profile), functions ``@rep1`` and ``@repR``; writes
  ``manifest.json`` and copies ``gpu_rep_run.py`` and the standalone modules.
* ``python3 DIR/gpu_rep_run.py DIR`` THERE: random inputs, medians, and
  torch.matmul (cuBLAS, CUDA events, the same dtypes) as the peer.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from falcon_mlir.bundles import copy_standalone
from falcon_mlir.cli import ArgumentParser, ToolError, run_tool
from falcon_mlir.files import write_atomic

PROG = "gpu_rep.py"
IREE_FLAGS = ("--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80")
DEFAULT_SHAPES = ("8192x8192x8192", "16384x16384x16384", "8192x4096x4096", "8192x1024x4096",
                  "8192x14336x4096", "8192x4096x14336", "8192x1024x8192", "8192x28672x8192",
                  "8192x8192x28672")


def rep_mlir(M: int, N: int, K: int, dtype: str, reps: int) -> str:
    """``@rep1`` and ``@rep{reps}``: C = A @ B (f32 accumulation, C in ``dtype``)
    computed ``reps`` times in one call (A behind a barrier each trip)."""
    a_t, b_t, c_t = f"tensor<{M}x{K}x{dtype}>", f"tensor<{K}x{N}x{dtype}>", f"tensor<{M}x{N}x{dtype}>"
    acc_t = f"tensor<{M}x{N}xf32>"
    trunc = "" if dtype == "f32" else (
        f"\n    %e2 = tensor.empty() : {c_t}\n"
        f"    %t = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], "
        f"iterator_types = [\"parallel\", \"parallel\"]}} ins(%p : {acc_t}) outs(%e2 : {c_t}) {{\n"
        f"    ^bb0(%v: f32, %w: {dtype}):\n      %z2 = arith.truncf %v : f32 to {dtype}\n      linalg.yield %z2 : {dtype}\n"
        f"    }} -> {c_t}")
    res = "%p" if dtype == "f32" else "%t"

    def fn(n: int) -> str:
        return f"""func.func @rep{n}(%a: {a_t}, %b: {b_t}) -> {c_t} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %cn = arith.constant {n} : index
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty() : {c_t}
  %r:2 = scf.for %i = %c0 to %cn step %c1 iter_args(%x = %a, %c = %e0) -> ({a_t}, {c_t}) {{
    %xb = util.optimization_barrier %x : {a_t}
    %e = tensor.empty() : {acc_t}
    %f = linalg.fill ins(%z : f32) outs(%e : {acc_t}) -> {acc_t}
    %p = linalg.matmul ins(%xb, %b : {a_t}, {b_t}) outs(%f : {acc_t}) -> {acc_t}{trunc}
    scf.yield %xb, {res} : {a_t}, {c_t}
  }}
  return %r#1 : {c_t}
}}
"""
    return fn(1) + fn(reps)


def _parse_shape(text: str) -> tuple:
    try:
        M, N, K = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise ToolError(f"{PROG}: error: bad shape '{text}' (expected MxNxK)") from None
    return M, N, K


def prepare(dir_: Path, shapes, dtypes, reps: int) -> None:
    import falcon_mlir
    from iree.compiler import compile_str

    dir_.mkdir(parents=True, exist_ok=True)
    entries = []
    for text in shapes:
        M, N, K = _parse_shape(text)
        for dtype in dtypes:
            src = rep_mlir(M, N, K, dtype, reps)
            entry = {"M": M, "N": N, "K": K, "dtype": dtype, "reps": reps}
            for name in ("iree", "falcon"):
                t0 = time.perf_counter()
                try:
                    if name == "iree":
                        vmfb = compile_str(src, extra_args=list(IREE_FLAGS))
                    else:
                        vmfb, rep = falcon_mlir.compile_str(src, extra_args=list(IREE_FLAGS),
                                                            return_report=True, input_name="rep.mlir")
                        entry["falcon_kernels"] = sorted({k.get("config") or k.get("reason")
                                                          for e in rep for k in e.get("kernels", [])})
                except Exception as e:  # noqa: BLE001 - recorded
                    entry[name] = {"error": " ".join(str(e).split())[:300]}
                    continue
                file = f"{name}_{dtype}_{M}x{N}x{K}.vmfb"
                write_atomic(str(dir_ / file), vmfb)
                entry[name] = {"file": file, "compile_s": round(time.perf_counter() - t0, 1)}
            print(f"[{PROG}] {dtype} {M}x{N}x{K}: " + ", ".join(
                f"{n} {entry[n].get('compile_s', 'failed')}" for n in ("iree", "falcon")), file=sys.stderr)
            entries.append(entry)
    shutil.copyfile(Path(__file__).with_name("gpu_rep_run.py"), dir_ / "gpu_rep_run.py")
    copy_standalone(dir_, ("falcon_mlir.compare", "falcon_mlir.files", "falcon_mlir.runner"))
    write_atomic(str(dir_ / "manifest.json"),
                 (json.dumps({"format": 1, "flags": list(IREE_FLAGS), "entries": entries}, indent=1)
                  + "\n").encode())


def _body(argv) -> int:
    p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("prepare")
    q.add_argument("dir")
    q.add_argument("--shapes", nargs="+", default=list(DEFAULT_SHAPES))
    q.add_argument("--dtypes", nargs="+", default=["bf16", "f16", "f32"], choices=["bf16", "f16", "f32"])
    q.add_argument("--reps", type=int, default=21)
    args = p.parse_args(argv)
    if args.reps < 2:
        raise ToolError(f"{PROG}: error: --reps must be >= 2")
    prepare(Path(args.dir), args.shapes, args.dtypes, args.reps)
    return 0


def main(argv=None) -> int:
    return run_tool(PROG, _body, argv)


if __name__ == "__main__":
    sys.exit(main())
