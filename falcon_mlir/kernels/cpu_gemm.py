"""falcon's own f32 GEMM for x86-64 CPUs with AVX-512, or with AVX2 and FMA: generated C, compiled by gcc to an object file.

Why: IREE 3.13's CPU GEMM (data tiling + the mmt4d ukernel) computes one
16 x 16 tile of C per workgroup over the whole K with no cache blocking; on a
Zen 5 it runs at 419-433 GFLOP/s at 1024-2048 but 251-264 at 4096-8192, where
packed B outgrows the L3. This kernel is the BLIS design instead
(docs/kernels.md, "falcon's own CPU GEMM kernel"):

* **Entry points**, each called once per IREE workgroup
  (:mod:`falcon_mlir.kernels.cpu_embed` builds the dispatches), their names
  followed by the blocking (:func:`entry_names`: an object of another
  blocking does not link). The classical pair, for row-major ``C = A @ B``
  (this ABI is fixed: names and arguments as below):

  - ``falcon_cpu_pack_b(B, Bp, M, N, K, wg)``: B (``K x N`` row-major) into
    ``ceil(N/NR)`` panels of ``K x NR`` (``Bp[j][k][r] = B[k][j*NR + r]``,
    zero past N); workgroup ``wg`` packs rows ``[wg*PACK_ROWS, ...)``.
  - ``falcon_cpu_gemm(A, Bp, C, S, M, N, K, wg_m, wg_n)``: the ``MC x NC``
    block ``(wg_m, wg_n)`` of ``C = A @ B`` (A ``M x K`` row-major, C
    ``M x N`` row-major). K runs in blocks of ``KC``; for each, the block's
    A rows are packed into the workgroup's own slot of the scratch buffer S
    (``MC`` rows of ``KC + 16`` floats: a plain row copy, zero rows past M;
    the padding line spreads the rows over L1's sets), then for
    every ``NR``-column B micro-panel (``KC x NR``, L1-resident) the
    micro-kernel runs down the ``MC`` rows (A micro-panels from L2).

  The general pair (:func:`general_entry_names`, ``falcon_cpu_general_...``)
  reads transposed operands and runs batches: ``falcon_cpu_general_pack_b(B,
  Bp, N, K, trans_b, wg, wg_b)`` packs entry ``wg_b`` of B, stored ``N x K``
  where ``trans_b`` is 1 (``Bp[j][k][r] = Bt[j*NR + r][k]``);
  ``falcon_cpu_general_gemm(A, Bp, C, S, M, N, K, trans_a, batch, wg_m,
  wg_n, wg_b, n_wg_b)`` packs A stored ``K x M`` where ``trans_a`` is 1
  (``ap[i][k] = At[p0 + k][i0 + i]``). A batch is a leading dimension of
  A, B and C alike (entries ``M K``, ``K N``, ``M N`` floats apart, packed
  B's ``packed_b_floats(N, K)``): the pack's workgroup y is the entry, the
  GEMM's workgroup z (``wg_b`` of ``n_wg_b``, :func:`batch_groups`) runs
  entries ``wg_b, wg_b + n_wg_b, ...`` for its block of C, so the scratch
  (one packed-A slot per workgroup) does not grow with the batch. The packs do the transpose, in
  16 x 16 blocks in zmm registers (``tile16``: unpack and 128-bit lane
  shuffles; whole cache lines read along the stored rows, whole packed rows
  written), so the packed formats, and the micro-kernel, are the plain ones.
  The layout is a run-time flag rather than an entry point per layout: it
  picks the pack routine once per pack call (per ``KC x MC`` block of A, per
  ``PACK_ROWS`` rows of B), which costs nothing next to the copy, and one
  export pair then serves the three transposed layouts (the plain one keeps
  the classical pair). The LCMA pair (:mod:`.cpu_plan`) takes the same
  flags.

* **Micro-kernel.** ``MR x NR`` of C in ``MR * NR/16`` zmm accumulators
  (14 x 32: 28 registers); each k step loads ``NR/16`` vectors of B and
  broadcasts ``MR`` elements of A (one pointer, the rows at constant
  displacements), one fused multiply-add per accumulator. It first
  prefetches its C tile into L2, and each k step one line of the next B
  micro-panel (C and B live in L3 or memory at large sizes: single-thread
  2048^3 went from 130 to 175 GFLOP/s).
  The first K block stores C, later ones add to it; edge tiles (rows past M,
  columns past N) store through masks.

* **ABI** (IREE 3.13, ``hal.import.static``): each ``memref<?xf32>`` arrives
  as five values (allocated pointer, aligned pointer, offset, size, stride);
  the kernel uses ``aligned + offset``. Then the ``index`` operands as
  ``size_t``. No libc, no globals, no calls (``-ffreestanding``,
  ``-fno-tree-loop-distribute-patterns``); stack use is under 2 KB (the LCMA
  GEMM's term arrays; the classical entries a few hundred bytes: IREE's
  workers have small stacks, all buffers are bindings).

The sizes M, N, K are run-time arguments, so one object serves every shape
of a configuration. Compiled with ``$FALCON_CC`` or ``gcc``
(:func:`falcon_mlir.kernels.cpu_source.compile_object`), cached by source hash under
``~/.cache/falcon-mlir/cpu`` (``$FALCON_KERNEL_CACHE/cpu`` when set). The
object needs AVX-512 F/BW/DQ/VL on the machine that runs it (:func:`falcon_mlir.kernels.cpu_object.host_has_avx512`).

**The AVX2 build** (``CpuGemmConfig.isa = "avx2"``, docs/kernels.md *The AVX2 build of the CPU kernel*): the same source
with 8-float ymm vectors (a 6 x 16 micro-kernel, 12 accumulators), vector masks for the edges, an
element-wise 16 x 16 transpose, compiled for x86-64-v3 (AVX2, FMA); its blockings :data:`AVX2_CONFIG`,
:data:`AVX2_SMALL_CONFIG`, :data:`AVX2_PLAN_CONFIG`, and the choices below take ``isa``.

This module holds the kernel's Python side: the blocking (:class:`CpuGemmConfig`), the entry
points' names, the choices of blocking and form per shape, and the buffers' sizes. The C source of
the eight entry points is :mod:`falcon_mlir.kernels.cpu_source`, its compile and cache
:mod:`falcon_mlir.kernels.cpu_object`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction

from .spec import DictFields

#: Entry symbols of the object: these, then the blocking (:func:`entry_names`).
PACK_B_NAME = "falcon_cpu_pack_b"
GEMM_NAME = "falcon_cpu_gemm"
#: Terms (blocks with a coefficient) an LCMA product's operand sums or destinations may have: the
#: entries take this many term arguments (2x2 schemes to three levels).
MAX_TERMS = 8


#: Floats per vector register of each ISA the kernel is written for.
ISA_WIDTH = {"avx512": 16, "avx2": 8}
#: Accumulator registers the micro-kernel may take: of 32 zmm, 28 (B's vectors and A's broadcast take
#: the rest); of 16 ymm, 12 (6 x 16: two B vectors and one broadcast beside them).
MAX_ACCUMULATORS = {"avx512": 28, "avx2": 12}


@dataclass(frozen=True)
class CpuGemmConfig(DictFields):
    """The kernel's blocking, in elements.

    ``isa``: the vector instructions, ``avx512`` (zmm registers, 16 floats) or
    ``avx2`` (ymm, 8 floats; AVX2 and FMA, the x86-64-v3 level).
    ``mr x nr``: the micro-kernel's tile of C (``nr`` a multiple of 16, a
    cache line; ``mr * nr / width`` accumulators, at most :data:`MAX_ACCUMULATORS`
    of the ISA). ``kc``: K block (the
    ``kc x nr`` B micro-panel stays in L1). ``mc x nc``: one workgroup's block
    of C (``mc`` a multiple of ``mr``, ``nc`` of ``nr``; the ``mc x kc`` A
    block stays in L2). ``pack_rows``: rows of B per pack workgroup.

    Raises:
        ValueError: a field out of range or not a multiple as above.
    """

    mr: int = 14
    nr: int = 32
    kc: int = 256
    mc: int = 112
    nc: int = 512
    pack_rows: int = 16
    isa: str = "avx512"

    def __post_init__(self):
        if self.isa not in ISA_WIDTH:
            raise ValueError(f"CpuGemmConfig.isa must be one of {', '.join(ISA_WIDTH)}, got {self.isa!r}")
        for name in ("mr", "nr", "kc", "mc", "nc", "pack_rows"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"CpuGemmConfig.{name} must be a positive int, got {v!r}")
        width, most = ISA_WIDTH[self.isa], MAX_ACCUMULATORS[self.isa]
        if self.nr % 16 or self.mr * (self.nr // width) > most:
            raise ValueError(f"CpuGemmConfig: nr={self.nr} must be a multiple of 16 with mr*nr/{width} <= {most} "
                             f"(mr={self.mr}, {self.isa})")
        if self.mc % self.mr or self.nc % self.nr:
            raise ValueError(f"CpuGemmConfig: mc={self.mc} must be a multiple of mr={self.mr} and "
                             f"nc={self.nc} of nr={self.nr}")

    @property
    def label(self) -> str:
        """``cpu14x32,k256,112x512``: the report's name for this kernel and blocking (``,avx2`` after it
        for the AVX2 kernel)."""
        return f"cpu{self.mr}x{self.nr},k{self.kc},{self.mc}x{self.nc}" + ("" if self.isa == "avx512" else f",{self.isa}")


def general_entry_names(config: "CpuGemmConfig") -> tuple:
    """``(pack-B symbol, GEMM symbol)`` of the general classical entries for ``config`` (transposed A or
    B as run-time flags): the classical names with ``general`` after ``falcon_cpu``."""
    return tuple(name.replace("falcon_cpu_", "falcon_cpu_general_", 1) for name in entry_names(config))


def lcma_entry_names(config: "CpuGemmConfig") -> tuple:
    """``(pack-B symbol, GEMM symbol)`` of the LCMA product entries (:mod:`.cpu_plan`) for ``config``:
    the classical names with ``lcma`` after ``falcon_cpu``."""
    return tuple(name.replace("falcon_cpu_", "falcon_cpu_lcma_", 1) for name in entry_names(config))


def fused_entry_name(config: "CpuGemmConfig") -> str:
    """The symbol of the classical GEMM that packs B itself, panel by panel (one dispatch,
    :func:`fuse_b_inside`): the classical GEMM's name with ``fgemm`` for ``gemm``."""
    return entry_names(config)[1].replace(f"{GEMM_NAME}_", f"{GEMM_NAME.replace('gemm', 'fgemm')}_", 1)


