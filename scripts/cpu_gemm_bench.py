#!/usr/bin/env python3
"""Time falcon's own CPU GEMM kernel against IREE's own code and numpy (f32, C = A @ B).

For each size n (``n x n x n``), or ``--shapes MxNxK``:

* ``iree``: ``@reference`` (one ``linalg.generic``) compiled with IREE's best
  CPU flags (:data:`falcon_mlir.runner.BEST_CPU_FLAGS`: data tiling + the
  mmt4d ukernel);
* ``falcon``: ``@main`` through falcon's kernel (:mod:`falcon_mlir.kernels.cpu_embed`),
  compiled with the host flags;
* ``numpy``: ``a @ b`` (OpenBLAS on this machine).

Inputs are random normal (seeded), put on the device once; each IREE call is
timed with its result copied back to the host (:meth:`falcon_mlir.runner.Module.time`),
each numpy call allocates its result. Prints the median and min of
``--repeat`` calls per runner (after one warm-up), GFLOP/s = 2MNK / median,
the relative error of each against a float64 reference on ``--check-rows``
random rows, and ``uptime`` before and after. Runners are timed one block
after another (numpy last: OpenBLAS's threads spin after a call).

Usage: ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python scripts/cpu_gemm_bench.py --sizes 1024 2048 4096 --repeat 7``
(this machine's environment sets ``OPENBLAS_CORETYPE=Haswell``, which makes
numpy run OpenBLAS's AVX2 kernels at about half its AVX-512 rate).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import numpy as np


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _shape(text: str) -> tuple:
    """``(M, N, K)`` of one ``MxNxK`` (falcon-bench's parser)."""
    from falcon_mlir.bench.shapes import parse_shapes

    try:
        (shape,) = parse_shapes(text)
    except ValueError as e:  # also a comma list: one shape per argument here
        raise argparse.ArgumentTypeError(str(e)) from None
    return shape.mnk


def _time(fn, repeat: int, warmup: int = 2) -> list:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def bench_shape(M: int, N: int, K: int, repeat: int, check_rows: int, runners: tuple, config=None) -> list:
    """Rows ``(runner, median s, min s, GFLOP/s at the median, relative error)`` for one shape
    (``config``: the kernel's blocking, default the library's choice)."""
    from falcon_mlir.kernels import cpu_embed
    from falcon_mlir.runner import BEST_CPU_FLAGS, Module, compile_mlir

    rng = np.random.default_rng([7, M, N, K])
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    rows = rng.choice(M, size=min(check_rows, M), replace=False)
    ref = a[rows].astype(np.float64) @ b.astype(np.float64)
    text = cpu_embed.gemm_module(M, N, K, config, reference=True)

    def err(c):
        return float(np.abs(c[rows] - ref).max() / np.abs(ref).max())

    out = []
    for name in runners:
        if name == "numpy":
            c = a @ b
            times = _time(lambda: a @ b, repeat)
        elif name.startswith("plan:"):
            from falcon_mlir.kernels import cpu_plan

            mod = Module(compile_mlir(cpu_plan.plan_module(cpu_plan.CpuPlan(M, N, K, name[5:])),
                                      tuple(cpu_embed.DEFAULT_CPU_FLAGS)))
            da, db = mod.on_device(a, b)
            c = mod("main", da, db)
            times = _time(lambda: mod("main", da, db), repeat)
            del mod
        else:
            flags, fn = ((BEST_CPU_FLAGS, "reference") if name == "iree" else
                         (cpu_embed.DEFAULT_CPU_FLAGS, "main"))
            extra = ("--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu") \
                if name == "iree" else ()
            mod = Module(compile_mlir(text, extra + tuple(flags)))
            da, db = mod.on_device(a, b)
            c = mod(fn, da, db)
            times = _time(lambda: mod(fn, da, db), repeat)
            del mod
        med = statistics.median(times)
        out.append((name, med, min(times), 2.0 * M * N * K / med / 1e9, err(c)))
    return out


def main(argv=None) -> int:
    """Parse arguments, time every shape, print a markdown table; 0 on success, 2 on bad input,
    1 (one line) when falcon's kernel cannot be built here."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="*", default=[1024, 2048, 4096], help="square sizes n")
    p.add_argument("--shapes", type=_shape, nargs="*", default=[], help="MxNxK shapes (besides --sizes)")
    p.add_argument("--repeat", type=int, default=7, help="timed calls per runner (>= 5 for medians)")
    p.add_argument("--check-rows", type=int, default=64, help="rows of C checked against float64")
    p.add_argument("--runners", default="iree,falcon,numpy", help="comma list of iree, falcon, numpy")
    p.add_argument("--plans", nargs="*", default=[],
                   help="also LCMA plans on falcon's kernel (cpu_plan: combines in its packs and epilogue), "
                        "by scheme name: strassen, strassen^2, ...")
    args = p.parse_args(argv)
    runners = tuple(r.strip() for r in args.runners.split(",") if r.strip())
    bad = [r for r in runners if r not in ("iree", "falcon", "numpy")]
    # the plans run before numpy (OpenBLAS's threads spin after a call)
    plans = tuple(f"plan:{s}" for s in args.plans)
    runners = tuple(r for r in runners if r != "numpy") + plans + tuple(r for r in runners if r == "numpy")
    if bad or args.repeat < 1 or args.check_rows < 1 or any(n < 1 for n in args.sizes):
        print(f"cpu_gemm_bench: bad --runners {bad} or --repeat/--sizes/--check-rows below 1", file=sys.stderr)
        return 2
    from falcon_mlir.kernels.cpu_gemm import choose_config

    print(f"uptime before: {_uptime()}")
    print(f"medians of {args.repeat} calls; falcon's row names its blocking\n")
    print("| M x N x K | runner | median ms | min ms | GFLOP/s (median) | rel. error |")
    print("|---|---|---:|---:|---:|---:|")
    for M, N, K in [(n, n, n) for n in args.sizes] + list(args.shapes):
        config = choose_config(M, N, K)
        try:
            rows = bench_shape(M, N, K, args.repeat, args.check_rows, runners, config)
        except (RuntimeError, ValueError) as e:  # the kernel cannot be built here (compiler, AVX-512), a
            # plan's format does not divide the shape: one line
            print(f"cpu_gemm_bench: error: {e}", file=sys.stderr)
            return 1
        for name, med, best, gf, e in rows:
            label = (f"falcon ({config.label})" if name == "falcon" else
                     f"falcon {name[5:]} (combines fused)" if name.startswith("plan:") else name)
            print(f"| {M}x{N}x{K} | {label} | {med * 1e3:.2f} | {best * 1e3:.2f} | {gf:.0f} | {e:.1e} |", flush=True)
    print(f"\nuptime after: {_uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
