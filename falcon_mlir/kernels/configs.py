"""Kernel configurations (tile sizes, pipeline depth, warps) and the table that picks one per GEMM.

The table is data (``configs.json`` beside this file), to be refilled from
H200 measurements: each entry names the GEMMs it serves (input class, output
types, size bounds), the :class:`KernelConfig`, and a ``source`` note saying
where the numbers come from. :func:`choose_config` takes the first entry that
serves a :class:`~falcon_mlir.kernels.spec.GemmSpec` and fits the shared
memory.

Compact text form of a configuration (``KernelConfig.parse`` / ``label``)::

    128x256x64,s3,w8,g8[,ws][,sub][,masked]

= BLOCK_M x BLOCK_N x BLOCK_K, pipeline stages, warps, GROUP_M, warp
specialization, epilogue subtiling (C stored in two halves), masked C store
instead of TMA store.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Optional

from .spec import DTYPE_BYTES, DTYPES, DictFields, GemmSpec, require_supported

#: The table shipped with the package.
TABLE_PATH = Path(__file__).with_name("configs.json")
#: Dynamic shared memory one block may use on sm_90 (H100/H200): 227 KiB.
SHARED_MEMORY_LIMIT = 232448
#: TMA boxes are at most this many elements along each dimension.
MAX_BOX = 256
#: What a table entry's ``inputs`` may name: input classes and 16-bit input dtypes.
TABLE_INPUTS = ("16bit", "bf16", "f16", "f32", "tf32", "tf32x3")


def _pow2(v: int) -> bool:
    return v > 0 and (v & (v - 1)) == 0


@dataclass(frozen=True)
class KernelConfig(DictFields):
    """How one kernel is built: tile sizes, pipeline depth, warps and epilogue.

    Args:
        block_m, block_n, block_k: the tile of C one program computes per step
            (``block_m x block_n``) and the K depth of one step; powers of two,
            16..256 (a TMA box is at most 256 elements a side).
        num_stages: software-pipeline depth (shared-memory buffers per operand), 1..8.
        num_warps: warps per program, 4 or 8 (with ``warp_specialize`` it must
            be 4; the compiled kernel then has 12, see the metadata).
        group_m: tile rows per group in the persistent tile order (L2 reuse), >= 1.
        warp_specialize: Triton's Hopper warp specialization of the K loop.
        epilogue_subtile: store C in two ``block_m x block_n/2`` halves
            (halves the epilogue's shared memory; TMA store only).
        tma_store: store C through TMA (needs C's row stride to be a multiple
            of 16 bytes); False: masked ``tl.store``.

    Raises:
        ValueError: a value out of range or an inconsistent combination.
    """

    block_m: int = 128
    block_n: int = 256
    block_k: int = 64
    num_stages: int = 3
    num_warps: int = 8
    group_m: int = 8
    warp_specialize: bool = False
    epilogue_subtile: bool = False
    tma_store: bool = True

    def __post_init__(self):
        for name in ("block_m", "block_n", "block_k"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not _pow2(v) or not 16 <= v <= MAX_BOX:
                raise ValueError(f"KernelConfig.{name} must be a power of two in 16..{MAX_BOX}, got {v!r}")
        for name, lo, hi in (("num_stages", 1, 8), ("group_m", 1, 64)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"KernelConfig.{name} must be an int in {lo}..{hi}, got {v!r}")
        if self.num_warps not in (4, 8) or isinstance(self.num_warps, bool):
            raise ValueError(f"KernelConfig.num_warps must be 4 or 8, got {self.num_warps!r}")
        for name in ("warp_specialize", "epilogue_subtile", "tma_store"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"KernelConfig.{name} must be a bool, got {getattr(self, name)!r}")
        if self.warp_specialize and self.num_warps != 4:
            raise ValueError("KernelConfig.warp_specialize needs num_warps=4 (Triton's Hopper warp "
                             "specialization only acts on 4-warp kernels and then runs 12 warps)")
        if self.epilogue_subtile and not self.tma_store:
            raise ValueError("KernelConfig.epilogue_subtile applies to the TMA store only (tma_store=True)")

    @property
    def label(self) -> str:
        """The compact text form, e.g. ``128x256x64,s3,w8,g8`` (inverse of :meth:`parse`)."""
        s = f"{self.block_m}x{self.block_n}x{self.block_k},s{self.num_stages},w{self.num_warps},g{self.group_m}"
        if self.warp_specialize:
            s += ",ws"
        if self.epilogue_subtile:
            s += ",sub"
        if not self.tma_store:
            s += ",masked"
        return s

    @classmethod
    def parse(cls, text: str) -> "KernelConfig":
        """Parse the compact form ``BMxBNxBK[,sS][,wW][,gG][,ws][,sub][,masked]`` (defaults for the rest).

        Raises:
            ValueError: malformed text or invalid values.
        """
        parts = [p.strip() for p in text.strip().split(",") if p.strip()]
        if not parts:
            raise ValueError("empty kernel configuration")
        dims = parts[0].split("x")
        if len(dims) != 3 or not all(d.isdigit() for d in dims):
            raise ValueError(f"kernel configuration {text!r}: expected BMxBNxBK first, e.g. 128x256x64")
        kw = dict(block_m=int(dims[0]), block_n=int(dims[1]), block_k=int(dims[2]))
        flags = {"ws": "warp_specialize", "sub": "epilogue_subtile"}
        for p in parts[1:]:
            if p in flags:
                kw[flags[p]] = True
            elif p == "masked":
                kw["tma_store"] = False
            elif p[:1] in "swg" and p[1:].isdigit():
                kw[{"s": "num_stages", "w": "num_warps", "g": "group_m"}[p[0]]] = int(p[1:])
            else:
                raise ValueError(f"kernel configuration {text!r}: unknown part {p!r} "
                                 "(expected sN, wN, gN, ws, sub or masked)")
        return cls(**kw)


def estimate_shared_bytes(spec: GemmSpec, config: KernelConfig) -> int:
    """Shared memory the kernel will ask for, estimated (bytes).

    ``num_stages`` buffers of the A and B tiles plus the TMA-store staging
    tile of C (half with subtiling). Matches Triton 3.6's (and 3.9's) figure for the
    tensor-core kernels (128x256x64, 3 stages, bf16: 212,992 + 24 barrier
    bytes); an upper bound for f32 FMA kernels. :func:`compile_kernel
    <falcon_mlir.kernels.aot.compile_kernel>` checks the real figure.
    """
    ab = config.num_stages * config.block_k * (config.block_m + config.block_n) * DTYPE_BYTES[spec.a_dtype]
    c = 0
    if config.tma_store:
        c = config.block_m * config.block_n * DTYPE_BYTES[spec.out_dtype] // (2 if config.epilogue_subtile else 1)
    return ab + c


@dataclass(frozen=True)
class TableEntry:
    """One row of the configuration table: which GEMMs it serves and with what.

    ``inputs``: input classes (``"16bit"``, ``"f32"``, ``"tf32"``,
    ``"tf32x3"``, see ``GemmSpec.input_class``) or 16-bit input dtypes
    (``"bf16"``, ``"f16"``: that type only); ``out``: output dtypes; ``min_*``/``max_*``:
    inclusive bounds on M, N and the output size M*N (None: no bound);
    ``source``: where it comes from.
    """

    name: str
    inputs: tuple
    out: tuple
    config: KernelConfig
    source: str
    min_m: int = 1
    max_m: Optional[int] = None
    min_n: int = 1
    max_n: Optional[int] = None
    min_mn: int = 1
    max_mn: Optional[int] = None

    def serves(self, spec: GemmSpec) -> bool:
        """Whether ``spec`` falls in this entry's class and bounds."""
        by_dtype = spec.input_class == "16bit" and spec.a_dtype in self.inputs
        return ((spec.input_class in self.inputs or by_dtype) and spec.out_dtype in self.out
                and spec.M >= self.min_m and (self.max_m is None or spec.M <= self.max_m)
                and spec.N >= self.min_n and (self.max_n is None or spec.N <= self.max_n)
                and spec.M * spec.N >= self.min_mn and (self.max_mn is None or spec.M * spec.N <= self.max_mn))


