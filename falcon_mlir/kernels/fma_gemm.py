"""The IEEE f32 GEMM on CUDA cores: generated CUDA C, compiled by NVRTC to an sm_90a cubin.

Why not Triton here: Triton lowers an IEEE f32 ``tl.dot`` to FMAs through
its generic shared-memory path, and the best of 12 configurations ran at
0.82-0.84x of cuBLAS's f32 SGEMM on the H200 (docs/h200/kernels_tune_f32_run11.json).
This kernel is the classical register-blocked SGEMM instead, written for the
one thing the FMA pipe needs: every thread keeps an 8 x 8 tile of C in
registers and feeds it from shared memory with 128-bit loads. Measured on the
H200 (docs/kernels.md, "The f32 FMA kernel"): 0.99-1.01x of cuBLAS at 8192^3 and
0.95x at 16384^3, with cuBLAS's exact result bits on those inputs.

What it computes: ``C[b] = op(A[b]) @ op(B[b])`` for f32 A, B and C
(:class:`~falcon_mlir.kernels.spec.GemmSpec` with ``f32_mode="ieee"``), every
product a fused multiply-add in f32 (``fmaf``), K summed in order.

Design (one kernel per shape: every size is a compile-time constant):

* **Tiles.** A block of 256 threads computes a ``128 x 128`` tile of C. Thread
  ``(tx, ty)`` of a 16 x 16 grid owns rows ``ty*4 + {0..3}`` and ``64 + ty*4 + {0..3}``
  and the same columns by ``tx``: four 4 x 4 sub-tiles, so each k step reads
  two float4 of A and two of B from shared memory for 64 FMAs. The inner loop
  runs over C's columns outside its rows (the order measured 5-10% faster:
  the A operand stays in the register reuse cache).
* **K loop.** Steps of 8: A's ``128 x 8`` and B's ``8 x 128`` tiles are loaded
  from global memory as float4 into registers during the current step's FMAs
  and stored to the other of two shared-memory buffers after them; one
  ``__syncthreads`` per step. A is stored transposed in shared memory
  (``As[k][m]``, rows padded by 4 floats against bank conflicts) so that both
  operands are read as float4 along M and N. A transposed A or B (``trans_a`` /
  ``trans_b``) is read in place with the other load pattern.
* **Grid.** One block per tile (``batch * M/128 * N/128`` blocks), tiles in
  groups of 8 tile rows (column-major inside a group) for L2 reuse, batch
  entries one after another. ``__launch_bounds__(256, 2)``: two blocks per SM
  (128 registers per thread, no spills).
* **ABI.** The parameters are those of falcon's Triton kernels: ``A, B, C``
  then two scratch pointers it never touches, so IREE calls both the same way
  (:mod:`falcon_mlir.kernels.embed`).

Served: f32 inputs and output, ``f32_mode="ieee"``, M and N multiples of 128,
K a multiple of 8 (:func:`fma_reason` says why not; the Triton kernel serves
the rest). Compiled by NVRTC from the pinned ``nvidia-cuda-nvrtc-cu12`` wheel
(the ``cuda`` extra), through ctypes, in the compile worker.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass
from typing import Optional

from .spec import DictFields, GemmSpec

#: The kernel's entry symbol.
KERNEL_NAME = "falcon_fma_gemm"
#: Threads per block (a 16 x 16 grid).
THREADS = 256
#: The NVRTC the kernels are built and measured with (``cuda`` extra).
NVRTC_PACKAGE = "nvidia-cuda-nvrtc-cu12"
NVRTC_VERSION = "12.9.86"
#: Bump when the generated source changes in a way the cache key would not see.
GENERATOR_VERSION = 1


@dataclass(frozen=True)
class FmaConfig(DictFields):
    """The FMA kernel's tiling: ``block_m x block_n`` of C per block, K steps of ``block_k``, ``group_m``
    tile rows per L2 group. Only the measured tiling is accepted (128 x 128 x 8, groups of 8).

    Raises:
        ValueError: any other tiling.
    """

    block_m: int = 128
    block_n: int = 128
    block_k: int = 8
    group_m: int = 8

    def __post_init__(self):
        if (self.block_m, self.block_n, self.block_k) != (128, 128, 8):
            raise ValueError("FmaConfig: only the 128x128x8 tile is generated (measured on the H200)")
        if isinstance(self.group_m, bool) or not isinstance(self.group_m, int) or not 1 <= self.group_m <= 64:
            raise ValueError(f"FmaConfig.group_m must be an int in 1..64, got {self.group_m!r}")

    @property
    def label(self) -> str:
        """``fma128x128x8,g8``: the report's name for this kernel and tiling."""
        return f"fma{self.block_m}x{self.block_n}x{self.block_k},g{self.group_m}"


