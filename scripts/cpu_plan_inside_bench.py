#!/usr/bin/env python3
"""An LCMA plan's products on falcon's CPU kernel with B inside (one dispatch each) against two dispatches.

For each shape, in one process, on the same random normal inputs: the classical kernel (the form and
blocking its own rule takes, :func:`falcon_mlir.kernels.cpu_gemm.classical_config`), and the plan
(``--scheme``, default Strassen) as two dispatches per product (``lcma_pack_b``, ``lcma_gemm``) and
with B summed and packed inside (``lcma_fgemm``) on 256- and on 512-column panels, whatever
:func:`falcon_mlir.kernels.cpu_gemm.plan_inside_columns` would pick. The candidates run in alternating
rounds (the order reversed every other round); prints the median wall time per call and the classical
kernel's median over each form's (docs/kernels.md, *LCMA products with B inside*)::

    python3 scripts/cpu_plan_inside_bench.py 1024x4096x14336 1024x14336x4096 --rounds 7

Needs an x86 CPU with AVX-512 F/BW/DQ/VL and a C compiler (falcon's CPU kernel).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from falcon_mlir.bench.shapes import shape_argument

#: The plan's forms timed beside the classical kernel: (label, b_inside, panel width or None).
FORMS = (("two", False, None), ("inside 256", True, 256), ("inside 512", True, 512))


def bench_shape(M: int, N: int, K: int, scheme: str, rounds: int, seed: int = 0) -> dict:
    """Median seconds per call of ``classical`` and of each of :data:`FORMS`, and each one's max-norm error
    against float64 (``err`` dict).

    Raises:
        ValueError: the shape is not a multiple of the scheme's format (:class:`CpuPlan`)."""
    import dataclasses

    from falcon_mlir.kernels import cpu_embed, cpu_gemm
    from falcon_mlir.kernels.cpu_plan import CpuPlan, plan_module
    from falcon_mlir.runner import Module

    mods = {"classical": Module(cpu_embed.compile_module(
        cpu_embed.gemm_module(M, N, K, cpu_gemm.classical_config(M, N, K))))}
    for label, inside, nc in FORMS:
        plan = CpuPlan(M, N, K, scheme, b_inside=inside)
        cfg = dataclasses.replace(plan.config, nc=nc) if nc else plan.config
        mods[label] = Module(cpu_embed.compile_module(plan_module(CpuPlan(M, N, K, scheme, cfg, b_inside=inside))))
    rng = np.random.default_rng([seed, M, N, K])
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = {k: float(np.abs(m("main", a, b) - ref).max() / np.abs(ref).max()) for k, m in mods.items()}
    args = {k: m.on_device(a, b) for k, m in mods.items()}
    times = {k: [] for k in mods}
    order = list(mods)
    for rnd in range(rounds):
        for k in order if rnd % 2 == 0 else order[::-1]:
            t = time.perf_counter()
            mods[k].functions["main"](*args[k])
            times[k].append(time.perf_counter() - t)
    out = {k: statistics.median(v) for k, v in times.items()}
    out["err"] = err
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="cpu_plan_inside_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("shapes", nargs="+", type=shape_argument, metavar="MxNxK")
    p.add_argument("--scheme", default="strassen", help="catalog scheme of the plan (default strassen)")
    p.add_argument("--rounds", type=int, default=7, help="alternating rounds (default 7)")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
    labels = [f[0] for f in FORMS]
    print("shape MxNxK | classical s | " + " | ".join(f"{x} s (classical / it)" for x in labels) + " | largest error")
    for M, N, K in args.shapes:
        try:
            r = bench_shape(M, N, K, args.scheme, args.rounds)
        except ValueError as e:
            print(f"cpu_plan_inside_bench: {M}x{N}x{K}: {e}", file=sys.stderr)
            return 1
        cells = " | ".join(f"{r[x]:.4f} ({r['classical'] / r[x]:.3f})" for x in labels)
        print(f"{M}x{N}x{K} | {r['classical']:.4f} | {cells} | {max(r['err'].values()):.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
