"""Small IR builders on ranked tensors (upstream ``linalg``/``tensor``/``arith``).

Every builder inserts at the current ``ir.InsertionPoint`` and location, in
the current context (call them inside ``with ctx, loc, InsertionPoint(...)``).

Slicing helpers take ``dims``: the loop dimensions (of the contraction being
rewritten) that index the tensor's positions, so one call can slice A, B or
C "along M" whatever their layout; ``ranges`` maps a loop dim to
``(offset, size)`` and dims not named keep their whole extent.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from iree.compiler import ir
from iree.compiler.dialects import arith, linalg, tensor

__all__ = ["tensor_type", "bit_width", "is_float", "cast", "constant", "index", "zeros",
           "slice_along", "slice_accumulator", "insert_along", "pad_along",
           "dynamic_slice", "dynamic_insert", "parallel_generic", "weighted_sum",
           "COMPUTE_BARRIER", "compute_barrier", "compute_barrier_text", "defining_op_name", "reassociation_attr",
           "permutation_source", "CONSTANT_OPS", "derives_from_constants"]


def tensor_type(v: ir.Value) -> ir.RankedTensorType:
    """The ranked tensor type of ``v`` (raises ``ValueError`` for other types)."""
    return ir.RankedTensorType(v.type)


def bit_width(t: ir.Type) -> int:
    """Bits of an integer or float type ``t`` (raises ``ValueError`` for others)."""
    if isinstance(t, ir.IntegerType):
        return ir.IntegerType(t).width
    return ir.FloatType(t).width


def is_float(t: ir.Type) -> bool:
    """Whether ``t`` is a float type (f16, bf16, f32, f64, ...)."""
    return isinstance(t, ir.FloatType)


def cast(v: ir.Value, to: ir.Type) -> ir.Value:
    """Scalar cast of ``v`` to ``to``: extf/truncf, extsi/trunci (sign-extending
    integers) or sitofp; ``v`` itself when the types agree.

    Raises:
        ValueError: float to integer (never needed by the rewrite).
    """
    src = v.type
    if src == to:
        return v
    if is_float(src) and is_float(to):
        if bit_width(src) < bit_width(to):
            return arith.extf(to, v)
        return arith.truncf(to, v)
    if not is_float(src) and not is_float(to):
        if bit_width(src) < bit_width(to):
            return arith.extsi(to, v)
        return arith.trunci(to, v)
    if not is_float(src) and is_float(to):
        return arith.sitofp(to, v)
    raise ValueError(f"cannot cast {src} to {to}")


def constant(t: ir.Type, value) -> ir.Value:
    """A scalar ``arith.constant`` of type ``t`` (float or integer)."""
    if is_float(t):
        return arith.constant(t, float(value))
    return arith.constant(t, int(value))


def index(n: int) -> ir.Value:
    """An ``index`` constant."""
    return arith.constant(ir.IndexType.get(), n)


def zeros(shape, elem: ir.Type) -> ir.Value:
    """``linalg.fill`` of 0 into a ``tensor.empty`` of ``shape`` x ``elem``."""
    empty = tensor.empty(list(shape), elem)
    return linalg.fill(constant(elem, 0), outs=[empty])


def slice_along(v: ir.Value, dims: Sequence[int], ranges: dict) -> ir.Value:
    """Static ``tensor.extract_slice`` of ``v`` to ``ranges`` (``v`` itself when
    the slice is the whole tensor)."""
    t = tensor_type(v)
    shape = list(t.shape)
    offs, sizes = [0] * len(shape), list(shape)
    for pos, d in enumerate(dims):
        if d in ranges:
            offs[pos], sizes[pos] = ranges[d]
    if offs == [0] * len(shape) and sizes == shape:
        return v
    rt = ir.RankedTensorType.get(sizes, t.element_type)
    return tensor.ExtractSliceOp(rt, v, [], [], [], offs, sizes, [1] * len(shape)).result


def slice_accumulator(v: ir.Value, dims: Sequence[int], ranges: dict) -> ir.Value:
    """Slice an accumulator; a ``linalg.fill`` is re-emitted at the slice's shape.

    Re-filling instead of slicing a shared fill keeps each product's
    accumulator independent, which IREE's dispatch formation needs (a slice
    of one fill shared by a product and an insert_slice chain fails to
    distribute on llvm-cpu).
    """
    owner = v.owner
    if isinstance(owner, ir.OpResult) or not hasattr(owner, "name"):
        return slice_along(v, dims, ranges)
    if owner.name == "linalg.fill":
        sliced_type = tensor_type(slice_along(v, dims, ranges)) if ranges else tensor_type(v)
        empty = tensor.empty(list(sliced_type.shape), sliced_type.element_type)
        return linalg.fill(owner.operands[0], outs=[empty])
    return slice_along(v, dims, ranges)


def insert_along(src: ir.Value, dest: ir.Value, dims: Sequence[int], offsets: dict) -> ir.Value:
    """Static ``tensor.insert_slice`` of ``src`` into ``dest`` at ``offsets``
    (loop dim -> offset; others 0)."""
    shape = list(tensor_type(src).shape)
    offs = [offsets.get(d, 0) for d in dims]
    return tensor.InsertSliceOp(src, dest, [], [], [], offs, shape, [1] * len(shape)).result


def pad_along(v: ir.Value, dims: Sequence[int], new_sizes: dict) -> ir.Value:
    """Zero-pad ``v`` at the high end of each loop dim in ``new_sizes`` (loop
    dim -> new extent); ``v`` itself when nothing grows."""
    t = tensor_type(v)
    shape = [new_sizes.get(d, s) for d, s in zip(dims, t.shape)]
    if shape == list(t.shape):
        return v
    return insert_along(v, zeros(shape, t.element_type), dims, {})


def dynamic_slice(v: ir.Value, dims: Sequence[int], d: int, offset: ir.Value, size) -> ir.Value:
    """Slice ``v`` along loop dim ``d`` (if ``v`` has it) at ``offset`` (an index
    value) with ``size`` (an int, or an index value for a dynamic size)."""
    if d not in dims:
        return v
    t, pos = tensor_type(v), dims.index(d)
    marker = ir.ShapedType.get_dynamic_size()
    shape = list(t.shape)
    offs = [marker if p == pos else 0 for p in range(t.rank)]
    sizes = shape[:pos] + [size if isinstance(size, int) else marker] + shape[pos + 1:]
    rt = ir.RankedTensorType.get(sizes, t.element_type)
    return tensor.ExtractSliceOp(rt, v, [offset], [] if isinstance(size, int) else [size], [],
                                 offs, sizes, [1] * t.rank).result


def dynamic_insert(src: ir.Value, dest: ir.Value, dims: Sequence[int], d: int,
                   offset: ir.Value, size) -> ir.Value:
    """Insert ``src`` into ``dest`` at ``offset`` along loop dim ``d`` (``size``
    as in :func:`dynamic_slice`)."""
    t, pos = tensor_type(src), dims.index(d)
    marker = ir.ShapedType.get_dynamic_size()
    offs = [marker if p == pos else 0 for p in range(t.rank)]
    sizes = list(t.shape)
    return tensor.InsertSliceOp(src, dest, [offset], [] if isinstance(size, int) else [size], [],
                                offs, sizes, [1] * t.rank).result


def parallel_generic(inputs: list, init: ir.Value, body: Callable[[list], ir.Value]) -> ir.Value:
    """Elementwise ``linalg.generic`` over same-shaped tensors (identity maps).

    ``body(args)`` gets the scalar block arguments (inputs..., init) and
    returns the scalar to yield.
    """
    rank = tensor_type(init).rank
    ident = ir.AffineMap.get_identity(rank)
    maps = ir.ArrayAttr.get([ir.AffineMapAttr.get(ident)] * (len(inputs) + 1))
    iters = ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<parallel>")] * rank)
    op = linalg.GenericOp([init.type], inputs, [init], maps, iters)
    block = op.regions[0].blocks.append(*[tensor_type(v).element_type for v in inputs + [init]])
    with ir.InsertionPoint(block):
        linalg.YieldOp([body(list(block.arguments))])
    return op.result


def weighted_sum(terms: list, acc: ir.Type, start: Optional[ir.Value] = None) -> ir.Value:
    """Scalar ``start + sum c * cast(x)`` over ``terms = [(c, x)]`` in type ``acc``
    (coefficients ``+-1`` become adds and subtracts, others a multiply)."""
    fl = is_float(acc)
    add = arith.addf if fl else arith.addi
    sub = arith.subf if fl else arith.subi
    mul = arith.mulf if fl else arith.muli
    total = start
    for coef, x in terms:
        x = cast(x, acc)
        if coef == 1 or coef == -1:
            if total is None:
                total = x if coef == 1 else (arith.negf(x) if fl else sub(constant(acc, 0), x))
            else:
                total = add(total, x) if coef == 1 else sub(total, x)
        else:
            term = mul(constant(acc, coef), x)
            total = term if total is None else add(total, term)
    return total


#: The op :func:`compute_barrier` emits.
COMPUTE_BARRIER = "iree_tensor_ext.compute_barrier.start"


def compute_barrier(v: ir.Value) -> ir.Value:
    """``v`` behind IREE's ``iree_tensor_ext.compute_barrier.start`` (same type).

    Dispatch creation does not fuse across it (so data tiling packs ``v``
    in a dispatch of its own, not inside the consumer's) and then removes
    it: unlike ``util.optimization_barrier``, which lives on into the host
    program, it leaves stream scheduling alone. IREE 3.13 splits the host
    program at every ``util.optimization_barrier`` (one execute region and a
    host wait each: 346 regions in the Llama-3-8B training step) and never
    deallocates the transient that passes through one; the caller of a
    ``.vmfb`` keeps those buffers, 245 MB per call of a 1024 x 14336 x 4096
    2x4x4:26 plan, about 2 GB per step of that training step.

    A tensor with dynamic sizes passes them as the op's ``value_dims``
    (read by ``tensor.dim`` on ``v``). The op's dialect is loaded into the
    context first: an in-process session may not have loaded it yet at the
    phase where the rewrite runs, and an op made before would be an
    unregistered one that IREE's passes then crash on.
    """
    ir.Context.current.dialects["iree_tensor_ext"]  # loads it (the op registered)
    t = v.type
    dims = []
    if isinstance(t, ir.RankedTensorType):
        rt = ir.RankedTensorType(t)
        dims = [tensor.DimOp(v, index(p)).result for p in range(rt.rank) if rt.is_dynamic_dim(p)]
    return ir.Operation.create(COMPUTE_BARRIER, results=[t], operands=[v] + dims).result


def compute_barrier_text(result: str, value: str, tensor_type: str) -> str:
    """The MLIR text of :func:`compute_barrier` on a statically shaped tensor:
    ``RESULT = iree_tensor_ext.compute_barrier.start VALUE : T -> T``, for
    modules written as text (falcon-calibrate's micro-benchmarks) that fence
    as the rewrite does."""
    return f"{result} = {COMPUTE_BARRIER} {value} : {tensor_type} -> {tensor_type}"


def defining_op_name(v: ir.Value) -> str:
    """Name of the op defining ``v`` (``""`` for a block argument)."""
    owner = v.owner
    if isinstance(owner, ir.Block):
        return ""
    return getattr(owner, "name", "")


#: Ops whose result is a constant of the module: a literal, a global's load (a weight held by the module,
#: e.g. an IREE parameter) or a flow constant.
CONSTANT_OPS = ("arith.constant", "util.global.load", "flow.tensor.constant")


def derives_from_constants(v: ir.Value, max_ops: int = 256) -> bool:
    """Whether ``v`` is computed from :data:`CONSTANT_OPS` alone (through any ops: slices,
    reshapes, lcma-rewrite's combines and fences; for an op with regions, the values its body
    captures from outside count too), so that IREE's global optimization hoists it, and what is
    computed from it alone, into the module's initializer (its const-expr hoisting, run once at
    load). False at a function argument, and where more than ``max_ops`` ops would have to be
    walked. Loads of mutable globals count as constants too (as the cost model's ``const_rhs``
    always has)."""
    seen, stack = [], [v]
    while stack:
        owner = stack.pop().owner
        if isinstance(owner, ir.Block):
            return False
        op = owner.operation if hasattr(owner, "operation") else owner
        if any(op == o for o in seen):
            continue
        seen.append(op)
        if len(seen) > max_ops:
            return False
        if op.name in CONSTANT_OPS:
            continue
        stack.extend(op.operands)
        if len(op.regions):
            inner = _nested_operands(op, max_ops)
            if inner is None:
                return False
            stack.extend(inner)
    return True


def _nested_operands(op, limit: int) -> Optional[list]:
    """The values the ops inside ``op``'s regions use that are defined outside ``op`` (None: more
    than ``limit`` nested ops)."""
    inside, used, todo = [], [], [op]
    while todo:
        cur = todo.pop()
        for region in cur.regions:
            for block in region.blocks:
                inside.append(block)
                for o in block.operations:
                    o = o.operation
                    inside.append(o)
                    used.extend(o.operands)
                    todo.append(o)
                    if len(inside) > limit:
                        return None

    def defined_inside(x) -> bool:
        owner = x.owner
        owner = owner if isinstance(owner, ir.Block) else getattr(owner, "operation", owner)
        return any(owner == i for i in inside)

    return [x for x in used if not defined_inside(x)]


def reassociation_attr(groups: Sequence[Sequence[int]]) -> ir.ArrayAttr:
    """The ``reassociation`` attribute of ``tensor.collapse_shape``/``expand_shape``:
    one ``[i64, ...]`` array of source dimensions per result dimension."""
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, p) for p in g]) for g in groups])


def permutation_source(t: ir.Value) -> Optional[tuple]:
    """``(S, where)`` when ``t`` only permutes ``S`` (a ``linalg.transpose``,
    or a ``linalg.generic`` of parallel loops that yields its one input
    through a permuted map into an identity-mapped init): ``where[j]`` is the
    dimension of ``t`` that ``S``'s dimension ``j`` becomes; else None (a
    block argument, any other op)."""
    owner = t.owner
    if isinstance(owner, ir.Block):
        return None
    op = owner.operation
    if op.name == "linalg.transpose":
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        where = [0] * len(perm)
        for i, p in enumerate(perm):  # result dimension i is input dimension perm[i]
            where[p] = i
        return op.operands[0], where
    if op.name != "linalg.generic" or len(op.operands) != 2 or len(op.results) != 1:
        return None
    if any("parallel" not in str(it) for it in ir.ArrayAttr(op.attributes["iterator_types"])):
        return None
    block = op.regions[0].blocks[0]
    body = list(block.operations)
    if len(body) != 1 or body[0].operation.name != "linalg.yield" or \
            body[0].operation.operands[0] != block.arguments[0]:
        return None
    in_map, out_map = (ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"]))
    if not out_map.is_permutation or list(out_map.results) != [ir.AffineDimExpr.get(i) for i in
                                                               range(out_map.n_dims)]:
        return None
    if not in_map.is_permutation:
        return None
    return op.operands[0], [ir.AffineDimExpr(e).position for e in in_map.results]