def lcma_fused_entry_name(config: "CpuGemmConfig") -> str:
    """The symbol of the LCMA product GEMM that sums and packs B itself, panel by panel (one dispatch per
    product, :func:`plan_b_inside`): the classical fused GEMM's name with ``lcma`` after ``falcon_cpu``."""
    return fused_entry_name(config).replace("falcon_cpu_", "falcon_cpu_lcma_", 1)


def entry_names(config: "CpuGemmConfig") -> tuple:
    """``(pack-B symbol, GEMM symbol)`` of the object for ``config``, e.g.
    ``falcon_cpu_gemm_14x32_k256_112x512_p16``: the blocking is compiled into the object and
    the module's grid and buffers follow it, so an object of another blocking must not link."""
    c = config
    sfx = f"{c.mr}x{c.nr}_k{c.kc}_{c.mc}x{c.nc}_p{c.pack_rows}" + ("" if c.isa == "avx512" else f"_{c.isa}")
    return f"{PACK_B_NAME}_{sfx}", f"{GEMM_NAME}_{sfx}"


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


#: The blocking for shapes with few 112 x 512 blocks of C: more, smaller workgroups balance IREE's
#: two workers better (1024^3: best call 6.0 ms against 6.7 ms with 112 x 512).
SMALL_CONFIG = CpuGemmConfig(mc=28, nc=256)
#: Fewer 112 x 512 blocks than this: :data:`SMALL_CONFIG` (4096^3 ran 3-5% faster on 112 x 512).
MIN_BLOCKS = 40

