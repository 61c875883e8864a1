"""Options of the falcon-kernels pass (declared once: :mod:`falcon_mlir.options`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from falcon_mlir.options import option, parse_options

#: What ``arch=`` accepts: the kernels' target, ``none`` (the pass does nothing)
#: or ``auto`` (falcon-opt: sm_90a; falcon-compile and the API: sm_90a for a
#: cuda target when Triton is installed, x86-avx512 for an llvm-cpu target CPU
#: with AVX-512 when a C compiler is found, x86-avx2 for one with AVX2 and FMA
#: but not AVX-512, else none). ``sm_90a``: falcon's
#: generated CUDA kernels (Triton, H100/H200); ``x86-avx512``: falcon's CPU
#: f32 GEMM (:mod:`falcon_mlir.kernels.cpu_gemm`, x86-64 with AVX-512
#: F/BW/DQ/VL; classical f32 GEMMs and kernel-form plans, :mod:`falcon_mlir.kernels.cpu_plan`);
#: ``x86-avx2``: the same kernel written for AVX2 and FMA (x86-64-v3).
ARCHS = ("auto", "sm_90a", "x86-avx512", "x86-avx2", "none")
#: The ``arch=`` values that run on the CPU (an llvm-cpu module), and the ISA of the CPU kernel each
#: builds (:class:`falcon_mlir.kernels.cpu_gemm.CpuGemmConfig`'s ``isa``).
CPU_ISAS = {"x86-avx512": "avx512", "x86-avx2": "avx2"}
CPU_ARCHS = tuple(CPU_ISAS)
#: The decision profile of each CPU arch's kernel (falcon-compile implies it for lcma-rewrite).
CPU_PROFILES = {"x86-avx512": "x86-falcon", "x86-avx2": "x86-falcon-avx2"}
#: How f32 inputs multiply (:data:`falcon_mlir.kernels.spec.F32_MODES`).
F32_MODES = ("ieee", "tf32", "tf32x3")
#: Classical contractions below this many FLOP (2 M N K x batch) stay IREE's:
#: the kernel's 128 x 256 tiles and per-shape compile are not worth it there.
MIN_FLOPS = 2 ** 27
#: Classical contractions whose arithmetic intensity (FLOP per byte of A, B and
#: C moved once) is below this stay IREE's: they are memory-bound, and IREE
#: fuses their elementwise consumers (scale, mask) into its own dispatch, which
#: an external kernel cannot. Set between two measured points (H200, ncu,
#: Llama-3-8B block at 4096 tokens, 2026-12-01): the attention scores (K = 128,
#: f32 result, 62 FLOP/byte) take 1.4-1.6 ms as IREE's batch matmul with the
#: scale and mask fused, and 0.69 ms on falcon's kernel plus 2.5 ms of a
#: separate scale/mask pass; P·V (K = tokens, 120 FLOP/byte) takes 1.23 ms as
#: IREE's and 0.29 ms on falcon's kernel (with P read through its transpose,
#: ``transposed.py``): the f16 block went from 7.91 to 7.40 ms at 100.
MIN_INTENSITY = 100.0
#: The ``--iree-cuda-target`` falcon compiles CUDA modules with
#: (:data:`falcon_mlir.kernels.embed.DEFAULT_CUDA_FLAGS`): falcon-opt's output
#: then compiles with falcon's documented flags. With IREE's own default
#: (sm_60) as the key, iree-compile ``--iree-cuda-target=sm_80`` rejects the
#: module ("no objects defined for external variant").
DEFAULT_CUDA_TARGET = "sm_80"
#: x86-avx512: classical contractions below this many FLOP (256^3 multiply-adds)
#: stay IREE's. Measured on the 2-core Zen 5 (2026-12-02, f32 A @ B through the
#: pass against IREE, same flags: data tiling, ukernels, 8 MiB matmul tiles;
#: ``scripts/cpu_kernel_pass_bench.py``, docs/benchmarks.md "falcon-kernels on the
#: CPU"): at 128^3-192^3 the kernel ran at 0.87-1.33x of IREE, a few
#: microseconds either way, within the noise; from 256^3 up mostly 1.0-1.4x
#: (512^3 0.94-1.09x, 288^3 0.67-0.89x: K = 288 leaves a 32-deep K block),
#: 1024 x 4096 x 4096 1.16x. With falcon-compile's default host flags (no data
#: tiling) IREE is slower still (1024^3: 2.2x, 1024 x 4096 x 4096: 3.3x).
CPU_MIN_FLOPS = 2 * 256 ** 3
#: x86-avx512: no intensity threshold. Memory-bound shapes measured no slower
#: through the kernel (same runs: 16 x 1024 x 1024 1.03-1.9x, 16 x 4096 x 4096
#: 1.03-1.08x, 64-256 x 4096 x 4096 1.02-1.09x).
CPU_MIN_INTENSITY = 0.0


def _split_flags(text: str) -> tuple:
    """``cpu-flags`` text -> flags: a comma-separated list of ``--`` flags (a comma followed by
    ``--`` starts the next flag, so a value may hold commas: ``--iree-llvmcpu-target-cpu-features=+a,+b``).

    Raises:
        ValueError: a flag that does not start with ``--``.
    """
    import re

    flags = tuple(f for f in re.split(r",(?=--)", text.strip()) if f)
    bad = [f for f in flags if not f.startswith("--")]
    if bad:
        raise ValueError(f"'{bad[0]}' is not an iree-compile flag (flags start with --, separated by commas)")
    return flags


@dataclass
class KernelsOptions:
    """Options of the falcon-kernels pass (see each field's help for the text form).

    Attributes:
        arch: ``sm_90a`` (generate Hopper kernels), ``x86-avx512`` or ``x86-avx2`` (falcon's
            CPU f32 GEMM), ``none`` (do nothing) or ``auto`` (sm_90a here; see
            :data:`ARCHS`).
        classical: serve contractions that carry no kernel-form plan with
            falcon's classical GEMM kernel (``False``: only kernel-form plans).
        f32_mode: how f32 products multiply: ``ieee`` (FMA, the default),
            ``tf32`` or ``tf32x3`` (tensor cores; only when the user asks).
        min_flops: classical contractions of fewer FLOP stay IREE's; ``None``
            (``auto``): :data:`MIN_FLOPS` for sm_90a, :data:`CPU_MIN_FLOPS` for
            x86-avx512 (:meth:`flops_threshold`).
        min_intensity: classical contractions of lower arithmetic intensity
            (FLOP per byte) stay IREE's, except those IREE cannot compile
            (bf16 results on CUDA); ``None`` (``auto``): :data:`MIN_INTENSITY`
            for sm_90a, :data:`CPU_MIN_INTENSITY` for x86-avx512
            (:meth:`intensity_threshold`).
        cuda_target: the ``--iree-cuda-target`` of the compile (the object
            key must be that device's exact executable target attribute);
            :data:`DEFAULT_CUDA_TARGET` unless given.
        cpu_flags: x86-avx512: the iree-compile flags of the llvm-cpu compile
            (the object key is the executable target IREE makes of them,
            :func:`falcon_mlir.kernels.cpu_embed.cpu_target_attribute`); ``()``:
            falcon's ``host`` target (:data:`falcon_mlir.kernels.cpu_embed.DEFAULT_CPU_FLAGS`).
        filename: name used for the ``"-"`` buffer in report locations.
    """

    PASS: ClassVar[str] = "falcon-kernels"

    arch: str = option("auto", choices=ARCHS, positional=True,
                       help="kernel target (sm_90a: Hopper, H100/H200; x86-avx512: falcon's CPU f32 "
                            "GEMM, x86-64 with AVX-512; x86-avx2: the same with AVX2 and FMA); none: do "
                            "nothing; auto: sm_90a (falcon-compile and the API: for a cuda target, with "
                            "the cuda extra installed; for an llvm-cpu target with a C compiler, "
                            "x86-avx512 where its CPU has AVX-512, else x86-avx2 where it has AVX2)")
    classical: bool = option(True, help="serve contractions without a kernel-form plan with "
                                        "falcon's classical GEMM kernel")
    f32_mode: str = option("ieee", choices=F32_MODES,
                           help="f32 products: ieee (FMA), or tf32 / tf32x3 on tensor cores "
                                "(less exact; only when asked)")
    min_flops: Optional[int] = option(None, type=int, auto=True, range=(0, None),
                                      help=f"classical contractions with fewer FLOP stay IREE's (auto: "
                                           f"{MIN_FLOPS} for sm_90a, {CPU_MIN_FLOPS} for x86-avx512)")
    min_intensity: Optional[float] = option(None, type=float, auto=True, range=(0, None),
                                            help=f"classical contractions with fewer FLOP per byte moved "
                                                 f"(memory-bound) stay IREE's, unless IREE cannot compile "
                                                 f"them (auto: {MIN_INTENSITY:g} for sm_90a, "
                                                 f"{CPU_MIN_INTENSITY:g} for x86-avx512)")
    cuda_target: str = option(DEFAULT_CUDA_TARGET,
                              help="IREE's --iree-cuda-target the module will be compiled with (the "
                                   "kernels' object key must be that target's; empty: IREE's own "
                                   "default, sm_60); falcon-compile and the API take it from their "
                                   "flags")
    cpu_flags: tuple = option((), parse=_split_flags, show=",".join, metavar="FLAG,FLAG...",
                              help="x86-avx512: the iree-compile flags of the llvm-cpu compile, comma-"
                                   "separated (the kernel's object key is the target IREE makes of them; "
                                   "empty: this machine's CPU, --iree-llvmcpu-target-cpu=host); "
                                   "falcon-compile and the API take them from their flags")
    filename: Optional[str] = None

    @property
    def on_cpu(self) -> bool:
        """Whether ``arch`` is a CPU kernel (:data:`CPU_ARCHS`)."""
        return self.arch in CPU_ARCHS

    @property
    def isa(self) -> Optional[str]:
        """The CPU kernel's ISA (``avx512``, ``avx2``: :data:`CPU_ISAS`), None off the CPU."""
        return CPU_ISAS.get(self.arch)

    def flops_threshold(self) -> int:
        """``min_flops``, or the arch's default where it is ``None`` (auto)."""
        if self.min_flops is not None:
            return self.min_flops
        return CPU_MIN_FLOPS if self.on_cpu else MIN_FLOPS

    def intensity_threshold(self) -> float:
        """``min_intensity``, or the arch's default where it is ``None`` (auto)."""
        if self.min_intensity is not None:
            return self.min_intensity
        return CPU_MIN_INTENSITY if self.on_cpu else MIN_INTENSITY

    @classmethod
    def parse(cls, text: Optional[str]) -> "KernelsOptions":
        """Options from ``"arch=sm_90a f32-mode=ieee"``.

        Raises:
            OptionError: unknown key or value, a key given twice.
        """
        return parse_options(cls, text)
