"""lcma-rewrite: rewrite contractions with lower-complexity schemes <m,k,n;R>.

For each contraction the pass finds (see :mod:`passes.contraction`) it takes
a plan (the ``falcon.plan`` attribute if one is attached, else a scheme
forced by the pass options, else the cost-model decision of
:mod:`falcon_mlir.decision` on the target profile)
and replaces the op by:

* combine A: for each product r, ``A_r = sum_ij U[r,i,j] A_ij`` over blocks of
  A (one ``linalg.generic`` per combined operand, in the accumulator type),
* combine B likewise with V,
* products: ``P_r = A_r B_r``, a contraction of the same kind as the original
  (same indexing maps, batch dimensions kept), itself rewritten again for the
  next level if the plan has one,
* combine C: ``C_il = C0_il + sum_r W[r,i,l] P_r`` (one ``linalg.generic`` per
  block of C, reading the live accumulator C0), inserted into C.

Sizes not divisible by the scheme's (m, k, n) are handled by peeling (the
divisible part goes through the scheme; the rest through classical
contractions) or padding (zero-padded operands, result sliced back), as the
plan says. Everything emitted is upstream ``linalg``/``tensor``/``arith``.

The scheme convention (U: R x m x k, V: R x k x n, W: R x m x n, C not
transposed) is the catalog's; see :mod:`falcon_mlir.catalog`.

Options (mlir-opt style, ``--lcma-rewrite="scheme=NAME levels=L edge=E"``):

* ``scheme``: ``auto`` (default), a catalog name or alias (``strassen``,
  ``3x3x3:23``), or a comma list with one name per level,
* ``levels``: ``auto`` (default) or an integer L >= 1,
* ``edge``: ``auto`` (default: peel), ``peel`` or ``pad``,
* ``form``: ``auto`` (default: the decision picks; per-product for a forced
  scheme), ``per-product`` or ``grouped``,
* ``barriers``: ``false`` (default) or ``true`` (see :class:`LcmaOptions`),
* ``max-error``: ``auto`` (default: per element type) or a relative error budget,
* ``target``: the hardware profile of the cost model: a preset name
  (``host``, ``h200``, ...; see :mod:`falcon_mlir.decision.profile`) or a path
  to a profile JSON file (``falcon-calibrate``); default ``host``.
* ``chunk``: ``auto`` (default) or the rows per chunk of the run-time
  dispatch of contractions with a dynamic M (see :func:`dynamic_choice`).

Contractions with a dynamic M (or one dynamic batch dimension) and static
N, K get a run-time dispatch: ``scf.if`` on the size, chunks of static size
through the plan of a static view of the contraction, classical otherwise
(see :func:`dynamic_choice` and :func:`_emit_dispatch`).

Integer contractions are rewritten only with integer-coefficient schemes and
only where :func:`falcon_mlir.decision.numerics.integer_bound_ok` proves that no
intermediate can overflow the accumulator type.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple, Optional

from iree.compiler import ir
from iree.compiler.dialects import arith, linalg, scf, tensor

from falcon_mlir.dialects.plan import PLAN_ATTR, Plan, PlanError
from falcon_mlir import decision
from falcon_mlir.ir.contraction import (DYNAMIC_REASON, Contraction, find_contractions,
                                            format_location)

from falcon_mlir.decision.cost import MAX_GROUPED_TERMS, MAX_PRODUCTS, scheme_stats

MAX_LEVELS = 4


class OptionError(ValueError):
    """An invalid lcma-rewrite option string (unknown key, bad value, unknown scheme)."""


@dataclass
class LcmaOptions:
    """Options of the lcma-rewrite pass.

    Attributes:
        scheme: ``"auto"`` or a tuple of catalog names, one per level.
        levels: ``None`` (auto) or L >= 1.
        edge: ``"auto"``, ``"peel"`` or ``"pad"``.
        form: ``"auto"`` (the decision picks; per-product for a forced
            scheme), ``"per-product"`` or ``"grouped"`` (see
            :mod:`falcon_mlir.dialects.plan`).
        target: hardware profile for the cost model: ``None`` (the host
            preset, or ``$FALCON_PROFILE``), a preset name or a profile path.
        barriers: put products' bare block operands, and the products'
            results, behind ``util.optimization_barrier`` (IREE's util
            dialect). Data tiling on llvm-cpu needs both: without the first
            a slice's packing is pulled into the product dispatch (stack
            allocation limit), without the second the unpacks of several
            products fuse into the combine-C dispatch and vectorize whole
            ("large vector sizes"), IREE 3.13. falcon-compile and the Python API turn
            it on; falcon-opt leaves it off so its output stays upstream-only.
        max_error: error budget (max-norm relative) per contraction, or
            ``None`` (auto): plans whose predicted error
            (:func:`falcon_mlir.decision.numerics.predicted_error`) exceeds it are not
            chosen. With auto, the per-type default
            (:func:`falcon_mlir.decision.numerics.default_max_error`) applies to auto
            plans; a forced scheme is applied unless ``max-error`` is given.
        dispatch: emit the run-time dispatch for dynamic sizes (default
            true; falcon-compile and the API turn it off for CUDA, where
            IREE 3.13 cannot bufferize the dispatch's dynamic slices).
        chunk: rows per chunk of the run-time dispatch on a dynamic M, or
            ``None`` (auto: chosen by the cost model for ``scheme=auto``,
            :data:`DYNAMIC_CHUNK_M` for a forced scheme); rounded up to a
            multiple of the plan's blocks along M (see :func:`dynamic_choice`).
        filename: name used for the ``"-"`` buffer in report locations.
    """

    scheme: object = "auto"
    levels: Optional[int] = None
    edge: str = "auto"
    form: str = "auto"
    barriers: bool = False
    max_error: Optional[float] = None
    target: Optional[str] = None
    chunk: Optional[int] = None
    dispatch: bool = True
    filename: Optional[str] = None

    KEYS = ("scheme", "levels", "edge", "form", "barriers", "max-error", "target", "chunk",
            "dispatch")

    @classmethod
    def parse(cls, text: Optional[str]) -> "LcmaOptions":
        """Parse ``"scheme=strassen levels=2 edge=pad"`` (space separated).

        Raises:
            OptionError: unknown key, missing ``=``, levels not an integer in
                [1, 4], unknown edge, unknown scheme name, or a scheme list
                whose length differs from ``levels``.
        """
        opts = cls()
        text = (text or "").strip()
        if text.startswith("{") and text.endswith("}"):
            text = text[1:-1]
        seen = set()
        for tok in text.split():
            key, eq, val = tok.partition("=")
            if key in seen:
                raise OptionError(f"lcma-rewrite option '{key}' is given twice")
            seen.add(key)
            if not eq:
                raise OptionError(f"lcma-rewrite option '{tok}' must be key=value "
                                  f"(keys: {', '.join(cls.KEYS)})")
            val = val.strip("'\"")
            if key == "scheme":
                if not [n for n in val.split(",") if n]:
                    raise OptionError("lcma-rewrite option scheme= needs a value (auto, or a name "
                                      "from `falcon-catalog list`)")
                opts.scheme = val
            elif key == "levels":
                if val == "auto":
                    opts.levels = None
                else:
                    try:
                        opts.levels = int(val)
                    except ValueError:
                        raise OptionError(f"lcma-rewrite option levels='{val}' is not an integer "
                                          f"(expected auto or 1..{MAX_LEVELS})") from None
                    if not 1 <= opts.levels <= MAX_LEVELS:
                        raise OptionError(f"lcma-rewrite option levels={val} is out of range "
                                          f"(expected auto or 1..{MAX_LEVELS})")
            elif key == "edge":
                opts.edge = _choice(key, val, ("auto", "peel", "pad"))
            elif key == "form":
                opts.form = _choice(key, val, ("auto", "per-product", "grouped"))
            elif key == "target":
                from falcon_mlir.decision.profile import ProfileError, load_profile

                try:
                    load_profile(val)
                except ProfileError as e:
                    raise OptionError(f"lcma-rewrite option target: {e}") from None
                opts.target = val
            elif key == "max-error":
                if val == "auto":
                    opts.max_error = None
                else:
                    try:
                        opts.max_error = float(val)
                    except ValueError:
                        raise OptionError(f"lcma-rewrite option max-error='{val}' is not a number "
                                          "(expected auto or a relative error such as 1e-4)") from None
                    if not opts.max_error > 0 or opts.max_error != opts.max_error:
                        raise OptionError(f"lcma-rewrite option max-error={val} must be > 0")
            elif key == "chunk":
                opts.chunk = _parse_chunk(val)
            elif key == "dispatch":
                if val not in ("true", "false", "1", "0"):
                    raise OptionError(f"lcma-rewrite option dispatch='{val}' is invalid "
                                      "(expected true or false)")
                opts.dispatch = val in ("true", "1")
            elif key == "barriers":
                if val not in ("true", "false", "1", "0"):
                    raise OptionError(f"lcma-rewrite option barriers='{val}' is invalid "
                                      "(expected true or false)")
                opts.barriers = val in ("true", "1")
            else:
                raise OptionError(f"unknown lcma-rewrite option '{key}' "
                                  f"(keys: {', '.join(cls.KEYS)})")
        # Scheme lists are written "a,b" inside one value.
        if opts.scheme != "auto":
            names = tuple(s for s in str(opts.scheme).split(",") if s)
            opts.scheme = names
        opts._validate()
        if opts.target is None and opts.scheme == "auto":
            from falcon_mlir.decision.profile import ProfileError, load_profile

            try:
                load_profile(None)  # $FALCON_PROFILE, checked before any rewriting
            except ProfileError as e:
                raise OptionError(f"lcma-rewrite: {e}") from None
        return opts

    def _validate(self):
        from falcon_mlir.catalog import UnknownSchemeError, get_scheme

        if self.scheme == "auto":
            return
        names = self.scheme
        if len(names) > MAX_LEVELS:
            raise OptionError(f"lcma-rewrite: {len(names)} schemes given; at most {MAX_LEVELS} levels")
        for name in names:
            try:
                get_scheme(name)
            except UnknownSchemeError as e:
                raise OptionError(str(e)) from None
        if self.levels is not None and len(names) > 1 and len(names) != self.levels:
            raise OptionError(f"lcma-rewrite: {len(names)} schemes given for levels={self.levels}")

    def forced_schemes(self) -> Optional[tuple]:
        """The per-level scheme names the user forced, or ``None`` for auto."""
        if self.scheme == "auto":
            return None
        names = tuple(self.scheme)
        if len(names) == 1:
            return names * (self.levels or 1)
        return names

    def edge_strategy(self) -> str:
        """``"peel"`` or ``"pad"`` (``auto`` peels)."""
        return "peel" if self.edge == "auto" else self.edge


def _parse_chunk(val: str) -> Optional[int]:
    """The ``chunk`` option: ``None`` for auto, else an integer in [1, 2**40]."""
    if val == "auto":
        return None
    try:
        n = int(val)
    except ValueError:
        raise OptionError(f"lcma-rewrite option chunk='{val}' is not an integer "
                          "(expected auto or a number of rows >= 1)") from None
    if not 1 <= n <= 2 ** 40:
        raise OptionError(f"lcma-rewrite option chunk={val} is out of range "
                          "(expected auto or 1..2**40 rows)")
    return n


def _choice(key: str, val: str, allowed: tuple) -> str:
    """``val`` if it is one of ``allowed``, else an OptionError naming them."""
    if val not in allowed:
        expected = ", ".join(allowed[:-1]) + " or " + allowed[-1]
        raise OptionError(f"lcma-rewrite option {key}='{val}' is invalid (expected {expected})")
    return val


# ----------------------------------------------------------------------------
# IR building helpers
# ----------------------------------------------------------------------------

def _tt(v: ir.Value) -> ir.RankedTensorType:
    return ir.RankedTensorType(v.type)


def _width(t: ir.Type) -> int:
    if isinstance(t, ir.IntegerType):
        return ir.IntegerType(t).width
    return ir.FloatType(t).width


def _is_float(t: ir.Type) -> bool:
    return isinstance(t, ir.FloatType)


def _cast(v: ir.Value, to: ir.Type) -> ir.Value:
    """Scalar cast of ``v`` to ``to`` (sign-extending for integers)."""
    src = v.type
    if src == to:
        return v
    if _is_float(src) and _is_float(to):
        if _width(src) < _width(to):
            return arith.extf(to, v)
        return arith.truncf(to, v)
    if not _is_float(src) and not _is_float(to):
        if _width(src) < _width(to):
            return arith.extsi(to, v)
        return arith.trunci(to, v)
    if not _is_float(src) and _is_float(to):
        return arith.sitofp(to, v)
    raise ValueError(f"cannot cast {src} to {to}")


def _const(t: ir.Type, value) -> ir.Value:
    if _is_float(t):
        return arith.constant(t, float(value))
    return arith.constant(t, int(value))


def _zeros(shape, elem: ir.Type) -> ir.Value:
    empty = tensor.empty(list(shape), elem)
    return linalg.fill(_const(elem, 0), outs=[empty])


def _slice(v: ir.Value, dims: list, ranges: dict) -> ir.Value:
    """Slice ``v`` (whose positions index loop dims ``dims``) to ``ranges``."""
    t = _tt(v)
    shape = list(t.shape)
    offs, sizes = [0] * len(shape), list(shape)
    for pos, d in enumerate(dims):
        if d in ranges:
            offs[pos], sizes[pos] = ranges[d]
    if offs == [0] * len(shape) and sizes == shape:
        return v
    rt = ir.RankedTensorType.get(sizes, t.element_type)
    return tensor.ExtractSliceOp(rt, v, [], [], [], offs, sizes, [1] * len(shape)).result


def _slice_init(v: ir.Value, dims: list, ranges: dict) -> ir.Value:
    """Slice an accumulator; a ``linalg.fill`` is re-emitted at the slice's shape.

    Re-filling instead of slicing a shared fill keeps each product's
    accumulator independent, which IREE's dispatch formation needs (a slice
    of one fill shared by a product and an insert_slice chain fails to
    distribute on llvm-cpu).
    """
    owner = v.owner
    if isinstance(owner, ir.OpResult) or not hasattr(owner, "name"):
        return _slice(v, dims, ranges)
    if owner.name == "linalg.fill":
        sliced_type = _tt(_slice(v, dims, ranges)) if ranges else _tt(v)
        empty = tensor.empty(list(sliced_type.shape), sliced_type.element_type)
        return linalg.fill(owner.operands[0], outs=[empty])
    return _slice(v, dims, ranges)


def _insert(src: ir.Value, dest: ir.Value, dims: list, offsets: dict) -> ir.Value:
    shape = list(_tt(src).shape)
    offs = [offsets.get(d, 0) for d in dims]
    return tensor.InsertSliceOp(src, dest, [], [], [], offs, shape, [1] * len(shape)).result


def _pad(v: ir.Value, dims: list, new_sizes: dict) -> ir.Value:
    """Zero-pad ``v`` at the high end of each loop dim in ``new_sizes``."""
    t = _tt(v)
    shape = [new_sizes.get(d, s) for d, s in zip(dims, t.shape)]
    if shape == list(t.shape):
        return v
    return _insert(v, _zeros(shape, t.element_type), dims, {})


def _parallel_generic(inputs: list, init: ir.Value, body) -> ir.Value:
    """Elementwise ``linalg.generic`` over same-shaped tensors.

    ``body(args)`` gets the scalar block arguments (inputs..., init) and
    returns the scalar to yield.
    """
    rank = _tt(init).rank
    ident = ir.AffineMap.get_identity(rank)
    maps = ir.ArrayAttr.get([ir.AffineMapAttr.get(ident)] * (len(inputs) + 1))
    iters = ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<parallel>")] * rank)
    op = linalg.GenericOp([init.type], inputs, [init], maps, iters)
    block = op.regions[0].blocks.append(*[_tt(v).element_type for v in inputs + [init]])
    with ir.InsertionPoint(block):
        linalg.YieldOp([body(list(block.arguments))])
    return op.result


#: Discardable attribute on every combine op the rewrite emits: the loop dims
#: whose whole extent one GPU thread should form (the r loop of a grouped
#: combine A/B, the block loops of a fused combine C; empty for a plain
#: elementwise combine). ``falcon-tiles`` turns it into a tile choice.
COMBINE_ATTR = "falcon.combine"


def _mark_combine(v: ir.Value, group_dims=()) -> ir.Value:
    """Tag the op defining ``v`` with :data:`COMBINE_ATTR` (``group_dims``)."""
    v.owner.attributes[COMBINE_ATTR] = ir.DenseI64ArrayAttr.get([int(g) for g in group_dims])
    return v


def _weighted_sum(terms: list, acc: ir.Type, start: Optional[ir.Value] = None) -> ir.Value:
    """Scalar ``start + sum c * cast(x)`` over ``terms = [(c, x)]`` in type ``acc``."""
    fl = _is_float(acc)
    add = arith.addf if fl else arith.addi
    sub = arith.subf if fl else arith.subi
    mul = arith.mulf if fl else arith.muli
    total = start
    for coef, x in terms:
        x = _cast(x, acc)
        if coef == 1 or coef == -1:
            if total is None:
                total = x if coef == 1 else (arith.negf(x) if fl else sub(_const(acc, 0), x))
            else:
                total = add(total, x) if coef == 1 else sub(total, x)
        else:
            term = mul(_const(acc, coef), x)
            total = term if total is None else add(total, term)
    return total


# ----------------------------------------------------------------------------
# The rewrite
# ----------------------------------------------------------------------------

class _Emitter:
    """Emits one contraction's plan in front of the original op."""

    def __init__(self, c: Contraction, barriers: bool = False, fuse_c: bool = False):
        self.c = c
        self.barriers = barriers
        self.fuse_c = fuse_c
        self.kind = c.kind
        self.acc = c.acc_type
        self.n_loops = 3 + len(c.batch_dims)
        self.maps = [ir.AffineMap.get(self.n_loops, 0, [ir.AffineDimExpr.get(d) for d in dims])
                     for dims in (c.lhs_dims, c.rhs_dims, c.out_dims)]
        self.products = 0
        self.combines = 0

    # -- classical contraction of the original kind --------------------------
    def classical(self, a: ir.Value, b: ir.Value, init: ir.Value) -> ir.Value:
        self.products += 1
        if self.kind == "matmul":
            return linalg.matmul(a, b, outs=[init], indexing_maps=self.maps)
        if self.kind == "batch_matmul":
            return linalg.batch_matmul(a, b, outs=[init], indexing_maps=self.maps)
        return self._generic_contraction(a, b, init, self.maps, batch_prefix=0)

    def _generic_contraction(self, a, b, init, maps, batch_prefix: int) -> ir.Value:
        """``init + a * b`` as a ``linalg.generic`` contraction, computed in the accumulator type.

        ``maps`` index ``batch_prefix`` extra leading parallel loops followed by
        the original op's loops (its K loop is the reduction).
        """
        c = self.c
        kinds = ["parallel"] * batch_prefix + ["reduction" if d == c.k_dim else "parallel"
                                               for d in range(self.n_loops)]
        iters = [ir.Attribute.parse(f"#linalg.iterator_type<{k}>") for k in kinds]
        op = linalg.GenericOp([init.type], [a, b], [init],
                              ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
                              ir.ArrayAttr.get(iters))
        block = op.regions[0].blocks.append(_tt(a).element_type, _tt(b).element_type,
                                            _tt(init).element_type)
        acc = self.acc
        with ir.InsertionPoint(block):
            x, y, o = block.arguments
            fl = _is_float(acc)
            prod = (arith.mulf if fl else arith.muli)(_cast(x, acc), _cast(y, acc))
            linalg.YieldOp([(arith.addf if fl else arith.addi)(o, prod)])
        return op.result

    # -- one plan (possibly several levels) -----------------------------------
    def emit(self, a: ir.Value, b: ir.Value, init: ir.Value, plan: Optional[Plan]) -> ir.Value:
        if plan is None:
            return self.classical(a, b, init)
        from falcon_mlir.catalog import get_scheme

        c = self.c
        if plan.form == "grouped":
            # All levels at once: the Kronecker product of the levels' schemes.
            s = get_scheme("*".join(plan.schemes))
            level, inner = self.level_grouped, None
        else:
            s = get_scheme(plan.schemes[0])
            level, inner = self.level, plan.inner()
        M = _tt(a).shape[c.lhs_dims.index(c.m_dim)]
        K = _tt(a).shape[c.lhs_dims.index(c.k_dim)]
        N = _tt(b).shape[c.rhs_dims.index(c.n_dim)]
        if M < s.m or K < s.k or N < s.n:
            return self.classical(a, b, init)
        md, kd, nd = c.m_dim, c.k_dim, c.n_dim
        Mp, Kp, Np = (-(-M // s.m) * s.m, -(-K // s.k) * s.k, -(-N // s.n) * s.n)
        if plan.edge == "pad" and max(Mp, Kp, Np) < 2 ** 62:  # else peel: no int64 overflow
            ap = _pad(a, c.lhs_dims, {md: Mp, kd: Kp})
            bp = _pad(b, c.rhs_dims, {kd: Kp, nd: Np})
            cp = _pad(init, c.out_dims, {md: Mp, nd: Np})
            res = level(ap, bp, cp, s, inner)
            return _slice(res, c.out_dims, {md: (0, M), nd: (0, N)})
        # Peeling: the divisible core through the scheme, the rest classical.
        M0, K0, N0 = M // s.m * s.m, K // s.k * s.k, N // s.n * s.n
        core_init = _slice_init(init, c.out_dims, {md: (0, M0), nd: (0, N0)})
        if K0 < K:
            core_init = self.classical(
                self._fence(_slice(a, c.lhs_dims, {md: (0, M0), kd: (K0, K - K0)})),
                self._fence(_slice(b, c.rhs_dims, {kd: (K0, K - K0), nd: (0, N0)})),
                core_init)
        core = level(_slice(a, c.lhs_dims, {md: (0, M0), kd: (0, K0)}),
                     _slice(b, c.rhs_dims, {kd: (0, K0), nd: (0, N0)}),
                     core_init, s, inner)
        if M0 == M and N0 == N:
            return core
        result = _insert(core, init, c.out_dims, {})
        if M0 < M:
            rows = self.classical(self._fence(_slice(a, c.lhs_dims, {md: (M0, M - M0)})), b,
                                  _slice_init(init, c.out_dims, {md: (M0, M - M0)}))
            result = _insert(rows, result, c.out_dims, {md: M0})
        if N0 < N:
            cols = self.classical(self._fence(_slice(a, c.lhs_dims, {md: (0, M0)})),
                                  self._fence(_slice(b, c.rhs_dims, {nd: (N0, N - N0)})),
                                  _slice_init(init, c.out_dims, {md: (0, M0), nd: (N0, N - N0)}))
            result = _insert(cols, result, c.out_dims, {nd: N0})
        return result

    def _fence(self, x: ir.Value) -> ir.Value:
        """``x`` behind ``util.optimization_barrier`` if it is a bare slice and barriers are on.

        IREE's data tiling otherwise pulls the packing of the slice into the
        consuming contraction's dispatch; for a narrow strip with a long K
        (the peeled column strip of a 4096 x 14336 weight: K = 4096, 2
        columns) that packs the whole strip on the stack and llvm-cpu fails
        ("exceeded stack allocation limit", IREE 3.13; iree-notes.md).
        """
        if self.barriers and not isinstance(x.owner, ir.Block) and \
                getattr(x.owner, "name", "") == "tensor.extract_slice":
            return ir.Operation.create("util.optimization_barrier", results=[x.type],
                                       operands=[x]).result
        return x

    def _combine(self, terms: list) -> ir.Value:
        """``sum c * X`` over ``terms = [(c, block)]`` as a tensor in the accumulator type.

        A single block with coefficient 1 is used as it is; with the
        ``barriers`` option it is put behind ``util.optimization_barrier``:
        IREE's data tiling otherwise pulls the packing of a bare slice into the
        product's dispatch, which fails on llvm-cpu ("exceeded stack
        allocation limit", IREE 3.13; iree-notes.md). An identity copy would
        not do: canonicalization erases it.
        """
        if len(terms) == 1 and terms[0][0] == 1:
            return self._fence(terms[0][1])
        self.combines += 1
        first = terms[0][1]
        init = tensor.empty(list(_tt(first).shape), self.acc)
        acc = self.acc
        return _mark_combine(_parallel_generic(
            [x for _, x in terms], init,
            lambda args: _weighted_sum([(coef, x) for (coef, _), x in zip(terms, args[:-1])], acc)))

    def level(self, a, b, init, s, inner: Optional[Plan]) -> ir.Value:
        """One level of scheme ``s`` on divisible operands."""
        c = self.c
        md, kd, nd = c.m_dim, c.k_dim, c.n_dim
        M = _tt(a).shape[c.lhs_dims.index(md)]
        K = _tt(a).shape[c.lhs_dims.index(kd)]
        N = _tt(b).shape[c.rhs_dims.index(nd)]
        Mb, Kb, Nb = M // s.m, K // s.k, N // s.n
        a_blk, b_blk = {}, {}

        def A(i, j):
            if (i, j) not in a_blk:
                a_blk[i, j] = _slice(a, c.lhs_dims, {md: (i * Mb, Mb), kd: (j * Kb, Kb)})
            return a_blk[i, j]

        def B(j, l):
            if (j, l) not in b_blk:
                b_blk[j, l] = _slice(b, c.rhs_dims, {kd: (j * Kb, Kb), nd: (l * Nb, Nb)})
            return b_blk[j, l]

        out_shape = list(_tt(init).shape)
        blk_shape = [Mb if d == md else Nb if d == nd else sz
                     for d, sz in zip(c.out_dims, out_shape)]
        products = []
        for r in range(s.R):
            ta = [(Fraction(s.U[r][i][j]), A(i, j)) for i in range(s.m) for j in range(s.k)
                  if s.U[r][i][j] != 0]
            tb = [(Fraction(s.V[r][j][l]), B(j, l)) for j in range(s.k) for l in range(s.n)
                  if s.V[r][j][l] != 0]
            ar, br = self._combine(ta), self._combine(tb)
            p = self.emit(ar, br, _zeros(blk_shape, self.acc), inner)
            if self.barriers:
                p = ir.Operation.create("util.optimization_barrier", results=[p.type],
                                        operands=[p]).result
            products.append(p)
        return self._combine_c(products.__getitem__, s, init, Mb, Nb)

    def _combine_c(self, product, s, init: ir.Value, Mb: int, Nb: int) -> ir.Value:
        """Combine C of both forms: ``C[i,l] = C0[i,l] + sum_r W[r][i][l] * product(r)``.

        One op per output block written back with ``tensor.insert_slice`` (CPU),
        or :meth:`_fused_combine_c` on GPU targets (``fuse_c``). ``product(r)``
        gives the r-th product (``Mb x Nb`` in the output's dims).
        """
        if self.fuse_c:
            return self._fused_combine_c([product(r) for r in range(s.R)], s, init, Mb, Nb)
        c = self.c
        md, nd = c.m_dim, c.n_dim
        result, acc = init, self.acc
        for i in range(s.m):
            for l in range(s.n):
                terms = [(Fraction(s.W[r][i][l]), r) for r in range(s.R) if s.W[r][i][l] != 0]
                if not terms:
                    continue
                c0 = _slice_init(init, c.out_dims, {md: (i * Mb, Mb), nd: (l * Nb, Nb)})
                self.combines += 1
                blk = _mark_combine(_parallel_generic(
                    [product(r) for _, r in terms], c0,
                    lambda args, terms=terms: _weighted_sum(
                        [(coef, x) for (coef, _), x in zip(terms, args[:-1])],
                        acc, start=args[-1])))
                result = _insert(blk, result, c.out_dims, {md: i * Mb, nd: l * Nb})
        return result

    def _fused_combine_c(self, products: list, s, init: ir.Value, Mb: int, Nb: int) -> ir.Value:
        """Combine C as one op over the whole output: ``C[a,b] = C0[a,b] + sum_r
        W[r][a][b] * P_r`` for every output block (a, b) at once.

        The output is viewed as blocks by ``tensor.expand_shape`` (M -> (m, Mb),
        N -> (n, Nb); free, the data stay in place), and one ``linalg.generic``
        over the expanded loops reads each product ``P_r`` (``Mb x Nb``, any batch
        dims) with the block loops a and b broadcast and each ``W[r]`` as an
        ``m x n`` table, then the result is collapsed back. With a thread tile
        spanning a and b (``falcon-tiles``) every product element is read once.
        On CUDA this replaces ``m*n`` dispatches and the scalar copies IREE 3.13
        makes of their ``tensor.insert_slice`` results. Terms whose coefficient
        is 0 are selected away (no ``0 * inf``).
        """
        c = self.c
        md, nd = c.m_dim, c.n_dim
        itype = _tt(init)
        pos_m, pos_n = c.out_dims.index(md), c.out_dims.index(nd)
        exp_shape, reassoc, where = [], [], {}
        for p, size in enumerate(itype.shape):
            if p == pos_m:
                where["a"], where["i"] = len(exp_shape), len(exp_shape) + 1
                group, exp_shape = [len(exp_shape), len(exp_shape) + 1], exp_shape + [s.m, Mb]
            elif p == pos_n:
                where["b"], where["j"] = len(exp_shape), len(exp_shape) + 1
                group, exp_shape = [len(exp_shape), len(exp_shape) + 1], exp_shape + [s.n, Nb]
            else:
                where[p] = len(exp_shape)
                group, exp_shape = [len(exp_shape)], exp_shape + [size]
            reassoc.append(group)
        E = len(exp_shape)
        exp_type = ir.RankedTensorType.get(exp_shape, itype.element_type)
        reassoc_attr = ir.ArrayAttr.get([ir.ArrayAttr.get(
            [ir.IntegerAttr.get(ir.IntegerType.get_signless(64), g) for g in grp])
            for grp in reassoc])
        exp_init = tensor.ExpandShapeOp(exp_type, init, reassoc_attr, [], exp_shape).result
        d = ir.AffineDimExpr.get
        p_dims = [d(where["i"]) if p == pos_m else d(where["j"]) if p == pos_n else d(where[p])
                  for p in range(itype.rank)]
        p_map = ir.AffineMap.get(E, 0, p_dims)
        w_map = ir.AffineMap.get(E, 0, [d(where["a"]), d(where["b"])])
        out_map = ir.AffineMap.get_identity(E)
        used = [r for r in range(s.R) if any(s.W[r][i][l] != 0 for i in range(s.m)
                                             for l in range(s.n))]
        inputs, maps = [], []
        for r in used:
            table = self._table([Fraction(s.W[r][i][l]) for i in range(s.m) for l in range(s.n)],
                                (s.m, s.n))
            inputs += [products[r], table]
            maps += [p_map, w_map]
        self.combines += 1
        res = self._table_generic(inputs, maps + [out_map], exp_init, accumulate=True)
        _mark_combine(res, [where["a"], where["b"]])
        return tensor.CollapseShapeOp(itype, res, reassoc_attr).result

    # -- the grouped form ---------------------------------------------------------
    def _table(self, values, shape=None) -> ir.Value:
        """A constant coefficient table (f32, f64 for f64 accumulators, i64 for
        integers) of ``shape`` (default 1-D)."""
        import numpy as np

        if _is_float(self.acc):
            et, dt = (ir.F64Type.get(), np.float64) if _width(self.acc) == 64 else \
                (ir.F32Type.get(), np.float32)
        else:  # coefficients are small integers; the body casts them to the acc type
            et, dt = ir.IntegerType.get_signless(64), np.int64
        arr = np.array([float(v) if _is_float(self.acc) else int(v) for v in values], dtype=dt)
        shape = list(shape or [len(values)])
        ttype = ir.RankedTensorType.get(shape, et)
        return arith.ConstantOp(ttype, ir.DenseElementsAttr.get(arr.reshape(shape),
                                                                type=ttype)).result

    def _table_generic(self, inputs: list, maps: list, init: ir.Value, accumulate: bool) -> ir.Value:
        """All-parallel ``linalg.generic`` over ``inputs`` = (block, coefficient
        table) pairs with ``maps`` (inputs', then the output's): yields
        ``sum w * x`` over the pairs in the accumulator type, plus the output's
        value with ``accumulate``. Float terms whose coefficient is 0 are
        selected away (no ``0 * inf``) when accumulating over all R products."""
        n = maps[-1].n_dims
        iters = ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<parallel>")] * n)
        op = linalg.GenericOp([init.type], inputs, [init],
                              ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]), iters)
        block = op.regions[0].blocks.append(*[_tt(v).element_type for v in inputs + [init]])
        acc = self.acc
        fl = _is_float(acc)
        with ir.InsertionPoint(block):
            args = list(block.arguments)
            total = args[-1] if accumulate else None
            zero = _const(acc, 0) if accumulate and fl else None
            for k in range(len(inputs) // 2):
                x, w = _cast(args[2 * k], acc), _cast(args[2 * k + 1], acc)
                term = (arith.mulf if fl else arith.muli)(w, x)
                if zero is not None:
                    term = arith.select(arith.cmpf(arith.CmpFPredicate.OEQ, w, zero), zero, term)
                total = term if total is None else (arith.addf if fl else arith.addi)(total, term)
            linalg.YieldOp([total])
        return op.result

    def _group_combine(self, blocks: dict, coef, R: int) -> ir.Value:
        """One op writing all R combined operands: ``G[r] = sum_b coef(r, b) * block_b``.

        ``blocks`` maps a block index to its slice; ``coef(r, idx)`` is the
        Fraction coefficient. Result: ``tensor<R x block x acc>``.
        """
        self.combines += 1
        used = [(idx, x) for idx, x in blocks.items() if any(coef(r, idx) != 0 for r in range(R))]
        shape = list(_tt(used[0][1]).shape)
        rank = len(shape)
        # Loop order (block dims except the last, r, last block dim): for each
        # row of the blocks, all R outputs are formed while the row is in
        # cache, so each block element is read from memory once and the
        # innermost loop is contiguous in every operand. (With r outermost,
        # every block would be streamed from memory R times.)
        d = lambda i: ir.AffineDimExpr.get(i)
        blk_dims = [d(i) for i in range(rank - 1)] + [d(rank)]
        blk_map = ir.AffineMap.get(rank + 1, 0, blk_dims)
        tab_map = ir.AffineMap.get(rank + 1, 0, [d(rank - 1)])
        out_map = ir.AffineMap.get(rank + 1, 0, [d(rank - 1)] + blk_dims)
        inputs, maps = [], []
        for idx, x in used:
            inputs += [x, self._table([coef(r, idx) for r in range(R)])]
            maps += [blk_map, tab_map]
        init = tensor.empty([R] + shape, self.acc)
        res = self._table_generic(inputs, maps + [out_map], init, accumulate=False)
        return _mark_combine(res, [rank - 1])

    def _batched_product(self, ga: ir.Value, gb: ir.Value, R: int, cshape: list) -> ir.Value:
        """All R products as one contraction with a leading batch dimension r."""
        c = self.c
        n = self.n_loops + 1
        shift = lambda dims: [ir.AffineDimExpr.get(0)] + [ir.AffineDimExpr.get(d + 1) for d in dims]
        maps = [ir.AffineMap.get(n, 0, shift(dims)) for dims in (c.lhs_dims, c.rhs_dims, c.out_dims)]
        init = _zeros([R] + cshape, self.acc)
        self.products += 1
        if self.kind == "matmul":
            return linalg.batch_matmul(ga, gb, outs=[init], indexing_maps=maps)
        return self._generic_contraction(ga, gb, init, maps, batch_prefix=1)

    def level_grouped(self, a, b, init, s, inner) -> ir.Value:
        """One grouped level of (composed) scheme ``s`` on divisible operands."""
        assert inner is None
        c = self.c
        md, kd, nd = c.m_dim, c.k_dim, c.n_dim
        M = _tt(a).shape[c.lhs_dims.index(md)]
        K = _tt(a).shape[c.lhs_dims.index(kd)]
        N = _tt(b).shape[c.rhs_dims.index(nd)]
        Mb, Kb, Nb = M // s.m, K // s.k, N // s.n
        a_blocks = {(i, j): _slice(a, c.lhs_dims, {md: (i * Mb, Mb), kd: (j * Kb, Kb)})
                    for i in range(s.m) for j in range(s.k)}
        b_blocks = {(j, l): _slice(b, c.rhs_dims, {kd: (j * Kb, Kb), nd: (l * Nb, Nb)})
                    for j in range(s.k) for l in range(s.n)}
        ga = self._group_combine(a_blocks, lambda r, ij: Fraction(s.U[r][ij[0]][ij[1]]), s.R)
        gb = self._group_combine(b_blocks, lambda r, jl: Fraction(s.V[r][jl[0]][jl[1]]), s.R)
        cshape = [Mb if d == md else Nb if d == nd else sz
                  for d, sz in zip(c.out_dims, _tt(init).shape)]
        gp = self._batched_product(ga, gb, s.R, cshape)
        if self.barriers:
            gp = ir.Operation.create("util.optimization_barrier", results=[gp.type],
                                     operands=[gp]).result
        rank = len(cshape)
        prod_type = ir.RankedTensorType.get(cshape, self.acc)

        def P(r):
            return tensor.ExtractSliceOp(prod_type, gp, [], [], [], [r] + [0] * rank,
                                         [1] + cshape, [1] * (rank + 1)).result

        return self._combine_c(P, s, init, Mb, Nb)


def _schemes_fit(c: Contraction, schemes: tuple, form: str = "per-product") -> Optional[str]:
    """Why ``schemes`` cannot serve ``c`` in ``form`` (``None`` if they can).

    The first level's blocks must fit in (M, K, N); in the grouped form all
    levels are applied at once, so the composed scheme's blocks must fit.
    """
    from falcon_mlir.catalog import UnknownSchemeError, get_scheme

    total = 1
    for name in schemes:
        try:
            s = get_scheme(name)
        except UnknownSchemeError as e:
            return f"{e}; kept classical"
        total *= s.R
        if total > MAX_PRODUCTS:
            return (f"plan {'+'.join(schemes)} has over {MAX_PRODUCTS} products "
                    f"({total} and counting); kept classical")
        if c.is_integer and not s.is_integral:
            return (f"scheme {name} has non-integer coefficients and {c.acc_type} is an integer "
                    "type; kept classical")
    s = get_scheme("*".join(schemes) if form == "grouped" else schemes[0])
    if c.M < s.m or c.K < s.k or c.N < s.n:
        return (f"M x K x N = {c.M} x {c.K} x {c.N} is smaller than the scheme's "
                f"{s.m}x{s.k}x{s.n} blocks; kept classical")
    return None


def _numerics_check(c: Contraction, schemes: tuple, budget: Optional[float]) -> Optional[str]:
    """Why ``schemes`` are numerically unfit for ``c`` (``None`` if fit).

    Integers: exactness (no overflow anywhere, worst case over all inputs).
    Floats: the predicted error against ``budget`` (no budget: always fit).
    """
    from falcon_mlir.decision import numerics

    if c.is_integer:
        ok, why = numerics.integer_bound_ok(list(schemes), c.K, _width(c.lhs_type),
                                            _width(c.acc_type), rhs_bits=_width(c.rhs_type))
        return None if ok else f"{why}; kept classical"
    if budget is None or c.K < 1:
        return None
    pred = numerics.predicted_error(list(schemes), c.K, str(c.acc_type))
    if pred > budget:
        return (f"predicted error {pred:.1e} of {'+'.join(schemes)} exceeds max-error "
                f"{budget:.1e}; kept classical")
    return None


def problem_of(c: Contraction) -> "decision.Problem":
    """The cost model's view of contraction ``c`` (sizes, element types, constant B)."""
    import math

    rhs = c.op.operands[1]
    owner = rhs.owner
    const_rhs = not isinstance(owner, ir.Block) and getattr(owner, "name", "") in (
        "arith.constant", "util.global.load", "flow.tensor.constant")
    return decision.Problem(M=c.M, N=c.N, K=c.K, batch=math.prod(c.batch) if c.batch else 1,
                            lhs=str(c.lhs_type), rhs=str(c.rhs_type), acc=str(c.acc_type),
                            const_rhs=const_rhs)


def decision_for(c: Contraction, options: LcmaOptions, forced: Optional[tuple] = None,
                 form: Optional[str] = None, edge: Optional[str] = None) -> "decision.Decision":
    """The cost-model decision for ``c`` under ``options`` (see :func:`falcon_mlir.decision.decide`).

    ``forced``/``form``/``edge`` evaluate a given plan instead of choosing one.
    """
    from falcon_mlir.decision import numerics

    profile = decision.load_profile(options.target)
    pb = problem_of(c)
    if forced is not None:
        return decision.decide(pb, profile, forced=forced, forms=(form or "per-product",),
                               edges=(edge or "peel",))
    budget = options.max_error if options.max_error is not None else \
        numerics.default_max_error(str(c.acc_type))
    forms = decision.FORMS if options.form == "auto" else (options.form,)
    edges = decision.EDGES if options.edge == "auto" else (options.edge,)
    return decision.decide(pb, profile, levels=options.levels, forms=forms, edges=edges,
                           budget=budget)


def plan_for(c: Contraction, options: LcmaOptions) -> tuple:
    """The plan for one contraction: ``(Plan or None, reason)``."""
    if c.unsupported:
        return None, c.unsupported
    if PLAN_ATTR in c.op.attributes:
        try:
            plan = Plan.from_attribute(c.op.attributes[PLAN_ATTR])
        except PlanError as e:
            return None, str(e)
        why = _schemes_fit(c, plan.schemes, plan.form) or \
            _numerics_check(c, plan.schemes, options.max_error)
        return (None, why) if why else (plan, f"plan attached by {PLAN_ATTR}")
    forced = options.forced_schemes()
    form = "per-product" if options.form == "auto" else options.form
    edge = options.edge_strategy()
    if forced is None:
        if min(c.M, c.N, c.K) < 1:
            return None, "auto: an empty contraction stays classical"
        d = decision_for(c, options)
        if d.choice.is_classical:
            return None, d.reason
        schemes, why = d.choice.schemes, d.reason
        form, edge = d.choice.form, d.choice.edge
    else:
        schemes, why = forced, f"scheme forced by option ({', '.join(forced)})"
    if form == "grouped" and _grouped_terms(schemes) > MAX_GROUPED_TERMS:
        form = "per-product"
        why += (f"; per-product form: the grouped combines of {'*'.join(schemes)} would read "
                f"{_grouped_terms(schemes)} blocks (at most {MAX_GROUPED_TERMS})")
    unfit = _schemes_fit(c, schemes, form) or _numerics_check(
        c, schemes, options.max_error if forced is not None else None)
    if unfit:
        return None, unfit
    return Plan(tuple(schemes), edge=edge, form=form), why


def _predicted_time(c: Contraction, options: LcmaOptions, plan: Optional[Plan]) -> Optional[dict]:
    """Predicted seconds of classical, of the plan taken and of the next best alternatives."""
    if c.unsupported or min(c.M, c.N, c.K) < 1:
        return None
    try:
        if plan is None or options.forced_schemes() is None and PLAN_ATTR not in c.op.attributes:
            d = decision_for(c, options)
            if plan is not None and d.choice.schemes != tuple(plan.schemes):
                d = decision_for(c, options, forced=plan.schemes, form=plan.form, edge=plan.edge)
        else:
            d = decision_for(c, options, forced=plan.schemes, form=plan.form, edge=plan.edge)
    except Exception:  # the model must never break the rewrite
        return None
    out = {"profile": d.profile, "classical": d.classical.seconds,
           "plan": d.choice.seconds if plan is not None else d.classical.seconds,
           "alternatives": [{"plan": a.label(), "seconds": a.seconds} for a in d.alternatives
                            if plan is None or a.schemes != tuple(plan.schemes)
                            or a.form != plan.form or a.edge != plan.edge][:3]}
    if plan is not None:
        out["dispatches"] = d.choice.dispatches
        out["temp_bytes"] = int(d.choice.temp_bytes)
        out["parts"] = {k: v for k, v in d.choice.parts.items() if v}
    return out


def _grouped_terms(schemes: tuple) -> int:
    """Most blocks a grouped combine (A, B or one C block) of the composed scheme reads."""
    return scheme_stats("*".join(schemes)).max_terms


def _predicted(c: Contraction, plan: Optional[Plan]) -> Optional[dict]:
    """Predicted max-norm relative errors of classical and of the plan (floats only)."""
    from falcon_mlir.decision import numerics

    if not c.is_float or c.unsupported or min(c.M, c.N, c.K) < 1:
        return None
    out = {"classical": numerics.classical_error(c.K, str(c.acc_type))}
    if plan is not None:
        out["plan"] = numerics.predicted_error(list(plan.schemes), c.K, str(c.acc_type))
    return out


def _strip_stray_plans(root, report: list, options: LcmaOptions) -> None:
    """Remove ``falcon.plan`` from ops that are not contractions, with a remark entry."""
    from falcon_mlir.ir.contraction import analyze

    stray = []

    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        if PLAN_ATTR in op.attributes and analyze(op) is None:
            stray.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    for op in stray:
        del op.attributes[PLAN_ATTR]
        report.append({"location": format_location(op.location, options.filename), "op": op.name,
                       "kind": "not a contraction", "M": None, "N": None, "K": None,
                       "batch": [], "element_types": None, "plan": "classical",
                       "reason": f"{PLAN_ATTR} on an op that is not a contraction; removed",
                       "remark": True})


# ----------------------------------------------------------------------------
# Run-time dispatch for dynamic sizes
# ----------------------------------------------------------------------------

#: Rows per chunk of the run-time dispatch on a dynamic M for a forced scheme
#: (and the M from which the chunked path is taken); under ``scheme=auto``
#: the cost model picks the chunk from :data:`DYNAMIC_CHUNK_CANDIDATES`.
DYNAMIC_CHUNK_M = 2048
#: Chunk sizes the cost model considers for a dynamic M.
DYNAMIC_CHUNK_CANDIDATES = (256, 512, 1024, 2048, 4096, 8192)


def _auto_chunk(c: Contraction, options: LcmaOptions) -> Optional[int]:
    """The chunk rows for a dynamic M under ``scheme=auto`` (``None``: no chunk wins).

    For each candidate chunk Mc the decision is taken on a static view with
    M = Mc; of those where a plan wins, the smallest whose predicted speedup
    is within 90% of the best one's gain is taken (a smaller chunk is also
    the run-time threshold, so more sizes get the faster path).
    """
    import dataclasses

    wins = []
    for mc in DYNAMIC_CHUNK_CANDIDATES:
        view = dataclasses.replace(c, M=mc, unsupported=None, dynamic=[])
        d = decision_for(view, options)
        if not d.choice.is_classical:
            wins.append((mc, d.speedup))
    if not wins:
        return None
    best = max(sp for _, sp in wins)
    return next(mc for mc, sp in wins if sp - 1.0 >= 0.9 * (best - 1.0))


class Dispatch(NamedTuple):
    """A run-time dispatch for a contraction with one dynamic size.

    ``chunk``: static size of the chunks along the dynamic dimension (rows
    for M); ``plan``: the plan for one chunk (a static view of the
    contraction, ``view``); ``threshold``: the smallest run-time size that
    takes the chunked LCMA path (below it the original op runs); ``dim``:
    ``"M"`` or ``"batch"``.
    """

    chunk: int
    plan: Plan
    threshold: int
    dim: str = "M"
    view: Optional[Contraction] = None

    def to_json(self) -> dict:
        """The report's ``dispatch`` entry, e.g. ``{"threshold_M": 2048, "chunk_M": 2048}``."""
        return {f"threshold_{self.dim}": self.threshold, f"chunk_{self.dim}": self.chunk}


def _m_blocks(plan: Plan) -> int:
    """How many blocks the plan cuts M into (product over the levels)."""
    from falcon_mlir.catalog import get_scheme

    n = 1
    for name in plan.schemes:
        n *= get_scheme(name).m
    return n


def dynamic_choice(c: Contraction, options: LcmaOptions) -> tuple:
    """The run-time dispatch for a contraction with a dynamic size: ``(Dispatch or None, reason)``.

    Served: a dynamic M with static N, K (batch static), and a single dynamic
    batch dimension with static M, N, K. A dynamic N or K, or several dynamic
    sizes, stay classical (the reason says so).

    Dynamic M: the plan is :func:`plan_for` on a static view of ``c`` with
    M = chunk, where chunk is the ``chunk`` option or :data:`DYNAMIC_CHUNK_M`,
    rounded up to a multiple of the plan's blocks along M; the threshold is
    the chunk (at run time M >= threshold runs floor(M / chunk) chunks
    through the plan and the rest classical; smaller M runs the original op).
    The same holds for a forced scheme and for an attached ``falcon.plan``.
    Dynamic batch: each batch element is a static (M, N, K) contraction, so
    chunk = threshold = 1 and the plan is :func:`plan_for` on the view with
    that batch size 1.

    Under ``scheme=auto`` without ``chunk=`` the chunk (and so the
    threshold) comes from the cost model (:func:`_auto_chunk`).
    """
    import dataclasses

    why_not = _not_dispatchable(c)
    if why_not:
        return None, why_not
    marker = ir.ShapedType.get_dynamic_size()
    if c.dynamic == ["batch"]:
        view = dataclasses.replace(c, batch=[1 if x == marker else x for x in c.batch],
                                   unsupported=None, dynamic=[])
        plan, why = plan_for(view, options)
        if plan is None:
            return None, f"dynamic batch, each batch element classical: {why}"
        return Dispatch(1, plan, 1, "batch", view), (
            f"dynamic batch: run-time loop over the batch, each element through the plan ({why})")
    chunk = options.chunk
    if chunk is None and options.forced_schemes() is None and PLAN_ATTR not in c.op.attributes:
        chunk = _auto_chunk(c, options)
        if chunk is None:
            return None, (f"dynamic M: auto keeps it classical at every M (no chunk size in "
                          f"{', '.join(map(str, DYNAMIC_CHUNK_CANDIDATES))} is predicted faster "
                          "through a plan)")
    chunk = chunk or DYNAMIC_CHUNK_M
    view = dataclasses.replace(c, M=chunk, unsupported=None, dynamic=[])
    plan, why = plan_for(view, options)
    if plan is not None and chunk % _m_blocks(plan):
        chunk += _m_blocks(plan) - chunk % _m_blocks(plan)
        view = dataclasses.replace(view, M=chunk)
        plan, why = plan_for(view, options)
    if plan is None:
        return None, f"dynamic M, classical at every M (plan for chunks of {chunk} rows: {why})"
    return Dispatch(chunk, plan, chunk, "M", view), (
        f"dynamic M: run-time dispatch, M >= {chunk} in chunks of {chunk} rows through the plan "
        f"({why}), the remaining rows and smaller M classical")


def _not_dispatchable(c: Contraction) -> Optional[str]:
    """Why run-time dispatch cannot serve ``c`` at all (``None`` if it can)."""
    if not c.dynamic or c.unsupported != DYNAMIC_REASON:
        return c.unsupported or "static sizes"
    dyn = list(c.dynamic)
    if len(dyn) > 1:
        return (f"dynamic {', '.join(dyn)}: run-time dispatch serves one dynamic size "
                "(M or a batch dimension); stays classical")
    if dyn[0] in ("N", "K"):
        return (f"dynamic {dyn[0]}: run-time dispatch serves a dynamic M or batch "
                "dimension only; stays classical")
    d = _dispatch_dim(c)
    for v, dims in zip(c.op.operands, (c.lhs_dims, c.rhs_dims, c.out_dims)):
        if d in dims and not _tt(v).is_dynamic_dim(dims.index(d)):
            return f"{dyn[0]} is dynamic in some operands and static in others; stays classical"
    return None


def _dispatch_dim(c: Contraction) -> int:
    """The loop dimension of ``c``'s one dynamic size (M or a batch dimension)."""
    if c.dynamic == ["M"]:
        return c.m_dim
    marker = ir.ShapedType.get_dynamic_size()
    return next(bd for bd, x in zip(c.batch_dims, c.batch) if x == marker)


def _index(n: int) -> ir.Value:
    return arith.constant(ir.IndexType.get(), n)


def _dyn_slice(v: ir.Value, dims: list, d: int, offset: ir.Value, size) -> ir.Value:
    """Slice ``v`` along loop dim ``d`` (if ``v`` has it) at ``offset`` with ``size`` (int or Value)."""
    if d not in dims:
        return v
    t, pos = _tt(v), dims.index(d)
    marker = ir.ShapedType.get_dynamic_size()
    shape = list(t.shape)
    offs = [marker if p == pos else 0 for p in range(t.rank)]
    sizes = shape[:pos] + [size if isinstance(size, int) else marker] + shape[pos + 1:]
    rt = ir.RankedTensorType.get(sizes, t.element_type)
    return tensor.ExtractSliceOp(rt, v, [offset], [] if isinstance(size, int) else [size], [],
                                 offs, sizes, [1] * t.rank).result


def _dyn_insert(src: ir.Value, dest: ir.Value, dims: list, d: int, offset: ir.Value,
                size) -> ir.Value:
    """Insert ``src`` into ``dest`` at ``offset`` along loop dim ``d``."""
    t, pos = _tt(src), dims.index(d)
    marker = ir.ShapedType.get_dynamic_size()
    offs = [marker if p == pos else 0 for p in range(t.rank)]
    sizes = list(t.shape)
    return tensor.InsertSliceOp(src, dest, [offset], [] if isinstance(size, int) else [size], [],
                                offs, sizes, [1] * t.rank).result


def _dyn_init(init: ir.Value, acc: ir.Value, dims: list, d: int, offset: ir.Value,
              size) -> ir.Value:
    """The accumulator of one chunk: a fresh fill when ``init`` is a ``linalg.fill``
    (so the chunk does not read the loop-carried tensor), else a slice of ``acc``."""
    owner = init.owner
    if not isinstance(owner, ir.Block) and getattr(owner, "name", "") == "linalg.fill":
        t = _tt(_dyn_slice(acc, dims, d, offset, size))
        sizes = [size if (p == dims.index(d) and not isinstance(size, int)) else x
                 for p, x in enumerate(t.shape)]
        return linalg.fill(owner.operands[0], outs=[tensor.empty(sizes, t.element_type)])
    return _dyn_slice(acc, dims, d, offset, size)


def _emit_dispatch(c: Contraction, disp: Dispatch, em: "_Emitter") -> ir.Value:
    """Emit the run-time dispatch of ``c`` in front of it; the original op moves into the else branch.

    ::

        %n = tensor.dim %A, <pos of the dynamic dim>
        %use = arith.cmpi sge, %n, %threshold
        %r = scf.if %use -> (type of C) {
          %full = (%n / chunk) * chunk
          %p = scf.for %o = 0 to %full step chunk iter_args(%acc = %C) {
            chunk of A, B (batch), C at %o, static -> the plan (static emitter) -> insert
          }
          the %n - %full remaining rows (may be 0): classical on dynamic slices, insert
        } else { the original op }

    Returns the ``scf.if`` result; the caller replaces the op's uses and
    moves the op into the else block (:func:`_finish_dispatch`).
    """
    a, b, init = c.op.operands
    d = _dispatch_dim(c)
    size = tensor.DimOp(a, _index(c.lhs_dims.index(d))).result
    use = arith.cmpi(arith.CmpIPredicate.sge, size, _index(disp.threshold))
    if_op = scf.IfOp(use, [init.type], has_else=True)
    with ir.InsertionPoint(if_op.then_block):
        step = _index(disp.chunk)
        full = arith.muli(arith.divui(size, step), step)
        loop = scf.ForOp(_index(0), full, step, [init])
        with ir.InsertionPoint(loop.body):
            off, acc = loop.induction_variable, loop.inner_iter_args[0]
            part = em.emit(_dyn_slice(a, c.lhs_dims, d, off, disp.chunk),
                           _dyn_slice(b, c.rhs_dims, d, off, disp.chunk),
                           _dyn_init(init, acc, c.out_dims, d, off, disp.chunk), disp.plan)
            scf.YieldOp([_dyn_insert(part, acc, c.out_dims, d, off, disp.chunk)])
        done = loop.results[0]
        rest = arith.subi(size, full)
        tail = em.classical(_dyn_slice(a, c.lhs_dims, d, full, rest),
                            _dyn_slice(b, c.rhs_dims, d, full, rest),
                            _dyn_init(init, done, c.out_dims, d, full, rest))
        scf.YieldOp([_dyn_insert(tail, done, c.out_dims, d, full, rest)])
    return if_op


def _finish_dispatch(c: Contraction, if_op) -> None:
    """Route ``c``'s uses to the dispatch and move ``c`` into its else branch."""
    c.op.results[0].replace_all_uses_with(if_op.results[0])
    with ir.InsertionPoint(if_op.else_block):
        y = scf.YieldOp([c.op.results[0]])
    c.op.move_before(y)


def _dynamic_entry(entry: dict, c: Contraction, disp: Optional[Dispatch],
                   options: LcmaOptions) -> None:
    """Report fields of a contraction with dynamic sizes (in place).

    Dynamic sizes are ``null``; a dispatched one gets its chunk's plan, the
    ``dispatch`` entry and the chunk's predicted errors. No remark when the
    decision (auto) keeps a servable one classical, as for static shapes.
    """
    marker = ir.ShapedType.get_dynamic_size()
    for key in ("M", "N", "K"):
        if entry[key] == marker:
            entry[key] = None
    entry["batch"] = [None if x == marker else x for x in entry["batch"]]
    if disp is not None:
        entry["plan"] = disp.plan.to_json()
        entry["dispatch"] = disp.to_json()
        entry["predicted_error"] = _predicted(disp.view, disp.plan)
        entry["remark"] = False
    elif not _not_dispatchable(c):  # servable, but the chunk's plan is classical
        entry["remark"] = options.forced_schemes() is not None or PLAN_ATTR in c.op.attributes


def run_lcma_rewrite(module_op, options: LcmaOptions) -> list:
    """Run the lcma-rewrite pass on ``module_op`` in place.

    Args:
        module_op: the ``ir.Operation`` (or OpView) of a module; its context
            must be current. Contractions are found anywhere below it
            (func.func, util.func, inside scf regions).
        options: :class:`LcmaOptions`.

    Returns:
        The report: one dict per contraction found, with ``location``
        (``file:line:col``), ``op``, ``kind``, ``M``, ``N``, ``K``, ``batch``,
        ``element_types`` (lhs, rhs, acc), ``plan`` (dict, or ``"classical"``),
        ``reason``, ``predicted_error`` (``{"classical": e, "plan": e}`` for
        float contractions, see :mod:`falcon_mlir.decision.numerics`), ``predicted_time``
        (seconds from the cost model, :mod:`falcon_mlir.decision`:
        ``{"profile", "classical", "plan", "alternatives": [{"plan", "seconds"}],
        "dispatches", "temp_bytes", "parts"}``; ``None`` where unsupported), ``remark``
        (whether the user should be told), and for rewritten ones
        ``products`` and ``combines`` (the number of contractions and combine
        ops emitted). Dynamic sizes are ``None``; a contraction with a
        run-time dispatch (:func:`dynamic_choice`) also has ``dispatch``
        (``{"threshold_M": T, "chunk_M": Mc}``, or ``_batch``), its plan is
        the chunk's and ``products`` counts the chunk's plan plus the
        classical remainder op.
    """
    root = module_op.operation if hasattr(module_op, "operation") else module_op
    report = []
    contractions = find_contractions(root)
    _strip_stray_plans(root, report, options)
    try:  # GPU targets: one combine-C dispatch (Profile.fused_combine_c)
        fuse_c = decision.load_profile(options.target).fused_combine_c
    except decision.ProfileError:
        fuse_c = False
    for c in contractions:
        plan, reason = plan_for(c, options)
        disp = None
        if plan is None and c.dynamic and options.dispatch:
            disp, reason = dynamic_choice(c, options)
        elif plan is None and c.dynamic:
            reason += " (run-time dispatch off: dispatch=false)"
        entry = {
            "location": format_location(c.op.location, options.filename),
            "op": c.op.name,
            "kind": c.describe_kind(),
            "M": c.M, "N": c.N, "K": c.K, "batch": list(c.batch),
            "element_types": {"lhs": str(c.lhs_type), "rhs": str(c.rhs_type),
                              "acc": str(c.acc_type)},
            "plan": plan.to_json() if plan else "classical",
            "reason": reason,
            "predicted_error": _predicted(c, plan),
            "predicted_time": _predicted_time(c, options, plan),
        }
        # A remark is due when the user asked for something we did not do, or
        # when the op is a contraction we cannot serve at all.
        entry["remark"] = plan is None and (c.unsupported is not None
                                            or options.forced_schemes() is not None
                                            or PLAN_ATTR in c.op.attributes)
        if c.dynamic:
            _dynamic_entry(entry, c, disp, options)
        if PLAN_ATTR in c.op.attributes:
            del c.op.attributes[PLAN_ATTR]
        if disp is not None:
            em = _Emitter(c, barriers=options.barriers, fuse_c=fuse_c)
            with c.op.location, ir.InsertionPoint(c.op):
                if_op = _emit_dispatch(c, disp, em)
                _finish_dispatch(c, if_op)
            entry["products"] = em.products
            entry["combines"] = em.combines
        if plan is not None:
            em = _Emitter(c, barriers=options.barriers, fuse_c=fuse_c)
            a, b, init = c.op.operands
            with c.op.location, ir.InsertionPoint(c.op):
                new = em.emit(a, b, init, plan)
            c.op.results[0].replace_all_uses_with(new)
            c.op.erase()
            entry["products"] = em.products
            entry["combines"] = em.combines
        report.append(entry)
    return report