#: The AVX2 kernel's blockings (the 6 x 16 micro-kernel: 12 ymm accumulators), in the roles of
#: ``CpuGemmConfig()``, :data:`SMALL_CONFIG` and :data:`PLAN_CONFIG` (below). Measured on a 2-core
#: AMD EPYC (Zen 3) VM, 2026-12-03 (docs/kernels.md, *The AVX2 build of the CPU kernel*).
AVX2_CONFIG = CpuGemmConfig(mr=6, nr=16, kc=256, mc=96, nc=512, isa="avx2")
AVX2_SMALL_CONFIG = CpuGemmConfig(mr=6, nr=16, kc=256, mc=24, nc=256, isa="avx2")
AVX2_PLAN_CONFIG = CpuGemmConfig(mr=6, nr=16, kc=384, mc=48, nc=512, isa="avx2")


def default_config(isa: str = "avx512") -> CpuGemmConfig:
    """The default blocking of the ``isa`` kernel (``CpuGemmConfig()`` for AVX-512, :data:`AVX2_CONFIG`).

    Raises:
        ValueError: ``isa`` is not one of :data:`ISA_WIDTH`."""
    if isa not in ISA_WIDTH:
        raise ValueError(f"no CPU kernel for ISA {isa!r} (one of {', '.join(ISA_WIDTH)})")
    return AVX2_CONFIG if isa == "avx2" else CpuGemmConfig()