def fma_reason(spec: GemmSpec, config: FmaConfig = FmaConfig()) -> Optional[str]:
    """Why the FMA kernel does not serve ``spec``, or None when it does."""
    if (spec.a_dtype, spec.b_dtype, spec.out_dtype) != ("f32", "f32", "f32"):
        return "the FMA kernel multiplies f32 x f32 -> f32 only"
    if spec.f32_mode != "ieee":
        return f"f32_mode={spec.f32_mode} runs on tensor cores (the Triton kernel)"
    for name, size, step in (("M", spec.M, config.block_m), ("N", spec.N, config.block_n), ("K", spec.K, config.block_k)):
        if size % step:
            return f"{name} = {size} is not a multiple of {step} (the FMA kernel has no edge handling)"
    return None


def kernel_source(spec: GemmSpec, config: FmaConfig = FmaConfig()) -> str:
    """The CUDA C source of the kernel for ``spec`` (sizes and layouts as constants).

    Raises:
        ValueError: ``spec`` not served (:func:`fma_reason`).
    """
    reason = fma_reason(spec, config)
    if reason:
        raise ValueError(f"GEMM {spec.name} not served by the FMA kernel: {reason}")
    consts = dict(M=spec.M, N=spec.N, K=spec.K, BATCH=spec.batch, TRANS_A=int(spec.trans_a),
                  TRANS_B=int(spec.trans_b), BM=config.block_m, BN=config.block_n, BK=config.block_k,
                  GROUP_M=config.group_m, THREADS=THREADS, NAME=KERNEL_NAME)
    head = "".join(f"#define {k} {v}\n" for k, v in consts.items() if k != "NAME")
    # Offsets inside one batch entry in 32-bit arithmetic where they fit: 64-bit index math costs the
    # registers that made ptxas spill (8 bytes per thread at 8192^3).
    small = max(spec.M * spec.K, spec.K * spec.N, spec.M * spec.N) < 2 ** 31
    head += f"typedef {'int' if small else 'long long'} idx_t;\n"
    return f"// falcon-mlir FMA GEMM, generator {GENERATOR_VERSION}: {spec.name}\n" + head + \
        _BODY.replace("@NAME@", KERNEL_NAME)