def _entry(d: dict, where: str) -> TableEntry:
    keys = {"name", "inputs", "out", "config", "source", "min_m", "max_m", "min_n", "max_n", "min_mn", "max_mn"}
    unknown = set(d) - keys
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    for k in ("name", "inputs", "out", "config", "source"):
        if k not in d:
            raise ValueError(f"{where}: missing {k!r}")
    bad = [x for x in d["inputs"] if x not in TABLE_INPUTS] + [x for x in d["out"] if x not in DTYPES]
    if bad:
        raise ValueError(f"{where}: unknown input class or dtype {', '.join(map(repr, bad))} "
                         f"(inputs: {', '.join(TABLE_INPUTS)}; out: {', '.join(DTYPES)})")
    cfg = d["config"]
    config = KernelConfig.parse(cfg) if isinstance(cfg, str) else KernelConfig.from_dict(cfg)
    return TableEntry(name=d["name"], inputs=tuple(d["inputs"]), out=tuple(d["out"]), config=config,
                      source=d["source"], min_m=d.get("min_m", 1), max_m=d.get("max_m"),
                      min_n=d.get("min_n", 1), max_n=d.get("max_n"), min_mn=d.get("min_mn", 1),
                      max_mn=d.get("max_mn"))


@lru_cache(maxsize=8)
def load_table(path: Optional[str] = None) -> tuple:
    """The configuration table (a tuple of :class:`TableEntry`), from ``path`` or the packaged file.

    Raises:
        ValueError: a malformed table (the message names the entry).
        OSError: the file cannot be read.
    """
    p = Path(path) if path else TABLE_PATH
    data = json.loads(p.read_text())
    if data.get("format") != 1 or not isinstance(data.get("entries"), list):
        raise ValueError(f"{p}: expected {{\"format\": 1, \"entries\": [...]}}")
    return tuple(_entry(e, f"{p} entry {i}") for i, e in enumerate(data["entries"]))


