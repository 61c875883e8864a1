#!/usr/bin/env python3
"""falcon's classical CPU kernel outside IREE: its pack of B and its GEMM on one and on two threads.

Splits what falcon's kernel is worth from what running it inside IREE costs (the pack dispatch, the
result's allocation, the workers). For each ``MxNxK`` shape the generated C of one blocking
(:func:`falcon_mlir.kernels.cpu_source.kernel_source`, ``--config`` fields of
:class:`~falcon_mlir.kernels.cpu_gemm.CpuGemmConfig`) is compiled together with a small C driver
(``$FALCON_CC`` or gcc, the object's own flags, :data:`~falcon_mlir.kernels.cpu_object.CFLAGS` and
``-march`` of :data:`~falcon_mlir.kernels.cpu_object.MARCH`, hosted) that calls the classical entry
points as IREE's workers do: ``pack_b`` once per workgroup of ``PACK_ROWS`` rows of B, ``gemm`` once
per ``MC x NC`` block of C (workgroup x, the block of M, fastest), on one thread and on ``--threads``
threads taking every ``threads``-th workgroup. Buffers are allocated and touched once, so no page fault
is timed. Prints, per shape and thread count, the best GEMM time of ``--repeat`` and its GFLOP/s (2 M
N K / seconds), the median pack time, and the largest error of 64 entries of C against a float64 dot
product (docs/benchmarks.md, *falcon's kernel outside IREE*)::

    python3 scripts/cpu_kernel_harness.py 1024x2560x2560 --repeat 7
    python3 scripts/cpu_kernel_harness.py 1024x2560x2560 --config kc=384,mc=56

Needs an x86 CPU with the ISA's features (AVX-512 F/BW/DQ/VL, or AVX2 and FMA) and a C compiler.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from falcon_mlir.bench.shapes import shape_argument

DRIVER = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A memref as the entry points take it: base, aligned pointer, offset, size, stride. */
#define MREF(p) (p), (p), (size_t)0, (size_t)0, (size_t)1

static size_t M, N, K, gm, gn, gp, nthreads;
static float *a, *b, *bp, *c, *s;

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

static void *pack_part(void *arg) {
  for (size_t wg = (size_t)arg; wg < gp; wg += nthreads) PACK_B(MREF(b), MREF(bp), M, N, K, wg);
  return 0;
}

static void *gemm_part(void *arg) {
  for (size_t w = (size_t)arg; w < gm * gn; w += nthreads) GEMM(MREF(a), MREF(bp), MREF(c), MREF(s), M, N, K, w % gm, w / gm);
  return 0;
}

static double run(void *(*part)(void *)) {
  pthread_t th[64];
  double t = now();
  for (size_t i = 0; i < nthreads; ++i) pthread_create(&th[i], 0, part, (void *)i);
  for (size_t i = 0; i < nthreads; ++i) pthread_join(th[i], 0);
  return now() - t;
}

static int cmp(const void *x, const void *y) { double d = *(const double *)x - *(const double *)y; return (d > 0) - (d < 0); }

int main(int argc, char **argv) {
  M = atol(argv[1]); N = atol(argv[2]); K = atol(argv[3]); nthreads = atol(argv[4]);
  int reps = atoi(argv[5]);
  gm = (M + MC - 1) / MC; gn = (N + NC - 1) / NC; gp = (K + PACK_ROWS - 1) / PACK_ROWS;
  size_t nbp = (N + NR - 1) / NR * K * NR, ns = gm * gn * MC * (KC + 16);
  a = aligned_alloc(64, M * K * 4); b = aligned_alloc(64, K * N * 4); c = aligned_alloc(64, M * N * 4);
  bp = aligned_alloc(64, nbp * 4); s = aligned_alloc(64, ns * 4);
  srand(1);
  for (size_t i = 0; i < M * K; ++i) a[i] = (float)rand() / RAND_MAX - 0.5f;
  for (size_t i = 0; i < K * N; ++i) b[i] = (float)rand() / RAND_MAX - 0.5f;
  memset(c, 0, M * N * 4); memset(bp, 0, nbp * 4); memset(s, 0, ns * 4);
  double packs[256], best = 1e30;
  for (int r = 0; r < reps; ++r) {
    packs[r] = run(pack_part);
    double t = run(gemm_part);
    if (t < best) best = t;
  }
  qsort(packs, reps, sizeof(double), cmp);
  double err = 0, scale = 0;
  for (int t = 0; t < 64; ++t) {
    size_t i = (size_t)rand() % M, j = (size_t)rand() % N;
    double ref = 0;
    for (size_t k = 0; k < K; ++k) ref += (double)a[i * K + k] * b[k * N + j];
    double e = ref - c[i * N + j];
    err = e < 0 ? (-e > err ? -e : err) : (e > err ? e : err);
    scale = (ref < 0 ? -ref : ref) > scale ? (ref < 0 ? -ref : ref) : scale;
  }
  printf("%zux%zux%zu | %zu | %.2f | %.1f | %.2f | %.1e\n", M, N, K, nthreads, best * 1e3,
         2.0 * M * N * K / best / 1e9, packs[reps / 2] * 1e3, err / scale);
  return 0;
}
"""