# The kernel. A operand tile in shared memory: As[k][m] (M contiguous), B: Bs[k][n] (N contiguous);
# a row-major operand whose contiguous dimension is K is transposed on the way in (4 scalar stores).
_BODY = r"""
#define PAD 4
#define GM (BM / 64)
#define GN (BN / 64)
#define AP (BM + (TRANS_A ? 0 : PAD))
#define BP (BN + (TRANS_B ? PAD : 0))  /* padded where stored transposed */
#define LA (BM * BK / 4 / THREADS)
#define LB (BK * BN / 4 / THREADS)
#define TILES_M (M / BM)
#define TILES_N (N / BN)

extern "C" __global__ void __launch_bounds__(THREADS, 2)
@NAME@(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
       void* global_scratch, void* profile_scratch) {
  __shared__ __align__(16) float As[2][BK][AP];
  __shared__ __align__(16) float Bs[2][BK][BP];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  int pid = blockIdx.x;
#if BATCH > 1
  const int bat = pid / (TILES_M * TILES_N);
  pid -= bat * (TILES_M * TILES_N);
  A += (size_t)bat * M * K;
  B += (size_t)bat * K * N;
  C += (size_t)bat * M * N;
#endif
  const int group = pid / (GROUP_M * TILES_N);
  const int first_m = group * GROUP_M;
  const int gsize = (TILES_M - first_m) < GROUP_M ? (TILES_M - first_m) : GROUP_M;
  const int tm = first_m + (pid % (GROUP_M * TILES_N)) % gsize;
  const int tn = (pid % (GROUP_M * TILES_N)) / gsize;
#if TRANS_A
  const float* Ab = A + tm * BM;
#else
  const float* Ab = A + (size_t)tm * BM * K;
#endif
#if TRANS_B
  const float* Bb = B + (size_t)tn * BN * K;
#else
  const float* Bb = B + tn * BN;
#endif
  float acc[GM * 4][GN * 4];
#pragma unroll
  for (int i = 0; i < GM * 4; ++i)
#pragma unroll
    for (int j = 0; j < GN * 4; ++j) acc[i][j] = 0.f;
  float4 ra[LA], rb[LB];
  auto load = [&](int kt) {
#pragma unroll
    for (int l = 0; l < LA; ++l) {
      const int idx = tid + l * THREADS;
#if TRANS_A   /* A stored K x M: float4 along M */
      const int k = idx / (BM / 4), mq = idx % (BM / 4);
      ra[l] = *reinterpret_cast<const float4*>(Ab + (idx_t)(kt * BK + k) * M + mq * 4);
#else         /* A stored M x K: float4 along K */
      const int row = idx / (BK / 4), kq = idx % (BK / 4);
      ra[l] = *reinterpret_cast<const float4*>(Ab + (idx_t)row * K + kt * BK + kq * 4);
#endif
    }
#pragma unroll
    for (int l = 0; l < LB; ++l) {
      const int idx = tid + l * THREADS;
#if TRANS_B   /* B stored N x K: float4 along K */
      const int col = idx / (BK / 4), kq = idx % (BK / 4);
      rb[l] = *reinterpret_cast<const float4*>(Bb + (idx_t)col * K + kt * BK + kq * 4);
#else         /* B stored K x N: float4 along N */
      const int k = idx / (BN / 4), nq = idx % (BN / 4);
      rb[l] = *reinterpret_cast<const float4*>(Bb + (idx_t)(kt * BK + k) * N + nq * 4);
#endif
    }
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int l = 0; l < LA; ++l) {
      const int idx = tid + l * THREADS;
#if TRANS_A
      const int k = idx / (BM / 4), mq = idx % (BM / 4);
      *reinterpret_cast<float4*>(&As[buf][k][mq * 4]) = ra[l];
#else
      const int row = idx / (BK / 4), kq = idx % (BK / 4);
      As[buf][kq * 4 + 0][row] = ra[l].x; As[buf][kq * 4 + 1][row] = ra[l].y;
      As[buf][kq * 4 + 2][row] = ra[l].z; As[buf][kq * 4 + 3][row] = ra[l].w;
#endif
    }
#pragma unroll
    for (int l = 0; l < LB; ++l) {
      const int idx = tid + l * THREADS;
#if TRANS_B
      const int col = idx / (BK / 4), kq = idx % (BK / 4);
      Bs[buf][kq * 4 + 0][col] = rb[l].x; Bs[buf][kq * 4 + 1][col] = rb[l].y;
      Bs[buf][kq * 4 + 2][col] = rb[l].z; Bs[buf][kq * 4 + 3][col] = rb[l].w;
#else
      const int k = idx / (BN / 4), nq = idx % (BN / 4);
      *reinterpret_cast<float4*>(&Bs[buf][k][nq * 4]) = rb[l];
#endif
    }
  };
  load(0);
  store(0);
  __syncthreads();
  int buf = 0;
#pragma unroll 1
  for (int kt = 0; kt < K / BK; ++kt) {
    if (kt + 1 < K / BK) load(kt + 1);
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[GM * 4], b[GN * 4];
#pragma unroll
      for (int g = 0; g < GM; ++g)
        *reinterpret_cast<float4*>(&a[g * 4]) = *reinterpret_cast<const float4*>(&As[buf][k][g * 64 + ty * 4]);
#pragma unroll
      for (int h = 0; h < GN; ++h)
        *reinterpret_cast<float4*>(&b[h * 4]) = *reinterpret_cast<const float4*>(&Bs[buf][k][h * 64 + tx * 4]);
#pragma unroll
      for (int j = 0; j < GN * 4; ++j)
#pragma unroll
        for (int i = 0; i < GM * 4; ++i) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    if (kt + 1 < K / BK) store(buf ^ 1);
    __syncthreads();
    buf ^= 1;
  }
  float* Ct = C + (size_t)tm * BM * N + tn * BN;
#pragma unroll
  for (int g = 0; g < GM; ++g)
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int h = 0; h < GN; ++h) {
        const int r = g * 64 + ty * 4 + i, c = h * 64 + tx * 4;
        *reinterpret_cast<float4*>(Ct + (idx_t)r * N + c) = make_float4(
            acc[g * 4 + i][h * 4 + 0], acc[g * 4 + i][h * 4 + 1], acc[g * 4 + i][h * 4 + 2], acc[g * 4 + i][h * 4 + 3]);
      }
}
"""


