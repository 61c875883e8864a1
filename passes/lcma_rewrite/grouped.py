"""The grouped form and the coefficient-table ops of the emitter.

Grouped form (the FalconGEMM paper's group-parallel idea; see
:mod:`falcon_mlir.dialects.plan`): all levels composed into one scheme, one
op forms all R combined A operands as an ``R x block`` tensor (likewise B),
one batched contraction over R computes every product, and combine C reads
the products from that tensor.

Coefficient-table ops: the grouped combines A/B and the fused combine C
(one op over all output blocks, used on GPU profiles in both forms) read
each factor matrix slice (U, V or W) as a small constant table instead of
unrolling one op per combined operand.

:class:`GroupedForm` is a mixin of :class:`.emit.Emitter`: it uses the
emitter's ``c``, ``acc``, ``kind``, ``n_loops``, ``barriers``, counters and
its ``generic_contraction``, ``combine_c`` and ``fence_product``.
"""

from __future__ import annotations

from fractions import Fraction

from iree.compiler import ir
from iree.compiler.dialects import arith, linalg, tensor

from falcon_mlir.dialects.combine import mark_combine
from falcon_mlir.ir.builders import bit_width, cast, constant, is_float, slice_along, tensor_type, zeros

__all__ = ["GroupedForm"]


