"""falcon's classical CPU GEMM with B packed inside (one dispatch) against pack B + GEMM (two), and numpy.

For each shape, the same GEMM as two IREE modules on falcon's kernel, one per form
(:func:`falcon_mlir.kernels.cpu_embed.gemm_module` with ``b_inside`` True and False, the 112 x 512 blocking
the rule takes), and numpy (OpenBLAS) on the same random normal inputs, in one process: the two forms in
alternating rounds (their order swapped each round, the inputs on the device), then numpy in a block of
its own (OpenBLAS's threads spin after a call and slowed whichever form came next: until 2026-12-04 numpy
ran inside the rounds, just before the two-dispatch form, which read about a third slow on a Zen 4 that
way, 97 against 72 ms at 1024x2560x2560; the rounds now start after falcon-bench's settle,
:data:`falcon_mlir.bench.measure.PEER_SETTLE_S`, since the float64 reference runs on OpenBLAS too); prints
the medians (wall per call, seconds), the ratios of the medians and the median of the per-round ratios
of the two forms
(docs/benchmarks.md, *The classical kernel with B packed inside*)::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 scripts/cpu_b_inside_bench.py \\
        512x7168x2048 1024x4096x4096 --rounds 9

Needs an x86 CPU with AVX-512 F/BW/DQ/VL and a C compiler (falcon's CPU kernel).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np


def parse_shape(text: str) -> tuple:
    """``MxNxK`` -> ``(M, N, K)``, positive ints.

    Raises:
        argparse.ArgumentTypeError: not three positive ints joined by ``x``.
    """
    try:
        dims = tuple(int(v) for v in text.lower().split("x"))
    except ValueError:
        dims = ()
    if len(dims) != 3 or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"a shape is MxNxK with positive sizes, got {text!r}")
    return dims


def bench_shape(M: int, N: int, K: int, rounds: int, seed: int = 0) -> dict:
    """Seconds per call (medians over ``rounds``) of ``two``, ``inside`` and ``numpy``, the median of the
    per-round ratios ``two/inside``, and both forms' max-norm errors against float64."""
    from falcon_mlir.bench.measure import PEER_SETTLE_S
    from falcon_mlir.kernels import cpu_embed
    from falcon_mlir.kernels.cpu_gemm import CpuGemmConfig
    from falcon_mlir.runner import Module

    cfg = CpuGemmConfig()
    mods = {form: Module(cpu_embed.compile_module(cpu_embed.gemm_module(M, N, K, cfg, b_inside=form == "inside")))
            for form in ("two", "inside")}
    rng = np.random.default_rng([seed, M, N, K])
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    out = {f"err_{f}": float(np.abs(m("main", a, b) - ref).max() / np.abs(ref).max()) for f, m in mods.items()}
    args = {form: m.on_device(a, b) for form, m in mods.items()}
    calls = {form: (lambda form=form: mods[form]("main", *args[form])) for form in mods}
    times = {k: [] for k in ("two", "inside", "numpy")}
    time.sleep(PEER_SETTLE_S)  # the float64 reference above ran on OpenBLAS's threads
    for rnd in range(rounds):
        for k in ("two", "inside") if rnd % 2 == 0 else ("inside", "two"):
            t = time.perf_counter()
            calls[k]()
            times[k].append(time.perf_counter() - t)
    for _ in range(rounds):  # OpenBLAS after IREE: its threads' spin after a call slows only numpy's next
        t = time.perf_counter()
        a @ b
        times["numpy"].append(time.perf_counter() - t)
    out.update({k: statistics.median(v) for k, v in times.items()})
    out["two/inside paired"] = statistics.median(x / y for x, y in zip(times["two"], times["inside"]))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="cpu_b_inside_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("shapes", nargs="+", type=parse_shape, metavar="MxNxK")
    p.add_argument("--rounds", type=int, default=9, help="alternating rounds (default 9)")
    args = p.parse_args(argv)
    print("shape MxNxK | two s | inside s | numpy s | two / inside (paired) | numpy / inside | errors")
    for M, N, K in args.shapes:
        r = bench_shape(M, N, K, args.rounds)
        print(f"{M}x{N}x{K} | {r['two']:.4f} | {r['inside']:.4f} | {r['numpy']:.4f} | "
              f"{r['two'] / r['inside']:.3f} ({r['two/inside paired']:.3f}) | "
              f"{r['numpy'] / r['inside']:.3f} | "
              f"{r['err_two']:.1e}, {r['err_inside']:.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
