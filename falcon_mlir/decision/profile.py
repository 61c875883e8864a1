"""Hardware profiles: what the cost model knows about a target.

A profile is a JSON document (``format`` 1)::

    {
      "format": 1,
      "name": "x86-host",
      "source": "measured" | "datasheet",
      "provenance": "falcon-calibrate on AMD EPYC (2 cores), IREE 3.13.0, 2026-11-30",
      "kind": "cpu" | "gpu",
      "device": "local-task" | "cuda",
      "cores": 2,
      "bandwidth": 1.3e10,            # bytes/s, streaming elementwise (read + write)
      "dispatch_overhead": 2.0e-5,    # s per dispatch
      "caches": {"l1d": 49152, "l2": 1048576, "l3": 33554432},   # bytes
      "dtypes": {
        "f32": {"gemm": [[128, 5.0e10], [256, 1.5e11], ...],     # [n, FLOP/s]
                "add": 2.0e10},                                    # FLOP/s
        "f16": {...}, "bf16": {...}, "f64": {...}, "i8": {...}
      },
      "forms": {"grouped_combine": 1.0, "per_product_combine": 1.0},
      "align": 64,        # auto: product blocks must be multiples of this
      "pow2_blocks": false,  # auto: product blocks must be powers of two
      "min_block_k": 1,   # auto: K blocks at least this
      "min_block_m": 1,   # auto: M blocks at least this
      "min_block_m_deep": 1,  # auto: M blocks at least this where K blocks >= N blocks
      "min_gain": 0.2,    # auto: predicted gain needed over classical
      "memory": 141000000000,  # device memory, bytes (GPU); absent: no limit
      "product_blocks": {...}  # a plan's products' rate by block shape (optional)
    }

Field meanings and units:

* ``dtypes[T].gemm``: the matrix-product throughput of a classical GEMM with
  inputs of element type ``T`` as falcon's target compiles it (same flags,
  same tile choices), as a table of ``[n, FLOP/s]`` for square ``n^3``
  products (``FLOP/s = 2 n^3 / seconds``). Between points the rate is
  interpolated linearly in log(n)/log(rate); outside, the end value is held.
  Keys are the input element type: ``f32``, ``f16``, ``bf16`` (bf16 inputs,
  f32 accumulator), ``f64``, ``i8`` (i8 inputs, i32 accumulator).
* ``dtypes[T].add``: throughput of the combines' multiply-adds (FLOP/s, one
  multiply-add = 2 FLOP) when they are compute-bound.
* ``bandwidth``: bytes/s that an elementwise dispatch streams (bytes read +
  bytes written per second), not the datasheet DRAM figure unless marked so.
* ``dispatch_overhead``: seconds added per dispatch (launch and sync).
* ``forms``: ``<form>_combine``: measured efficiency (fraction of
  ``bandwidth``) of the combine dispatches of each form (1.0 = streams like a
  plain elementwise op); ``<form>_products``: time factor of a plan's
  products against the isolated GEMM of the same size (1.0 = as fast).
  ``falcon-calibrate`` fits both per form to measured plans
  (:mod:`falcon_mlir.calibration.fit`). ``blocking_products``: the same
  factor for the products of classical blocking plans (``2x2x2:8``; set by
  hand from measured blocked plans, not fitted by falcon-calibrate).
  ``kernel_products_f32_triton`` (GPU, set by hand): the time factor of a
  kernel-form plan's f32 products whose blocks the FMA kernel does not serve
  (the Triton kernel runs them; the f32 ``gemm`` rates are the FMA kernel's).
  On CPU profiles the kernel form is falcon's CPU kernel
  (:mod:`falcon_mlir.decision.cpu_kernel`): ``kernel_combine`` is the
  efficiency of its packs of B (which form combine B), ``kernel_products``
  the time factor of one of its LCMA products over its classical GEMM of the
  same blocks (the f32 ``gemm`` rates are that classical kernel's).
* ``product_blocks``: how a per-product plan's products, B a constant, run for
  their block shape against the ``gemm`` table (a power law in the block sizes
  around a reference block; :mod:`falcon_mlir.decision.product_blocks`).

Presets (:data:`PRESETS`, shipped as ``profiles/*.json``): the x86
development host (measured with ``falcon-calibrate``; cores and caches of the
running host are filled in when ``host`` is asked for), ``x86-avx2`` (that
host compiled for ``x86-64-v3``, no native bf16: derived from it by measured
ratios, see its ``provenance``; falcon-compile and the API imply it for every
target CPU without AVX512-BF16, ``falcon_mlir.pipeline.assemble.NO_NATIVE_BF16_CPUS``), AArch64 Neoverse-N1
and V1, NVIDIA H200, H100, A100 and H20, and ``h200-iree`` (the H200 as
IREE's CUDA code runs on it: sm_80 PTX with falcon's tile choices, measured
with ``falcon-calibrate --device cuda``), ``h200-falcon`` (falcon's own CUDA
kernels), ``x86-falcon`` (the x86 host where falcon's own CPU kernel serves
the f32 GEMMs and the kernel-form plans) and ``x86-falcon-avx2`` (the same with the
kernel's AVX2 build, on a 2-core Zen 3 without AVX-512). Presets whose ``source`` is
``datasheet`` carry vendor peak figures (and a ramp for small sizes), marked
in ``provenance``; they are starting points, to be replaced by a
``falcon-calibrate`` run on the machine.

``target=NAME`` (a preset) or ``target=path/to/profile.json`` selects one
(:func:`load_profile`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .product_blocks import ProductBlocks

FORMAT = 1
#: Largest profile file read (bytes) and most points per GEMM table.
MAX_FILE_BYTES = 1 << 20
MAX_TABLE = 256

#: Preset names -> file names in falcon_mlir/decision/profiles.
PRESETS = {
    "host": "x86-dev.json",
    "x86-dev": "x86-dev.json",
    "x86-avx2": "x86-avx2.json",
    "x86-falcon": "x86-falcon.json",
    "x86-falcon-avx2": "x86-falcon-avx2.json",
    "neoverse-n1": "neoverse-n1.json",
    "neoverse-v1": "neoverse-v1.json",
    "h200": "h200.json",
    "h200-iree": "h200-iree.json",
    "h200-falcon": "h200-falcon.json",
    "h100": "h100.json",
    "a100": "a100.json",
    "h20": "h20.json",
}

#: Input element type -> key in ``dtypes`` (bf16 x bf16 -> f32 is "bf16").
DTYPE_KEYS = ("f64", "f32", "f16", "bf16", "i8")

#: Bytes per element of the MLIR element types the model meets.
ELEMENT_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i8": 1, "i16": 2, "i32": 4,
                 "i64": 8, "f8E4M3FN": 1, "f8E5M2": 1}


class ProfileError(ValueError):
    """A profile cannot be found or is malformed; the message names the file and field."""


@dataclass(frozen=True)
class Profile:
    """A target's figures for the cost model (see the module docstring for units).

    Attributes:
        name: the profile's name.
        source: ``"measured"`` or ``"datasheet"``.
        provenance: where the figures come from (one line).
        kind: ``"cpu"`` or ``"gpu"``.
        device: IREE HAL driver the figures were measured on.
        cores: CPU cores (CPU) or streaming multiprocessors (GPU).
        bandwidth: streaming bandwidth, bytes/s.
        dispatch_overhead: seconds per dispatch.
        caches: cache sizes in bytes (``l1d``, ``l2``, ``l3``).
        gemm: per input element type, ``((n, FLOP/s), ...)`` sorted by n.
        add: per input element type, combine multiply-add throughput, FLOP/s.
        forms: combine efficiency factors per form (fractions of bandwidth).
        align: under ``auto``, every product's block sizes must be multiples
            of this (elements); plans with peeled or padded edges or odd
            blocks are not chosen (IREE's CPU microkernels lose on them:
            measured, docs/benchmarks.md). 1 = no constraint.
        pow2_blocks: under ``auto``, every product's block sizes must be powers
            of two (H200, IREE 3.13: grouped plans with other blocks measured
            0.85-1.01x of tuned classical at M = 8192, docs/benchmarks.md).
        min_block_k: under ``auto``, every level's K block must be at least
            this (x86: 26 products with 256-deep K blocks ran at 0.72x).
        min_block_m: under ``auto``, every level's M block must be at least
            this (x86: plans with 128-row blocks, M = 256, gained at most
            1.1x where the model said 1.28-1.38x, and the training step's
            dX via gate/up ran at 0.93x).
        min_block_m_deep: under ``auto``, a level whose K block is at least
            its N block (a block deeper than wide) must have M blocks at
            least this (x86-falcon: Strassen in the kernel form on 384-row
            blocks measured 0.91-1.00x of the classical kernel at M = 768
            where K >= N, 1.05x where N > K, docs/benchmarks.md).
        max_levels: most levels ``levels=auto`` tries on this target
            (``None``: :data:`falcon_mlir.decision.MAX_AUTO_LEVELS`).
        min_gain: the predicted gain a plan needs over classical on this
            target (fraction), from the model's measured error here; ``None``
            = :data:`falcon_mlir.decision.MIN_GAIN`.
        plan_forms: the plan forms ``form=auto`` chooses among on this target
            (default per-product and grouped; ``h200-falcon``: kernel, the form
            falcon's generated CUDA kernels run; ``x86-falcon``: kernel, on
            falcon's CPU kernel).
        memory: the device's memory in bytes (``None``: not limited; CPU
            profiles leave it out, host memory varies). ``auto`` skips plans
            whose A, B, C and predicted temporaries exceed
            :data:`falcon_mlir.decision.MEMORY_FRACTION` of it (a plan that
            cannot be allocated fails at run time, not at compile time).
        auto_schemes: the catalog schemes ``scheme=auto`` may use at any level
            on this target (``None``: all); a profile names only the schemes
            whose form was measured there (``h200-falcon``: Strassen's kernels).
        iree_profile: for a profile of falcon's own kernels, the profile (a
            preset name or path) of IREE's code on the same target, used for the
            contractions those kernels leave to IREE (a constant B:
            :func:`constant_b_profile`); ``x86-falcon``: ``host``,
            ``x86-falcon-avx2``: ``x86-avx2``. ``None``: none.
        product_blocks: the rate of a per-product plan's products against the ``gemm`` table by
            their block shape (:class:`~falcon_mlir.decision.product_blocks.ProductBlocks`);
            ``None``: the table's rate.

    Derived: :attr:`fused_combine_c` (GPU profiles: combine C is one
    dispatch over the whole output; see ``passes/lcma_rewrite.py``).
    """

    name: str
    source: str
    provenance: str
    kind: str
    device: str
    cores: int
    bandwidth: float
    dispatch_overhead: float
    caches: Dict[str, int] = field(default_factory=dict)
    gemm: Dict[str, Tuple[Tuple[float, float], ...]] = field(default_factory=dict)
    add: Dict[str, float] = field(default_factory=dict)
    forms: Dict[str, float] = field(default_factory=dict)
    align: int = 1
    pow2_blocks: bool = False
    min_block_k: int = 1
    min_block_m: int = 1
    min_block_m_deep: int = 1
    min_gain: Optional[float] = None
    max_levels: Optional[int] = None
    plan_forms: Tuple[str, ...] = ("per-product", "grouped")
    auto_schemes: Optional[Tuple[str, ...]] = None
    memory: Optional[int] = None
    iree_profile: Optional[str] = None
    product_blocks: Optional[ProductBlocks] = None

    def without_block_minimums(self) -> "Profile":
        """This profile with ``min_block_k``, ``min_block_m`` and ``min_block_m_deep`` at 1 (the
        plans those rules keep out allowed; ``align`` and ``pow2_blocks`` kept): what falcon-bench's
        ``top`` decides on where auto is classical by them."""
        return replace(self, min_block_k=1, min_block_m=1, min_block_m_deep=1)

    # ------------------------------------------------------------------ rates
    def _key(self, elem: str) -> str:
        """The ``dtypes`` key used for element type ``elem`` (falls back to f32's
        figures; on GPUs bf16 takes f16's: the same tensor-core rate)."""
        e = str(elem)
        if e in self.gemm:
            return e
        if e.startswith("i") and "i8" in self.gemm:
            return "i8"
        if e.startswith("f8") and "f16" in self.gemm:
            return "f16"
        if e == "bf16" and self.kind == "gpu" and "f16" in self.gemm:
            return "f16"
        return "f32" if "f32" in self.gemm else next(iter(self.gemm))

    def gemm_rate(self, elem: str, M: int, N: int, K: int) -> float:
        """Classical GEMM throughput (FLOP/s) for an M x K by K x N product of ``elem`` inputs.

        Looked up in the ``gemm`` table (log-log interpolation, ends held)
        at the square size n that is equivalent both in work and in operand
        footprint: ``n = max((M N K)^(1/3), sqrt(max(MK, KN, MN)))``. The
        second term matters on CPUs: IREE's kernel slows down once an operand
        outgrows the last-level cache (measured: 4096^3 f32 runs at 0.6x the
        rate of 2048^3 on the development host), and a 512 x 7168 x 2048
        product with a 59 MB B behaves like 3831^3, not like its 1944^3 work.
        Memory limits of skinny shapes are not in here: the cost model adds
        the roofline.
        """
        return _rate(self.gemm[self._key(elem)], float(M), float(N), float(K))

    def peak_rate(self, elem: str) -> float:
        """The highest GEMM throughput in the table for ``elem`` inputs (FLOP/s)."""
        return max(r for _, r in self.gemm[self._key(elem)])

    def add_rate(self, elem: str) -> float:
        """Combine multiply-add throughput for accumulator type ``elem`` (FLOP/s)."""
        k = self._key(elem)
        return self.add.get(k) or self.add.get("f32") or self.bandwidth / 4.0

    @property
    def fused_combine_c(self) -> bool:
        """Combine C is emitted as one dispatch over all output blocks (GPU
        targets), instead of one dispatch per block written back with
        ``tensor.insert_slice`` (CPU targets, where IREE writes the slices in
        place but on CUDA copies them with a scalar ``slow_memcpy`` dispatch,
        IREE 3.13)."""
        return self.kind == "gpu"

    def form_efficiency(self, form: str) -> float:
        """Fraction of ``bandwidth`` the combines of ``form`` achieve (1.0 if unknown)."""
        return float(self.forms.get(form.replace("-", "_") + "_combine", 1.0))

    def product_factor(self, form: str) -> float:
        """Time factor of a plan's products in ``form`` against an isolated GEMM (1.0 if unknown)."""
        return float(self.forms.get(form.replace("-", "_") + "_products", 1.0))

    # ------------------------------------------------------------------ I/O
    def to_dict(self) -> dict:
        """The profile as a JSON-ready dict (the file format above)."""
        return {
            "format": FORMAT, "name": self.name, "source": self.source,
            "provenance": self.provenance, "kind": self.kind, "device": self.device,
            "cores": self.cores, "bandwidth": self.bandwidth,
            "dispatch_overhead": self.dispatch_overhead, "caches": dict(self.caches),
            "dtypes": {k: {"gemm": [list(p) for p in self.gemm[k]],
                           **({"add": self.add[k]} if k in self.add else {})}
                       for k in self.gemm},
            "forms": dict(self.forms), "align": self.align, "pow2_blocks": self.pow2_blocks,
            "min_block_k": self.min_block_k,
            **({"min_block_m": self.min_block_m} if self.min_block_m > 1 else {}),
            **({"min_block_m_deep": self.min_block_m_deep} if self.min_block_m_deep > 1 else {}),
            **({"min_gain": self.min_gain} if self.min_gain is not None else {}),
            **({"max_levels": self.max_levels} if self.max_levels is not None else {}),
            **({"plan_forms": list(self.plan_forms)}
               if self.plan_forms != ("per-product", "grouped") else {}),
            **({"auto_schemes": list(self.auto_schemes)} if self.auto_schemes else {}),
            **({"memory": self.memory} if self.memory is not None else {}),
            **({"iree_profile": self.iree_profile} if self.iree_profile else {}),
            **({"product_blocks": self.product_blocks.to_json()} if self.product_blocks else {}),
        }

    @classmethod
    def from_dict(cls, d: dict, where: str = "<profile>") -> "Profile":
        """Build a profile from its JSON dict.

        Raises:
            ProfileError: a field is missing or has the wrong type/sign; the
                message starts with ``where`` and names the field.
        """
        if not isinstance(d, dict):
            raise ProfileError(f"{where}: a profile is a JSON object")
        if d.get("format", FORMAT) != FORMAT:
            raise ProfileError(f"{where}: unsupported profile format {d.get('format')!r} "
                               f"(this falcon-mlir reads format {FORMAT})")
        dtypes = _need(d, "dtypes", dict, where)
        if not dtypes:
            raise ProfileError(f"{where}: field 'dtypes' is empty")
        gemm, add = _gemm_tables(dtypes, where)
        forms, caches, cores, kind = _checked_fields(d, where)
        return cls(
            name=str(d.get("name", Path(where).stem)), source=str(d.get("source", "measured")),
            provenance=str(d.get("provenance", "")), kind=kind,
            device=str(d.get("device", "local-task" if kind == "cpu" else "cuda")),
            cores=cores, bandwidth=_need(d, "bandwidth", float, where),
            dispatch_overhead=_need(d, "dispatch_overhead", float, where),
            caches={str(k): int(v) for k, v in caches.items()},
            gemm=gemm, add=add, forms={k: float(v) for k, v in forms.items()},
            align=_pos_int(d.get("align", 1), "align", where),
            pow2_blocks=_bool(d.get("pow2_blocks", False), "pow2_blocks", where),
            min_block_k=_pos_int(d.get("min_block_k", 1), "min_block_k", where),
            min_block_m=_pos_int(d.get("min_block_m", 1), "min_block_m", where),
            min_block_m_deep=_pos_int(d.get("min_block_m_deep", 1), "min_block_m_deep", where),
            min_gain=(None if d.get("min_gain") is None else
                      _fraction(d["min_gain"], "min_gain", where)),
            max_levels=(None if d.get("max_levels") is None else
                        _pos_int(d["max_levels"], "max_levels", where)),
            plan_forms=_plan_forms(d.get("plan_forms", ["per-product", "grouped"]), where),
            auto_schemes=_auto_schemes(d.get("auto_schemes"), where),
            memory=(None if d.get("memory") is None else _pos_int(d["memory"], "memory", where)),
            iree_profile=_optional_name(d.get("iree_profile"), "iree_profile", where),
            product_blocks=(None if d.get("product_blocks") is None else
                            ProductBlocks.from_json(d["product_blocks"], where)))

    def save(self, path) -> None:
        """Write the profile as JSON to ``path`` atomically
        (:func:`falcon_mlir.files.write_atomic`).

        Raises:
            OSError: the file cannot be written (no file is left behind).
        """
        from falcon_mlir.files import write_atomic

        write_atomic(str(path), (json.dumps(self.to_dict(), indent=1) + "\n").encode())


@lru_cache(maxsize=65536)
def _rate(table, M: float, N: float, K: float) -> float:
    """:meth:`Profile.gemm_rate` on one ``((n, FLOP/s), ...)`` table (memoized)."""
    n = max(1.0, (M * N * K) ** (1.0 / 3.0), max(M * K, K * N, M * N) ** 0.5)
    if n <= table[0][0]:
        return table[0][1]
    if n >= table[-1][0]:
        return table[-1][1]
    for (n0, r0), (n1, r1) in zip(table, table[1:]):
        if n0 <= n <= n1:
            t = (math.log(n) - math.log(n0)) / (math.log(n1) - math.log(n0))
            return math.exp(math.log(r0) + t * (math.log(r1) - math.log(r0)))
    return table[-1][1]  # pragma: no cover - table is sorted


def _need(parent, key: str, kind, where: str, path: str = ""):
    """``parent[key]``, checked: a positive finite number (``kind`` float; returned as a float) or
    an instance of ``kind``; ``path`` prefixes the field's name in the error."""
    if not isinstance(parent, dict) or key not in parent:
        raise ProfileError(f"{where}: missing field '{path}{key}'")
    v = parent[key]
    if kind is float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or \
                not math.isfinite(v) or v <= 0:
            raise ProfileError(f"{where}: field '{path}{key}' must be a positive number")
        return float(v)
    if not isinstance(v, kind):
        raise ProfileError(f"{where}: field '{path}{key}' must be a {kind.__name__}")
    return v


def _gemm_tables(dtypes: dict, where: str) -> tuple:
    """(gemm, add) of the ``dtypes`` field: per key its sorted ``(n, FLOP/s)`` table and, where given,
    its combine add rate."""
    gemm, add = {}, {}
    for key, entry in dtypes.items():
        table = _need(entry, "gemm", list, where, f"dtypes.{key}.")
        pts = []
        for i, p in enumerate(table):
            if not (isinstance(p, (list, tuple)) and len(p) == 2 and
                    all(isinstance(x, (int, float)) and not isinstance(x, bool)
                        and math.isfinite(x) and x > 0 for x in p)):
                raise ProfileError(f"{where}: dtypes.{key}.gemm[{i}] must be "
                                   "[n, FLOP/s] with positive numbers")
            pts.append((float(p[0]), float(p[1])))
        if not pts:
            raise ProfileError(f"{where}: dtypes.{key}.gemm is empty")
        if len(pts) > MAX_TABLE:
            raise ProfileError(f"{where}: dtypes.{key}.gemm has {len(pts)} points "
                               f"(at most {MAX_TABLE})")
        gemm[key] = tuple(sorted(pts))
        if "add" in entry:
            add[key] = _need(entry, "add", float, where, f"dtypes.{key}.")
    return gemm, add


def _checked_fields(d: dict, where: str) -> tuple:
    """(forms, caches, cores, kind) of a profile dict, checked (and its string fields)."""
    forms = d.get("forms", {})
    if not isinstance(forms, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            and v > 0 for v in forms.values()):
        raise ProfileError(f"{where}: field 'forms' must map names to positive numbers")
    caches = d.get("caches", {})
    if not isinstance(caches, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for v in caches.values()):
        raise ProfileError(f"{where}: field 'caches' must map names to sizes in bytes "
                           "(non-negative integers)")
    cores = d.get("cores", 0)
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 0:
        raise ProfileError(f"{where}: field 'cores' must be a non-negative integer")
    for key in ("name", "source", "provenance", "device"):
        if key in d and not isinstance(d[key], str):
            raise ProfileError(f"{where}: field '{key}' must be a string")
    kind = d.get("kind", "cpu")
    if kind not in ("cpu", "gpu"):
        raise ProfileError(f"{where}: field 'kind' must be 'cpu' or 'gpu'")
    return forms, caches, cores, kind


def _plan_forms(v, where: str) -> Tuple[str, ...]:
    from falcon_mlir.dialects.plan import FORMS

    if not isinstance(v, list) or not v or not all(isinstance(f, str) and f in FORMS for f in v):
        raise ProfileError(f"{where}: field 'plan_forms' must be a non-empty list of "
                           f"{', '.join(FORMS)}")
    return tuple(v)


def _auto_schemes(v, where: str) -> Optional[Tuple[str, ...]]:
    if v is None:
        return None
    if not isinstance(v, list) or not v or not all(isinstance(n, str) and n for n in v):
        raise ProfileError(f"{where}: field 'auto_schemes' must be a non-empty list of "
                           "catalog names")
    return tuple(v)


def _optional_name(v, name: str, where: str) -> Optional[str]:
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        raise ProfileError(f"{where}: field {name!r} must be a profile name or path, got {v!r}")
    return v


def _pos_int(v, name: str, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ProfileError(f"{where}: field '{name}' must be a positive integer")
    return v


def _bool(v, name: str, where: str) -> bool:
    if not isinstance(v, bool):
        raise ProfileError(f"{where}: field '{name}' must be true or false")
    return v


def _fraction(v, name: str, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 10:
        raise ProfileError(f"{where}: field '{name}' must be a number in [0, 10)")
    return float(v)


def _host_caches() -> Dict[str, int]:
    """Cache sizes of CPU 0 from /sys (bytes); empty where unknown."""
    out = {}
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for idx in sorted(base.glob("index*")):
            level = (idx / "level").read_text().strip()
            typ = (idx / "type").read_text().strip()
            size = (idx / "size").read_text().strip()
            mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(size[-1:], 1)
            val = int(size.rstrip("KMG")) * mult
            if typ == "Instruction":
                continue
            out["l1d" if level == "1" else f"l{level}"] = val
    except (OSError, ValueError):
        pass
    return out


def _load_cached(spec: str) -> Profile:
    """A preset, or a file (cached by path, size and modification time, so an edited
    file is read again)."""
    if spec in PRESETS:
        return _load_key(spec, None)
    try:
        st = os.stat(spec)
    except OSError as e:
        raise ProfileError(f"cannot read profile {spec!r}: {e.strerror or e} (presets: "
                           f"{', '.join(sorted(PRESETS))})") from None
    import stat as _stat

    if not _stat.S_ISREG(st.st_mode):
        raise ProfileError(f"cannot read profile {spec!r}: not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise ProfileError(f"{spec}: a profile is at most {MAX_FILE_BYTES} bytes "
                           f"(this file has {st.st_size})")
    return _load_key(spec, (st.st_size, st.st_mtime_ns))


@lru_cache(maxsize=32)
def _load_key(spec: str, stamp) -> Profile:
    if spec in PRESETS:
        text = resources.files("falcon_mlir.decision").joinpath(
            "profiles", PRESETS[spec]).read_text()
        prof = Profile.from_dict(json.loads(text), where=f"preset {spec}")
        if spec == "host":
            caches = _host_caches() or prof.caches
            prof = Profile(**{**prof.__dict__, "name": "host",
                              "cores": os.cpu_count() or prof.cores, "caches": caches,
                              "provenance": prof.provenance + "; cores and caches of this host"})
        return prof
    path = Path(spec)
    try:
        text = path.read_bytes()[:MAX_FILE_BYTES + 1].decode("utf-8")
    except OSError as e:
        raise ProfileError(f"cannot read profile {spec!r}: {e.strerror or e} (presets: "
                           f"{', '.join(sorted(PRESETS))})") from None
    except UnicodeDecodeError as e:
        raise ProfileError(f"{spec}: not UTF-8 text (byte {e.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProfileError(f"{spec}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    except RecursionError:
        raise ProfileError(f"{spec}: JSON nested too deeply") from None
    return Profile.from_dict(data, where=spec)


def load_profile(spec: Optional[str] = None) -> Profile:
    """The profile named by ``spec``: a preset name, or a path to a profile JSON file.

    ``None`` or ``"host"``: ``$FALCON_PROFILE`` if set (a path or a preset),
    else the x86 host preset (the development machine's measured figures,
    with this host's core count and cache sizes).

    Raises:
        ProfileError: unknown name, unreadable file, invalid JSON (with
            ``file:line:col``) or a malformed field.
    """
    if spec is None or spec == "host":
        env = os.environ.get("FALCON_PROFILE")
        if env:
            try:
                return load_profile(env) if env != "host" else _load_cached("host")
            except ProfileError as e:
                raise ProfileError(f"$FALCON_PROFILE: {e}") from None
        spec = "host"
    if not spec or not spec.strip():
        raise ProfileError("target needs a value: a preset name "
                           f"({', '.join(sorted(PRESETS))}) or a profile .json path")
    if spec not in PRESETS and not (spec.endswith(".json") or os.sep in spec
                                    or Path(spec).exists()):
        raise ProfileError(f"unknown target profile {spec!r} (presets: "
                           f"{', '.join(sorted(PRESETS))}; or a path to a profile .json)")
    return _load_cached(spec)


def preset_names() -> List[str]:
    """Names of the shipped presets (sorted)."""
    return sorted(PRESETS)
