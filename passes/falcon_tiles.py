"""falcon-tiles: per-contraction tile choices for IREE's CUDA code generation.

IREE 3.13's default CUDA tile choices are poor on large matmuls (H200,
8192^3 f32: 271 ms default vs 31.3 ms with a hand-picked choice; f16:
7.39 ms vs 4.62 ms; ``../shared/iree-notes.md``). IREE honours a
``compilation_info`` attribute on a linalg op (a ``lowering_config`` plus a
``translation_info``) in place of its own choice, so this pass attaches one
to every contraction it can serve:

* ``linalg.matmul`` (default or transposed maps), ``linalg.batch_matmul``
  (the grouped form's one batched product over R), and ``linalg.generic``
  contractions with one M, one N and one K loop (any batch loops), static
  shapes; found with :func:`falcon_mlir.ir.contraction.find_contractions`.
* The choice comes from a small table per target and element types
  (:data:`TABLES`): the first entry whose workgroup tile divides M and N and
  whose K step divides K (entries marked ``batched_only`` serve only
  contractions with batch loops). When none fits, the op keeps IREE's default.
  The table's first entries were measured on an H200 (8192^3 and 16384^3,
  ``docs/gpu_tiles_h200.json``); the smaller ones only make smaller shapes
  valid and are not tuned.
* Ops that already carry ``compilation_info`` or ``lowering_config`` are left
  alone.

Pipeline: ``TileAndFuse`` (IREE's own for these ops on sm_80). Two kinds of
choice:

* SIMT (f32): ``workgroup = [TM, TN]`` output elements per workgroup,
  ``thread = [tm, tn]`` elements per thread (``TM/tm * TN/tn`` threads),
  ``reduction = [KT]`` elements of K per step, operands promoted to shared
  memory.
* MMA (f16/bf16 operands, ``mma.sync`` 16x8x16 intrinsics): ``workgroup``
  in elements, ``subgroup = [sm, sn]`` intrinsic tiles per warp (so
  ``TM/(16 sm) * TN/(8 sn)`` warps of 32 threads), ``reduction = [kr]``
  intrinsics of K per step (``16 kr`` elements), ``prefetch_num_stages = 2``
  and ``convert_acc_gemm`` as IREE's own MMA choice has them.

Batch loops get workgroup tile 1 (thread 1 for SIMT, subgroup 0 for MMA, as
IREE's own choices for ``batch_matmul``).

Combines. The rewrite tags every combine op it emits with
``falcon.combine = array<i64: ...>``: the loop dims whose whole extent one
thread should form (:data:`falcon_mlir.passes.lcma_rewrite.COMBINE_ATTR`).
IREE 3.13's default for these elementwise ops on sm_80 is one warp per
workgroup, 4 elements per thread ([1, 128] / [1, 4]); falcon gives them
(:func:`combine_choice`): a thread forms 16 bytes of the contiguous last dim
for every index of the group dims (all R combined operands of a grouped
combine A/B from one read of each block; all m x n output blocks of a fused
combine C from one read of each product), 256 threads per workgroup along
the last dim (and the one before it when the last is short). Only ops with
that tag are touched; a user's elementwise ops keep IREE's choice.

Usage::

    falcon-opt in.mlir --falcon-tiles=target=cuda-sm80
    falcon-opt in.mlir --pass-pipeline='builtin.module(lcma-rewrite{scheme=strassen},falcon-tiles{target=cuda-sm80})'

and inside ``falcon-compile`` / :mod:`falcon_mlir.api` it runs after the
rewrite whenever the IREE target device is ``cuda`` (``--falcon-tiles=none``
turns it off).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from iree.compiler import ir

from falcon_mlir.ir.contraction import find_contractions, format_location
from falcon_mlir.passes.lcma_rewrite import OptionError, _width

#: Targets with a table; ``none`` turns the pass into a no-op; ``auto`` is
#: resolved from the compile flags by falcon-compile and the API (cuda device:
#: ``cuda-sm80``, else none) and means ``cuda-sm80`` where no flags exist
#: (falcon-opt).
TARGETS = ("cuda-sm80", "none", "auto")
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


#: target -> (lhs, rhs, acc element types) -> tile choices, best first.
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


#: Threads per workgroup and bytes per thread along the contiguous dim for combines.
COMBINE_THREADS = 256
COMBINE_VECTOR_BYTES = 16
#: Most elements one thread forms in a combine (registers). Measured on the
#: H200 at 16384^3 (grouped Strassen^2, whose combines form R = 49 operands):
#: 64 -> f32 180.7 ms, f16 28.6 ms; 128 -> 185.4 / 38.6 ms; 256 -> 185.0 /
#: 32.4 ms (docs/gpu_check_h200_combine_max.json). One-level plans (R = 7)
#: are the same under all three.
COMBINE_MAX_PER_THREAD = 64


@dataclass
class TilesOptions:
    """Options of the falcon-tiles pass.

    Attributes:
        target: a key of :data:`TABLES`, ``none`` or ``auto`` (see :data:`TARGETS`).
        combine_max: most elements one thread forms in a combine (default
            :data:`COMBINE_MAX_PER_THREAD`; narrower vectors above it).
        prefer: names of table entries (e.g. ``("simt64x64", "mma128x128")``)
            tried first, in order, for every contraction, before the table's
            own order (for tuning experiments; an entry is skipped where it
            does not fit or belongs to other element types).
        filename: name used for the ``"-"`` buffer in report locations.
    """

    target: str = "cuda-sm80"
    prefer: tuple = ()
    combine_max: int = COMBINE_MAX_PER_THREAD
    filename: Optional[str] = None

    KEYS = ("target", "prefer", "combine-max")

    @classmethod
    def parse(cls, text: Optional[str]) -> "TilesOptions":
        """``"target=cuda-sm80 prefer=simt64x64,mma128x128"`` (a bare target
        name is accepted for ``target=``).

        Raises:
            OptionError: unknown key, target or choice name.
        """
        opts = cls()
        text = (text or "").strip()
        if text.startswith("{") and text.endswith("}"):
            text = text[1:-1]
        for tok in text.split():
            key, eq, val = tok.partition("=")
            if not eq:
                key, val = "target", tok
            val = val.strip("'\"")
            if key == "prefer":
                names = sorted({c.name for t in TABLES.values() for cs in t.values() for c in cs})
                wanted = tuple(v for v in val.split(",") if v)
                bad = [v for v in wanted if v not in names] or ([] if wanted else [val])
                if bad:
                    raise OptionError(f"falcon-tiles option prefer='{bad[0]}' is not a tile choice "
                                      f"(known: {', '.join(names)})")
                opts.prefer = wanted
                continue
            if key in ("combine-max", "combine_max"):
                if not val.isdigit() or not 1 <= int(val) <= 4096:
                    raise OptionError(f"falcon-tiles option combine-max='{val}' must be an "
                                      "integer in [1, 4096]")
                opts.combine_max = int(val)
                continue
            if key != "target":
                raise OptionError(f"unknown falcon-tiles option '{key}' (keys: {', '.join(cls.KEYS)})")
            if val not in TARGETS:
                raise OptionError(f"falcon-tiles option target='{val}' is invalid "
                                  f"(expected one of: {', '.join(TARGETS)})")
            opts.target = val
        return opts


def choose(target: str, types: tuple, M: int, N: int, K: int, prefer=(), batched: bool = False):
    """``(TileChoice or None, reason)`` for a contraction of element types
    ``types`` = (lhs, rhs, acc) names and sizes M, N, K on ``target``
    (``prefer``: choice names tried first, in order; ``batched``: the
    contraction has batch loops)."""
    table = TABLES.get(target, {}).get(tuple(types))
    if not table:
        return None, (f"no tile table for {types[0]} x {types[1]} -> {types[2]} on {target} "
                      "(IREE's default)")
    if isinstance(prefer, str):
        prefer = (prefer,)
    by_name = {c.name: c for c in table}
    for name in prefer or ():
        choice = by_name.get(name)
        if choice is not None and choice.fits(M, N, K):
            return choice, f"{choice.name}: preferred by option, divides M={M}, N={N}, K={K}"
    for choice in table:
        if choice.fits(M, N, K) and (batched or not choice.batched_only):
            return choice, (f"{choice.name}: first choice of the {target} table that divides "
                            f"M={M}, N={N}, K={K}")
    smallest = table[-1]
    return None, (f"M={M}, N={N}, K={K} not divisible by any {target} tile choice (smallest: "
                  f"workgroup {smallest.workgroup[0]}x{smallest.workgroup[1]}, K step "
                  f"{smallest.k_step}); IREE's default")


def combine_choice(shape, group_dims, elem_bytes: int,
                   max_per_thread: int = COMBINE_MAX_PER_THREAD) -> tuple:
    """``((workgroup, thread), reason)`` tile sizes for a combine op of loop
    extents ``shape`` (static), ``group_dims`` formed whole by each thread and
    ``elem_bytes`` bytes per output element (at most ``max_per_thread``
    elements per thread, default :data:`COMBINE_MAX_PER_THREAD`); ``(None, reason)`` where IREE's
    default stays (dynamic shape, a group dim last, too many elements per thread).

    The last loop dim is the contiguous one of the output (the rewrite emits
    combines so). Each thread forms ``COMBINE_VECTOR_BYTES`` of it (fewer where
    the extent is not a multiple, or where the group dims times the vector
    would pass ``COMBINE_MAX_PER_THREAD`` elements); ``COMBINE_THREADS`` threads share a
    workgroup along it, then along the dim before it.
    """
    limit = max_per_thread
    rank = len(shape)
    if rank == 0 or any(s is None or s <= 0 for s in shape):
        return None, "dynamic or empty shape (IREE's default)"
    last = rank - 1
    if last in group_dims:
        return None, "group dim is the contiguous one (IREE's default)"
    v = max(1, COMBINE_VECTOR_BYTES // max(1, elem_bytes))
    while v > 1 and shape[last] % v:
        v //= 2
    thread = [1] * rank
    for g in group_dims:
        thread[g] = shape[g]
    group = 1
    for g in group_dims:
        group *= shape[g]
    while v > 1 and group * v > limit:  # registers: narrower vectors
        v //= 2
    thread[last] = v
    per_thread = group * v
    if per_thread > limit:
        return None, f"{per_thread} elements per thread (at most {limit}; IREE's default)"
    lanes = COMBINE_THREADS
    while lanes > 1 and (shape[last] // v) % lanes:
        lanes //= 2
    workgroup = list(thread)
    workgroup[last] = v * lanes
    rows = 1
    others = [d for d in range(last) if d not in group_dims]
    if others and lanes < COMBINE_THREADS:
        d = others[-1]
        rows = COMBINE_THREADS // lanes
        while rows > 1 and shape[d] % rows:
            rows //= 2
        workgroup[d] = rows
    if lanes * rows < 32:
        return None, f"{lanes * rows} threads per workgroup would fit (IREE's default)"
    return (workgroup, thread), (f"combine: {v} elements x group dims {list(group_dims)} per "
                                 f"thread, {lanes * rows} threads")


def combine_info_text(workgroup, thread) -> str:
    """``#iree_codegen.compilation_info<...>`` (TileAndFuse) for a combine op."""
    threads = 1
    for w, th in zip(workgroup, thread):
        threads *= w // th
    lc = f"#iree_gpu.lowering_config<{{thread = {list(thread)}, workgroup = {list(workgroup)}}}>"
    ti = (f"#iree_codegen.translation_info<pipeline = #iree_gpu.pipeline<TileAndFuse> "
          f"workgroup_size = [{threads}, 1, 1] subgroup_size = {SUBGROUP_SIZE}>")
    return f"#iree_codegen.compilation_info<lowering_config = {lc}, translation_info = {ti}>"


