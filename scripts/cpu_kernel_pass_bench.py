#!/usr/bin/env python3
"""Time f32 ``C = A @ B`` through the falcon-kernels pass (this machine's CPU arch: ``x86-avx512``, else
``x86-avx2``) against IREE's own code.

For each ``--shapes MxNxK`` one module, compiled twice with the same iree-compile flags:

* ``iree``: the ``linalg.matmul`` as it is (IREE's code);
* ``kernel``: the same module after ``falcon-kernels{ARCH min-flops=0 min-intensity=0
  cpu-flags=...}`` (falcon's CPU kernel: pack B, then the GEMM; blocking by
  :func:`falcon_mlir.kernels.cpu_gemm.choose_config`).

``--flags best`` (default): the main job's flags, data tiling, ukernels and 8 MiB matmul tiles
(:mod:`falcon_mlir.models.main_job`); ``--flags host``: falcon-compile's default for this machine
(``--iree-llvmcpu-target-cpu=host`` only). Inputs are random normal, placed on the device once;
both modules' results are checked against float64 first. Then ``--rounds`` rounds, each timing
``--repeat`` calls of one module after the other's (after two warm-up calls); prints the median
of all calls per module, their ratio (IREE's time / the kernel's: above 1 the kernel is faster)
and ``uptime`` before and after. This is how the pass's CPU ``min-flops`` default was set
(docs/benchmarks.md, "falcon-kernels on the CPU").

Usage: ``python scripts/cpu_kernel_pass_bench.py --shapes 256x256x256 1024x4096x4096 --repeat 15``.
Exit status 0; 1 (one line) when the kernel cannot be built or a result is wrong; 2 for bad input.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

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


def flags_of(which: str) -> tuple:
    """``(compile flags, back-end-only flags)`` for ``--flags`` ``best`` or ``host`` (the second: global
    LLVM options, given to iree-compile's process, not to the pass's object key)."""
    from falcon_mlir.models.main_job import BASE_FLAGS, DATA_TILING_FLAGS, MATMUL_TILE_BYTES, tile_flags

    if which == "host":
        return list(BASE_FLAGS), []
    return list(BASE_FLAGS) + list(DATA_TILING_FLAGS), list(tile_flags(MATMUL_TILE_BYTES))


def module_texts(M: int, N: int, K: int, flags) -> tuple:
    """``(IREE's module text, the kernel's module text, the kernel's blocking label)``.

    Raises:
        RuntimeError: the pass did not serve the matmul (its report's reason).
        PassError: the kernel cannot be built (compiler, target without AVX-512).
    """
    from iree.compiler import ir

    from falcon_mlir.ir.matmul_text import matmul_mlir
    from falcon_mlir.kernels import cpu_object
    from falcon_mlir.passes.falcon_kernels import KernelsOptions, run_falcon_kernels
    from falcon_mlir.passes.falcon_kernels.options import CPU_ISAS

    text = matmul_mlir(M, N, K)  # @mm(A, B) -> A @ B, zero-filled C
    # the arch of this machine's ISA; with neither ISA x86-avx512, and the pass says why it cannot build
    arch = next((a for a, isa in CPU_ISAS.items() if isa == cpu_object.host_isa()), "x86-avx512")
    opts = KernelsOptions.parse(f"{arch} min-flops=0 min-intensity=0 cpu-flags=" + ",".join(flags))
    with ir.Context():
        m = ir.Module.parse(text)
        rep = run_falcon_kernels(m.operation, opts)
        if rep[0]["kernel"] != "classical":
            raise RuntimeError(f"the pass left {M}x{N}x{K} to IREE: {rep[0]['reason']}")
        return text, str(m), rep[0]["config"]


def bench_shape(M: int, N: int, K: int, flags, back, repeat: int, rounds: int) -> tuple:
    """``(IREE median s, kernel median s, blocking label)`` for one shape.

    Raises:
        RuntimeError: a result is more than 1e-5 (max-norm, relative) from float64.
    """
    from iree.compiler import compile_str

    from falcon_mlir.runner import Module

    plain, kernel, label = module_texts(M, N, K, flags)
    mods = [Module(compile_str(t, extra_args=list(flags) + list(back))) for t in (plain, kernel)]
    rng = np.random.default_rng([7, M, N, K])
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    for name, mod in zip(("iree", "kernel"), mods):
        err = float(np.abs(mod("mm", a, b) - ref).max() / np.abs(ref).max())
        if not err < 1e-5:
            raise RuntimeError(f"{name} at {M}x{N}x{K}: relative error {err:.2e}")
    times = [[], []]
    for _ in range(rounds):
        for t, mod in zip(times, mods):
            t += mod.time("mm", a, b, repeat=repeat, warmup=2)
    return statistics.median(times[0]), statistics.median(times[1]), label


def main(argv=None) -> int:
    """Parse arguments, time every shape, print a markdown table; see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", type=_shape, nargs="+", required=True, help="MxNxK shapes")
    p.add_argument("--flags", choices=("best", "host"), default="best",
                   help="best: data tiling, ukernels, 8 MiB matmul tiles (the main job's); host: falcon-compile's")
    p.add_argument("--repeat", type=int, default=15, help="timed calls per module and round")
    p.add_argument("--rounds", type=int, default=3, help="rounds (the modules alternate between rounds)")
    args = p.parse_args(argv)
    if args.repeat < 1 or args.rounds < 1:
        print("cpu_kernel_pass_bench: --repeat and --rounds must be >= 1", file=sys.stderr)
        return 2
    flags, back = flags_of(args.flags)
    print(f"uptime before: {_uptime()}")
    print(f"flags: {' '.join(flags + back)}; medians of {args.rounds} x {args.repeat} calls\n")
    print("| M x N x K | IREE ms | kernel ms | IREE / kernel | blocking |")
    print("|---|---:|---:|---:|---|")
    from falcon_mlir.passes import PassError

    for M, N, K in args.shapes:
        try:
            ti, tk, label = bench_shape(M, N, K, flags, back, args.repeat, args.rounds)
        except (RuntimeError, PassError) as e:
            print(f"cpu_kernel_pass_bench: error: {e}", file=sys.stderr)
            return 1
        print(f"| {M}x{N}x{K} | {ti * 1e3:.3f} | {tk * 1e3:.3f} | {ti / tk:.2f}x | {label} |", flush=True)
    print(f"\nuptime after: {_uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
