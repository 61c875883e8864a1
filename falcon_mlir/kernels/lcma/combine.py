"""The combine kernels: what each computes (:class:`CombineSpec`), how it is tiled (:class:`CombineConfig`),
how its outputs are grouped, and its launch (constexprs and grid).

A plan has three: combine A and combine B split a matrix into blocks and write
the R combined operands (``direction = "split"``), combine C merges the R
products into C's blocks (``"merge"``). Their Triton source is generated in
:mod:`.source`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np

from falcon_mlir.catalog.groups import LIVE_BUDGET, choose_groups, greedy_groups, group_loads, live_tiles

from ..spec import DTYPE_BYTES, DictFields
from .scale import operand_shifts
from .spec import PlanSpec, _cdiv, plan_geometry, resolve_scheme



@dataclass(frozen=True)
class CombineConfig(DictFields):
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

    ``scale`` (a scaled plan, :mod:`.scale`): for a split, ``(s,)``: the kernel
    also reads the input's absmax partials and stores every output times
    ``2^-(e + s)``; for a merge, ``(s_A, s_B)``: it reads A's and B's partials
    and stores every output times ``2^(e_A + s_A) 2^(e_B + s_B)``. Empty: no
    scaling.
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
    scale: tuple = ()

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
            loads = group_loads(needs, groups)
            reread = (loads - self.grid_r * self.grid_c) * plane * ib
            return {"read": read + max(0, reread), "written": self.planes * plane * ob}
        loads = group_loads(needs, groups)
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
    """Outputs split into groups (:func:`falcon_mlir.catalog.groups.greedy_groups`): split kernels keep each
    group's input union within ``max_live`` tiles, merge kernels at most ``max_live`` accumulators per group."""
    return greedy_groups(cs.needs(), max_live, merge=cs.direction == "merge")


def _live(cs: CombineSpec, groups) -> int:
    """Tiles one group keeps in registers (:func:`falcon_mlir.catalog.groups.live_tiles`)."""
    return live_tiles(cs.needs(), groups, merge=cs.direction == "merge")


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
    cap, _, per_thread = choose_groups(cs.needs(), cs.direction == "merge", vec, wide_offsets)
    tile_r = max(1, min(256, per_thread * threads // tile_c))
    return CombineConfig(tile_r=tile_r, tile_c=tile_c, num_warps=4, max_live=cap)


def combine_launch(cs: CombineSpec, config: CombineConfig) -> tuple:
    """(constexprs, programs) of one combine kernel."""
    cx = dict(ROWS=cs.rows, COLS=cs.cols, BR=cs.block_r, BC=cs.block_c, TR=config.tile_r, TC=config.tile_c)
    return cx, _cdiv(cs.block_r, config.tile_r) * _cdiv(cs.block_c, config.tile_c)


def combine_specs(spec: PlanSpec, scheme=None) -> dict:
    """The three :class:`CombineSpec` of a plan, by role ``"a"``, ``"b"``, ``"c"``. With ``trans_b`` combine B
    splits the stored ``N x K`` matrix S (block ``(l, j)`` is ``B_jl`` transposed) with ``V[r, j, l]`` as the
    coefficient of input ``l * k + j``, so it writes each combined operand transposed."""
    s = scheme if scheme is not None else resolve_scheme(spec.scheme)
    g = plan_geometry(spec, s)
    sa, sb = operand_shifts(s, g.bk) if spec.scaled else (None, None)
    ops = spec.operand_dtype
    return {
        "a": CombineSpec("a", "split", split_coeffs(s.U), spec.M, spec.K, g.m, g.k, g.bm, g.bk, spec.dtype,
                         ops, (sa,) if spec.scaled else ()),
        "b": (CombineSpec("b", "split", split_coeffs(np.transpose(s.V, (0, 2, 1))), spec.N, spec.K, g.n, g.k, g.bn,
                          g.bk, spec.dtype, ops, (sb,) if spec.scaled else ()) if spec.trans_b else
              CombineSpec("b", "split", split_coeffs(s.V), spec.K, spec.N, g.k, g.n, g.bk, g.bn, spec.dtype,
                          ops, (sb,) if spec.scaled else ())),
        "c": CombineSpec("c", "merge", merge_coeffs(s.W), spec.M, spec.N, g.m, g.n, g.bm, g.bn,
                         spec.product_dtype, spec.out_dtype, (sa, sb) if spec.scaled else ()),
    }