def config_by_name(name: str, path: Optional[str] = None) -> KernelConfig:
    """The configuration of the table entry called ``name``.

    Raises:
        ValueError: no such entry.
    """
    for e in load_table(path):
        if e.name == name:
            return e.config
    raise ValueError(f"no configuration named {name!r} (have: {', '.join(e.name for e in load_table(path))})")


def adapt(spec: GemmSpec, config: KernelConfig) -> KernelConfig:
    """``config`` with the C store adjusted to ``spec``: masked (no subtiling) where TMA cannot store C."""
    if config.tma_store and not spec.c_row_aligned():
        return replace(config, tma_store=False, epilogue_subtile=False)
    return config


def choose_config(spec: GemmSpec, path: Optional[str] = None) -> KernelConfig:
    """The first table entry that serves ``spec`` and fits the shared memory, adapted by :func:`adapt`.

    Raises:
        ValueError: ``spec`` is not served by the kernels (the reason from
            :func:`~falcon_mlir.kernels.spec.supports`), or no entry serves it.
    """
    require_supported(spec)
    for e in load_table(path):
        if e.serves(spec):
            config = adapt(spec, e.config)
            if estimate_shared_bytes(spec, config) <= SHARED_MEMORY_LIMIT:
                return config
    raise ValueError(f"no configuration in the table serves {spec.name} (input class {spec.input_class}, "
                     f"out {spec.out_dtype}, M {spec.M}, N {spec.N})")