def num_programs(spec: GemmSpec, config: FmaConfig = FmaConfig()) -> int:
    """Blocks of the grid: one per ``block_m x block_n`` tile of every batch entry."""
    return spec.batch * (spec.M // config.block_m) * (spec.N // config.block_n)


# --------------------------------------------------------------------------- NVRTC (ctypes)

def nvrtc_library() -> Optional[str]:
    """Path of ``libnvrtc.so`` from the ``nvidia-cuda-nvrtc-cu12`` wheel (``$FALCON_NVRTC`` overrides), or
    None when neither is there."""
    env = os.environ.get("FALCON_NVRTC")
    if env:
        return env if os.path.isfile(env) else None
    found = importlib.util.find_spec("nvidia.cuda_nvrtc")
    if found is None or not found.submodule_search_locations:
        return None
    for root in found.submodule_search_locations:
        libs = sorted(glob.glob(os.path.join(root, "lib", "libnvrtc.so*")))
        libs = [p for p in libs if "builtins" not in p and ".alt." not in p]
        if libs:
            return libs[0]
    return None


def nvrtc_version() -> str:
    """``nvrtc 12.9.86`` (the wheel's version), or ``nvrtc`` plus the library's own when ``$FALCON_NVRTC``
    names it.

    Raises:
        ImportError: ``$FALCON_NVRTC`` names a file that is not NVRTC (:func:`require_nvrtc`).
    """
    try:
        if not os.environ.get("FALCON_NVRTC"):
            return "nvrtc " + importlib.metadata.version(NVRTC_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        pass
    if nvrtc_library() is None:
        return "nvrtc (not installed)"
    major, minor = ctypes.c_int(), ctypes.c_int()
    _load(require_nvrtc()).nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"nvrtc {major.value}.{minor.value}"


def available() -> bool:
    """Whether NVRTC is installed (the FMA kernel can be built)."""
    return nvrtc_library() is not None


def require_nvrtc() -> str:
    """Path of ``libnvrtc.so`` (:func:`nvrtc_library`).

    Raises:
        ImportError: NVRTC is not installed, or ``$FALCON_NVRTC`` names a file that is not NVRTC; the
            message says how to get it.
    """
    path = nvrtc_library()
    where = None
    if path is None:
        where = (f"$FALCON_NVRTC={os.environ['FALCON_NVRTC']} is not a file" if os.environ.get("FALCON_NVRTC")
                 else f"{NVRTC_PACKAGE} is not installed")
    else:
        try:
            _load(path)
        except (OSError, AttributeError) as e:  # not a shared library, or one without NVRTC's entry points
            why = " ".join(str(e).replace(f"{path}: ", "").split())
            where = f"{'$FALCON_NVRTC=' if os.environ.get('FALCON_NVRTC') else ''}{path} is not an NVRTC library: {why}"
    if where:
        raise ImportError(f"the f32 FMA kernel needs NVRTC ({where}): pip install 'falcon-mlir[cuda]' "
                          f"(or {NVRTC_PACKAGE}=={NVRTC_VERSION}), or FALCON_FMA_KERNEL=0 for the Triton kernel")
    return path


@functools.lru_cache(maxsize=None)
def _load(path: str) -> ctypes.CDLL:
    """``path`` opened by ctypes, checked for the NVRTC entry points used here.

    Raises:
        OSError: not a loadable shared library.
        AttributeError: a library without them.
    """
    lib = ctypes.CDLL(path)
    for fn in ("nvrtcVersion", "nvrtcCreateProgram", "nvrtcCompileProgram", "nvrtcGetCUBIN"):
        getattr(lib, fn)
    return lib


def compile_cubin(source: str, arch: str = "sm_90a", name: str = "falcon_fma_gemm.cu") -> bytes:
    """Compile CUDA C ``source`` to a cubin for ``arch`` with NVRTC (default optimization).

    Raises:
        ImportError: NVRTC is not installed.
        RuntimeError: NVRTC failed (its log's first error line).
    """
    lib = _load(require_nvrtc())
    prog = ctypes.c_void_p()
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None), "create")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++17"]
        r = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        if r != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            lines = [ln for ln in log.value.decode(errors="replace").splitlines() if "error" in ln] or ["no log"]
            raise RuntimeError(f"NVRTC failed to compile {name}: {lines[0].strip()}")
        size = ctypes.c_size_t()
        _check(lib, lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "cubin size")
        buf = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetCUBIN(prog, buf), "cubin")
        return buf.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _check(lib, code: int, what: str) -> None:
    if code != 0:
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise RuntimeError(f"NVRTC {what}: {lib.nvrtcGetErrorString(code).decode()}")