def choose_config(M: int, N: int, K: int, batch: int = 1, isa: str = "avx512") -> CpuGemmConfig:
    """The blocking for ``M x N x K`` (``batch`` of them) on the ``isa`` kernel: the default blocks of C
    (:func:`default_config`) when there are at least :data:`MIN_BLOCKS` of them (counted over the batch:
    the workgroups to balance are those of the whole batch), else the small one (:data:`SMALL_CONFIG`,
    :data:`AVX2_SMALL_CONFIG`; measured on the 2-core Zen 5 at batch 1, docs/kernels.md).

    Raises:
        ValueError: ``isa`` is not one of :data:`ISA_WIDTH`."""
    big = default_config(isa)
    small = AVX2_SMALL_CONFIG if isa == "avx2" else SMALL_CONFIG
    return big if batch * _ceil(M, big.mc) * _ceil(N, big.nc) >= MIN_BLOCKS else small


#: The classical GEMM packs B inside itself (:func:`fuse_b_inside`) up to this many rows of A ...
FUSED_MAX_M = 1024
#: ... where B has at least this many elements (N K) ...
FUSED_MIN_B = 6_000_000
#: ... and there are at least this many panels of :data:`FUSED_PANEL_COLS` columns (workgroups to share) ...
FUSED_MIN_PANELS = 2
#: ... counted in the width the rule was measured with (the default blocking's ``nc``), whatever the
#: blocking the GEMM is given: counted in the given ``nc``, :data:`SMALL_CONFIG`'s 256-column panels let
#: N of 257-512 through, and :func:`classical_config`'s 28 x 256 for 64x512x16384 ran B inside end to
#: end (2026-12-03), a blocking B inside was never measured faster on (0.91-0.97x where tried).
FUSED_PANEL_COLS = 512
#: ... and K is at least the default blocking's K block. Each workgroup's scratch is a whole ``kc x nc``
#: panel and a packed-A slot whatever K is: at 14x200003x31 (391 workgroups) 252 MB of scratch for a B
#: of 25 MB, where the two-dispatch form packs B's own 25 MB. Shapes below it were never measured
#: with B inside; those measured had K of 2048 and more.
FUSED_MIN_K = 256
#: ... and, above :data:`FUSED_BALANCE_FREE_M` rows, the panels (one workgroup each) share out evenly over
#: the workers: at least this fraction of the workers' rounds busy, ``p / (ceil(p / w) w)`` for ``p``
#: panels on ``w`` workers (:func:`fuse_b_inside`).
FUSED_MIN_BALANCE = Fraction(9, 10)
#: Rows up to which B goes inside however the panels share out (the pass over B is then the larger part
#: that B inside saves: 512x2304x4096, 5 panels on 2 workers, ran 1.09x faster inside).
FUSED_BALANCE_FREE_M = 512


