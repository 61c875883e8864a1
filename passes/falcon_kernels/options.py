"""Options of the falcon-kernels pass (declared once: :mod:`falcon_mlir.options`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from falcon_mlir.options import option, parse_options

#: What ``arch=`` accepts: the kernels' target, ``none`` (the pass does nothing)
#: or ``auto`` (falcon-opt: sm_90a; falcon-compile and the API: sm_90a for a
#: cuda target when Triton is installed, else none).
ARCHS = ("auto", "sm_90a", "none")
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


@dataclass
class KernelsOptions:
    """Options of the falcon-kernels pass (see each field's help for the text form).

    Attributes:
        arch: ``sm_90a`` (generate Hopper kernels), ``none`` (do nothing) or
            ``auto`` (sm_90a here; see :data:`ARCHS`).
        classical: serve contractions that carry no kernel-form plan with
            falcon's classical GEMM kernel (``False``: only kernel-form plans).
        f32_mode: how f32 products multiply: ``ieee`` (FMA, the default),
            ``tf32`` or ``tf32x3`` (tensor cores; only when the user asks).
        min_flops: classical contractions of fewer FLOP stay IREE's.
        min_intensity: classical contractions of lower arithmetic intensity
            (FLOP per byte) stay IREE's (:data:`MIN_INTENSITY`), except those
            IREE cannot compile (bf16 results on CUDA).
        cuda_target: the ``--iree-cuda-target`` of the compile (the object
            key must be that device's exact executable target attribute);
            :data:`DEFAULT_CUDA_TARGET` unless given.
        filename: name used for the ``"-"`` buffer in report locations.
    """

    PASS: ClassVar[str] = "falcon-kernels"

    arch: str = option("auto", choices=ARCHS, positional=True,
                       help="kernel target (sm_90a: Hopper, H100/H200); none: do nothing; auto: "
                            "sm_90a (falcon-compile and the API: for a cuda target, with the "
                            "cuda extra installed)")
    classical: bool = option(True, help="serve contractions without a kernel-form plan with "
                                        "falcon's classical GEMM kernel")
    f32_mode: str = option("ieee", choices=F32_MODES,
                           help="f32 products: ieee (FMA), or tf32 / tf32x3 on tensor cores "
                                "(less exact; only when asked)")
    min_flops: int = option(MIN_FLOPS, range=(0, None),
                            help="classical contractions with fewer FLOP stay IREE's")
    min_intensity: float = option(MIN_INTENSITY, range=(0, None),
                                  help="classical contractions with fewer FLOP per byte moved "
                                       "(memory-bound) stay IREE's, unless IREE cannot compile them")
    cuda_target: str = option(DEFAULT_CUDA_TARGET,
                              help="IREE's --iree-cuda-target the module will be compiled with (the "
                                   "kernels' object key must be that target's; empty: IREE's own "
                                   "default, sm_60); falcon-compile and the API take it from their "
                                   "flags")
    filename: Optional[str] = None

    @classmethod
    def parse(cls, text: Optional[str]) -> "KernelsOptions":
        """Options from ``"arch=sm_90a f32-mode=ieee"``.

        Raises:
            OptionError: unknown key or value, a key given twice.
        """
        return parse_options(cls, text)
