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


@dataclass(frozen=True)
class PlanSpec(DictFields):
    """One GEMM ``C = A @ B`` run as a grouped LCMA plan.

    Args:
        M, N, K: C is ``M x N``, A ``M x K``, B ``K x N`` (row-major, no transposes).
        scheme: a catalog name (``"strassen"``, ``"strassen^2"``, ``"2x2x3:11"``, ``"3x3x3:23"``, ...).
        dtype: A, B and the combined operands (``"bf16"``, ``"f16"``, ``"f32"``).
        out_dtype: C (default ``dtype``).
        product_dtype: how the R products are stored between the GEMM and combine C
            (default ``dtype``: what the measured bf16 run did; ``"f32"`` for accuracy).
        f32_mode: how f32 products multiply (``"ieee"``: FMA; see :class:`GemmSpec`).
        align: the block sizes are rounded up to a multiple of this (elements; >= 16 bytes' worth).

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
    f32_mode: str = "ieee"
    align: int = 16

    def __post_init__(self):
        for name in ("M", "N", "K", "align"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"PlanSpec.{name} must be a positive int, got {v!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"PlanSpec.dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        object.__setattr__(self, "out_dtype", self.out_dtype or self.dtype)
        object.__setattr__(self, "product_dtype", self.product_dtype or self.dtype)
        for name in ("out_dtype", "product_dtype"):
            if getattr(self, name) not in DTYPES:
                raise ValueError(f"PlanSpec.{name} must be one of {', '.join(DTYPES)}, got {getattr(self, name)!r}")
        if self.f32_mode not in F32_MODES:
            raise ValueError(f"PlanSpec.f32_mode must be one of {', '.join(F32_MODES)}, got {self.f32_mode!r}")
        if (self.align * DTYPE_BYTES[self.dtype]) % 16 or (self.align * DTYPE_BYTES[self.product_dtype]) % 16:
            raise ValueError(f"PlanSpec.align = {self.align} elements is not a multiple of 16 bytes "
                             f"for {self.dtype} / {self.product_dtype} (TMA needs 16-byte row strides)")
        if not isinstance(self.scheme, str) or not self.scheme:
            raise ValueError(f"PlanSpec.scheme must be a catalog name, got {self.scheme!r}")

    @property
    def name(self) -> str:
        """A file-name-safe label, e.g. ``strassen2_bf16_16384x16384x16384_pbf16_obf16``."""
        sch = "".join(c if c.isalnum() else ("" if c == "^" else "-") for c in self.scheme.lower())
        s = f"{sch}_{self.dtype}_{self.M}x{self.N}x{self.K}_p{self.product_dtype}_o{self.out_dtype}"
        if self.dtype == "f32" and self.f32_mode != "ieee":
            s += f"_{self.f32_mode}"
        return s

    @property
    def flops(self) -> int:
        """The classical product's ``2 M N K`` (effective TFLOP/s are counted against it)."""
        return 2 * self.M * self.N * self.K


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


def products_spec(spec: PlanSpec, geo: PlanGeometry) -> GemmSpec:
    """The batched GEMM of the R products."""
    return GemmSpec(geo.bm, geo.bn, geo.bk, spec.dtype, spec.dtype, spec.product_dtype, batch=geo.R,
                    f32_mode=spec.f32_mode)