#: IREE's local-task device starts at most this many workers by default (``--task_topology_max_group_count``).
MAX_WORKERS = 64


def workers(sys_cpu: str = "/sys/devices/system/cpu") -> int:
    """The workers IREE's local-task device shares the kernel's workgroups among by default: one per
    physical core (``--task_topology_mode=physical_cores``), counted as the distinct ``(package, core)``
    pairs of the CPUs this process may run on (``sys_cpu``'s ``topology``), at most :data:`MAX_WORKERS`;
    ``os.cpu_count()`` where the topology cannot be read; at least 1. (IREE also keeps to the current
    NUMA node; not modelled.) The machine that compiles is taken for the one that runs."""
    import os

    try:
        cpus = os.sched_getaffinity(0)
        cores = set()
        for c in cpus:
            topo = f"{sys_cpu}/cpu{c}/topology"
            with open(f"{topo}/physical_package_id") as f, open(f"{topo}/core_id") as g:
                cores.add((f.read().strip(), g.read().strip()))
        n = len(cores)
    except (OSError, AttributeError):
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_WORKERS))


def fuse_b_inside(M: int, N: int, K: int, config: CpuGemmConfig, n_workers: int = 0) -> bool:
    """Whether the classical GEMM ``M x N x K`` (plain layout, no batch) runs as one dispatch that packs
    B itself, a ``kc x nc`` panel at a time into the workgroup's scratch just before the micro-kernels
    use it (the BLIS loop order: one workgroup per ``nc`` columns of C, over all of M), instead of a pack
    dispatch that writes all of packed B to memory and a GEMM that reads each ``nc``-column stripe of it
    once per block of rows.

    Where M is small and B large the pass over B is a large part of the work and does not speed up with
    the cores. Measured inside IREE on the 2-core Xeon with the default 112 x 512 blocking (2026-12-03,
    docs/kernels.md, *B packed inside the GEMM*): 512x7168x2048 1.55x, 512x2048x7168 1.33-1.40x,
    512x4096x3584 1.13-1.36x, 1024x4096x4096 1.13-1.15x, 1024x2560x2560 1.11-1.13x, 1024x5120x5120
    1.05-1.08x faster; slower where B is small (512x2048x2048 0.93-0.97x, 1024x1024x4096 0.91-0.93x) and
    at M = 2048 (0.93x). So: ``M <= FUSED_MAX_M``, ``N K >= FUSED_MIN_B``, at least
    ``FUSED_MIN_PANELS`` panels of ``FUSED_PANEL_COLS`` (512) columns, and ``K >= FUSED_MIN_K`` (the
    scratch's size, not its speed). (An LCMA plan's products have a rule of their own,
    :func:`plan_inside_columns`: measured on the Xeon with the classical entries they ran no faster, on
    the Zen 4 with the LCMA entry that sums B's terms inside they did.)

    And the panels balance over the workers (``n_workers``, default :func:`workers`): B inside has one
    workgroup per panel, so ``p`` panels on ``w`` workers keep them busy ``p / (ceil(p / w) w)`` of the
    rounds, where the two-dispatch form has ``ceil(M / mc)`` times as many workgroups. Above
    ``FUSED_BALANCE_FREE_M`` rows that share must be at least ``FUSED_MIN_BALANCE``. Measured on a 2-core
    Zen 4, 2026-12-04 (``scripts/cpu_b_inside_bench.py`` after its fix: the Xeon's figures above were
    taken with numpy's OpenBLAS threads still spinning into the two-dispatch calls), two / inside at
    M = 1024: 3 panels (1024x1536x7168) 0.74, 5 (1024x2560x2560) 0.89, 7 (1024x3584x3584) 0.95, 6
    (1024x3072x3072) 0.99, 9 (1024x4544x4544) 1.04, 10 (1024x5120x5120) 1.09, 8 (1024x4096x4096) 1.10;
    at M = 512, 5 panels (512x2304x4096) 1.09, 8 and 14 1.19 and 1.27. What the rule leaves open: it counts
    panels, not columns (a last panel of one column counts as a whole one: 1024x2561x2561 is 6 panels
    and goes inside, 1024x2049x4096 is 5 and does not); 9/10 rests on M = 1024 and 512 on one shape at
    M = 512, both on two workers; on many workers (16 and up) it leaves B inside to few shapes above 512
    rows, never measured there; where B stays out, M of 513-1024 with fewer than :data:`MIN_BLOCKS`
    blocks runs on the small blocking (:func:`classical_config`), the measurements above on 112 x 512
    (falcon-bench's 1024x1536x7168 ran the small one: 124 ms against 152-166 ms B inside).

    The rule is one of the shape and the workers alone: ``config`` (the blocking the GEMM runs with, its
    workgroups ``config.nc`` columns wide) does not change it, so :func:`cpu_embed.dispatch_lines` asked
    with the blocking :func:`classical_config` gave answers as :func:`classical_config` did.

    Raises:
        ValueError: ``n_workers`` is negative."""
    if n_workers < 0:
        raise ValueError(f"fuse_b_inside: n_workers must be >= 0 (0: workers()), got {n_workers}")
    panels, w = _ceil(N, FUSED_PANEL_COLS), n_workers or workers()
    balanced = M <= FUSED_BALANCE_FREE_M or panels >= FUSED_MIN_BALANCE * _ceil(panels, w) * w
    return (M <= FUSED_MAX_M and N * K >= FUSED_MIN_B and panels >= FUSED_MIN_PANELS and K >= FUSED_MIN_K
            and balanced)


