"""Finding contractions: what the lcma-rewrite pass can see and serve.

A contraction is any linalg structured op that
``linalg.isa_contraction_op`` accepts (``linalg.matmul`` with default or
transposed indexing maps, ``linalg.batch_matmul``, ``linalg.generic`` and
``linalg.contract`` contractions), with two inputs and one output on ranked
tensors. For the rewrite it must have exactly one M, one N and one K loop
dimension (any number of batch dimensions, which stay as they are), static
shapes, and a body that is a multiply-accumulate with at most casts around it.

A contraction with dynamic sizes is analyzed like a static one (dims, types,
body); its dynamic sizes are listed in ``dynamic`` and, when nothing else is
wrong with it, ``unsupported`` is :data:`DYNAMIC_REASON`: the static rewrite
cannot serve it, but the run-time dispatch of the lcma-rewrite pass
(:func:`passes.lcma_rewrite.dynamic_choice`) may.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Optional

from iree.compiler import ir
from iree.compiler.dialects import linalg

#: Ops whose body is one multiply, one add and casts.
_BODY_OK = {
    "arith.mulf", "arith.addf", "arith.muli", "arith.addi",
    "arith.extf", "arith.truncf", "arith.extsi", "arith.extui", "arith.trunci",
    "arith.sitofp", "arith.uitofp", "linalg.yield",
}
#: Float accumulator types the rewrite and its error model know (operands may
#: be any narrower float type: they are combined in the accumulator type).
_FLOAT_OK = {"f16", "bf16", "f32", "f64"}
_NAMED = {"linalg.matmul": "matmul", "linalg.batch_matmul": "batch_matmul"}
#: ``unsupported`` of a contraction whose only problem is a dynamic size.
DYNAMIC_REASON = "dynamic shape (the static rewrite needs static sizes)"
#: ``unsupported`` of a contraction whose only problem is several loop
#: dimensions in one role that fold into one (``Contraction.groups``): the
#: lcma-rewrite pass serves it through a folded view (collapse_shape, one
#: contraction, expand_shape); other passes leave it alone.
FOLD_REASON = ("several loop dimensions in one role (e.g. a batch_matmul whose B has no batch "
               "dimension: batch and M are both M dimensions); served only through a folded view")


def format_location(loc: ir.Location, filename: Optional[str] = None) -> str:
    """``file:line:col`` of an MLIR location (``"-"`` buffers renamed to ``filename``).

    Fused and call-site locations give their first file location; an unknown
    location gives ``"<unknown>"``.
    """
    text = str(loc)
    m = re.search(r'"([^"]*)":(\d+):(\d+)', text)
    if not m:
        return "<unknown>"
    name = m.group(1)
    if filename and name in ("-", "<stdin>"):
        name = filename
    return f"{name}:{m.group(2)}:{m.group(3)}"


def _map_dims(map_attr) -> list:
    """Loop dimension index of each result of a projected-permutation map."""
    amap = ir.AffineMapAttr(map_attr).value
    dims = []
    for expr in amap.results:
        dims.append(ir.AffineDimExpr(expr).position)
    return dims


@dataclass
class Contraction:
    """One contraction op and its shape, as the rewrite and the report see it.

    Attributes:
        op: the ``ir.Operation``.
        kind: ``"matmul"``, ``"batch_matmul"`` or ``"generic"`` (any other
            contraction op, re-emitted as ``linalg.generic``).
        M, N, K: the sizes of the M, N and K loop dimensions (elements).
        batch: sizes of the batch dimensions.
        m_dim, n_dim, k_dim: loop dimension indices; batch_dims likewise.
        lhs_dims, rhs_dims, out_dims: for each operand position, its loop dim.
        lhs_type, rhs_type, acc_type: element types (``ir.Type``); the
            accumulator type is the output's.
        transposed: names of operands whose layout is not the default
            (``"lhs"``: A stored K x M, ``"rhs"``: B stored N x K).
        unsupported: why the rewrite cannot serve it (``None`` when it can).
        dynamic: names of the dynamic sizes (``"M"``, ``"N"``, ``"K"``,
            ``"batch"`` once per dynamic batch dimension; empty when static).
            Their entries in M, N, K, batch hold MLIR's dynamic-size marker.
        groups: roles (``"M"``, ``"N"``, ``"K"``) held by several loop
            dimensions that fold into one, each with its dims in operand
            order (e.g. ``{"M": [0, 1]}`` for a batch_matmul whose B has no
            batch dimension); M, N, K are then the products of their sizes,
            ``m_dim``/``n_dim``/``k_dim`` stay -1 and ``unsupported`` is
            :data:`FOLD_REASON` when nothing else is wrong.
        group_sizes: the sizes of the dims of each role held by several loop
            dimensions (in operand order when they fold), also when they do not.
        empty_reduction: a reduction (K) loop dimension has the static size 0
            in an operand that carries it (:func:`_zero_dims`: also where the
            other operand has it dynamic, or where a ``tensor.cast`` made a
            static 0 dynamic): the body never runs and the result is the init
            (outs operand), whatever else the op holds (``unsupported`` may be
            set as well). IREE 3.13 crashes compiling such an op (SIGFPE; once
            its canonicalization has made the 0 static);
            :mod:`passes.empty_reduction` replaces it.
    """

    op: ir.Operation
    kind: str
    M: int = 0
    N: int = 0
    K: int = 0
    batch: list = field(default_factory=list)
    m_dim: int = -1
    n_dim: int = -1
    k_dim: int = -1
    batch_dims: list = field(default_factory=list)
    lhs_dims: list = field(default_factory=list)
    rhs_dims: list = field(default_factory=list)
    out_dims: list = field(default_factory=list)
    lhs_type: Optional[ir.Type] = None
    rhs_type: Optional[ir.Type] = None
    acc_type: Optional[ir.Type] = None
    transposed: list = field(default_factory=list)
    unsupported: Optional[str] = None
    dynamic: list = field(default_factory=list)
    groups: dict = field(default_factory=dict)
    group_sizes: dict = field(default_factory=dict)
    empty_reduction: bool = False

    @property
    def is_float(self) -> bool:
        """True when the accumulator element type is a float type."""
        return isinstance(self.acc_type, ir.FloatType) or isinstance(self.acc_type, ir.FloatType)

    @property
    def is_integer(self) -> bool:
        """True when the accumulator element type is an integer type."""
        return isinstance(self.acc_type, ir.IntegerType)

    def describe_kind(self) -> str:
        """The kind with its transposes, e.g. ``"matmul (transposed rhs)"``."""
        if self.transposed:
            return f"{self.kind} (transposed {', '.join(self.transposed)})"
        return self.kind


def _size_text(n: int) -> str:
    return "?" if n == ir.ShapedType.get_dynamic_size() else str(n)


def _run(dims: list, group: list) -> bool:
    """Whether ``group`` appears in ``dims`` as one adjacent run, in that order."""
    if group[0] not in dims:
        return False
    p = dims.index(group[0])
    return dims[p:p + len(group)] == group


def _fold_groups(c: Contraction, roles: dict) -> tuple:
    """``(groups, why)``: the roles with several loop dims that fold into one
    (``{role: dims}``), or ``None`` and why not. Each group must be one
    adjacent run, in the same order, in both operands that carry it, and at
    most one batch dimension may stay (the folded contraction is a matmul or
    a batch_matmul)."""
    carriers = {"M": (("A", c.lhs_dims), ("C", c.out_dims)),
                "N": (("B", c.rhs_dims), ("C", c.out_dims)),
                "K": (("A", c.lhs_dims), ("B", c.rhs_dims))}
    if len(c.batch_dims) > 1:
        return None, f"{len(c.batch_dims)} batch dimensions besides"
    groups = {}
    for role, ds in roles.items():
        if len(ds) < 2:
            continue
        group = [d for d in carriers[role][0][1] if d in ds]
        bad = [name for name, dl in carriers[role] if not _run(dl, group)]
        if bad:
            return None, (f"its {role} dimensions are not adjacent in the same order in "
                          f"{' and '.join(bad) if len(bad) > 1 else bad[0]}")
        groups[role] = group
    return groups, None


def _check_body(op: ir.Operation) -> Optional[str]:
    region = op.regions[0]
    blocks = list(region.blocks)
    if not blocks:
        return None
    names = [o.name for o in blocks[0].operations]
    bad = [n for n in names if n not in _BODY_OK]
    if bad:
        return f"unsupported op '{bad[0]}' in the contraction body"
    if sum(n in ("arith.mulf", "arith.muli") for n in names) != 1 or \
            sum(n in ("arith.addf", "arith.addi") for n in names) != 1:
        return "contraction body is not a single multiply-accumulate"
    if any(n in ("arith.extui", "arith.uitofp") for n in names):
        return "unsigned operand casts are not supported"
    # The multiply must happen in the accumulator type (casts only on the
    # operands): a product formed in a narrow type and extended afterwards
    # wraps per product, which a rewrite in the accumulator type would change.
    args = list(blocks[0].arguments)
    acc = args[-1].type
    inputs = args[:-1]
    for o in blocks[0].operations:
        # A cast may only lift an operand (a block argument) into the
        # accumulator type; a rounding chain such as truncf then extf would be
        # lost by the rewrite, which casts operands straight to the acc type.
        if o.name.startswith("arith.") and o.name not in ("arith.mulf", "arith.muli",
                                                          "arith.addf", "arith.addi"):
            if o.operands[0] not in inputs or o.results[0].type != acc:
                return (f"'{o.name}' in the contraction body is not a cast of an operand to the "
                        f"accumulator type {acc}")
        if o.name in ("arith.mulf", "arith.muli", "arith.addf", "arith.addi") and \
                o.results[0].type != acc:
            return (f"'{o.name}' in the contraction body computes in {o.results[0].type}, "
                    f"not in the accumulator type {acc}")
    return None


def _loop_sizes(ttypes: list, c: Contraction) -> dict:
    """loop dimension -> its size (the dynamic marker where any operand has it dynamic)."""
    dyn_size = ir.ShapedType.get_dynamic_size()
    sizes = {}
    for t, dl in zip(ttypes, (c.lhs_dims, c.rhs_dims, c.out_dims)):
        for pos, d in enumerate(dl):
            if sizes.get(d) != dyn_size:
                sizes[d] = dyn_size if t.is_dynamic_dim(pos) else t.shape[pos]
    return sizes


def _constant_index(v) -> Optional[int]:
    """The value of ``v`` where an ``arith.constant`` of an integer or index type makes it, else None."""
    owner = v.owner if isinstance(v, ir.OpResult) else None
    if owner is None or owner.name != "arith.constant" or "value" not in owner.attributes:
        return None
    attr = owner.attributes["value"]
    return ir.IntegerAttr(attr).value if isinstance(attr, ir.IntegerAttr) else None


def _size_is_zero(v, pos: int) -> bool:
    """Whether dimension ``pos`` of tensor value ``v`` has the size 0 for certain: static 0 in its type,
    or a dynamic size that the ops making ``v`` fix at 0, as IREE's canonicalization will see it: a
    ``tensor.cast`` of a static 0 (any chain of them), a ``tensor.empty`` or a ``tensor.extract_slice``
    (not rank-reducing) whose size there is an ``arith.constant`` 0."""
    for _ in range(64):  # a chain of casts, bounded
        if not isinstance(v.type, ir.RankedTensorType):
            return False
        t = ir.RankedTensorType(v.type)
        if pos >= t.rank:
            return False
        if not t.is_dynamic_dim(pos):
            return t.shape[pos] == 0
        owner = v.owner if isinstance(v, ir.OpResult) else None
        if owner is None:
            return False
        nth = sum(t.is_dynamic_dim(p) for p in range(pos))  # which dynamic size operand is ``pos``'s
        if owner.name == "tensor.cast":
            v = owner.operands[0]
            if not isinstance(v.type, ir.RankedTensorType) or ir.RankedTensorType(v.type).rank != t.rank:
                return False
            continue
        if owner.name == "tensor.empty":
            sizes = list(owner.operands)
            return nth < len(sizes) and _constant_index(sizes[nth]) == 0
        if owner.name == "tensor.extract_slice":
            static = list(owner.opview.static_sizes)
            if len(static) != t.rank:  # rank-reducing: positions differ
                return False
            dyn = [i for i, x in enumerate(static) if x == ir.ShapedType.get_dynamic_size()]
            sizes = list(owner.opview.sizes)
            return pos in dyn and len(sizes) == len(dyn) and _constant_index(sizes[dyn.index(pos)]) == 0
        return False
    return False


def _zero_dims(values: list, c: Contraction) -> set:
    """The loop dimensions that some operand in ``values`` (lhs, rhs, out) has with the size 0 for
    certain (:func:`_size_is_zero`: static, or a dynamic size its producers fix at 0, which IREE's
    canonicalization folds back into the op as a static 0).

    A dimension that one operand has as 0 and another as dynamic is 0 in any valid run, so it counts:
    ``tensor<8x?xf32>`` by ``tensor<0x16xf32>`` sums over no terms, and IREE 3.13 crashed on it
    (SIGFPE) once its canonicalization had made the 0 static (were: all left to IREE).
    """
    return {d for v, dl in zip(values, (c.lhs_dims, c.rhs_dims, c.out_dims))
            for pos, d in enumerate(dl) if _size_is_zero(v, pos)}


def _set_sizes(c: Contraction, sizes: dict, m: list, n: list, k: list, b: list) -> None:
    """Set ``c``'s M, N, K, batch and dynamic roles from the loop sizes.

    M, N, K are the op's own sizes whatever its form: with several loop
    dimensions in one role (a batch_matmul whose B has no batch dimension
    has two M dimensions, batch and M) the product of theirs.
    """
    dyn_size = ir.ShapedType.get_dynamic_size()
    prod = lambda ds: dyn_size if any(sizes[d] == dyn_size for d in ds) else math.prod(
        sizes[d] for d in ds)
    c.M, c.N, c.K = prod(m), prod(n), prod(k)
    c.batch = [sizes[d] for d in b]
    c.dynamic = [name for name, ds in [("batch", [d]) for d in b] +
                 [("M", m), ("N", n), ("K", k)] if ds and prod(ds) == dyn_size]


def _type_reason(c: Contraction) -> Optional[str]:
    """Why ``c``'s element types are not served (i1, an unsupported float accumulator, int/float mixed), or None."""
    float_types = all(isinstance(t, ir.FloatType) for t in (c.lhs_type, c.rhs_type, c.acc_type))
    int_types = all(isinstance(t, ir.IntegerType) for t in (c.lhs_type, c.rhs_type, c.acc_type))
    if int_types and any(ir.IntegerType(t).width == 1 for t in (c.lhs_type, c.rhs_type, c.acc_type)):
        return "i1 (boolean) contractions are not supported"
    if float_types and str(c.acc_type) not in _FLOAT_OK:
        return (f"accumulator type {c.acc_type}: only "
                f"{', '.join(sorted(_FLOAT_OK))} accumulators are supported")
    if not (float_types or int_types):
        return (f"mixed integer/float element types ({c.lhs_type}, {c.rhs_type} -> "
                f"{c.acc_type}) are not supported")
    return None