def _tile_combines(module_op, target: str, filename, report: list,
                   max_per_thread: int = COMBINE_MAX_PER_THREAD) -> None:
    """Attach :func:`combine_choice` to every op tagged ``falcon.combine``."""
    from falcon_mlir.passes.lcma_rewrite import COMBINE_ATTR

    found = []

    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        if op.name == "linalg.generic" and COMBINE_ATTR in op.attributes:
            found.append(op)
        return ir.WalkResult.ADVANCE

    root = module_op.operation if hasattr(module_op, "operation") else module_op
    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    for op in found:
        entry = {"pass": "falcon-tiles", "location": format_location(op.location, filename),
                 "op": "linalg.generic (combine)", "loops": None, "group_dims": None,
                 "target": target, "tiles": None, "remark": False}
        report.append(entry)
        parsed, why = _combine_loops(op, COMBINE_ATTR)
        if parsed is None:
            entry["reason"] = why
            continue
        shape, group, out_t = parsed
        entry.update(loops=shape, group_dims=group)
        if "compilation_info" in op.attributes or "lowering_config" in op.attributes:
            entry["reason"] = "already carries compilation_info/lowering_config (left alone)"
            continue
        why = _untileable_combine(op, out_t)
        if why:
            entry["reason"] = why
            continue
        try:
            elem_bytes = max(1, _width(out_t.element_type) // 8)
        except ValueError:  # not an int or float type (a hand-tagged op): as 4 bytes
            elem_bytes = 4
        choice, reason = combine_choice(shape, group, elem_bytes, max_per_thread)
        entry["reason"] = reason
        if choice is None:
            continue
        wg, th = choice
        op.attributes["compilation_info"] = ir.Attribute.parse(combine_info_text(wg, th),
                                                               context=module_op.context)
        entry["tiles"] = {"name": "combine", "workgroup": wg, "thread": th}


def _combine_loops(op, attr_name: str):
    """``((loop extents, group dims, output type), None)`` of a tagged combine, or
    ``(None, reason)`` when the tag or the op is not what the rewrite emits (the
    tag is then ignored: IREE's default)."""
    ignored = "; tag ignored (IREE's default)"
    try:
        group = [int(x) for x in ir.DenseI64ArrayAttr(op.attributes[attr_name])]
    except (ValueError, TypeError):
        return None, f"{attr_name} is not an array<i64: ...> of loop dims{ignored}"
    if len(op.results) != 1:
        return None, f"a combine has one tensor result{ignored}"
    try:
        out_t = ir.RankedTensorType(op.results[0].type)
        out_map = ir.AffineMapAttr(list(op.attributes["indexing_maps"])[-1]).value
        dims = [ir.AffineDimExpr(e).position for e in out_map.results]
    except (ValueError, TypeError, KeyError, IndexError):
        return None, f"the output is not indexed by plain loop dims{ignored}"
    n = out_map.n_dims
    if sorted(dims) != list(range(n)):
        return None, f"the output does not index every loop once{ignored}"
    if any(g < 0 or g >= n for g in group) or len(set(group)) != len(group):
        return None, f"group dims {group} are not distinct loops of 0..{n - 1}{ignored}"
    if dims and dims[-1] != n - 1:
        return None, "last loop is not the output's contiguous dim (IREE's default)"
    shape = [None] * n
    for pos, d in enumerate(dims):
        s = out_t.shape[pos]
        shape[d] = None if s == ir.ShapedType.get_dynamic_size() else s
    return (shape, group, out_t), None


def _untileable_combine(op, out_t) -> Optional[str]:
    """Why a combine must keep IREE's default choice on CUDA (None if it need not).

    * It widens its blocks (f16/bf16/i8 operands, f32/i32 accumulator): IREE
      fuses such "dequantizing" producers into the consuming product's
      dispatch, which then has two ops with a translation_info ("multiple ops
      within dispatch trying to set the translation info", IREE 3.13).
    * All its blocks come from constants or globals (combine B of a weight):
      IREE's const-eval compiles it for the host, where a GPU choice does not
      build.
    """
    def root(v):
        for _ in range(64):  # through slices and reshapes to the producer
            owner = v.owner
            if isinstance(owner, ir.Block) or not hasattr(owner, "name"):
                return None
            if owner.name in ("tensor.extract_slice", "tensor.expand_shape",
                              "tensor.collapse_shape", "util.optimization_barrier"):
                v = owner.operands[0]
                continue
            return owner.name
        return None

    def direct(v):
        owner = v.owner
        return None if isinstance(owner, ir.Block) or not hasattr(owner, "name") else owner.name

    ins = list(op.operands[:len(op.operands) - 1])
    # coefficient tables are arith.constant operands of their own; blocks are the rest
    blocks = [v for v in ins if direct(v) != "arith.constant"]
    if any(ir.RankedTensorType(v.type).element_type != out_t.element_type for v in blocks):
        return ("widening combine (blocks of another element type): IREE fuses it into "
                "the product's dispatch; IREE's default")
    consts = ("arith.constant", "util.global.load", "flow.tensor.constant")
    if blocks and all(root(v) in consts for v in blocks):
        return "blocks of a constant (folded by IREE's const-eval on the host); IREE's default"
    return None


def compilation_info_text(choice: TileChoice, n_loops: int, m_dim: int, n_dim: int, k_dim: int,
                          batch_dims) -> str:
    """The ``#iree_codegen.compilation_info<...>`` text for ``choice`` on an op
    with ``n_loops`` loops (dims of M, N, K and batch given by index)."""
    def vec(values):
        out = [0] * n_loops
        for d, v in values.items():
            out[d] = v
        return "[" + ", ".join(str(v) for v in out) + "]"

    batch = {d: 1 for d in batch_dims}
    wg = vec({**batch, m_dim: choice.workgroup[0], n_dim: choice.workgroup[1]})
    red = vec({k_dim: choice.reduction})
    if choice.mma:
        sg = vec({m_dim: choice.subgroup[0], n_dim: choice.subgroup[1]})
        lc = (f"#iree_gpu.lowering_config<{{convert_acc_gemm, "
              f"mma_kind = #iree_gpu.mma_layout<{choice.mma}>, promote_operands = [0, 1], "
              f"reduction = {red}, subgroup = {sg}, workgroup = {wg}}}>")
        opts = (", {gpu_pipeline_options = #iree_gpu.pipeline_options<prefetch_num_stages = 2, "
                "no_reduce_shared_memory_bank_conflicts = false, use_igemm_convolution = false>}")
    else:
        th = vec({**batch, m_dim: choice.thread[0], n_dim: choice.thread[1]})
        lc = (f"#iree_gpu.lowering_config<{{promote_operands = [0, 1], reduction = {red}, "
              f"thread = {th}, workgroup = {wg}}}>")
        opts = ""
    ti = (f"#iree_codegen.translation_info<pipeline = #iree_gpu.pipeline<TileAndFuse> "
          f"workgroup_size = [{choice.threads}, 1, 1] subgroup_size = {SUBGROUP_SIZE}{opts}>")
    return f"#iree_codegen.compilation_info<lowering_config = {lc}, translation_info = {ti}>"


def _n_loops(op) -> int:
    maps = list(op.attributes["indexing_maps"])
    return ir.AffineMapAttr(maps[0]).value.n_dims


def run_falcon_tiles(module_op, options=None) -> list:
    """Attaches ``compilation_info`` to every contraction under ``module_op``.

    Args:
        module_op: the ``builtin.module`` operation (call inside its context).
        options: :class:`TilesOptions`, an option string, or a target name.

    Returns:
        One report dict per contraction: ``pass`` (``falcon-tiles``),
        ``location``, ``op``, ``M``, ``N``, ``K``, ``batch``,
        ``element_types``, ``target``, ``tiles`` (the choice as a dict, or
        None), ``reason``, ``remark`` (False).
    """
    if options is None or isinstance(options, str):
        options = TilesOptions.parse(options)
    target = "cuda-sm80" if options.target == "auto" else options.target
    report = []
    if target == "none":
        return report
    for c in find_contractions(module_op):
        op = c.op
        entry = {"pass": "falcon-tiles", "location": format_location(op.location, options.filename),
                 "op": op.name, "M": c.M, "N": c.N, "K": c.K, "batch": list(c.batch),
                 "element_types": {"lhs": str(c.lhs_type), "rhs": str(c.rhs_type),
                                   "acc": str(c.acc_type)},
                 "target": target, "tiles": None, "remark": False}
        report.append(entry)
        if "compilation_info" in op.attributes or "lowering_config" in op.attributes:
            entry["reason"] = "already carries compilation_info/lowering_config (left alone)"
            continue
        if c.m_dim < 0 or c.lhs_type is None:
            entry["reason"] = f"not served: {c.unsupported}"
            continue
        sizes = [c.M, c.N, c.K] + list(c.batch)
        if any(s is None or s <= 0 for s in sizes):
            entry["reason"] = "dynamic or empty shape (IREE's default)"
            continue
        types = (str(c.lhs_type), str(c.rhs_type), str(c.acc_type))
        choice, reason = choose(target, types, c.M, c.N, c.K, options.prefer,
                                batched=bool(c.batch_dims))
        entry["reason"] = reason
        if choice is None:
            continue
        text = compilation_info_text(choice, _n_loops(op), c.m_dim, c.n_dim, c.k_dim, c.batch_dims)
        op.attributes["compilation_info"] = ir.Attribute.parse(text, context=module_op.context)
        entry["tiles"] = choice.as_dict()
    _tile_combines(module_op, target, options.filename, report, options.combine_max)
    return report