def b_inside(M: int, N: int, K: int, trans_a: bool = False, trans_b: bool = False, batch: int = 1) -> bool:
    """Whether the classical GEMM ``M x N x K`` (A stored ``K x M`` where ``trans_a``, B ``N x K`` where
    ``trans_b``, ``batch`` of them) runs as the one dispatch ``@fgemm`` that packs B inside
    (:func:`fuse_b_inside`; the plain layout at batch 1 only), not as two (pack B, then the GEMM)."""
    return not (trans_a or trans_b or batch > 1) and fuse_b_inside(M, N, K, CpuGemmConfig())


def classical_config(M: int, N: int, K: int, batch: int = 1, trans_a: bool = False,
                     trans_b: bool = False, isa: str = "avx512") -> CpuGemmConfig:
    """The blocking of a classical GEMM on falcon's ``isa`` kernel: the default (:func:`default_config`)
    where B is packed inside (:func:`b_inside`; measured with that blocking), else :func:`choose_config`.

    Raises:
        ValueError: ``isa`` is not one of :data:`ISA_WIDTH`."""
    if b_inside(M, N, K, trans_a, trans_b, batch):
        return default_config(isa)
    return choose_config(M, N, K, batch, isa)


def fused_scratch_floats(N: int, config: CpuGemmConfig) -> int:
    """Floats of the B-inside GEMM's scratch: per workgroup (``ceil(N / nc)``) one ``kc x nc`` panel of
    packed B and one packed-A slot (:func:`fused_slot_floats`)."""
    return _ceil(N, config.nc) * fused_slot_floats(config)


def fused_slot_floats(config: CpuGemmConfig) -> int:
    """Floats of one workgroup's scratch in the B-inside GEMM: a ``kc x nc`` panel, a packed-A slot."""
    return config.kc * config.nc + config.mc * (config.kc + 16)


def lcma_fused_scratch_floats(M: int, N: int, config: CpuGemmConfig) -> int:
    """Floats of the scratch of an LCMA product ``M x N`` run with B inside (:func:`plan_b_inside`): per
    workgroup (``ceil(N / nc)``) a :func:`fused_slot_floats` slot and the product's private ``M x nc``
    tile (its K blocks but the last accumulate there where it has several destinations)."""
    return _ceil(N, config.nc) * (fused_slot_floats(config) + M * config.nc)


