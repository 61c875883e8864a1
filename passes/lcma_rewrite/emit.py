"""The emitter: one contraction's plan as upstream ``linalg``/``tensor``/``arith`` IR.

For a plan of scheme <m,k,n;R> the op is replaced by:

* combine A: for each product r, ``A_r = sum_ij U[r,i,j] A_ij`` over blocks of
  A (one ``linalg.generic`` per combined operand, in the accumulator type),
* combine B likewise with V,
* products: ``P_r = A_r B_r``, a contraction of the same kind as the original
  (same indexing maps, batch dimensions kept); a plan of several levels is
  emitted stacked (:mod:`.stacked`: one combine op per operand and level,
  one batched contraction for all R_1 * ... * R_L products), or by recursion
  where the composed blocks do not fit the sizes or the emitter is told to
  (``stacked=False``: R_1 * ... * R_L contractions, faster on CPU),
* combine C: ``C_il = C0_il + sum_r W[r,i,l] P_r`` (one ``linalg.generic`` per
  block of C, reading the live accumulator C0), inserted into C; on GPU
  profiles one op over all blocks (:mod:`.grouped`).

Classical blocking ``<m,k,n; m*k*n>`` (``2x2x2:8``: the catalog generates
it) is a level like any other but emitted without combines: its products
read plain blocks and accumulate into their block of C one after the other
(:meth:`Emitter._blocking_level`).

A bf16 or f16 result (``bf16 x bf16 -> bf16``) is not accumulated in its own
type: the plan runs with an f32 accumulator (products accumulate in f32,
combine C in f32, from a zero f32 C) and one final op adds C0 and rounds
once (``arith.truncf``) to the result type; the combined operands are formed
in f32 and kept in f32 or rounded once to the input type, as the planning
says (:func:`.planning.sums_type`). With f32 sums, a block a product reads
alone (coefficient 1) is either passed as it is (``products=mixed``: that
product is ``f32 x bf16 -> f32``) or extended to f32 once
(``products=f32``: every product ``f32 x f32 -> f32``, the profile's f32
GEMM; :func:`.planning.products_type`).

Sizes not divisible by (m, k, n) are peeled (the divisible core through the
scheme, the strips classical) or padded (zero-padded operands, result sliced
back), as the plan says. The grouped form and the coefficient-table ops live
in :mod:`.grouped`. Every combine op is tagged ``falcon.combine``
(:mod:`falcon_mlir.dialects.combine`).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Optional

from iree.compiler import ir
from iree.compiler.dialects import arith, linalg, tensor

from falcon_mlir.catalog import composed_format
from falcon_mlir.dialects.combine import mark_combine
from falcon_mlir.dialects.plan import PLAN_ATTR, Plan
from falcon_mlir.ir.builders import (COMPUTE_BARRIER, cast, compute_barrier, defining_op_name,
                                     insert_along, is_float, pad_along, parallel_generic,
                                     slice_accumulator, slice_along, tensor_type, weighted_sum,
                                     zeros)
from falcon_mlir.ir.contraction import Contraction

from .grouped import GroupedForm
from .stacked import StackedForm

__all__ = ["Emitter"]


class Emitter(GroupedForm, StackedForm):
    """Emits one contraction's plan in front of the original op.

    Args:
        c: the contraction (its op's operands are A, B and the accumulator C0).
        barriers: put bare block operands and products behind
            IREE's compute barrier
            (:func:`~falcon_mlir.ir.builders.compute_barrier`; see ``LcmaOptions.barriers``).
        fuse_c: combine C as one op over all output blocks (GPU profiles).
        sums: for a bf16/f16 result, the element type name of the combined
            operands (``"f32"`` or the input type; ``None``: f32), in both forms.
        products: for a bf16/f16 result with f32 sums, ``"f32"``: blocks read
            alone by a product are extended to f32 once (every product
            ``f32 x f32``); else (``"mixed"``, ``None``) they stay as they are.
        stacked: emit per-product plans of several levels stacked (else by
            recursion: R_1 * ... * R_L contractions; ``LcmaOptions.stack``).

    Attributes:
        products: contractions emitted so far (the report's ``products``).
        combines: combine ops emitted so far (the report's ``combines``).
    """

    def __init__(self, c: Contraction, barriers: bool = False, fuse_c: bool = False,
                 sums: Optional[str] = None, products: Optional[str] = None, stacked: bool = True):
        self.c = c
        self.stacked = stacked
        self.barriers = barriers
        self.fuse_c = fuse_c
        self.kind = c.kind
        self.acc = c.acc_type
        #: the narrow result type (bf16/f16) that plans round to once at the end, else None
        self.out = None
        if is_float(c.acc_type) and str(c.acc_type) in ("bf16", "f16"):
            self.out, self.acc = c.acc_type, ir.F32Type.get()
        self.sums = ir.Type.parse(sums) if sums and self.out is not None else self.acc
        #: extend blocks read alone to the sums type (f32), once each (products=f32)
        self.extend_single = (self.out is not None and products == "f32"
                              and self.sums == self.acc)
        self._extended = []  # (block, extended block) pairs, one extension per block
        self.n_loops = 3 + len(c.batch_dims)
        self.maps = [ir.AffineMap.get(self.n_loops, 0, [ir.AffineDimExpr.get(d) for d in dims])
                     for dims in (c.lhs_dims, c.rhs_dims, c.out_dims)]
        self.products = 0
        self.combines = 0

    # -- classical contraction of the original kind --------------------------
    def classical(self, a: ir.Value, b: ir.Value, init: ir.Value) -> ir.Value:
        """``init + a b`` as one contraction of the original op's kind and maps.

        Every operand that is a bare slice, the accumulator included, goes
        behind a barrier when barriers are on (:meth:`_fence`): the peeled
        strips read slices of A, B and of the live C, and the run-time
        dispatch's remainder dynamic slices of A and C.
        """
        self.products += 1
        a, b, init = self._fence(a), self._fence(b), self._fence(init)
        if self.kind == "matmul":
            return linalg.matmul(a, b, outs=[init], indexing_maps=self.maps)
        if self.kind == "batch_matmul":
            return linalg.batch_matmul(a, b, outs=[init], indexing_maps=self.maps)
        return self.generic_contraction(a, b, init, self.maps, batch_prefix=0)

    def generic_contraction(self, a, b, init, maps, batch_prefix: int) -> ir.Value:
        """``init + a * b`` as a ``linalg.generic`` contraction, computed in ``init``'s
        element type (the accumulator type; the original result type for a
        classical op on a bf16/f16 result).

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
        block = op.regions[0].blocks.append(tensor_type(a).element_type,
                                            tensor_type(b).element_type,
                                            tensor_type(init).element_type)
        acc = tensor_type(init).element_type
        with ir.InsertionPoint(block):
            x, y, o = block.arguments
            fl = is_float(acc)
            prod = (arith.mulf if fl else arith.muli)(cast(x, acc), cast(y, acc))
            linalg.YieldOp([(arith.addf if fl else arith.addi)(o, prod)])
        return op.result

    # -- one plan (possibly several levels) -----------------------------------
    def emit(self, a: ir.Value, b: ir.Value, init: ir.Value, plan: Optional[Plan]) -> ir.Value:
        """``init + a b`` through ``plan`` (classical for ``None``), edges handled
        as the plan says; returns the value that replaces the op's result."""
        if plan is None:
            return self.classical(a, b, init)
        if plan.form == "kernel":
            # falcon's generated kernels run it (the falcon-kernels pass): one op
            # of the original kind that carries the plan, as for a static op.
            res = self.classical(a, b, init)
            res.owner.attributes[PLAN_ATTR] = plan.to_attribute()
            return res
        if self.out is not None and tensor_type(init).element_type == self.out:
            return self._rounded(a, b, init, plan)
        from falcon_mlir.catalog import get_scheme

        c = self.c
        if plan.form == "grouped":
            # All levels at once: the Kronecker product of the levels' schemes.
            s = get_scheme("*".join(plan.schemes))
            level, inner = self.level_grouped, None
        elif len(plan.schemes) > 1 and self.stacked and self._stack_fits(a, b, plan.schemes):
            # Several per-product levels: stacked (.stacked), one contraction in all.
            s = composed_format(plan.schemes)
            level, inner = (lambda a, b, init, s, inner, schemes=plan.schemes:
                            self.level_stacked(a, b, init, schemes)), None
        else:
            s = get_scheme(plan.schemes[0])
            level, inner = self.level, plan.inner()
        M = tensor_type(a).shape[c.lhs_dims.index(c.m_dim)]
        K = tensor_type(a).shape[c.lhs_dims.index(c.k_dim)]
        N = tensor_type(b).shape[c.rhs_dims.index(c.n_dim)]
        if M < s.m or K < s.k or N < s.n:
            return self.classical(a, b, init)
        md, kd, nd = c.m_dim, c.k_dim, c.n_dim
        Mp, Kp, Np = (-(-M // s.m) * s.m, -(-K // s.k) * s.k, -(-N // s.n) * s.n)
        if plan.edge == "pad" and max(Mp, Kp, Np) < 2 ** 62:  # else peel: no int64 overflow
            ap = pad_along(a, c.lhs_dims, {md: Mp, kd: Kp})
            bp = pad_along(b, c.rhs_dims, {kd: Kp, nd: Np})
            cp = pad_along(init, c.out_dims, {md: Mp, nd: Np})
            res = level(ap, bp, cp, s, inner)
            return slice_along(res, c.out_dims, {md: (0, M), nd: (0, N)})
        return self._peeled(a, b, init, s, level, inner, (M, K, N))

    def _rounded(self, a: ir.Value, b: ir.Value, init: ir.Value, plan: Plan) -> ir.Value:
        """A plan on a bf16/f16 result: ``plan`` from a zero f32 accumulator (every
        product, combine C and the peeled strips in f32), then one op
        ``C = truncf(extf(C0) + P)``: the only rounding to the result type."""
        shape = list(tensor_type(init).shape)
        wide = self.emit(a, b, zeros(shape, self.acc), plan)
        acc, out = self.acc, self.out
        self.combines += 1
        return mark_combine(parallel_generic(
            [wide], init, lambda args: cast(arith.addf(cast(args[1], acc), args[0]), out)))

    def _stack_fits(self, a: ir.Value, b: ir.Value, schemes) -> bool:
        """Whether the composed blocks of ``schemes`` fit in ``a``, ``b`` (else the
        levels are emitted by recursion, each level peeling its own edges)."""
        c = self.c
        s = composed_format(schemes)
        M = tensor_type(a).shape[c.lhs_dims.index(c.m_dim)]
        K = tensor_type(a).shape[c.lhs_dims.index(c.k_dim)]
        N = tensor_type(b).shape[c.rhs_dims.index(c.n_dim)]
        return M >= s.m and K >= s.k and N >= s.n

    def _peeled(self, a, b, init, s, level, inner, sizes) -> ir.Value:
        """Peeling: the divisible core through ``level``, the K, row and column strips classical."""
        c = self.c
        md, kd, nd = c.m_dim, c.k_dim, c.n_dim
        M, K, N = sizes
        M0, K0, N0 = M // s.m * s.m, K // s.k * s.k, N // s.n * s.n
        core_init = slice_accumulator(init, c.out_dims, {md: (0, M0), nd: (0, N0)})
        if K0 < K:
            core_init = self.classical(slice_along(a, c.lhs_dims, {md: (0, M0), kd: (K0, K - K0)}),
                                       slice_along(b, c.rhs_dims, {kd: (K0, K - K0), nd: (0, N0)}),
                                       core_init)
        core = level(slice_along(a, c.lhs_dims, {md: (0, M0), kd: (0, K0)}),
                     slice_along(b, c.rhs_dims, {kd: (0, K0), nd: (0, N0)}),
                     core_init, s, inner)
        if M0 == M and N0 == N:
            return core
        result = insert_along(core, init, c.out_dims, {})
        if M0 < M:
            rows = self.classical(slice_along(a, c.lhs_dims, {md: (M0, M - M0)}), b,
                                  slice_accumulator(init, c.out_dims, {md: (M0, M - M0)}))
            result = insert_along(rows, result, c.out_dims, {md: M0})
        if N0 < N:
            cols = self.classical(slice_along(a, c.lhs_dims, {md: (0, M0)}),
                                  slice_along(b, c.rhs_dims, {nd: (N0, N - N0)}),
                                  slice_accumulator(init, c.out_dims,
                                                    {md: (0, M0), nd: (N0, N - N0)}))
            result = insert_along(cols, result, c.out_dims, {nd: N0})
        return result

    def _fence(self, x: ir.Value) -> ir.Value:
        """``x`` behind a compute barrier if it is a bare slice and barriers are on.

        IREE's data tiling otherwise pulls the packing of the slice into the
        consuming contraction's dispatch; for a narrow strip with a long K
        (the peeled column strip of a 4096 x 14336 weight: K = 4096, 2
        columns) that packs the whole strip on the stack and llvm-cpu fails
        ("exceeded stack allocation limit", IREE 3.13; iree-notes.md). The
        accumulator is packed too (the result's encoding): a bare slice of C
        as the init of a peeled strip (127^3 Strassen: the K strip's 126 x 126
        init, 64 KiB on the stack) or a dynamic slice of C as the init of the
        run-time dispatch's remainder fails the same way.
        """
        if self.barriers and defining_op_name(x) == "tensor.extract_slice":
            return compute_barrier(x)
        return x

    def fence_product(self, p: ir.Value) -> ir.Value:
        """A product's result behind a compute barrier when barriers are on."""
        return compute_barrier(p) if self.barriers else p

    def fence_unit_lhs(self, x: ir.Value, Mb: int, Kb: int) -> ir.Value:
        """A combined A operand behind a compute barrier when its block is
        1 x 1 (``Mb == Kb == 1``) and barriers are on.

        IREE 3.13's data tiling fails on a matmul whose LHS is 1 x 1, N > 1,
        and made by an elementwise op: the producer fused into
        the LHS packing gives "tiling factors must be less than or equal to
        the input rank for pack" (test_data_tiling.py keeps a plain module
        that shows it).
        Such blocks come only from forced schemes on tiny operands (2 x 2 A
        under Strassen); the fence costs one 1-element dispatch. The grouped
        form's batched product (R x 1 x 1 combined A) compiles without it.
        """
        fenced = defining_op_name(x) == COMPUTE_BARRIER
        if self.barriers and Mb == 1 and Kb == 1 and not fenced:
            return compute_barrier(x)
        return x

    def _combine(self, terms: list) -> ir.Value:
        """``sum c * X`` over ``terms = [(c, block)]``, summed in the accumulator type,
        as a tensor of the sums type (the accumulator type, or for a bf16/f16
        result the type :func:`.planning.sums_type` chose: one rounding).

        A single block with coefficient 1 is used as it is; with the
        ``barriers`` option it is put behind a compute barrier:
        IREE's data tiling otherwise pulls the packing of a bare slice into the
        product's dispatch, which fails on llvm-cpu ("exceeded stack
        allocation limit", IREE 3.13; iree-notes.md). An identity copy would
        not do: canonicalization erases it.
        """
        if len(terms) == 1 and terms[0][0] == 1:
            if self.extend_single and tensor_type(terms[0][1]).element_type != self.sums:
                return self._extend(terms[0][1])
            return self._fence(terms[0][1])
        self.combines += 1
        first = terms[0][1]
        init = tensor.empty(list(tensor_type(first).shape), self.sums)
        acc, sums = self.acc, self.sums
        return mark_combine(parallel_generic(
            [x for _, x in terms], init,
            lambda args: cast(weighted_sum([(coef, x) for (coef, _), x in zip(terms, args[:-1])],
                                           acc), sums)))

    def _extend(self, x: ir.Value) -> ir.Value:
        """Block ``x`` extended to the sums type (f32) by one combine op, made once
        per block (``products=f32``): the products that read it alone then run
        as ``f32 x f32`` GEMMs. Exact (no rounding)."""
        for blk, ext in self._extended:
            if blk == x:
                return ext
        self.combines += 1
        sums = self.sums
        init = tensor.empty(list(tensor_type(x).shape), sums)
        ext = mark_combine(parallel_generic([self._fence(x)], init,
                                            lambda args: cast(args[0], sums)))
        if self.barriers:
            # else IREE's data tiling fuses the extension into the product's
            # operand packing and llvm-cpu fails ("exceeded stack allocation
            # limit": 66560 bytes at 1024x4096x4096 bf16 Strassen, IREE 3.13)
            ext = compute_barrier(ext)
        self._extended.append((x, ext))
        return ext

    def level(self, a, b, init, s, inner: Optional[Plan]) -> ir.Value:
        """One per-product level of scheme ``s`` on divisible operands (``inner``:
        the plan of each product, ``None`` for classical products)."""
        c = self.c
        md, kd, nd = c.m_dim, c.k_dim, c.n_dim
        M = tensor_type(a).shape[c.lhs_dims.index(md)]
        K = tensor_type(a).shape[c.lhs_dims.index(kd)]
        N = tensor_type(b).shape[c.rhs_dims.index(nd)]
        Mb, Kb, Nb = M // s.m, K // s.k, N // s.n
        a_blk, b_blk = {}, {}

        def A(i, j):
            if (i, j) not in a_blk:
                a_blk[i, j] = slice_along(a, c.lhs_dims, {md: (i * Mb, Mb), kd: (j * Kb, Kb)})
            return a_blk[i, j]

        def B(j, l):
            if (j, l) not in b_blk:
                b_blk[j, l] = slice_along(b, c.rhs_dims, {kd: (j * Kb, Kb), nd: (l * Nb, Nb)})
            return b_blk[j, l]

        if s.is_blocking:
            return self._blocking_level(A, B, init, s, inner, Mb, Nb)
        out_shape = list(tensor_type(init).shape)
        blk_shape = [Mb if d == md else Nb if d == nd else sz
                     for d, sz in zip(c.out_dims, out_shape)]
        products = []
        for r in range(s.R):
            ta = [(Fraction(s.U[r][i][j]), A(i, j)) for i in range(s.m) for j in range(s.k)
                  if s.U[r][i][j] != 0]
            tb = [(Fraction(s.V[r][j][l]), B(j, l)) for j in range(s.k) for l in range(s.n)
                  if s.V[r][j][l] != 0]
            ar, br = self.fence_unit_lhs(self._combine(ta), Mb, Kb), self._combine(tb)
            p = self.emit(ar, br, zeros(blk_shape, self.acc), inner)
            products.append(self.fence_product(p))
        return self.combine_c(products.__getitem__, s, init, Mb, Nb)

    def _blocking_level(self, A, B, init, s, inner: Optional[Plan], Mb: int, Nb: int) -> ir.Value:
        """Classical blocking ``<m,k,n; m*k*n>`` (:attr:`Scheme.is_blocking`): for
        each block ``C[i,l]`` the k products ``A[i,j] B[j,l]`` (each through
        ``inner``) accumulate into it in K order, each product's result the
        next one's accumulator, and the block is written back with
        ``tensor.insert_slice``: no combine ops, no product temporaries. ``A``,
        ``B`` give the blocks."""
        c = self.c
        md, nd = c.m_dim, c.n_dim
        result = init
        for i in range(s.m):
            for l in range(s.n):
                acc = slice_accumulator(init, c.out_dims, {md: (i * Mb, Mb), nd: (l * Nb, Nb)})
                for j in range(s.k):
                    acc = self.emit(A(i, j), B(j, l), acc, inner)
                result = insert_along(acc, result, c.out_dims, {md: i * Mb, nd: l * Nb})
        return result

    def combine_c(self, product, s, init: ir.Value, Mb: int, Nb: int) -> ir.Value:
        """Combine C of both forms: ``C[i,l] = C0[i,l] + sum_r W[r][i][l] * product(r)``.

        One op per output block written back with ``tensor.insert_slice`` (CPU),
        or :meth:`fused_combine_c` on GPU targets (``fuse_c``). ``product(r)``
        gives the r-th product (``Mb x Nb`` in the output's dims).
        """
        if self.fuse_c:
            return self.fused_combine_c([product(r) for r in range(s.R)], s, init, Mb, Nb)
        c = self.c
        md, nd = c.m_dim, c.n_dim
        result, acc = init, self.acc
        for i in range(s.m):
            for l in range(s.n):
                terms = [(Fraction(s.W[r][i][l]), r) for r in range(s.R) if s.W[r][i][l] != 0]
                if not terms:
                    continue
                c0 = slice_accumulator(init, c.out_dims, {md: (i * Mb, Mb), nd: (l * Nb, Nb)})
                self.combines += 1
                blk = mark_combine(parallel_generic(
                    [product(r) for _, r in terms], c0,
                    lambda args, terms=terms: weighted_sum(
                        [(coef, x) for (coef, _), x in zip(terms, args[:-1])],
                        acc, start=args[-1])))
                result = insert_along(blk, result, c.out_dims, {md: i * Mb, nd: l * Nb})
        return result
