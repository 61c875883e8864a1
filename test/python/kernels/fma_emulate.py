"""Run the f32 FMA kernel's own CUDA C source on the CPU, to check its numerics without a GPU.

:func:`falcon_mlir.kernels.fma_gemm.kernel_source` emits CUDA C that only NVRTC
compiles, and Triton's interpreter does not apply to it. Here that very text is
compiled by g++ behind a small shim (:data:`SHIM`) that gives the CUDA words a
host meaning:

* ``__global__``, ``__launch_bounds__(...)``: nothing;
* ``__shared__``: ``static`` (one copy shared by all threads of the process;
  blocks run one after another, so it is the block's shared memory);
* ``__align__(n)``: ``__attribute__((aligned(n)))``;
* ``float4``, ``make_float4``: a struct of four floats (no 16-byte alignment
  asked: the kernel casts plain float arrays to ``float4*``);
* ``threadIdx``: ``thread_local``, ``blockIdx``: one global;
* ``__syncthreads()``: ``std::barrier::arrive_and_wait`` over the block's threads.

:data:`DRIVER` reads A and B (raw float32 files, laid out as the spec stores
them), fills C with NaN (a tile no block writes stays NaN), and runs the grid
block by block, each block as ``THREADS`` (256) ``std::thread``; ``fmaf`` is the
C library's fused multiply-add, so every product and sum rounds as on the GPU.

Used by test_fma_gemm.py; needs g++ with C++20 (``std::barrier``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np

#: Host meanings of the CUDA words the kernel uses (prepended to its source; every header here, before the
#: kernel's ``#define M ...``).
SHIM = r"""
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <limits>
#include <thread>
#include <vector>
#define __global__
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
struct float4 { float x, y, z, w; };
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
struct falcon_dim3 { unsigned x = 0, y = 0, z = 0; };
thread_local falcon_dim3 threadIdx;
falcon_dim3 blockIdx;
static std::barrier<>* falcon_block_barrier;
static inline void __syncthreads() { falcon_block_barrier->arrive_and_wait(); }
"""

#: ``main(A file, B file, C file)``: the whole grid, blocks in order, THREADS threads each.
DRIVER = r"""
static bool io(const char* path, float* p, size_t n, bool write) {
  FILE* f = std::fopen(path, write ? "wb" : "rb");
  if (!f) return false;
  size_t got = write ? std::fwrite(p, sizeof(float), n, f) : std::fread(p, sizeof(float), n, f);
  std::fclose(f);
  return got == n;
}
int main(int argc, char** argv) {
  if (argc != 4) { std::fprintf(stderr, "usage: emulate A.f32 B.f32 C.f32\n"); return 2; }
  const size_t na = (size_t)BATCH * M * K, nb = (size_t)BATCH * K * N, nc = (size_t)BATCH * M * N;
  std::vector<float> a(na), b(nb), c(nc, std::numeric_limits<float>::quiet_NaN());
  if (!io(argv[1], a.data(), na, false) || !io(argv[2], b.data(), nb, false)) {
    std::fprintf(stderr, "cannot read A or B\n"); return 1;
  }
  std::barrier<> bar(THREADS);
  falcon_block_barrier = &bar;
  const int blocks = BATCH * (M / BM) * (N / BN);
  for (int blk = 0; blk < blocks; ++blk) {
    blockIdx.x = blk;
    std::vector<std::thread> threads;
    for (int t = 0; t < THREADS; ++t)
      threads.emplace_back([&, t] { threadIdx.x = t; KERNEL_FN(a.data(), b.data(), c.data(), nullptr, nullptr); });
    for (auto& t : threads) t.join();
  }
  if (!io(argv[3], c.data(), nc, true)) { std::fprintf(stderr, "cannot write C\n"); return 1; }
  return 0;
}
"""

#: How the emulation is compiled (``-fno-strict-aliasing``: the kernel reads float arrays as float4).
GXX_FLAGS = ("-std=c++20", "-O1", "-pthread", "-fno-strict-aliasing", "-w")


def gxx() -> str | None:
    """The g++ on PATH, or None."""
    return shutil.which("g++")


def build(source: str, kernel_name: str, workdir: Path) -> Path:
    """Compile ``source`` (the kernel's CUDA C, sizes as its ``#define`` constants) with the shim and
    driver into an executable in ``workdir``.

    Raises:
        RuntimeError: g++ is missing or rejects the text (its first error line).
    """
    if gxx() is None:
        raise RuntimeError("the FMA kernel emulation needs g++ (C++20)")
    workdir.mkdir(parents=True, exist_ok=True)
    cpp, exe = workdir / "fma_emulation.cpp", workdir / "fma_emulation"
    cpp.write_text(SHIM + source + f"\n#define KERNEL_FN {kernel_name}\n" + DRIVER)
    r = subprocess.run([gxx(), *GXX_FLAGS, str(cpp), "-o", str(exe)], capture_output=True, text=True)
    if r.returncode != 0:
        first = next((ln for ln in r.stderr.splitlines() if "error" in ln), r.stderr.strip()[:300])
        raise RuntimeError(f"g++ rejects the emulation: {first}")
    return exe


def run(exe: Path, a: np.ndarray, b: np.ndarray, c_shape: tuple, workdir: Path) -> np.ndarray:
    """Run an emulation built by :func:`build` on A and B (float32, shaped as the spec stores them);
    returns C (float32, ``c_shape``).

    Raises:
        RuntimeError: the emulation failed (its stderr).
    """
    paths = [workdir / n for n in ("a.f32", "b.f32", "c.f32")]
    np.ascontiguousarray(a, np.float32).tofile(paths[0])
    np.ascontiguousarray(b, np.float32).tofile(paths[1])
    r = subprocess.run([str(exe), *map(str, paths)], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"the emulation failed ({r.returncode}): {r.stderr.strip()[:300]}")
    return np.fromfile(paths[2], np.float32).reshape(c_shape)


def emulate(source: str, kernel_name: str, a: np.ndarray, b: np.ndarray, c_shape: tuple,
            workdir: Path) -> np.ndarray:
    """:func:`build` then :func:`run`: C as the kernel in ``source`` computes it from A and B."""
    return run(build(source, kernel_name, workdir), a, b, c_shape, workdir)
