"""What a plan computes: the GEMM and its scheme (:class:`PlanSpec`), its blocks (:class:`PlanGeometry`) and
the batched GEMM of its products (:func:`products_spec`). The package docstring says how a plan runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..spec import DTYPE_BYTES, DTYPES, F32_MODES, DictFields, GemmSpec

#: Each combined block must be indexable with i32 inside a plane.
MAX_BLOCK_ELEMENTS = 2**31 - 1


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _cdiv(a, b) * b


#: Plan blocks are rounded up to a multiple of this many elements (TMA: 16-byte row strides).
BLOCK_ALIGN = 16


@dataclass(frozen=True)
class PlanSpec(DictFields):
    """One GEMM ``C = A @ B`` run as a grouped LCMA plan.

    Args:
        M, N, K: C is ``M x N``, A ``M x K``, B ``K x N`` (row-major).
        scheme: a catalog name (``"strassen"``, ``"strassen^2"``, ``"2x2x3:11"``, ``"3x3x3:23"``, ...).
        dtype: A and B (``"bf16"``, ``"f16"``, ``"f32"``).
        out_dtype: C (default ``dtype``).
        operand_dtype: the combined operands, which the products multiply (default
            :func:`default_operand_dtype`: ``"f16"`` for bf16 inputs, else ``dtype``).
            ``"f16"`` operands of bf16 inputs are **scaled** (:mod:`.scale`): A and B are
            multiplied by powers of two that bring them into f16's range before they are
            summed, and combine C multiplies back, so f16's three more mantissa bits cut
            the rounding of the sums and products by 8 at the tensor cores' 16-bit rate
            (Strassen^2: error about 1.1x classical's instead of 5x with bf16 operands).
            ``"bf16"`` keeps bf16 operands: what one scale per matrix cannot hold (both
            A and B with elements 2^16 or more above those C's largest entries are made
            of) is in :mod:`.scale` and docs/accuracy.md.
        product_dtype: how the R products are stored between the GEMM and combine C
            (default ``operand_dtype``; ``"f32"`` for accuracy at twice the bytes).
        f32_mode: how f32 products multiply (``"ieee"``: FMA; see :class:`GemmSpec`).
        align: the block sizes are rounded up to a multiple of this (elements; >= 16 bytes' worth).
        trans_b: B is stored transposed, ``N x K`` (``C = A @ S^T``, a linear layer's weight as torch
            stores it): combine B reads S's blocks with V's coefficients transposed and writes each
            combined operand transposed (``R x bn x bk``), which the products read with ``trans_b``.

    Raises:
        ValueError: bad sizes, dtypes or alignment.
    """

    M: int
    N: int
    K: int
    scheme: str = "strassen"
    dtype: str = "bf16"
    out_dtype: Optional[str] = None
    product_dtype: Optional[str] = None
    operand_dtype: Optional[str] = None
    f32_mode: str = "ieee"
    align: int = BLOCK_ALIGN
    trans_b: bool = False

    def __post_init__(self):
        for name in ("M", "N", "K", "align"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"PlanSpec.{name} must be a positive int, got {v!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"PlanSpec.dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        object.__setattr__(self, "out_dtype", self.out_dtype or self.dtype)
        object.__setattr__(self, "operand_dtype", self.operand_dtype or default_operand_dtype(self.dtype))
        object.__setattr__(self, "product_dtype", self.product_dtype or self.operand_dtype)
        for name in ("out_dtype", "operand_dtype", "product_dtype"):
            if getattr(self, name) not in DTYPES:
                raise ValueError(f"PlanSpec.{name} must be one of {', '.join(DTYPES)}, got {getattr(self, name)!r}")
        if self.operand_dtype not in (self.dtype, SCALED_OPERANDS.get(self.dtype)):
            raise ValueError(f"PlanSpec.operand_dtype {self.operand_dtype} for {self.dtype} inputs: the combined "
                             f"operands are the input type or, for bf16, f16 (scaled)")
        if self.f32_mode not in F32_MODES:
            raise ValueError(f"PlanSpec.f32_mode must be one of {', '.join(F32_MODES)}, got {self.f32_mode!r}")
        if any((self.align * DTYPE_BYTES[t]) % 16 for t in (self.dtype, self.operand_dtype, self.product_dtype)):
            raise ValueError(f"PlanSpec.align = {self.align} elements is not a multiple of 16 bytes "
                             f"for {self.dtype} / {self.product_dtype} (TMA needs 16-byte row strides)")
        if not isinstance(self.trans_b, bool):
            raise ValueError(f"PlanSpec.trans_b must be a bool, got {self.trans_b!r}")
        if not isinstance(self.scheme, str) or not self.scheme:
            raise ValueError(f"PlanSpec.scheme must be a catalog name, got {self.scheme!r}")

    @property
    def name(self) -> str:
        """A file-name-safe label, e.g. ``strassen2_bf16_16384x16384x16384_pbf16_obf16``."""
        sch = "".join(c if c.isalnum() else ("" if c == "^" else "-") for c in self.scheme.lower())
        s = f"{sch}_{self.dtype}_{self.M}x{self.N}x{self.K}_p{self.product_dtype}_o{self.out_dtype}"
        if self.scaled:
            s += f"_s{self.operand_dtype}"
        if self.trans_b:
            s += "_tb"
        if self.dtype == "f32" and self.f32_mode != "ieee":
            s += f"_{self.f32_mode}"
        return s

    @property
    def b_shape(self) -> tuple:
        """B as stored: ``(K, N)``, or ``(N, K)`` with ``trans_b``."""
        return (self.N, self.K) if self.trans_b else (self.K, self.N)

    @property
    def scaled(self) -> bool:
        """Whether the plan scales A and B by powers of two into the operand type's range (:mod:`.scale`)."""
        return self.operand_dtype != self.dtype

    @property
    def flops(self) -> int:
        """The classical product's ``2 M N K`` (effective TFLOP/s are counted against it)."""
        return 2 * self.M * self.N * self.K


#: Input types whose plans may form their combined operands in a narrower-range type of more precision,
#: scaled by powers of two (:mod:`.scale`): bf16 (8 significant bits) -> f16 (11 bits, max 65504).
SCALED_OPERANDS = {"bf16": "f16"}


def default_operand_dtype(dtype: str) -> str:
    """The combined operands' type a plan on ``dtype`` inputs uses by default: the scaled type of
    :data:`SCALED_OPERANDS` (f16 for bf16: never worse than bf16 operands on the inputs of
    docs/accuracy.md, section *Scaled f16 operands*, but for both matrices holding elements 2^16 or more
    above those C's largest entries are made of), else ``dtype``."""
    return SCALED_OPERANDS.get(dtype, dtype)


def resolve_scheme(name: str):
    """The catalog's :class:`~falcon_mlir.catalog.Scheme` for ``name`` (``"strassen^2"`` composes)."""
    from falcon_mlir.catalog import get_scheme
    return get_scheme(name)


@dataclass(frozen=True)
class PlanGeometry:
    """Blocks of a plan: the scheme's format and rank, block sizes, and the tensors between kernels."""

    m: int
    k: int
    n: int
    R: int
    bm: int
    bk: int
    bn: int

    @property
    def a_ops_shape(self) -> tuple:
        return (self.R, self.bm, self.bk)

    @property
    def b_ops_shape(self) -> tuple:
        return (self.R, self.bk, self.bn)

    @property
    def products_shape(self) -> tuple:
        return (self.R, self.bm, self.bn)

    @property
    def product_flops(self) -> int:
        """Multiply-adds times two the products do (padding included)."""
        return 2 * self.R * self.bm * self.bn * self.bk


def plan_geometry(spec: PlanSpec, scheme=None) -> PlanGeometry:
    """Block sizes of ``spec`` under ``scheme`` (default: the catalog's ``spec.scheme``).

    Raises:
        ValueError: a block too large for i32 indexing inside a plane.
    """
    s = scheme if scheme is not None else resolve_scheme(spec.scheme)
    g = PlanGeometry(m=s.m, k=s.k, n=s.n, R=s.R, bm=_round_up(_cdiv(spec.M, s.m), spec.align),
                     bk=_round_up(_cdiv(spec.K, s.k), spec.align), bn=_round_up(_cdiv(spec.N, s.n), spec.align))
    for a, b in ((g.bm, g.bk), (g.bk, g.bn), (g.bm, g.bn)):
        if a * b > MAX_BLOCK_ELEMENTS:
            raise ValueError(f"{spec.name}: a {a} x {b} block exceeds i32 indexing; use more levels")
    return g


def b_ops_shape(spec: PlanSpec, geo: PlanGeometry) -> tuple:
    """The combined B operands as stored: ``R x bk x bn``, or ``R x bn x bk`` with ``trans_b``."""
    return (geo.R, geo.bn, geo.bk) if spec.trans_b else geo.b_ops_shape


def products_spec(spec: PlanSpec, geo: PlanGeometry) -> GemmSpec:
    """The batched GEMM of the R products (reading the combined B operands transposed with ``trans_b``)."""
    return GemmSpec(geo.bm, geo.bn, geo.bk, spec.operand_dtype, spec.operand_dtype, spec.product_dtype, batch=geo.R,
                    f32_mode=spec.f32_mode, trans_b=spec.trans_b)