def analyze(op: ir.Operation) -> Optional[Contraction]:
    """Describe ``op`` if it is a contraction, else return ``None``.

    A contraction the rewrite cannot serve is returned with ``unsupported``
    set to the reason (dynamic shapes, no M or N dimension, several M/N/K
    dimensions, memref operands, unsupported body ops, unsigned casts).
    """
    if not op.name.startswith("linalg."):
        return None
    try:
        if not linalg.isa_contraction_op(op):
            return None
    except Exception:  # pragma: no cover - defensive: not a linalg op interface
        return None
    kind = _NAMED.get(op.name, "generic")
    c = Contraction(op=op, kind=kind)
    operands = list(op.operands)
    if len(operands) != 3 or len(op.results) != 1:
        c.unsupported = "expected two inputs and one output on tensors"
        return c
    types = [o.type for o in operands]
    if not all(isinstance(t, ir.RankedTensorType) for t in types):
        c.unsupported = "operands are not ranked tensors"
        return c
    ttypes = [ir.RankedTensorType(t) for t in types]
    c.lhs_type, c.rhs_type, c.acc_type = (t.element_type for t in ttypes)
    dims = linalg.infer_contraction_dimensions(op)
    m, n, k, b = list(dims.m), list(dims.n), list(dims.k), list(dims.batch)
    c.batch_dims = b
    maps = list(linalg.get_indexing_maps(op))  # named ops without the attribute too
    try:
        c.lhs_dims, c.rhs_dims, c.out_dims = (_map_dims(a) for a in maps)
    except ValueError:
        c.unsupported = "indexing maps are not projected permutations"
        return c
    sizes = _loop_sizes(ttypes, c)
    _set_sizes(c, sizes, m, n, k, b)
    c.empty_reduction = bool(_zero_dims(operands, c).intersection(k))
    if not m or not n or not k:
        c.unsupported = (f"needs an M, an N and a K dimension "
                         f"(has {len(m)} M, {len(n)} N, {len(k)} K)")
        return c
    if len(m) > 1 or len(n) > 1 or len(k) > 1:
        roles = {"M": m, "N": n, "K": k}
        groups, why = _fold_groups(c, roles)
        order = groups or {r: ds for r, ds in roles.items() if len(ds) > 1}
        c.group_sizes = {r: [sizes[d] for d in ds] for r, ds in order.items()}
        if groups is None:
            many = ", ".join(f"{r} = {' x '.join(_size_text(x) for x in xs)}"
                             for r, xs in c.group_sizes.items())
            c.unsupported = (f"several loop dimensions in one role ({many}) that do not fold "
                             f"into one: {why}")
            return c
        c.groups = groups
    else:
        c.m_dim, c.n_dim, c.k_dim = m[0], n[0], k[0]
    if "cast" in op.attributes and "unsigned" in str(op.attributes["cast"]):
        c.unsupported = "unsigned operand casts are not supported"
        return c
    if 0 in c.batch:
        c.unsupported = "empty contraction (a batch dimension of size 0)"
        return c
    # Transposes relative to the default (batch..., M, K) x (batch..., K, N).
    if c.m_dim >= 0 and c.lhs_dims.index(c.m_dim) > c.lhs_dims.index(c.k_dim):
        c.transposed.append("lhs")
    if c.m_dim >= 0 and c.rhs_dims.index(c.k_dim) > c.rhs_dims.index(c.n_dim):
        c.transposed.append("rhs")
    if op.name not in _NAMED:
        c.unsupported = _check_body(op)
    if c.unsupported is None:
        c.unsupported = _type_reason(c)
    if c.unsupported is None and c.groups:
        c.unsupported = FOLD_REASON
    elif c.unsupported is None and c.dynamic:
        c.unsupported = DYNAMIC_REASON
    return c


def find_contractions(root: ir.Operation) -> list:
    """All contractions under ``root`` (in pre-order), as :class:`Contraction`."""
    found = []

    def visit(op):
        c = analyze(op.operation if hasattr(op, "operation") else op)
        if c is not None:
            found.append(c)
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found