#: The blocking of an LCMA plan's products (:mod:`.cpu_plan`) where :func:`choose_config` takes the
#: default: a longer K block and shorter row blocks. Each K block of a product re-reads its A terms and
#: adds into its destinations (through the private tile), so fewer, longer K blocks pay there; 4096^3
#: Strassen (7 products of 2048^3) ran 312-322 ms against 332-360 ms on the default blocking, the
#: classical kernel itself no faster with it (374 against 377 ms), 2026-12-02 (docs/kernels.md).
PLAN_CONFIG = CpuGemmConfig(kc=384, mc=56)


#: An LCMA plan's products run with B summed and packed inside (:func:`plan_b_inside`) up to this many
#: rows (the product's M block) ...
PLAN_FUSED_MAX_M = 512
#: ... and, of the two panel widths, the wider where it gives each worker at least this many panels.
PLAN_FUSED_WIDE_ROUNDS = 4


def plan_inside_columns(M: int, N: int, K: int, isa: str = "avx512", n_workers: int = 0) -> int:
    """The panel width (``nc``: 512 or 256 columns) an LCMA plan's ``M x N x K`` products run with B summed
    and packed inside the GEMM (``lcma_fgemm``, one dispatch per product, one workgroup per panel over all
    M rows), or 0 where they run as two dispatches (``lcma_pack_b`` writes the summed B, ``lcma_gemm``
    reads it once per block of rows). Plain layout at batch 1 and the AVX-512 kernel only (the caller
    checks the layout; the AVX2 build was not measured this way).

    Inside where ``M <= PLAN_FUSED_MAX_M``, the block of B is large (``N K >= FUSED_MIN_B``, ``K >=
    FUSED_MIN_K``, the classical rule's figures) and the panels share out evenly over the workers
    (``n_workers``, default :func:`workers`; at least ``FUSED_MIN_BALANCE`` of the rounds busy, as
    :func:`fuse_b_inside`); 512 columns where that gives at least ``PLAN_FUSED_WIDE_ROUNDS`` panels per
    worker, else 256. Measured on a 2-core Zen 4, 2026-12-04 (Strassen, one level, against the classical
    kernel, ``scripts/cpu_plan_inside_bench.py``; docs/kernels.md, *LCMA products with B inside*): with B
    inside on 256 columns 1024x4096x14336 1.072x (two dispatches 1.020x), 1024x7168x16384 1.087x
    (0.888x), 768x4096x14336 1.051x (0.949x), 512x4096x14336 1.007x (0.861x); on 512 columns
    1024x14336x4096 1.167x (1.164x), 768x14336x4096 1.174x (1.078x), 512x14336x4096 1.098x (0.996x), where
    256 columns ran 0.99-1.04x; 256 and 512 columns trade places by 2-3% from run to run at 2048-wide
    blocks (4 panels of 512). Two dispatches stayed faster at 1024-row blocks (2048x14336x4096 1.085x
    against 0.94-1.02x inside, 2048x4096x4096 1.149x against 1.10-1.14x) and at two of three small blocks of
    B (1024x3584x3584 1.060x against 0.95-0.97x, 1024x1536x7168 0.946x against 0.77-0.82x; at
    1024x2048x7168, 3.7M elements, inside ran 1.07-1.08x against 1.064x, and the classical rule's 6M keeps
    it out).

    Raises:
        ValueError: ``n_workers`` is negative."""
    if n_workers < 0:
        raise ValueError(f"plan_inside_columns: n_workers must be >= 0 (0: workers()), got {n_workers}")
    if isa != "avx512" or M > PLAN_FUSED_MAX_M or N * K < FUSED_MIN_B or K < FUSED_MIN_K:
        return 0
    w = n_workers or workers()
    balanced = lambda p: p >= FUSED_MIN_BALANCE * _ceil(p, w) * w  # noqa: E731
    wide = _ceil(N, 512)
    if wide >= PLAN_FUSED_WIDE_ROUNDS * w and balanced(wide):
        return 512
    narrow = _ceil(N, 256)
    return 256 if narrow >= w and balanced(narrow) else 0


