"""falcon-tiles' tile tables: measured tile choices per table and element types, as data.

Two kinds of choice (pipeline ``TileAndFuse``, IREE's own for these ops on sm_80):

* SIMT (f32): ``workgroup = [TM, TN]`` output elements per workgroup,
  ``thread = [tm, tn]`` elements per thread (``TM/tm * TN/tn`` threads),
  ``reduction = [KT]`` elements of K per step, operands promoted to shared
  memory.
* MMA (f16/bf16 operands, ``mma.sync`` 16x8x16 intrinsics): ``workgroup``
  in elements, ``subgroup = [sm, sn]`` intrinsic tiles per warp (so
  ``TM/(16 sm) * TN/(8 sn)`` warps of 32 threads), ``reduction = [kr]``
  intrinsics of K per step (``16 kr`` elements), ``prefetch_num_stages = 2``
  and ``convert_acc_gemm`` as IREE's own MMA choice has them.

The table's first entries were measured on an H200 (8192^3 and 16384^3,
``docs/gpu_tiles_h200.json``); the smaller ones only make smaller shapes
valid and are not tuned. :func:`choose` picks the first entry that fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["TileChoice", "TABLES", "TABLE_NAMES", "SUBGROUP_SIZE", "choose", "choice_names"]

#: Threads per warp on NVIDIA GPUs.
SUBGROUP_SIZE = 32


@dataclass(frozen=True)
class TileChoice:
    """One tile choice (see the module docstring for the units).

    Attributes:
        name: short label used in reports.
        workgroup: (TM, TN) output elements per workgroup.
        reduction: K step: elements (SIMT) or intrinsics (MMA).
        thread: (tm, tn) elements per thread (SIMT), else None.
        subgroup: (sm, sn) intrinsic tiles per warp (MMA), else None.
        mma: intrinsic name (``NV_MMA_SYNC_...``), None for SIMT.
        batched_only: chosen from the table only for contractions with batch
            loops (``prefer=`` can still force it elsewhere).
        note: where the choice comes from.
    """

    name: str
    workgroup: tuple
    reduction: int
    thread: Optional[tuple] = None
    subgroup: Optional[tuple] = None
    mma: Optional[str] = None
    batched_only: bool = False
    note: str = ""

    #: intrinsic shape (M, N, K) of the mma.sync kinds used here
    MMA_SHAPE = (16, 8, 16)

    @property
    def k_step(self) -> int:
        """Elements of K per reduction step (K must be a multiple)."""
        return self.reduction * (self.MMA_SHAPE[2] if self.mma else 1)

    @property
    def threads(self) -> int:
        """Threads per workgroup."""
        tm, tn = self.workgroup
        if self.mma:
            im, inn, _ = self.MMA_SHAPE
            return (tm // (im * self.subgroup[0])) * (tn // (inn * self.subgroup[1])) * SUBGROUP_SIZE
        return (tm // self.thread[0]) * (tn // self.thread[1])

    def fits(self, M: int, N: int, K: int) -> bool:
        """The shape is a whole number of workgroup tiles and K steps."""
        return M % self.workgroup[0] == 0 and N % self.workgroup[1] == 0 and K % self.k_step == 0

    def as_dict(self) -> dict:
        """The choice as the report's ``tiles`` entry."""
        d = {"name": self.name, "workgroup": list(self.workgroup), "reduction": self.reduction,
             "k_step": self.k_step, "threads": self.threads}
        if self.mma:
            d.update(subgroup=list(self.subgroup), mma=self.mma)
        else:
            d.update(thread=list(self.thread))
        return d


def _simt(tm, tn, th, red, note="", name=None, batched_only=False):
    return TileChoice(name or f"simt{tm}x{tn}", (tm, tn), red, thread=th, note=note,
                      batched_only=batched_only)


def _mma(kind, tm, tn, sg, red, note=""):
    return TileChoice(f"mma{tm}x{tn}", (tm, tn), red, subgroup=sg, mma=kind, note=note)


_MEASURED = "best of eight hand-picked choices at 8192^3 on the H200 (iree-notes.md)"


def _mma_table(kind):
    return (
        _mma(kind, 128, 256, (4, 8), 4, _MEASURED),   # 8 warps of 64x64
        _mma(kind, 128, 128, (4, 4), 4),               # 8 warps of 64x32
        _mma(kind, 64, 64, (2, 4), 4),                 # 4 warps of 32x32
        _mma(kind, 32, 32, (1, 2), 2),                 # 4 warps of 16x16
    )


#: table name -> (lhs, rhs, acc element types) -> tile choices, best first.
TABLES = {
    "cuda-sm80": {
        ("f32", "f32", "f32"): (
            # Batched products (the grouped form): K step 32 measured faster on
            # the H200 (7 x 4096^3: 26.5 vs 28.5 ms; grouped Strassen at 16384^3:
            # 223 vs 241 ms), but slower for plain matmuls (8192^3: 35.0 vs
            # 30.8 ms); docs/gpu_tiles_h200.json.
            _simt(128, 128, (8, 8), 32, name="simt128x128k32", batched_only=True),
            _simt(128, 128, (8, 8), 16, _MEASURED),   # 256 threads
            _simt(64, 64, (4, 4), 16),                 # 256 threads
            _simt(32, 32, (2, 2), 16),                 # 256 threads
        ),
        ("f16", "f16", "f16"): _mma_table("NV_MMA_SYNC_F16_16x8x16_F16"),
        ("f16", "f16", "f32"): _mma_table("NV_MMA_SYNC_F32_16x8x16_F16"),
        ("bf16", "bf16", "f32"): _mma_table("NV_MMA_SYNC_F32_16x8x16_BF16"),
    },
}

#: What the ``table=`` option accepts: a key of :data:`TABLES`, ``none`` (the
#: pass does nothing) or ``auto`` (falcon-compile and the API: ``cuda-sm80``
#: when the compile flags select the cuda device, else none; ``cuda-sm80`` in
#: falcon-opt, which has no compile flags).
TABLE_NAMES = tuple(TABLES) + ("none", "auto")


def choice_names() -> list:
    """Names of every tile choice in every table, sorted (what ``prefer=`` accepts)."""
    return sorted({c.name for t in TABLES.values() for cs in t.values() for c in cs})


def choose(table: str, types: tuple, M: int, N: int, K: int, prefer=(), batched: bool = False):
    """``(TileChoice or None, reason)`` for a contraction of element types
    ``types`` = (lhs, rhs, acc) names and sizes M, N, K from tile table
    ``table`` (``prefer``: choice names tried first, in order; ``batched``:
    the contraction has batch loops)."""
    entries = TABLES.get(table, {}).get(tuple(types))
    if not entries:
        return None, (f"no tile table for {types[0]} x {types[1]} -> {types[2]} on {table} "
                      "(IREE's default)")
    if isinstance(prefer, str):
        prefer = (prefer,)
    by_name = {c.name: c for c in entries}
    for name in prefer or ():
        choice = by_name.get(name)
        if choice is not None and choice.fits(M, N, K):
            return choice, f"{choice.name}: preferred by option, divides M={M}, N={N}, K={K}"
    for choice in entries:
        if choice.fits(M, N, K) and (batched or not choice.batched_only):
            return choice, (f"{choice.name}: first choice of the {table} table that divides "
                            f"M={M}, N={N}, K={K}")
    smallest = entries[-1]
    return None, (f"M={M}, N={N}, K={K} not divisible by any {table} tile choice (smallest: "
                  f"workgroup {smallest.workgroup[0]}x{smallest.workgroup[1]}, K step "
                  f"{smallest.k_step}); IREE's default")
