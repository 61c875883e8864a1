"""falcon-tiles for the rewrite's combine ops (tagged ``falcon.combine``).

IREE 3.13's default for these elementwise ops on sm_80 is one warp per
workgroup, 4 elements per thread ([1, 128] / [1, 4]); falcon gives them
(:func:`combine_choice`): a thread forms 16 bytes of the contiguous last dim
for every index of the group dims (all R combined operands of a grouped
combine A/B from one read of each block; all m x n output blocks of a fused
combine C from one read of each product), 256 threads per workgroup along
the last dim (and the one before it when the last is short). Only ops with
the tag (:mod:`falcon_mlir.dialects.combine`) are touched; a user's
elementwise ops keep IREE's choice.
"""

from __future__ import annotations

from typing import Optional

from iree.compiler import ir

from falcon_mlir.dialects.combine import COMBINE_ATTR, combine_group_dims, is_combine
from falcon_mlir.ir.builders import COMPUTE_BARRIER, CONSTANT_OPS, bit_width
from falcon_mlir.ir.contraction import format_location

from .tables import SUBGROUP_SIZE

__all__ = ["COMBINE_THREADS", "COMBINE_VECTOR_BYTES", "COMBINE_MAX_PER_THREAD", "combine_choice",
           "combine_info_text", "tile_combines"]

#: Threads per workgroup and bytes per thread along the contiguous dim for combines.
COMBINE_THREADS = 256
COMBINE_VECTOR_BYTES = 16
#: Most elements one thread forms in a combine (registers). Measured on the
#: H200 at 16384^3 (grouped Strassen^2, whose combines form R = 49 operands):
#: 64 -> f32 180.7 ms, f16 28.6 ms; 128 -> 185.4 / 38.6 ms; 256 -> 185.0 /
#: 32.4 ms (docs/gpu_check_h200_combine_max.json). One-level plans (R = 7)
#: are the same under all three.
COMBINE_MAX_PER_THREAD = 64


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


def tile_combines(module_op, table: str, filename, report: list,
                  max_per_thread: int = COMBINE_MAX_PER_THREAD) -> None:
    """Attach :func:`combine_choice` to every op tagged ``falcon.combine``;
    one report entry per tagged op is appended to ``report``."""
    found = []

    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        if is_combine(op):
            found.append(op)
        return ir.WalkResult.ADVANCE

    root = module_op.operation if hasattr(module_op, "operation") else module_op
    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    for op in found:
        entry = {"pass": "falcon-tiles", "location": format_location(op.location, filename),
                 "op": "linalg.generic (combine)", "loops": None, "group_dims": None,
                 "target": table, "tiles": None, "remark": False}
        report.append(entry)
        parsed, why = _combine_loops(op)
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
            elem_bytes = max(1, bit_width(out_t.element_type) // 8)
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


def _combine_loops(op):
    """``((loop extents, group dims, output type), None)`` of a tagged combine, or
    ``(None, reason)`` when the tag or the op is not what the rewrite emits (the
    tag is then ignored: IREE's default)."""
    ignored = "; tag ignored (IREE's default)"
    try:
        group = combine_group_dims(op)
    except (ValueError, TypeError):
        return None, f"{COMBINE_ATTR} is not an array<i64: ...> of loop dims{ignored}"
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
                              "tensor.collapse_shape", COMPUTE_BARRIER):
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
    if blocks and all(root(v) in CONSTANT_OPS for v in blocks):
        return "blocks of a constant (folded by IREE's const-eval on the host); IREE's default"
    return None