def plan_b_inside(M: int, N: int, K: int, isa: str = "avx512", n_workers: int = 0) -> bool:
    """Whether an LCMA plan's ``M x N x K`` products (plain layout, batch 1) run with B summed and packed
    inside the GEMM: :func:`plan_inside_columns` is not 0.

    Raises:
        ValueError: ``n_workers`` is negative."""
    return plan_inside_columns(M, N, K, isa, n_workers) > 0


def choose_plan_config(M: int, N: int, K: int, batch: int = 1, isa: str = "avx512",
                       b_inside: bool = False) -> CpuGemmConfig:
    """The blocking for an LCMA plan's ``M x N x K`` products (``batch`` of each) on the ``isa`` kernel:
    with B inside (``b_inside``) the default blocking on :func:`plan_inside_columns`' panels (512
    columns where it names none: a forced choice); else
    :data:`PLAN_CONFIG` (:data:`AVX2_PLAN_CONFIG`) where :func:`choose_config` takes the default
    blocking, else its small one.

    Raises:
        ValueError: ``isa`` is not one of :data:`ISA_WIDTH`."""
    if b_inside:
        nc = plan_inside_columns(M, N, K, isa) if batch == 1 else 0
        return dataclasses.replace(default_config(isa), nc=nc or default_config(isa).nc)
    c = choose_config(M, N, K, batch, isa)
    if c != default_config(isa):
        return c
    return AVX2_PLAN_CONFIG if isa == "avx2" else PLAN_CONFIG


def packed_b_floats(N: int, K: int, config: CpuGemmConfig = CpuGemmConfig(), batch: int = 1) -> int:
    """Floats of packed B for ``batch`` ``K x N`` Bs: ``batch * ceil(N/nr) * K * nr``."""
    return batch * _ceil(N, config.nr) * K * config.nr


def grid(M: int, N: int, K: int, config: CpuGemmConfig = CpuGemmConfig()) -> tuple:
    """``(pack workgroups, gemm workgroups along M, gemm workgroups along N)`` for ``M x N x K``.

    The GEMM's workgroup ids are ``(x, y) = (block of M, block of N)``: IREE
    runs x fastest, so consecutive workgroups share one ``K x nc`` column of
    packed B, which then stays in L3 (A's row blocks are the ones read again).
    """
    return _ceil(K, config.pack_rows), _ceil(M, config.mc), _ceil(N, config.nc)


#: Workgroups a batched GEMM aims at (:func:`batch_groups`): enough to balance a many-core host's
#: workers, few enough that the scratch (one slot per workgroup) stays small.
BATCH_WORKGROUPS = 64


def batch_groups(M: int, N: int, batch: int, config: CpuGemmConfig = CpuGemmConfig()) -> int:
    """Workgroups along the batch (IREE's workgroup z) of a batched GEMM: ``min(batch,
    ceil(BATCH_WORKGROUPS / (gm gn)))`` (at least 1); workgroup z runs batch entries ``z, z + gz, ...``.
    One slot of scratch per workgroup, so the scratch is ``gz gm gn`` slots whatever the batch
    (attention's 32 heads of 1024 x 1024 x 128 on 112 x 512 blocks: 20 blocks per entry, gz = 4, 80
    workgroups of 8 entries each and 9.7 MB of scratch, where a workgroup per entry and block would take
    78 MB)."""
    _, gm, gn = grid(M, N, 1, config)
    return max(1, min(batch, _ceil(BATCH_WORKGROUPS, gm * gn)))


def scratch_floats(M: int, N: int, K: int, config: CpuGemmConfig = CpuGemmConfig(), lcma: bool = False,
                   batch: int = 1) -> int:
    """Floats of the GEMM's scratch: one packed-A slot per workgroup (``mc`` rows of ``kc + 16``), and for
    an LCMA product (``lcma``) the workgroup's private ``mc x nc`` tile of the product; ``batch``: the
    workgroups of a batched GEMM (:func:`batch_groups`)."""
    _, gm, gn = grid(M, N, K, config)
    gz = batch_groups(M, N, batch, config)
    return gz * gn * gm * config.mc * (config.kc + 16 + (config.nc if lcma else 0))
