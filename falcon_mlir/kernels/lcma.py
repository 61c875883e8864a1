"""Grouped LCMA plans as kernels of our own: combine A, combine B, R batched products, combine C.

A plan runs one bilinear scheme ``<m,k,n;R>`` (falcon's catalog; several levels
are one composed scheme, ``strassen^2`` = ``<4,4,4;49>`` by the catalog's
Kronecker product) on a GEMM ``C = A @ B`` (A ``M x K``, B ``K x N``) as four
kernels, the FalconGEMM paper's group-parallel execution:

1. **combine A** reads A once and writes the R combined operands
   ``A_r = sum_ij U[r,i,j] A_ij`` as one ``R x bm x bk`` tensor (each sum formed
   in f32 registers and rounded once to the operand type);
2. **combine B** likewise ``B_r = sum_jl V[r,j,l] B_jl``, ``R x bk x bn``;
3. **products**: the GEMM of :mod:`.triton_gemm` with batch R,
   ``P_r = A_r @ B_r`` accumulated in f32 and stored in ``product_dtype``;
4. **combine C** reads the R products once and writes
   ``C_il = sum_r W[r,i,l] P_r`` (f32 registers, rounded once to C's type).

The combine kernels are **generated Triton source** per coefficient table
(never hand-expanded): every coefficient is a literal in the source, each
program loads the input tiles of one tile position of every block once and
writes every output that uses them from registers. Where the inputs (or, for
combine C, the accumulators) of all outputs would not fit in registers
(``CombineConfig.max_live``), the outputs are split into groups, greedily
sharing inputs, and a group's inputs are loaded again for it. The source is
written to the kernel cache named by its SHA-256 and compiled by Triton in
the worker process like the GEMM; sizes and tiles are ``tl.constexpr``.

Blocks: ``bm = ceil(M/m)``, ``bk = ceil(K/k)``, ``bn = ceil(N/n)``, each rounded up
to a multiple of ``PlanSpec.align`` (16 elements: TMA needs 16-byte row strides
for the products' operands). Sizes that do not fill the blocks are padded
inside the combine kernels: masked loads read zeros past A's and B's edges,
the combined operands are written whole (zeros included), and combine C's
masked stores leave out what lies past C's edges.

Coefficients that are not integers are written as f32 literals (exact for
dyadic fractions such as 1/2; others round).

:func:`plan_module` gives a complete module ``@main(A, B) -> C`` with the
four dispatches (see :mod:`.embed` for the ABI).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from .aot import (CompiledKernel, CompileRequest, H200_SMS, _check_arch, _write_atomic, cache_dir, check_launchable,
                  compile_batch, decode_cubin, encode_cubin, gemm_request, read_entry, triton_version, warn_spills)
from .configs import KernelConfig
from .spec import DTYPE_BYTES, DTYPES, F32_MODES, GemmSpec

#: Bump when the combine kernels' generated source or cache entries change shape.
GENERATOR_VERSION = 1
#: The generated kernels' entry symbols per role.
COMBINE_FN = {"a": "falcon_combine_a", "b": "falcon_combine_b", "c": "falcon_combine_c"}
#: f32 values per thread the live input tiles (or accumulators) of one output group may hold.
LIVE_BUDGET = 160
#: Each combined block must be indexable with i32 inside a plane.
MAX_BLOCK_ELEMENTS = 2**31 - 1


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _cdiv(a, b) * b


# --------------------------------------------------------------------------- what a plan computes

@dataclass(frozen=True)
class PlanSpec:
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

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "PlanSpec":
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown PlanSpec field(s): {', '.join(sorted(unknown))}")
        return cls(**d)


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


# --------------------------------------------------------------------------- combine kernels: configuration

@dataclass(frozen=True)
class CombineConfig:
    """Tiling of a combine kernel: each program handles a ``tile_r x tile_c`` tile position of every block.

    Args:
        tile_r, tile_c: tile rows and columns (powers of two, 1..256 and 16..1024).
        num_warps: 1, 2, 4 or 8.
        max_live: input tiles (combine A/B) or accumulators (combine C) one output group may hold.
    """

    tile_r: int = 16
    tile_c: int = 64
    num_warps: int = 4
    max_live: int = 16

    def __post_init__(self):
        for name, lo, hi in (("tile_r", 1, 256), ("tile_c", 16, 1024)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi or v & (v - 1):
                raise ValueError(f"CombineConfig.{name} must be a power of two in {lo}..{hi}, got {v!r}")
        if self.num_warps not in (1, 2, 4, 8):
            raise ValueError(f"CombineConfig.num_warps must be 1, 2, 4 or 8, got {self.num_warps!r}")
        if isinstance(self.max_live, bool) or not isinstance(self.max_live, int) or self.max_live < 1:
            raise ValueError(f"CombineConfig.max_live must be a positive int, got {self.max_live!r}")

    @property
    def label(self) -> str:
        """``16x64,w4,l16``."""
        return f"{self.tile_r}x{self.tile_c},w{self.num_warps},l{self.max_live}"

    @classmethod
    def parse(cls, text: str) -> "CombineConfig":
        """Parse ``RxC[,wW][,lL]``."""
        parts = [p.strip() for p in text.split(",") if p.strip()]
        try:
            r, c = (int(x) for x in parts[0].split("x"))
            kw = dict(tile_r=r, tile_c=c)
            for p in parts[1:]:
                kw[{"w": "num_warps", "l": "max_live"}[p[0]]] = int(p[1:])
        except (ValueError, KeyError, IndexError):
            raise ValueError(f"combine configuration {text!r}: expected RxC[,wW][,lL], e.g. 16x64,w4,l16") from None
        return cls(**kw)

    def to_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------- combine kernels: what they compute

@dataclass(frozen=True)
class CombineSpec:
    """One combine kernel: ``out[t] = sum_s coeffs[t][s] * in[s]`` over tiles, f32 sums.

    ``direction = "split"`` (combine A, B): the inputs are the ``grid_r x grid_c``
    blocks (``block_r x block_c``) of a ``rows x cols`` matrix, input ``s`` being
    block ``(s // grid_c, s % grid_c)``, read with zeros past the matrix's edges;
    the outputs are the planes of a ``T x block_r x block_c`` tensor.
    ``direction = "merge"`` (combine C): the inputs are the planes, the
    outputs the blocks (``t`` = block ``(t // grid_c, t % grid_c)``), stored
    only inside the matrix.
    """

    role: str
    direction: str
    coeffs: tuple  # T rows of S Fractions
    rows: int
    cols: int
    grid_r: int
    grid_c: int
    block_r: int
    block_c: int
    in_dtype: str
    out_dtype: str

    @property
    def planes(self) -> int:
        return len(self.coeffs) if self.direction == "split" else len(self.coeffs[0])

    @property
    def in_shape(self) -> tuple:
        return (self.rows, self.cols) if self.direction == "split" else (self.planes, self.block_r, self.block_c)

    @property
    def out_shape(self) -> tuple:
        return (self.planes, self.block_r, self.block_c) if self.direction == "split" else (self.rows, self.cols)

    def needs(self) -> list:
        """Per output, the set of inputs with a nonzero coefficient."""
        return [frozenset(s for s, c in enumerate(row) if c != 0) for row in self.coeffs]

    def traffic_bytes(self, groups: Sequence[Sequence[int]]) -> dict:
        """Bytes read and written: the matrix once (split) or each group's inputs (merge), the planes once."""
        ib, ob = DTYPE_BYTES[self.in_dtype], DTYPE_BYTES[self.out_dtype]
        plane = self.block_r * self.block_c
        needs = self.needs()
        if self.direction == "split":
            read = self.rows * self.cols * ib
            # Re-reads of A/B across groups: inputs loaded by more than one group.
            loads = sum(len(frozenset().union(*(needs[t] for t in g))) for g in groups)
            reread = (loads - self.grid_r * self.grid_c) * plane * ib
            return {"read": read + max(0, reread), "written": self.planes * plane * ob}
        loads = sum(len(frozenset().union(*(needs[t] for t in g))) for g in groups)
        return {"read": loads * plane * ib, "written": self.rows * self.cols * ob}


def split_coeffs(T: np.ndarray) -> tuple:
    """Scheme factor ``(R, a, b)`` (U or V) as combine rows: output r, input ``i * b + j``."""
    R = T.shape[0]
    return tuple(tuple(Fraction(x) for x in T[r].reshape(-1)) for r in range(R))


def merge_coeffs(W: np.ndarray) -> tuple:
    """Scheme factor W ``(R, m, n)`` as combine rows: output ``i * n + l``, input r."""
    R, m, n = W.shape
    return tuple(tuple(Fraction(W[r, i, l]) for r in range(R)) for i in range(m) for l in range(n))


def output_groups(cs: CombineSpec, max_live: int) -> list:
    """Outputs split into groups: split kernels keep each group's input union within ``max_live``
    tiles, merge kernels at most ``max_live`` accumulators per group; greedily, the next output the
    one adding the fewest new inputs (ties: the lower index). One group when everything fits."""
    needs = cs.needs()
    remaining = list(range(len(needs)))
    groups = []
    while remaining:
        g = [remaining.pop(0)]
        union = set(needs[g[0]])
        while remaining:
            if cs.direction == "merge" and len(g) >= max_live:
                break
            best = None
            for t in remaining:
                grown = len(union | needs[t])
                if cs.direction == "split" and grown > max_live:
                    continue
                key = (grown - len(union), t)
                if best is None or key < best:
                    best = key
            if best is None:
                break
            g.append(best[1])
            remaining.remove(best[1])
            union |= needs[best[1]]
        groups.append(g)
    return groups


def _term(c: Fraction, name: str, first: bool) -> str:
    if c == 1:
        return name if first else f" + {name}"
    if c == -1:
        return f"-{name}" if first else f" - {name}"
    v = float(c)
    if first:
        return f"{v!r} * {name}"
    return f" + {v!r} * {name}" if v > 0 else f" - {-v!r} * {name}"


def combine_source(cs: CombineSpec, groups: Sequence[Sequence[int]]) -> str:
    """The Triton source of one combine kernel (every coefficient a literal; see the module docstring)."""
    fn = COMBINE_FN[cs.role]
    L = [
        f'"""falcon-mlir generated combine kernel ({cs.role}, {cs.direction}); do not edit.',
        "",
        f"{len(cs.coeffs)} outputs from {len(cs.coeffs[0])} inputs in {len(groups)} group(s);",
        "generated by falcon_mlir.kernels.lcma.combine_source from the scheme's coefficients.",
        '"""',
        "",
        "import triton",
        "import triton.language as tl",
        "",
        "",
        "@triton.jit",
        "def _block_load(x_ptr, p, q, I: tl.constexpr, J: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr,",
        "                BR: tl.constexpr, BC: tl.constexpr, EVEN: tl.constexpr):",
        '    """Block (I, J) of the matrix at tile rows p, columns q, as f32; zeros past its edges."""',
        "    rows = I * BR + p",
        "    cols = J * BC + q",
        "    ptrs = x_ptr + rows.to(tl.int64)[:, None] * COLS + cols[None, :]",
        "    if EVEN and (I + 1) * BR <= ROWS and (J + 1) * BC <= COLS:",
        "        x = tl.load(ptrs)",
        "    else:",
        "        ok = ((p < BR) & (rows < ROWS))[:, None] & ((q < BC) & (cols < COLS))[None, :]",
        "        x = tl.load(ptrs, mask=ok, other=0.0)",
        "    return x.to(tl.float32)",
        "",
        "",
        "@triton.jit",
        "def _block_store(y_ptr, p, q, I: tl.constexpr, J: tl.constexpr, y, ROWS: tl.constexpr,",
        "                 COLS: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, EVEN: tl.constexpr):",
        '    """Store y (f32) into block (I, J) of the matrix, rounded once, inside its edges only."""',
        "    rows = I * BR + p",
        "    cols = J * BC + q",
        "    ptrs = y_ptr + rows.to(tl.int64)[:, None] * COLS + cols[None, :]",
        "    if EVEN and (I + 1) * BR <= ROWS and (J + 1) * BC <= COLS:",
        "        tl.store(ptrs, y.to(y_ptr.dtype.element_ty))",
        "    else:",
        "        ok = ((p < BR) & (rows < ROWS))[:, None] & ((q < BC) & (cols < COLS))[None, :]",
        "        tl.store(ptrs, y.to(y_ptr.dtype.element_ty), mask=ok)",
        "",
        "",
        "@triton.jit",
        "def _plane_load(x_ptr, p, q, T: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, EVEN: tl.constexpr):",
        '    """Plane T of a T x BR x BC tensor at tile rows p, columns q, as f32."""',
        "    ptrs = x_ptr + T * (BR * BC) + (p[:, None] * BC + q[None, :])",
        "    if EVEN:",
        "        x = tl.load(ptrs)",
        "    else:",
        "        x = tl.load(ptrs, mask=(p < BR)[:, None] & (q < BC)[None, :], other=0.0)",
        "    return x.to(tl.float32)",
        "",
        "",
        "@triton.jit",
        "def _plane_store(y_ptr, p, q, T: tl.constexpr, y, BR: tl.constexpr, BC: tl.constexpr, EVEN: tl.constexpr):",
        '    """Store y (f32) into plane T, rounded once (the whole plane: padding holds zeros)."""',
        "    ptrs = y_ptr + T * (BR * BC) + (p[:, None] * BC + q[None, :])",
        "    if EVEN:",
        "        tl.store(ptrs, y.to(y_ptr.dtype.element_ty))",
        "    else:",
        "        tl.store(ptrs, y.to(y_ptr.dtype.element_ty), mask=(p < BR)[:, None] & (q < BC)[None, :])",
        "",
        "",
        "@triton.jit",
        f"def {fn}(x_ptr, y_ptr, ROWS: tl.constexpr, COLS: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,",
        f"{' ' * (len(fn) + 5)}TR: tl.constexpr, TC: tl.constexpr):",
        "    TILES_C: tl.constexpr = (BC + TC - 1) // TC",
        "    EVEN: tl.constexpr = BR % TR == 0 and BC % TC == 0",
        "    pid = tl.program_id(0)",
        "    p = (pid // TILES_C) * TR + tl.arange(0, TR)",
        "    q = (pid % TILES_C) * TC + tl.arange(0, TC)",
    ]
    gc = cs.grid_c
    for gi, g in enumerate(groups):
        need = sorted(set().union(*(set(s for s, c in enumerate(cs.coeffs[t]) if c != 0) for t in g)))
        L.append(f"    # group {gi}: outputs {', '.join(map(str, g))}")
        if cs.direction == "split":
            for s in need:
                L.append(f"    x{s} = _block_load(x_ptr, p, q, {s // gc}, {s % gc}, ROWS, COLS, BR, BC, EVEN)")
            for t in g:
                terms = [(c, f"x{s}") for s, c in enumerate(cs.coeffs[t]) if c != 0]
                expr = "".join(_term(c, nm, i == 0) for i, (c, nm) in enumerate(terms)) if terms else \
                    "tl.zeros((TR, TC), dtype=tl.float32)"
                L.append(f"    _plane_store(y_ptr, p, q, {t}, {expr}, BR, BC, EVEN)")
        else:
            started = set()
            for s in need:
                L.append(f"    x = _plane_load(x_ptr, p, q, {s}, BR, BC, EVEN)")
                for t in g:
                    c = cs.coeffs[t][s]
                    if c == 0:
                        continue
                    if t in started:
                        L.append(f"    acc{t} = acc{t}{_term(c, 'x', False)}")
                    else:
                        L.append(f"    acc{t} = {_term(c, 'x', True)}")
                        started.add(t)
            for t in g:
                if t not in started:
                    L.append(f"    acc{t} = tl.zeros((TR, TC), dtype=tl.float32)")
                L.append(f"    _block_store(y_ptr, p, q, {t // gc}, {t % gc}, acc{t}, ROWS, COLS, BR, BC, EVEN)")
    return "\n".join(L) + "\n"


def _live(cs: CombineSpec, groups) -> int:
    """Tiles one group keeps in registers: its input union (split), or its accumulators and one input (merge)."""
    needs = cs.needs()
    if cs.direction == "split":
        return max(len(frozenset().union(*(needs[t] for t in g))) for g in groups)
    return max(len(g) for g in groups) + 1


def default_combine_config(cs: CombineSpec) -> CombineConfig:
    """Tiles for a combine kernel: 4 warps, rows of 128 bytes of the wider type, and the output grouping
    (``max_live`` 16, 32 or 64) that reads the least, each program's live tiles kept within
    ``LIVE_BUDGET`` f32 values per thread (at least half a 16-byte vector per thread and tile; half as
    many values when there are several groups, which the compiler interleaves).

    Planes past 2^31 elements get half the values per thread too (64-bit offsets cost registers).
    Checked here (no GPU): no register spills for the default plans (``gpu_kernels.py`` ``PLAN_DEFAULTS``).
    Speed is measured on the GPU (``gpu_kernels.py jit``)."""
    wide = max(DTYPE_BYTES[cs.in_dtype], DTYPE_BYTES[cs.out_dtype])
    tile_c, threads, vec = 128 // wide, 128, 16 // wide
    # Planes past 2^31 elements: 64-bit plane offsets, no immediate store offsets, more registers
    # (Strassen^2 bf16 at 32768^3: 255 registers and a spill with 16x64 tiles, 8x64 fit).
    wide_offsets = cs.planes * cs.block_r * cs.block_c > 2**31 - 1
    best = None
    for cap in (16, 32, 64):
        groups = output_groups(cs, cap)
        per_thread = min(32, LIVE_BUDGET // _live(cs, groups))
        if len(groups) > 1 or wide_offsets:
            per_thread //= 2
        if per_thread < max(1, vec // 2):
            continue
        per_thread = 1 << int(math.log2(per_thread))
        read = cs.traffic_bytes(groups)["read"]
        if best is None or read < best[0]:
            best = (read, cap, per_thread)
    if best is None:  # nothing fits the budget: the smallest tiles, one vector per thread
        best = (0, 16, max(1, vec // 2))
    _, cap, per_thread = best
    tile_r = max(1, min(256, per_thread * threads // tile_c))
    return CombineConfig(tile_r=tile_r, tile_c=tile_c, num_warps=4, max_live=cap)


# --------------------------------------------------------------------------- combine kernels: compiled

@dataclass(frozen=True)
class CombineKernel:
    """A compiled combine kernel and its launch facts (the same ABI as the GEMM: pointers ``x, y``,
    then Triton's global and profile scratch)."""

    spec: CombineSpec = field(repr=False)
    config: CombineConfig
    source_sha256: str
    constexprs: dict
    arch: str
    name: str
    cubin: bytes = field(repr=False)
    num_warps: int
    shared: int
    global_scratch_size: int
    global_scratch_align: int
    profile_scratch_size: int
    profile_scratch_align: int
    num_programs: int
    triton_version: str
    key: str
    registers: Optional[int] = None
    stack_bytes: Optional[int] = None
    compile_seconds: float = 0.0
    from_cache: bool = False

    @property
    def threads(self) -> int:
        return 32 * self.num_warps

    @property
    def global_scratch_bytes(self) -> int:
        return self.global_scratch_size * self.num_programs

    @property
    def profile_scratch_bytes(self) -> int:
        return self.profile_scratch_size * self.num_programs

    @property
    def in_shape(self) -> tuple:
        return self.spec.in_shape

    @property
    def out_shape(self) -> tuple:
        return self.spec.out_shape

    def metadata(self) -> dict:
        keys = ("arch", "name", "num_warps", "shared", "global_scratch_size", "profile_scratch_size",
                "num_programs", "triton_version", "key", "registers", "stack_bytes", "source_sha256")
        d = {k: getattr(self, k) for k in keys}
        d.update(threads=self.threads, cubin_bytes=len(self.cubin), config=self.config.label,
                 constexprs=self.constexprs, role=self.spec.role)
        return d

    def _to_json(self) -> str:
        d = {k: getattr(self, k) for k in ("source_sha256", "constexprs", "arch", "name", "num_warps", "shared",
                                           "global_scratch_size", "global_scratch_align", "profile_scratch_size",
                                           "profile_scratch_align", "num_programs", "triton_version", "key",
                                           "registers", "stack_bytes", "compile_seconds")}
        d.update(format=GENERATOR_VERSION, **encode_cubin(self.cubin))
        return json.dumps(d, sort_keys=True)


_PRIVATE_SOURCES: Optional[Path] = None


def _private_sources() -> Path:
    """A folder of this process's own for generated sources (removed at exit)."""
    global _PRIVATE_SOURCES
    if _PRIVATE_SOURCES is None:
        import atexit
        import shutil
        import tempfile

        _PRIVATE_SOURCES = Path(tempfile.mkdtemp(prefix="falcon-sources-"))
        atexit.register(shutil.rmtree, _PRIVATE_SOURCES, True)
    return _PRIVATE_SOURCES


def source_path(text: str) -> Path:
    """Where a generated source lives: ``cache_dir()/sources/<sha256>.py`` (written once, atomically).

    Where the cache cannot be written (read-only, a file in its place, no
    such folder to make), a temporary folder of this process's own: the
    Triton child reads the source from that file, and an unwritable cache
    costs only the cache.
    """
    sha = hashlib.sha256(text.encode()).hexdigest()
    name = f"combine_{sha[:32]}.py"
    p = cache_dir() / "sources" / name
    try:
        if not (p.is_file() and p.read_text() == text):
            _write_atomic(p, text)
        return p
    except (OSError, UnicodeDecodeError):
        pass
    p = _private_sources() / name
    if not (p.is_file() and p.read_text() == text):
        _write_atomic(p, text)
    return p


def combine_launch(cs: CombineSpec, config: CombineConfig) -> tuple:
    """(constexprs, programs) of one combine kernel."""
    cx = dict(ROWS=cs.rows, COLS=cs.cols, BR=cs.block_r, BC=cs.block_c, TR=config.tile_r, TC=config.tile_c)
    return cx, _cdiv(cs.block_r, config.tile_r) * _cdiv(cs.block_c, config.tile_c)


_PTR = {"f32": "*fp32", "f16": "*fp16", "bf16": "*bf16"}


def combine_request(cs: CombineSpec, config: Optional[CombineConfig] = None,
                    arch: str = "sm_90a") -> tuple:
    """(:class:`~falcon_mlir.kernels.aot.CompileRequest`, source text, groups) of one combine kernel."""
    capability = _check_arch(arch)
    config = config or default_combine_config(cs)
    groups = output_groups(cs, config.max_live)
    text = combine_source(cs, groups)
    sha = hashlib.sha256(text.encode()).hexdigest()
    cx, programs = combine_launch(cs, config)
    fn = COMBINE_FN[cs.role]
    what = f"combine {cs.role.upper()} ({cs.direction}, {len(cs.coeffs)} outputs, {cs.rows}x{cs.cols} " \
           f"{cs.in_dtype}->{cs.out_dtype}) with {config.label}"
    key = hashlib.sha256(json.dumps({"format": GENERATOR_VERSION, "source": sha, "constexprs": cx,
                                     "num_warps": config.num_warps, "in": cs.in_dtype, "out": cs.out_dtype,
                                     "triton": triton_version(), "arch": arch}, sort_keys=True).encode()).hexdigest()
    path = source_path(text)
    job = {"kind": "source", "path": str(path), "fn": fn,
           "signature": {"x_ptr": _PTR[cs.in_dtype], "y_ptr": _PTR[cs.out_dtype]}, "constexprs": cx, "pointers": 2,
           "options": {"num_warps": config.num_warps, "num_stages": 1}, "capability": capability, "label": what}

    def build(result: dict) -> CombineKernel:
        if not result["ok"]:
            raise RuntimeError(result["error"])
        md = result["metadata"]
        check_launchable(what, md)
        usage = result.get("usage") or {}
        warn_spills(what, usage)
        return CombineKernel(spec=cs, config=config, source_sha256=sha, constexprs=cx, arch=arch, name=md["name"],
                             cubin=base64.b64decode(result["cubin"]), num_warps=md["num_warps"], shared=md["shared"],
                             global_scratch_size=md.get("global_scratch_size") or 0,
                             global_scratch_align=md.get("global_scratch_align") or 1,
                             profile_scratch_size=md.get("profile_scratch_size") or 0,
                             profile_scratch_align=md.get("profile_scratch_align") or 1, num_programs=programs,
                             triton_version=result["triton_version"], key=key, registers=usage.get("registers"),
                             stack_bytes=usage.get("stack_bytes"), compile_seconds=result["seconds"])

    def load(text_: str) -> CombineKernel:
        d = read_entry(text_)
        if d.pop("format") != GENERATOR_VERSION or d["key"] != key:
            raise ValueError("stale cache entry")
        d["cubin"] = decode_cubin(d)
        return CombineKernel(spec=cs, config=config, from_cache=True, **d)

    return CompileRequest(key=key, job=job, build=build, load=load, dump=lambda k: k._to_json()), text, groups


# --------------------------------------------------------------------------- plans

def combine_specs(spec: PlanSpec, scheme=None) -> dict:
    """The three :class:`CombineSpec` of a plan, by role ``"a"``, ``"b"``, ``"c"``."""
    s = scheme if scheme is not None else resolve_scheme(spec.scheme)
    g = plan_geometry(spec, s)
    return {
        "a": CombineSpec("a", "split", split_coeffs(s.U), spec.M, spec.K, g.m, g.k, g.bm, g.bk, spec.dtype,
                         spec.dtype),
        "b": CombineSpec("b", "split", split_coeffs(s.V), spec.K, spec.N, g.k, g.n, g.bk, g.bn, spec.dtype,
                         spec.dtype),
        "c": CombineSpec("c", "merge", merge_coeffs(s.W), spec.M, spec.N, g.m, g.n, g.bm, g.bn,
                         spec.product_dtype, spec.out_dtype),
    }


@dataclass(frozen=True)
class CompiledPlan:
    """A plan's four compiled kernels (``combine_a``, ``combine_b``, ``products``, ``combine_c``)."""

    spec: PlanSpec
    scheme_name: str
    geometry: PlanGeometry
    combine_a: CombineKernel
    combine_b: CombineKernel
    products: CompiledKernel
    combine_c: CombineKernel
    sources: dict = field(repr=False, default_factory=dict)  # role -> generated source text
    groups: dict = field(repr=False, default_factory=dict)   # role -> output groups

    @property
    def kernels(self) -> tuple:
        return (self.combine_a, self.combine_b, self.products, self.combine_c)

    def traffic(self) -> dict:
        """Bytes each combine kernel reads and writes (see ``CombineSpec.traffic_bytes``)."""
        return {r: getattr(self, f"combine_{r}").spec.traffic_bytes(self.groups[r]) for r in ("a", "b", "c")}

    def metadata(self) -> dict:
        g = self.geometry
        return {"spec": self.spec.to_dict(), "scheme": self.scheme_name, "geometry": asdict(g),
                "traffic": self.traffic(), "groups": {r: len(v) for r, v in self.groups.items()},
                "kernels": {"combine_a": self.combine_a.metadata(), "combine_b": self.combine_b.metadata(),
                            "products": self.products.metadata(), "combine_c": self.combine_c.metadata()}}


def plan_requests(spec: PlanSpec, gemm_config: Optional[KernelConfig] = None,
                  combine_configs: Optional[dict] = None, scheme=None, arch: str = "sm_90a",
                  num_sms: int = H200_SMS) -> tuple:
    """(requests in the order a, b, products, c; sources; groups) for :func:`compile_plans`."""
    css = combine_specs(spec, scheme)
    geo = plan_geometry(spec, scheme)
    combine_configs = combine_configs or {}
    reqs, sources, groups = {}, {}, {}
    for role in ("a", "b", "c"):
        reqs[role], sources[role], groups[role] = combine_request(css[role], combine_configs.get(role), arch)
    reqs["p"] = gemm_request(products_spec(spec, geo), gemm_config, arch, num_sms)
    return [reqs["a"], reqs["b"], reqs["p"], reqs["c"]], sources, groups


def compile_plans(items: Sequence, arch: str = "sm_90a", num_sms: int = H200_SMS, cache: bool = True,
                  errors: str = "raise") -> list:
    """Compile several plans, every uncached kernel of all of them in one Triton child process.

    Args:
        items: :class:`PlanSpec`, or ``(spec, options)`` with options a dict of
            :func:`compile_plan`'s keywords (``gemm_config``, ``combine_configs``, ``scheme``).
        errors: ``"raise"`` or ``"return"`` (a failed plan's entry is the exception).

    Returns:
        One :class:`CompiledPlan` (or exception) per item.
    """
    prepared, flat = [], []
    for it in items:
        spec, opts = (it, {}) if isinstance(it, PlanSpec) else it
        try:
            reqs, sources, groups = plan_requests(spec, arch=arch, num_sms=num_sms, **opts)
            scheme = opts.get("scheme")
            name = scheme.name if scheme is not None else resolve_scheme(spec.scheme).name
            prepared.append((spec, name, reqs, sources, groups, opts))
            flat.extend(reqs)
        except ValueError as e:
            if errors == "raise":
                raise
            prepared.append(e)
    done = iter(compile_batch(flat, cache=cache, errors=errors))
    out = []
    for p in prepared:
        if isinstance(p, Exception):
            out.append(p)
            continue
        spec, name, reqs, sources, groups, opts = p
        ks = [next(done) for _ in reqs]
        bad = [k for k in ks if isinstance(k, Exception)]
        if bad:
            out.append(bad[0])
            continue
        out.append(CompiledPlan(spec=spec, scheme_name=name, geometry=plan_geometry(spec, opts.get("scheme")),
                                combine_a=ks[0], combine_b=ks[1], products=ks[2], combine_c=ks[3],
                                sources=sources, groups=groups))
    return out


def compile_plan(spec: PlanSpec, gemm_config: Optional[KernelConfig] = None,
                 combine_configs: Optional[dict] = None, scheme=None, arch: str = "sm_90a",
                 num_sms: int = H200_SMS, cache: bool = True) -> CompiledPlan:
    """Generate and compile the four kernels of ``spec`` (one Triton child process for all of them).

    Args:
        spec: the plan.
        gemm_config: the products' GEMM configuration (default: the table's for the batched products).
        combine_configs: ``{"a"|"b"|"c": CombineConfig}`` (default :func:`default_combine_config`).
        scheme: a :class:`~falcon_mlir.catalog.Scheme` to use instead of the catalog's ``spec.scheme``.
        arch, num_sms, cache: as :func:`~falcon_mlir.kernels.aot.compile_kernel`.

    Raises:
        ValueError, RuntimeError: a kernel cannot be built (one line naming it).
    """
    opts = {"gemm_config": gemm_config, "combine_configs": combine_configs, "scheme": scheme}
    return compile_plans([(spec, opts)], arch=arch, num_sms=num_sms, cache=cache)[0]


# --------------------------------------------------------------------------- float64 reference

def pad_blocks(x: np.ndarray, gr: int, gc: int, br: int, bc: int) -> np.ndarray:
    """``x`` zero-padded to ``gr*br x gc*bc`` and cut into blocks: ``(gr, gc, br, bc)`` float64."""
    out = np.zeros((gr * br, gc * bc))
    out[:x.shape[0], :x.shape[1]] = x
    return out.reshape(gr, br, gc, bc).transpose(0, 2, 1, 3)


def reference_stages(spec: PlanSpec, a: np.ndarray, b: np.ndarray, scheme=None) -> dict:
    """The plan's stages in float64 from ``a``, ``b`` (no rounding): ``a_ops``, ``b_ops``, ``products``, ``c``."""
    s = scheme if scheme is not None else resolve_scheme(spec.scheme)
    g = plan_geometry(spec, s)
    U, V, W = (np.asarray(x, dtype=np.float64) for x in (s.U, s.V, s.W))
    ab = pad_blocks(np.asarray(a, dtype=np.float64), g.m, g.k, g.bm, g.bk)
    bb = pad_blocks(np.asarray(b, dtype=np.float64), g.k, g.n, g.bk, g.bn)
    a_ops = np.einsum("rij,ijpq->rpq", U, ab)
    b_ops = np.einsum("rjl,jlpq->rpq", V, bb)
    products = a_ops @ b_ops
    return {"a_ops": a_ops, "b_ops": b_ops, "products": products, "c": combine_c_reference(spec, products, s)}


def combine_c_reference(spec: PlanSpec, products: np.ndarray, scheme=None) -> np.ndarray:
    """C from the R products in float64 (``C_il = sum_r W[r,i,l] P_r``, cut to M x N)."""
    s = scheme if scheme is not None else resolve_scheme(spec.scheme)
    g = plan_geometry(spec, s)
    W = np.asarray(s.W, dtype=np.float64)
    cb = np.einsum("ril,rpq->iplq", W, np.asarray(products, dtype=np.float64))
    return cb.reshape(g.m * g.bm, g.n * g.bn)[:spec.M, :spec.N]


# --------------------------------------------------------------------------- MLIR: four dispatches

def _exe_names(plan: CompiledPlan) -> dict:
    from .embed import executable_name
    base = "falcon_lcma_" + "".join(c if c.isalnum() else "_" for c in plan.spec.name)
    return {"a": f"{base}_a_{plan.combine_a.key[:8]}", "b": f"{base}_b_{plan.combine_b.key[:8]}",
            "p": executable_name(plan.products), "c": f"{base}_c_{plan.combine_c.key[:8]}"}


def plan_executables(plan: CompiledPlan, target_attr: str) -> str:
    """The four ``hal.executable.source`` ops of a plan (combine A, combine B, products, combine C)."""
    from .embed import executable_source, external_executable
    names = _exe_names(plan)
    parts = []
    for role in ("a", "b", "p", "c"):
        if role == "p":
            parts.append(executable_source(plan.products, target_attr, names["p"]))
            continue
        k = getattr(plan, f"combine_{role}")
        comment = (f"{plan.spec.name} ({plan.scheme_name}): combine {role.upper()}, {len(k.spec.coeffs)} outputs "
                   f"in {len(plan.groups[role])} group(s), tiles {k.config.label}; {k.arch} cubin from Triton "
                   f"{k.triton_version}")
        parts.append(external_executable(names[role], k.name, k.cubin, target_attr, 1, 1, k.num_programs,
                                         k.threads, k.shared, comment))
    return "\n".join(parts)


def plan_dispatches(plan: CompiledPlan, a: str = "%a", b: str = "%b", prefix: str = "%lcma",
                    types: Optional[Sequence[str]] = None) -> tuple:
    """(lines, C value): the four ``flow.dispatch`` lines of a plan reading ``a`` and ``b``.

    ``types``: the tensor types of A, B and C as the caller holds them (same
    elements as ``M x K``, ``K x N``, ``M x N``, e.g. with a unit batch
    dimension); default those 2-D types.
    """
    from .embed import external_dispatch, scratch_bytes, tensor_type
    s, g = plan.spec, plan.geometry
    names = _exe_names(plan)
    a_t, b_t, c_t = types or (tensor_type((s.M, s.K), s.dtype), tensor_type((s.K, s.N), s.dtype),
                              tensor_type((s.M, s.N), s.out_dtype))
    ao_t, bo_t = tensor_type(g.a_ops_shape, s.dtype), tensor_type(g.b_ops_shape, s.dtype)
    p_t = tensor_type(g.products_shape, s.product_dtype)
    ka, kb, kc = plan.combine_a, plan.combine_b, plan.combine_c
    lines = [
        external_dispatch(names["a"], ka.name, [(a, a_t)], [ao_t], scratch_bytes(ka), f"{prefix}_a"),
        external_dispatch(names["b"], kb.name, [(b, b_t)], [bo_t], scratch_bytes(kb), f"{prefix}_b"),
        external_dispatch(names["p"], plan.products.name, [(f"{prefix}_a#0", ao_t), (f"{prefix}_b#0", bo_t)], [p_t],
                          scratch_bytes(plan.products), f"{prefix}_p"),
        external_dispatch(names["c"], kc.name, [(f"{prefix}_p#0", p_t)], [c_t], scratch_bytes(kc), f"{prefix}_c"),
    ]
    return lines, f"{prefix}_c#0"


def plan_module(plan, target_attr: Optional[str] = None, flags: Sequence[str] = None, reference: bool = False,
                func: str = "main", **compile_options) -> str:
    """A complete module ``func.func @{func}(%a: A, %b: B) -> C`` running the plan's four kernels.

    Args:
        plan: a :class:`CompiledPlan`, or a :class:`PlanSpec` to compile first
            (``compile_options`` go to :func:`compile_plan`).
        target_attr: the object key (default: :func:`~falcon_mlir.kernels.embed.cuda_target_attribute`).
        flags: the IREE target flags (default ``embed.DEFAULT_CUDA_FLAGS``).
        reference: also emit ``@reference``, the classical product compiled by IREE itself.
        func: name of the plan's function.

    Returns:
        MLIR text for ``iree-compile`` with :data:`~falcon_mlir.kernels.embed.KERNEL_MODULE_FLAGS`.
    """
    from .embed import DEFAULT_CUDA_FLAGS, cuda_target_attribute, reference_func, tensor_type
    if isinstance(plan, PlanSpec):
        plan = compile_plan(plan, **compile_options)
    target_attr = target_attr or cuda_target_attribute(tuple(flags or DEFAULT_CUDA_FLAGS))
    s = plan.spec
    a_t, b_t, c_t = (tensor_type((s.M, s.K), s.dtype), tensor_type((s.K, s.N), s.dtype),
                     tensor_type((s.M, s.N), s.out_dtype))
    lines, c = plan_dispatches(plan)
    body = [plan_executables(plan, target_attr),
            f"func.func @{func}(%a: {a_t}, %b: {b_t}) -> {c_t} {{\n" + "".join(f"  {ln}\n" for ln in lines)
            + f"  return {c} : {c_t}\n}}\n"]
    if reference:
        body.append(reference_func(GemmSpec(s.M, s.N, s.K, s.dtype, s.dtype, s.out_dtype)))
    text = "\n".join(body)
    return "module {\n" + "\n".join("  " + ln if ln else ln for ln in text.splitlines()) + "\n}\n"


# --------------------------------------------------------------------------- launches (interpreter, JIT)

def plan_launches(spec: PlanSpec, gemm_config: Optional[KernelConfig] = None,
                  combine_configs: Optional[dict] = None, scheme=None) -> dict:
    """How to launch a plan's kernels by Triton's JIT or interpreter (no compiling here).

    Returns:
        ``{"a"|"b"|"c": {"source": TEXT, "fn", "constexprs", "programs", "num_warps", "config", "groups"},
        "p": {"spec": GemmSpec dict, "config": KernelConfig dict}, "geometry": {...}, "spec": {...}}``.
    """
    from .configs import choose_config
    css = combine_specs(spec, scheme)
    geo = plan_geometry(spec, scheme)
    combine_configs = combine_configs or {}
    out = {"spec": spec.to_dict(), "geometry": asdict(geo)}
    for role in ("a", "b", "c"):
        cs = css[role]
        cfg = combine_configs.get(role) or default_combine_config(cs)
        groups = output_groups(cs, cfg.max_live)
        cx, programs = combine_launch(cs, cfg)
        out[role] = {"source": combine_source(cs, groups), "fn": COMBINE_FN[role], "constexprs": cx,
                     "programs": programs, "num_warps": cfg.num_warps, "config": cfg.label, "groups": len(groups),
                     "traffic": cs.traffic_bytes(groups)}
    ps = products_spec(spec, geo)
    out["p"] = {"spec": ps.to_dict(), "config": (gemm_config or choose_config(ps)).to_dict()}
    return out
