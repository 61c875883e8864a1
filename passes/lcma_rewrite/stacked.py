"""The stacked emission of multi-level per-product plans.

A per-product plan of L levels with ranks R_1 .. R_L used to be emitted by
recursion: R_1 products, each rewritten again, R_1 * ... * R_L contractions
in all (529 for 3x3x3:23 at two levels), each its own linalg op and its own
IREE dispatch, so compile time grew with R^L (issue 13: Strassen at four
levels on 256^3 compiled for 1,104 s; a Llama block with 3x3x3:23 at two
levels did not finish in 300 s).

The stacked form keeps the per-product form's level-by-level arithmetic
(each level's combines read the blocks of that level's scheme only, as the
recursion does) but carries the products of the levels above as a leading
stack dimension:

* level l (outer first): one op per operand forms all R_l combined operands
  of every stacked operand, ``G_l[r * S + s] = sum_b U_l[r, b] * block_b(G_{l-1}[s])``
  (``S = R_1 * ... * R_{l-1}``; the table ops of :mod:`.grouped`,
  ``tensor<R_l x S x block>`` collapsed to ``R_l * S``);
* one batched contraction over the ``R_1 * ... * R_L`` stacked operands;
* combine C level by level from the inside out: level l's combine reads
  the ``R_l`` slices ``[r * S, (r + 1) * S)`` of the stacked products and
  writes the ``S`` operands of the level above (the outermost one
  accumulates into C0) as one op over all output blocks
  (:meth:`.grouped.GroupedForm.fused_combine_c`, on every target: one op
  per output block, as one-level plans emit on CPU, made IREE compile the
  Llama block with 2x4x6:39 at two levels for 85 s instead of 45 s).

So a plan of L levels emits ``L`` combine ops per operand (more where a
level reads over ``MAX_GROUPED_TERMS`` blocks), one contraction and ``L``
combine-C ops: compile time grows with the number of contractions and
levels, not with R^L. Sizes not divisible by the composed
blocks (``m_1 * ... * m_L`` along M, likewise K and N) are peeled or padded
once, around the whole stack (:meth:`.emit.Emitter.emit`).

On CPU profiles the pass still emits some plans by recursion
(``LcmaOptions.stack``, :class:`falcon_mlir.passes.lcma_rewrite._Emission`):
the stacked operands of a large contraction are hundreds of MB of IREE
transients, allocated anew on every call (glibc maps them fresh: strassen^2
on 256x4096x4096 f32 spent 61% of its time in page faults and ran 3x slower
than the recursion), so where the recursion is predicted to compile fast
it is taken instead (docs/compile-time.md).

:class:`StackedForm` is a mixin of :class:`.emit.Emitter` (it uses ``c``,
``acc``, the table ops and ``fused_combine_c`` of :class:`.grouped.GroupedForm`,
``batched_product`` and ``fence_product``).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from iree.compiler import ir
from iree.compiler.dialects import tensor

from falcon_mlir.decision.cost import MAX_GROUPED_TERMS
from falcon_mlir.dialects.combine import mark_combine
from falcon_mlir.ir.builders import slice_along, tensor_type, zeros

__all__ = ["StackedForm"]


def stacked_view(c):
    """``c`` with a new leading loop dimension 0 (the stack) on every operand.

    The helpers that slice and insert by loop dimension (``slice_along``,
    ``insert_along``, the emitter's ``combine_c``) then work on stacked
    operands unchanged.
    """
    up = lambda dims: [0] + [d + 1 for d in dims]
    return dataclasses.replace(c, m_dim=c.m_dim + 1, n_dim=c.n_dim + 1, k_dim=c.k_dim + 1,
                               batch_dims=up(c.batch_dims), lhs_dims=up(c.lhs_dims),
                               rhs_dims=up(c.rhs_dims), out_dims=up(c.out_dims))


class StackedForm:
    """The stacked multi-level per-product emission (mixin of the emitter)."""

    def stacked_combine(self, blocks: dict, coef, R: int, stacked: bool) -> ir.Value:
        """All R combined operands of every stacked operand, in at most
        ``ceil(blocks / MAX_GROUPED_TERMS)`` ops (IREE's CPU runtime takes 64
        binding offsets per dispatch).

        Result: ``tensor<(R * S) x block>`` (``S`` the leading stack size of
        the blocks when ``stacked``), or ``tensor<R x block>``.
        """
        used = [(idx, x) for idx, x in blocks.items() if any(coef(r, idx) != 0 for r in range(R))]
        chunks = [dict(used[i:i + MAX_GROUPED_TERMS]) for i in range(0, len(used),
                                                                       MAX_GROUPED_TERMS)]
        g = self.group_combine(chunks[0], coef, R)
        for more in chunks[1:]:
            g = self._accumulate_combine(g, more, coef, R)
        if not stacked:
            return g
        t = tensor_type(g)
        shape = list(t.shape)
        flat = ir.RankedTensorType.get([shape[0] * shape[1]] + shape[2:], t.element_type)
        reassoc = ir.ArrayAttr.get([ir.ArrayAttr.get(
            [ir.IntegerAttr.get(ir.IntegerType.get_signless(64), d) for d in grp])
            for grp in [[0, 1]] + [[p] for p in range(2, len(shape))]])
        return tensor.CollapseShapeOp(flat, g, reassoc).result

    def _accumulate_combine(self, g: ir.Value, blocks: dict, coef, R: int) -> ir.Value:
        """``g[r] += sum_b coef(r, b) * block_b`` as one op (a further chunk of blocks)."""
        self.combines += 1
        items = list(blocks.items())
        rank = len(tensor_type(items[0][1]).shape)
        d = ir.AffineDimExpr.get
        blk_dims = [d(i) for i in range(rank - 1)] + [d(rank)]
        blk_map = ir.AffineMap.get(rank + 1, 0, blk_dims)
        tab_map = ir.AffineMap.get(rank + 1, 0, [d(rank - 1)])
        out_map = ir.AffineMap.get(rank + 1, 0, [d(rank - 1)] + blk_dims)
        inputs, maps = [], []
        for idx, x in items:
            inputs += [x, self.table([coef(r, idx) for r in range(R)])]
            maps += [blk_map, tab_map]
        res = self.table_generic(inputs, maps + [out_map], g, accumulate=True)
        return mark_combine(res, [rank - 1])

    def level_stacked(self, a: ir.Value, b: ir.Value, init: ir.Value, schemes) -> ir.Value:
        """``init + a b`` through the levels ``schemes`` (outer first) in the
        stacked form; ``a``, ``b``, ``init`` divisible by :func:`falcon_mlir.catalog.composed_format`."""
        from falcon_mlir.catalog import get_scheme

        c = self.c
        view = stacked_view(c)
        ga, gb, cur = a, b, c
        S = 1
        levels = []
        for depth, name in enumerate(schemes):
            s = get_scheme(name)
            md, kd, nd = cur.m_dim, cur.k_dim, cur.n_dim
            M = tensor_type(ga).shape[cur.lhs_dims.index(md)]
            K = tensor_type(ga).shape[cur.lhs_dims.index(kd)]
            N = tensor_type(gb).shape[cur.rhs_dims.index(nd)]
            Mb, Kb, Nb = M // s.m, K // s.k, N // s.n
            a_blocks = {(i, j): slice_along(ga, cur.lhs_dims, {md: (i * Mb, Mb),
                                                              kd: (j * Kb, Kb)})
                        for i in range(s.m) for j in range(s.k)}
            b_blocks = {(j, l): slice_along(gb, cur.rhs_dims, {kd: (j * Kb, Kb),
                                                              nd: (l * Nb, Nb)})
                        for j in range(s.k) for l in range(s.n)}
            ga = self.stacked_combine(a_blocks, lambda r, ij, s=s: Fraction(s.U[r][ij[0]][ij[1]]),
                                      s.R, depth > 0)
            gb = self.stacked_combine(b_blocks, lambda r, jl, s=s: Fraction(s.V[r][jl[0]][jl[1]]),
                                      s.R, depth > 0)
            levels.append((s, S, Mb, Nb))
            S *= s.R
            cur = view
        out_shape = list(tensor_type(init).shape)
        for s, _, _, _ in levels:
            out_shape = [x // s.m if d == c.m_dim else x // s.n if d == c.n_dim else x
                         for d, x in zip(c.out_dims, out_shape)]
        gp = self.fence_product(self.batched_product(ga, gb, S, out_shape))
        for s, S_above, Mb, Nb in reversed(levels):
            blk = list(tensor_type(gp).shape)[1:]
            ptype = ir.RankedTensorType.get(blk if S_above == 1 else [S_above] + blk, self.acc)
            sizes = [S_above] + blk
            ones = [1] * len(sizes)

            def P(r, gp=gp, ptype=ptype, S_above=S_above, sizes=sizes, ones=ones):
                offs = [r * S_above] + [0] * (len(sizes) - 1)
                return tensor.ExtractSliceOp(ptype, gp, [], [], [], offs, sizes, ones).result

            if S_above == 1:
                gp = self.fused_combine_c(_Lazy(P), s, init, Mb, Nb)
            else:
                above = [x * s.m if d == c.m_dim else x * s.n if d == c.n_dim else x
                         for d, x in zip(c.out_dims, blk)]
                saved, self.c = self.c, view
                try:
                    gp = self.fused_combine_c(_Lazy(P), s, zeros([S_above] + above, self.acc),
                                              Mb, Nb)
                finally:
                    self.c = saved
        return gp


class _Lazy:
    """``products[r]`` built on first use (the fused combine C reads only the
    products whose W slice is not all zero)."""

    def __init__(self, make):
        self.make, self.made = make, {}

    def __getitem__(self, r):
        if r not in self.made:
            self.made[r] = self.make(r)
        return self.made[r]