def parse_config(text: str):
    """``kc=384,mc=56`` -> the :class:`CpuGemmConfig` with those fields (ints, ``isa`` a name).

    Raises:
        argparse.ArgumentTypeError: not ``field=value`` pairs of the config, or a value it refuses.
    """
    from falcon_mlir.kernels.cpu_gemm import CpuGemmConfig

    fields = {}
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        if key not in CpuGemmConfig.__dataclass_fields__ or not value:
            raise argparse.ArgumentTypeError(f"--config takes field=value pairs of CpuGemmConfig, got {part!r}")
        fields[key] = value if key == "isa" else int(value) if value.isdigit() else value
    try:
        return CpuGemmConfig(**fields)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build(config, workdir: Path) -> Path:
    """The driver compiled with ``config``'s kernel source in ``workdir``; the executable's path.

    Raises:
        RuntimeError: the compiler fails (its last lines of output).
    """
    from falcon_mlir.kernels import cpu_object, cpu_source
    from falcon_mlir.kernels.cpu_gemm import entry_names

    src = cpu_source.kernel_source(config).replace('__attribute__((visibility("hidden"))) ', "")
    pack_b, gemm = entry_names(config)
    (workdir / "kernel.c").write_text(src + f"\n#define PACK_B {pack_b}\n#define GEMM {gemm}\n" + DRIVER)
    exe = workdir / "harness"
    flags = [f for f in cpu_object.CFLAGS if f not in ("-ffreestanding", "-fvisibility=hidden")]
    cmd = [cpu_object.compiler(), cpu_object.MARCH[config.isa], *flags, "-pthread", "-o", str(exe),
           str(workdir / "kernel.c")]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"{cmd[0]} failed: {(p.stderr or p.stdout).strip().splitlines()[-3:]}")
    return exe


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="cpu_kernel_harness", description=__doc__.split("\n\n")[0])
    p.add_argument("shapes", nargs="+", type=shape_argument, metavar="MxNxK")
    p.add_argument("--config", type=parse_config, default=None,
                   help="CpuGemmConfig fields, e.g. kc=384,mc=56 (default: the classical blocking)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="threads of the parallel run (default: the CPUs, %(default)s)")
    p.add_argument("--repeat", type=int, default=5, help="pack + GEMM rounds per run (1-256, default 5)")
    args = p.parse_args(argv)
    if not 1 <= args.repeat <= 256 or not 1 <= args.threads <= 64:
        p.error("--repeat must be 1-256 and --threads 1-64")
    from falcon_mlir.kernels.cpu_gemm import default_config

    config = args.config or default_config()
    with tempfile.TemporaryDirectory(prefix="falcon-harness-") as tmp:
        try:
            exe = build(config, Path(tmp))
        except (RuntimeError, OSError) as e:
            print(f"cpu_kernel_harness: {e}", file=sys.stderr)
            return 1
        print(f"kernel {config.label}")
        print("shape MxNxK | threads | GEMM best ms | GFLOP/s | pack median ms | rel. error")
        for M, N, K in args.shapes:
            for threads in sorted({1, args.threads}):
                out = subprocess.run([str(exe), str(M), str(N), str(K), str(threads), str(args.repeat)],
                                     capture_output=True, text=True)
                print(out.stdout.strip() if out.returncode == 0 else
                      f"{M}x{N}x{K} | {threads} | failed (exit {out.returncode})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