class GroupedForm:
    """The grouped level and the table-driven combines (mixin of the emitter)."""

    def fused_combine_c(self, products: list, s, init: ir.Value, Mb: int, Nb: int) -> ir.Value:
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
        itype = tensor_type(init)
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
            table = self.table([Fraction(s.W[r][i][l]) for i in range(s.m) for l in range(s.n)],
                               (s.m, s.n))
            inputs += [products[r], table]
            maps += [p_map, w_map]
        self.combines += 1
        res = self.table_generic(inputs, maps + [out_map], exp_init, accumulate=True)
        mark_combine(res, [where["a"], where["b"]])
        return tensor.CollapseShapeOp(itype, res, reassoc_attr).result

    def table(self, values, shape=None) -> ir.Value:
        """A constant coefficient table (f32, f64 for f64 accumulators, i64 for
        integers) of ``shape`` (default 1-D)."""
        import numpy as np

        if is_float(self.acc):
            et, dt = (ir.F64Type.get(), np.float64) if bit_width(self.acc) == 64 else \
                (ir.F32Type.get(), np.float32)
        else:  # coefficients are small integers; the body casts them to the acc type
            et, dt = ir.IntegerType.get_signless(64), np.int64
        arr = np.array([float(v) if is_float(self.acc) else int(v) for v in values], dtype=dt)
        shape = list(shape or [len(values)])
        ttype = ir.RankedTensorType.get(shape, et)
        return arith.ConstantOp(ttype, ir.DenseElementsAttr.get(arr.reshape(shape),
                                                                type=ttype)).result

    def table_generic(self, inputs: list, maps: list, init: ir.Value, accumulate: bool) -> ir.Value:
        """All-parallel ``linalg.generic`` over ``inputs`` = (block, coefficient
        table) pairs with ``maps`` (inputs', then the output's): yields
        ``sum w * x`` over the pairs in the accumulator type, plus the output's
        value with ``accumulate``, cast to ``init``'s element type (the sums
        type of a bf16/f16 result's combined operands: one rounding). Float terms whose coefficient is 0 are
        selected away (no ``0 * inf``) when accumulating over all R products."""
        n = maps[-1].n_dims
        iters = ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<parallel>")] * n)
        op = linalg.GenericOp([init.type], inputs, [init],
                              ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]), iters)
        block = op.regions[0].blocks.append(*[tensor_type(v).element_type
                                              for v in inputs + [init]])
        acc = self.acc
        fl = is_float(acc)
        with ir.InsertionPoint(block):
            args = list(block.arguments)
            total = args[-1] if accumulate else None
            zero = constant(acc, 0) if accumulate and fl else None
            for k in range(len(inputs) // 2):
                x, w = cast(args[2 * k], acc), cast(args[2 * k + 1], acc)
                term = (arith.mulf if fl else arith.muli)(w, x)
                if zero is not None:
                    term = arith.select(arith.cmpf(arith.CmpFPredicate.OEQ, w, zero), zero, term)
                total = term if total is None else (arith.addf if fl else arith.addi)(total, term)
            linalg.YieldOp([cast(total, tensor_type(init).element_type)])
        return op.result

    def group_combine(self, blocks: dict, coef, R: int) -> ir.Value:
        """One op writing all R combined operands: ``G[r] = sum_b coef(r, b) * block_b``.

        ``blocks`` maps a block index to its slice; ``coef(r, idx)`` is the
        Fraction coefficient. Result: ``tensor<R x block x T>``, T the sums
        type (the accumulator type; for a bf16/f16 result f32 or the input type).
        """
        self.combines += 1
        used = [(idx, x) for idx, x in blocks.items() if any(coef(r, idx) != 0 for r in range(R))]
        shape = list(tensor_type(used[0][1]).shape)
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
            inputs += [x, self.table([coef(r, idx) for r in range(R)])]
            maps += [blk_map, tab_map]
        init = tensor.empty([R] + shape, self.sums)
        res = self.table_generic(inputs, maps + [out_map], init, accumulate=False)
        return mark_combine(res, [rank - 1])

    def batched_product(self, ga: ir.Value, gb: ir.Value, R: int, cshape: list) -> ir.Value:
        """All R products as one contraction with a leading batch dimension r."""
        c = self.c
        n = self.n_loops + 1
        shift = lambda dims: [ir.AffineDimExpr.get(0)] + [ir.AffineDimExpr.get(d + 1) for d in dims]
        maps = [ir.AffineMap.get(n, 0, shift(dims)) for dims in (c.lhs_dims, c.rhs_dims, c.out_dims)]
        init = zeros([R] + cshape, self.acc)
        self.products += 1
        if self.kind == "matmul":
            return linalg.batch_matmul(ga, gb, outs=[init], indexing_maps=maps)
        return self.generic_contraction(ga, gb, init, maps, batch_prefix=1)

    def level_grouped(self, a, b, init, s, inner) -> ir.Value:
        """One grouped level of (composed) scheme ``s`` on divisible operands."""
        assert inner is None
        c = self.c
        md, kd, nd = c.m_dim, c.k_dim, c.n_dim
        M = tensor_type(a).shape[c.lhs_dims.index(md)]
        K = tensor_type(a).shape[c.lhs_dims.index(kd)]
        N = tensor_type(b).shape[c.rhs_dims.index(nd)]
        Mb, Kb, Nb = M // s.m, K // s.k, N // s.n
        a_blocks = {(i, j): slice_along(a, c.lhs_dims, {md: (i * Mb, Mb), kd: (j * Kb, Kb)})
                    for i in range(s.m) for j in range(s.k)}
        b_blocks = {(j, l): slice_along(b, c.rhs_dims, {kd: (j * Kb, Kb), nd: (l * Nb, Nb)})
                    for j in range(s.k) for l in range(s.n)}
        ga = self.group_combine(a_blocks, lambda r, ij: Fraction(s.U[r][ij[0]][ij[1]]), s.R)
        gb = self.group_combine(b_blocks, lambda r, jl: Fraction(s.V[r][jl[0]][jl[1]]), s.R)
        cshape = [Mb if d == md else Nb if d == nd else sz
                  for d, sz in zip(c.out_dims, tensor_type(init).shape)]
        gp = self.fence_product(self.batched_product(ga, gb, s.R, cshape))
        rank = len(cshape)
        prod_type = ir.RankedTensorType.get(cshape, self.acc)

        def P(r):
            return tensor.ExtractSliceOp(prod_type, gp, [], [], [], [r] + [0] * rank,
                                         [1] + cshape, [1] * (rank + 1)).result

        return self.combine_c(P, s, init, Mb, Nb)
