"""Analytical cost model: predicted seconds of classical GEMM and of LCMA plans.

(One class, one method per emitted form - per-product, stacked levels,
grouped, kernel - so a form's cost sits next to the others'; the CPU kernel
form's limits and price are in :mod:`.cpu_kernel`, the counts read off a
scheme's tables in :mod:`.scheme_stats`.)

Source: the decision module of the FalconGEMM paper (arXiv 2605.06057): a
contraction whose arithmetic intensity ``2MNK / (MK + KN + MN)`` (FLOP per
element moved) is at most the machine balance ``FLOP/s / (bytes/s / element
bytes)`` is memory-bound and stays classical; otherwise the GEMM's time is
compared, under a roofline, with the time of the ``R`` smaller products plus
combine A, combine B and combine C. Extended here to what
:mod:`falcon_mlir.passes.lcma_rewrite` emits:

* several levels, mixed schemes per level (per-product form: level by
  level, each level's operands stacked into one combine op per operand and
  one batched product for all levels, as the emitter does), or all levels composed into one
  Kronecker-product scheme (grouped form: one combine op per operand, one
  batched product, combine C per output block; on GPU profiles combine C is
  one dispatch over all blocks and a grouped combine reads each block once,
  as the rewrite emits it there);
* edges: peeling (divisible core through the scheme; a K strip, a row strip
  and a column strip classical) or padding (copies of A, B and C to the
  next multiple, a slice of the result);
* constant weights: combine B is folded at compile time (``const_rhs``);
* mixed precision: combines run in the accumulator type, so the products of
  a rewritten ``bf16 x bf16 -> f32`` contraction multiply f32 operands;
* bf16/f16 results (``bf16 x bf16 -> bf16``): the plan runs with an f32
  accumulator; its combined operands are f32 or rounded to the input type
  (``sums``) and, with f32 sums, a block a product reads alone stays in the
  input type (``mixed``) or is extended to f32 once (``products=f32``), so
  the products are priced at the rate of the type they multiply in
  (:meth:`CostModel.plan`'s ``rounding``);
* dispatch counts (each costs the profile's ``dispatch_overhead``).

Every time is ``dispatches * overhead + sum over dispatches of max(FLOP /
rate, bytes / bandwidth)`` (roofline per dispatch). The GEMM rate comes from
the profile's measured table at the product's own size
(:meth:`Profile.gemm_rate`), which is what lets smaller products run at a
different rate than the whole contraction.

All times are seconds, sizes are elements, bytes are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence, Tuple

from falcon_mlir.catalog import composed_format

from .profile import ELEMENT_BYTES, Profile
from .scheme_stats import SchemeStats, has_blocking, kernel_combine_loads, scheme_stats

#: Most products (R_1 * ... * R_L) one contraction may be rewritten into:
#: two levels of a rank-49 scheme (2401) fit; 153^2 does not. Larger plans
#: would take minutes and gigabytes to emit and compile for no gain.
MAX_PRODUCTS = 2401
#: Most blocks one grouped combine op may read. IREE's CPU runtime allows 64
#: constants (binding offsets) per dispatch and fuses chained elementwise ops,
#: so composed schemes with more terms per combine (e.g. strassen^3: 64
#: products per C block) use the per-product form instead.
MAX_GROUPED_TERMS = 24


@dataclass(frozen=True)
class Problem:
    """One contraction as the cost model sees it.

    Attributes:
        M, N, K: sizes (elements); C is M x N, A is M x K, B is K x N.
        batch: product of the batch sizes (1 for a plain matmul).
        lhs, rhs, acc: MLIR element type names of A, B and the accumulator.
        const_rhs: B is a compile-time constant (a weight), so combine B is
            folded by IREE's constant evaluation and costs nothing at run time.
        sums, products: a bf16/f16 result's ``sums`` option (``auto``,
            ``f32``, ``input``) and ``products`` option (``auto``, ``f32``,
            ``mixed``) of lcma-rewrite: how the decision forms each plan's
            product operands (:func:`falcon_mlir.decision.plan_rounding`).
        operands: lcma-rewrite's ``operands`` option (``auto``, ``input``,
            ``f16``): the type kernel-form plans form their combined operands
            in (:func:`falcon_mlir.decision.numerics.kernel_operands`; auto:
            scaled f16 for bf16 inputs).
        transposed: the operands stored transposed (``"lhs"``: A as K x M,
            ``"rhs"``: B as N x K, ``"out"``: C as N x M), and ``"batch"`` where
            the batch dimensions are not the leading dimensions of A, B and C
            in one order: falcon's CPU kernel runs no kernel-form plan on the
            last two (:func:`falcon_mlir.decision.cpu_kernel.unfit`).
    """

    M: int
    N: int
    K: int
    batch: int = 1
    lhs: str = "f32"
    rhs: str = "f32"
    acc: str = "f32"
    const_rhs: bool = False
    sums: str = "auto"
    products: str = "auto"
    operands: str = "auto"
    transposed: Tuple[str, ...] = ()

    @property
    def flops(self) -> float:
        """Classical FLOP count ``2 * batch * M * N * K``."""
        return 2.0 * self.batch * self.M * self.N * self.K

    @property
    def operand_bytes(self) -> float:
        """Bytes of A, B and C (C counted in the accumulator type, an upper
        bound where the result is narrower)."""
        return float(self.batch * (self.M * self.K * _eb(self.lhs) + self.K * self.N * _eb(self.rhs)
                                   + self.M * self.N * _eb(self.acc)))

    def intensity(self) -> float:
        """Arithmetic intensity: FLOP per byte of A, B and C moved once."""
        eb = _eb(self.lhs), _eb(self.rhs), _eb(self.acc)
        moved = self.batch * (self.M * self.K * eb[0] + self.K * self.N * eb[1]
                              + self.M * self.N * eb[2])
        return self.flops / max(moved, 1)


@dataclass
class Estimate:
    """The predicted cost of one way to compute a :class:`Problem`.

    Attributes:
        schemes: per-level scheme names, outer first; ``()`` is classical.
        edge: ``"peel"`` or ``"pad"``.
        form: ``"per-product"`` or ``"grouped"``.
        seconds: predicted run time (s).
        dispatches: predicted number of dispatches.
        parts: seconds per part: ``products``, ``combine_a``, ``combine_b``,
            ``combine_c``, ``edges``, ``overhead``.
        temp_bytes: predicted peak temporary memory of the plan beyond A, B
            and C (bytes): combined operands and products alive at once.
        error: predicted max-norm relative error (floats), set by the decision.
        compile_seconds: rough seconds IREE spends compiling what the plan
            emits (:func:`falcon_mlir.decision.compile_cost.compile_seconds`).
        sums, products: a plan on a bf16/f16 result: the type its combined
            operands are formed in (``f32`` or the input type) and its
            products' operands (``input``: both in the input type; ``f32``:
            both f32, blocks read alone extended once; ``mixed``: f32 sums
            next to blocks read alone in the input type); ``None`` elsewhere.
        operands: a kernel-form plan: the type of its combined operands and
            stored products (``f16`` for bf16 inputs: scaled); ``None`` elsewhere.
        unfit: why the target's kernels cannot run this plan (a kernel-form plan
            on a CPU profile: :func:`falcon_mlir.decision.cpu_kernel.unfit`), priced
            all the same; ``None`` where they can. ``auto`` never takes such a plan.
        ragged: the dimensions (``"M"``, ``"N"``, ``"K"``) that the plan's
            composed blocks do not divide, whose edges ``edge`` handles
            (:func:`ragged_dims`); ``()``: the blocks tile the shape exactly and
            ``edge`` changes nothing (set by :meth:`CostModel.plan`).
    """

    schemes: Tuple[str, ...]
    edge: str = "peel"
    form: str = "per-product"
    seconds: float = 0.0
    dispatches: int = 0
    parts: Dict[str, float] = field(default_factory=dict)
    temp_bytes: float = 0.0
    error: Optional[float] = None
    compile_seconds: float = 0.0
    sums: Optional[str] = None
    products: Optional[str] = None
    operands: Optional[str] = None
    unfit: Optional[str] = None
    ragged: Tuple[str, ...] = ()

    @property
    def is_classical(self) -> bool:
        """IREE's one GEMM (no plan)."""
        return not self.schemes

    @property
    def is_blocking(self) -> bool:
        """A classical blocking plan: every level ``mxkxn:R`` with ``R = m*k*n``
        (:func:`falcon_mlir.catalog.blocking_scheme`), no algebra."""
        from falcon_mlir.catalog import is_blocking_name

        return bool(self.schemes) and all(is_blocking_name(s) for s in self.schemes)

    def label(self) -> str:
        """Short human name: ``classical``, ``strassen (kernel)`` where the blocks
        divide every dimension (the edge policy does nothing, so it is not named),
        else with what happens at the edges: ``strassen+winograd (grouped, M edge
        peeled)``, ``strassen (per-product, M and N edges padded)`` (:func:`edge_text`)."""
        if not self.schemes:
            return "classical"
        edges = edge_text(self.edge, self.ragged)
        return f"{'+'.join(self.schemes)} ({self.form}{', ' + edges if edges else ''})"

    def add(self, part: str, seconds: float, dispatches: int = 0) -> None:
        self.parts[part] = self.parts.get(part, 0.0) + seconds
        self.seconds += seconds
        self.dispatches += dispatches


def ragged_dims(M, N, K, schemes) -> Tuple[str, ...]:
    """The dimensions among ``M``, ``N``, ``K`` that the composed blocks of
    ``schemes`` (names, outer level first; :func:`falcon_mlir.catalog.composed_format`)
    do not divide: the ones an edge policy (``peel``, ``pad``) has work on, at
    some level. ``()`` where the blocks tile the shape exactly; a dimension that
    is not known (``None``, dynamic) counts as ragged.

    Raises:
        falcon_mlir.catalog.UnknownSchemeError: unknown scheme name.
    """
    if not schemes:
        return ()
    comp = composed_format(tuple(schemes))
    return tuple(d for d, size, block in (("M", M, comp.m), ("N", N, comp.n), ("K", K, comp.k))
                 if size is None or size % block)


def edge_text(edge: str, ragged: Sequence[str]) -> str:
    """What the edge policy ``edge`` does to the ``ragged`` dimensions, for a
    reader: ``""`` where none is ragged (nothing is padded or peeled), else
    ``M edge padded`` / ``M and K edges peeled`` (``pad``: A, B and C copied
    into zero-filled tensors of the next multiple of the blocks, the result
    sliced; ``peel``: the divisible core through the plan, the strips left over
    classical)."""
    if not ragged:
        return ""
    dims = ragged[0] if len(ragged) == 1 else ", ".join(ragged[:-1]) + " and " + ragged[-1]
    what = {"pad": "padded", "peel": "peeled"}.get(edge, f"handled by edge={edge}")
    return f"{dims} edge{'s' if len(ragged) > 1 else ''} {what}"


def _eb(elem: str) -> int:
    e = str(elem)
    if e in ELEMENT_BYTES:
        return ELEMENT_BYTES[e]
    digits = "".join(ch for ch in e if ch.isdigit())
    return max(1, int(digits) // 8) if digits else 4


#: The kernels' plan blocks are rounded up to a multiple of this (``falcon_mlir.kernels.lcma.spec.BLOCK_ALIGN``;
#: the decision does not import the kernels, test_kernel_form checks the two agree).
KERNEL_BLOCK_ALIGN = 16
#: Compile seconds per external dispatch of a CPU kernel-form plan (host-side ops only; a rough figure, not
#: measured: IREE generates no code for them).
SECONDS_PER_EXTERNAL_DISPATCH = 0.01
#: M, N and K multiples the f32 FMA kernel serves (``falcon_mlir.kernels.fma_gemm.FmaConfig``'s tile; checked
#: likewise): other f32 products run on the Triton kernel.
FMA_TILE = (128, 128, 8)


# ------------------------------------------------------------------ the model
class CostModel:
    """Predicted times on one :class:`Profile` (see the module docstring).

    Args:
        profile: the target's figures.
    """

    def __init__(self, profile: Profile):
        self.p = profile
        #: (sums type, products) of the narrow-result plan being priced, else None
        self._operands: Optional[Tuple[str, str]] = None

    # -- primitives ----------------------------------------------------------
    def gemm(self, M, N, K, batch, ein: str, eacc: str, est: Estimate, part: str,
             rhs_bytes: Optional[int] = None, scale: float = 1.0,
             batch_rate: bool = False) -> None:
        """Add one classical GEMM dispatch (roofline of the profile's GEMM rate).

        ``scale`` multiplies the time: a plan's products run at the profile's
        fitted ``<form>_products`` factor of the isolated-GEMM rate (operands
        fresh from the combines, not hot in cache; see
        :mod:`falcon_mlir.calibration.fit`). ``batch_rate``: rate the batch at
        its total work (M stacked ``batch`` times), as a persistent kernel runs
        it (falcon's kernels: the 49 products of Strassen^2 at 16384^3 f32 ran
        at the 16384^3 rate, not at 4096^3's).
        """
        if M <= 0 or N <= 0 or K <= 0:
            return
        p = self.p
        flops = 2.0 * batch * M * N * K
        bi, bo = _eb(ein), _eb(eacc)
        br = bi if rhs_bytes is None else rhs_bytes
        moved = batch * (M * K * bi + K * N * br + 2 * M * N * bo)
        rate = p.gemm_rate(ein, M * batch if batch_rate else M, N, K)
        t = max(flops / rate, moved / p.bandwidth) * scale
        est.add(part, t + p.dispatch_overhead, 1)

    def stream(self, nbytes: float, est: Estimate, part: str, eff: float = 1.0,
               flops: float = 0.0, acc: str = "f32", dispatches: int = 1) -> None:
        """Add elementwise dispatches moving ``nbytes`` (roofline with the add rate)."""
        p = self.p
        t = max(nbytes / (p.bandwidth * eff), flops / p.add_rate(acc) if flops else 0.0)
        est.add(part, t + dispatches * p.dispatch_overhead, dispatches)

    # -- classical -----------------------------------------------------------
    def classical(self, pb: Problem) -> Estimate:
        """The predicted time of classical GEMM (one dispatch)."""
        est = Estimate(())
        self.gemm(pb.M, pb.N, pb.K, pb.batch, pb.lhs, pb.acc, est, "products",
                  rhs_bytes=_eb(pb.rhs))
        return est

    # -- plans ---------------------------------------------------------------
    def plan(self, pb: Problem, schemes: Sequence[str], edge: str = "peel",
             form: str = "per-product", rounding: Optional[Tuple[str, str]] = None) -> Estimate:
        """The predicted time of an LCMA plan.

        Args:
            pb: the contraction.
            schemes: per-level catalog names, outer level first.
            edge: ``peel`` or ``pad``.
            form: ``per-product``, ``grouped`` (all levels composed) or ``kernel``
            (all levels composed as falcon's own kernels: the generated CUDA kernels
            on GPU profiles, the CPU kernel's ``2 R`` dispatches on CPU profiles,
            :meth:`_cpu_kernel_plan`).
            rounding: a bf16/f16 result's ``(sums, products)``: the combined
                operands' type (``f32`` or the input type) and ``input``,
                ``f32`` or ``mixed`` (see :class:`Estimate`); ``None``: f32
                sums, ``mixed`` products (what the emitter does by default).

        Raises:
            falcon_mlir.catalog.UnknownSchemeError: unknown scheme name.
        """
        schemes = tuple(schemes)
        if form != "kernel" and str(pb.acc) in ("bf16", "f16"):
            return self._narrow_plan(pb, schemes, edge, form, rounding or ("f32", "mixed"))
        est = Estimate(schemes, edge, form, ragged=ragged_dims(pb.M, pb.N, pb.K, schemes))
        if form == "kernel" and self.p.kind == "cpu":
            return self._cpu_kernel_plan(pb, schemes, est)
        if form == "kernel":
            self._kernel_plan(pb, scheme_stats("*".join(schemes)), est)
        elif form == "grouped":
            st = scheme_stats("*".join(schemes)) if len(schemes) > 1 else scheme_stats(schemes[0])
            self._edges(pb.M, pb.N, pb.K, pb, st, edge, est, lambda M, N, K:
                        self._grouped_level(M, N, K, pb, st, est), pb.lhs, pb.rhs)
        elif len(schemes) > 1 and self._stack_fits(pb, schemes) and not has_blocking(schemes):
            comp = composed_format(schemes)
            self._edges(pb.M, pb.N, pb.K, pb, comp, edge, est, lambda M, N, K:
                        self._stacked(M, N, K, pb, schemes, est), pb.lhs, pb.rhs)
        else:
            self._level(pb.M, pb.N, pb.K, pb, schemes, edge, est, pb.lhs, pb.rhs)
        from .compile_cost import compile_seconds

        est.compile_seconds = compile_seconds(schemes, form, edges=bool(est.parts.get("edges")))
        return est

    def _narrow_plan(self, pb: Problem, schemes: tuple, edge: str, form: str,
                     rounding: Tuple[str, str]) -> Estimate:
        """A plan on a bf16/f16 result: emitted with an f32 accumulator (products
        and combine C in f32, the rewrite's narrow-result emission), so costed
        as the f32-accumulator problem with the combined operands in the
        ``rounding``'s sums type and the products priced at the rate of their
        operands (the input type's with input-type sums, f32's with f32
        products, the slower of the two for ``mixed``), plus one elementwise
        pass that reads the f32 result and C0 and writes C rounded
        (``combine_c``)."""
        import dataclasses

        sums, products = rounding
        self._operands = (sums, products)
        try:
            est = self.plan(dataclasses.replace(pb, acc="f32"), schemes, edge, form)
        finally:
            self._operands = None
        est.sums, est.products = sums, products
        bc = _eb(pb.acc)
        self.stream(pb.batch * pb.M * pb.N * (4 + 2 * bc), est, "combine_c",
                    self.p.form_efficiency("per-product"), flops=pb.batch * pb.M * pb.N,
                    acc="f32")
        return est

    def blocking_plans(self, pb: Problem, formats, inner: Sequence[str] = ()) -> list:
        """Classical blocking plans of ``pb``: for each ``(m, k, n)`` in
        ``formats`` the per-product plan ``inner + ("mxkxn:R",)`` (``inner``:
        LCMA levels above the blocking, outer first; ``()``: blocking alone, a
        classical plan), peeled edges. Returns their :class:`Estimate` list."""
        return [self.plan(pb, tuple(inner) + (f"{m}x{k}x{n}:{m * k * n}",), "peel")
                for m, k, n in formats]

    @staticmethod
    def _stack_fits(pb: Problem, schemes) -> bool:
        """Whether the rewrite emits ``schemes`` stacked (the composed blocks fit)."""
        comp = composed_format(schemes)
        return pb.M >= comp.m and pb.N >= comp.n and pb.K >= comp.k

    def _stacked(self, M, N, K, pb, schemes, est) -> None:
        """Several per-product levels, stacked (:mod:`falcon_mlir.passes.lcma_rewrite.stacked`):
        per level one combine op per operand over all stacked operands (the
        grouped form's table ops), one batched product of all R_1 * ... * R_L,
        then combine C level by level from the inside out, one op over all
        output blocks per level."""
        B, eacc = pb.batch, pb.acc
        bc = _eb(eacc)
        esum = self._operands[0] if self._operands else eacc  # combined operands' type
        bs = _eb(esum)
        eff = self.p.form_efficiency("grouped")
        fused = self.p.fused_combine_c
        ea, eb = pb.lhs, pb.rhs
        S, levels = 1, []
        for name in schemes:
            st = scheme_stats(name)
            Mb, Nb, Kb = M // st.m, N // st.n, K // st.k
            reads_a = st.used_a * _eb(ea) * (1 if fused else st.R)
            self.stream(B * S * Mb * Kb * (reads_a + st.R * bs), est, "combine_a", eff,
                        flops=2.0 * B * S * st.R * st.used_a * Mb * Kb, acc=eacc,
                        dispatches=-(-st.used_a // MAX_GROUPED_TERMS))
            if not pb.const_rhs:
                reads_b = st.used_b * _eb(eb) * (1 if fused else st.R)
                self.stream(B * S * Kb * Nb * (reads_b + st.R * bs), est, "combine_b", eff,
                            flops=2.0 * B * S * st.R * st.used_b * Kb * Nb, acc=eacc,
                            dispatches=-(-st.used_b // MAX_GROUPED_TERMS))
            levels.append((st, S, Mb, Nb))
            S *= st.R
            M, N, K, ea, eb = Mb, Nb, Kb, esum, esum
        self.gemm(M, N, K, B * S, esum, eacc, est, "products",
                  scale=self.p.product_factor("grouped"))
        for st, above, Mb, Nb in reversed(levels):  # one op over all blocks, every target
            self._combine_c(B * above, Mb, Nb, bc, st, est,
                            self.p.form_efficiency("per-product"), eacc, fused=True)
        est.temp_bytes = max(est.temp_bytes, B * S * (M * K + K * N + M * N) * bc)

    def _edges(self, M, N, K, pb, st: SchemeStats, edge, est, core, ein, erhs) -> None:
        """Edge handling around a divisible ``core(M0, N0, K0)`` (peel or pad)."""
        eacc = pb.acc
        ba, bb, bc = _eb(ein), _eb(erhs), _eb(eacc)
        B = pb.batch
        if M < st.m or N < st.n or K < st.k:
            self.gemm(M, N, K, B, ein, eacc, est, "products", rhs_bytes=bb)
            return
        if edge == "pad":
            Mp, Np, Kp = -(-M // st.m) * st.m, -(-N // st.n) * st.n, -(-K // st.k) * st.k
            if (Mp, Np, Kp) != (M, N, K):
                moved = B * ((M * K + Mp * Kp) * ba + (K * N + Kp * Np) * bb
                             + (M * N + Mp * Np) * bc + 2 * M * N * bc)
                self.stream(moved, est, "edges", dispatches=4)
                est.temp_bytes = max(est.temp_bytes, B * (Mp * Kp * ba + Kp * Np * bb
                                                          + Mp * Np * bc))
            core(Mp, Np, Kp)
            return
        M0, N0, K0 = M // st.m * st.m, N // st.n * st.n, K // st.k * st.k
        if K0 < K:
            self.gemm(M0, N0, K - K0, B, ein, eacc, est, "edges", rhs_bytes=bb)
        core(M0, N0, K0)
        if M0 < M or N0 < N:
            self.stream(2.0 * B * M * N * bc, est, "edges")
            self.gemm(M - M0, N, K, B, ein, eacc, est, "edges", rhs_bytes=bb)
            self.gemm(M0, N - N0, K, B, ein, eacc, est, "edges", rhs_bytes=bb)

    def _level(self, M, N, K, pb, schemes, edge, est, ein, erhs) -> None:
        """Per-product form: level ``schemes[0]`` then the rest recursively."""
        if not schemes:
            self.gemm(M, N, K, pb.batch, ein, pb.acc, est, "products", rhs_bytes=_eb(erhs),
                      scale=self.p.product_factor("per-product") if est.schemes else 1.0)
            return
        st = scheme_stats(schemes[0])
        self._edges(M, N, K, pb, st, edge, est,
                    lambda M0, N0, K0: self._level_core(M0, N0, K0, pb, st, schemes[1:], edge,
                                                        est, ein, erhs), ein, erhs)

    def _level_core(self, M, N, K, pb, st: SchemeStats, inner, edge, est, ein, erhs) -> None:
        B = pb.batch
        eacc = pb.acc
        Mb, Nb, Kb = M // st.m, N // st.n, K // st.k
        ba, bb, bc = _eb(ein), _eb(erhs), _eb(eacc)
        # a bf16/f16 result: the combined operands' type (f32 or the input type)
        esum, products = self._operands if self._operands else (eacc, None)
        bs = _eb(esum)
        eff = self.p.form_efficiency("per-product")
        # One dispatch per combined operand; summed (the roofline of the sum).
        na, sa = len(st.comb_a), sum(st.comb_a)
        if na:
            self.stream(B * Mb * Kb * (sa * ba + na * bs), est, "combine_a", eff,
                        flops=2.0 * B * sa * Mb * Kb, acc=eacc, dispatches=na)
        nb, sb = len(st.comb_b), sum(st.comb_b)
        if nb and not pb.const_rhs:
            self.stream(B * Kb * Nb * (sb * bb + nb * bs), est, "combine_b", eff,
                        flops=2.0 * B * sb * Kb * Nb, acc=eacc, dispatches=nb)
        # Products: the R sub-problems are alike; time one and scale it.
        sub = Estimate(())
        # a combined operand is in the sums type; most products read one
        in_a = esum if st.comb_a else ein
        in_b = esum if st.comb_b and not pb.const_rhs else erhs
        if products == "mixed" and _eb(ein) < 4 and (st.comb_a or st.comb_b):
            # f32 sums next to blocks read alone in the input type: a mixed GEMM
            # (f32 x bf16) gets neither type's fast path; priced at the slower rate
            in_a = min(("f32", ein), key=lambda t: self.p.gemm_rate(t, Mb, Nb, Kb))
        if products == "f32":  # blocks read alone extended to f32 once each (an extf op per block)
            ext_a = min(st.R - na, st.used_a) if _eb(ein) < 4 else 0
            ext_b = min(st.R - nb, st.used_b) if _eb(erhs) < 4 and not pb.const_rhs else 0
            if ext_a:
                self.stream(B * Mb * Kb * ext_a * (ba + 4), est, "combine_a", eff, dispatches=ext_a)
            if ext_b:
                self.stream(B * Kb * Nb * ext_b * (bb + 4), est, "combine_b", eff, dispatches=ext_b)
            in_a, in_b = "f32", "f32"
        self._level(Mb, Nb, Kb, pb, inner, edge, sub, in_a, in_b)
        # classical blocking: its products at the profile's measured factor against
        # the isolated GEMM of the block size (forms.blocking_products; 1.0 if unknown);
        # an LCMA level's GEMM products with a constant B at the profile's rate for their
        # block shape (product_blocks, measured with B constant: IREE's products side by
        # side run slower the wider the block they write)
        if st.blocking:
            k = self.p.product_factor("blocking")
        elif not inner and pb.const_rhs and self.p.product_blocks:
            k = 1.0 / self.p.product_blocks.rate_factor(Mb, Nb, Kb)
        else:
            k = 1.0
        for part, t in sub.parts.items():
            est.parts[part] = est.parts.get(part, 0.0) + st.R * t * k
        est.seconds += st.R * sub.seconds * k
        est.dispatches += st.R * sub.dispatches
        self._combine_c(B, Mb, Nb, bc, st, est, eff, eacc)
        kept = 0 if st.blocking else st.R  # blocking: products accumulate into C in place
        temps = B * (kept * Mb * Nb * bc + len(st.comb_a) * Mb * Kb * bs
                     + (0 if pb.const_rhs else len(st.comb_b)) * Kb * Nb * bs)
        est.temp_bytes = max(est.temp_bytes, temps + sub.temp_bytes)

    def _combine_c(self, B, Mb, Nb, bc, st: SchemeStats, est, eff, eacc,
                   fused: bool = False) -> None:
        """Combine C: one dispatch per output block, reading its products and C0;
        on profiles with :attr:`Profile.fused_combine_c` (GPU), or with ``fused``
        (stacked levels), one dispatch over all blocks that reads each product
        once (and forms every block's terms). Classical blocking in the
        per-product form has none: its products accumulate into C."""
        if st.blocking and not fused:
            return
        if self.p.fused_combine_c or fused:
            blocks = st.m * st.n
            self.stream(B * Mb * Nb * (st.R + 2 * blocks) * bc, est, "combine_c", eff,
                        flops=2.0 * B * st.R * blocks * Mb * Nb, acc=eacc, dispatches=1)
            return
        nc, sc = len(st.comb_c), sum(st.comb_c)
        self.stream(B * Mb * Nb * (sc + 2 * nc) * bc, est, "combine_c", eff,
                    flops=2.0 * B * sc * Mb * Nb, acc=eacc, dispatches=nc)

    def _kernel_plan(self, pb: Problem, st: SchemeStats, est: Estimate) -> None:
        """Kernel form (:mod:`falcon_mlir.kernels.lcma`): four dispatches on blocks
        rounded up to the scheme's format (the kernels pad inside): combine A reads
        A once and writes the R combined operands, likewise B; the R products as
        one batched GEMM in the operand type; combine C reads each product once and
        writes C. The combines stream at the profile's bandwidth times its
        ``kernel_combine`` factor; B is combined at run time even when constant.
        Scaled operands (f16 for bf16 inputs, the default:
        :func:`~falcon_mlir.decision.numerics.kernel_operands` of ``pb.operands``)
        add two absmax dispatches that read A and B once more (part ``absmax``;
        same bytes for everything else, f16 and bf16 being 2 bytes each). Where a combine's outputs
        do not fit one pass, its input blocks are read once per group
        (:func:`kernel_combine_loads`, the kernels' own grouping; Strassen^3's 343
        bf16 operands: A read about 9 times, measured on the H200 2026-12-01: 2.5 ms
        per combine at 16384^3 where reading A once would take 0.9; f32 combines hold
        all 64 blocks in one group and read A once: Strassen^3 f32 measured 16.5 ms
        at 8192^3 and 123.4 ms at 16384^3, run 25)."""
        from .numerics import kernel_operands

        B, R = pb.batch, st.R
        Mb, Nb, Kb = -(-pb.M // st.m), -(-pb.N // st.n), -(-pb.K // st.k)
        ba, bb, bc = _eb(pb.lhs), _eb(pb.rhs), _eb(pb.acc)
        eff = self.p.form_efficiency("kernel")
        ops = kernel_operands(pb.lhs, pb.operands)[0] if pb.lhs == pb.rhs else str(pb.lhs)
        est.operands = ops
        bo = _eb(ops)  # combined operands and products (the kernels' default product type)
        big = 2 ** 31 - 1
        la, lb, lc = kernel_combine_loads(st.name, (max(ba, bo), max(bb, bo), max(bo, bc)),
                                          (R * Mb * Kb > big, R * Kb * Nb > big, R * Mb * Nb > big))
        if ops != str(pb.lhs):  # scaled: max|A|, max|B| first (256 partial maxima each)
            self.stream(B * (pb.M * pb.K * ba + pb.K * pb.N * bb), est, "absmax", eff, dispatches=2)
        self.stream(B * (la * Mb * Kb * ba + R * Mb * Kb * ba), est, "combine_a", eff)
        self.stream(B * (lb * Kb * Nb * bb + R * Kb * Nb * bb), est, "combine_b", eff)
        self.gemm(Mb, Nb, Kb, B * R, ops, ops, est, "products",
                  scale=self.p.product_factor("kernel") * self._f32_products_factor(ops, Mb, Nb, Kb, R),
                  batch_rate=True)
        self.stream(B * (lc * Mb * Nb * ba + pb.M * pb.N * bc), est, "combine_c", eff)
        est.temp_bytes = max(est.temp_bytes, B * R * (Mb * Kb + Kb * Nb + Mb * Nb) * ba)

    def unfit(self, pb: Problem, schemes: Sequence[str], form: str) -> Optional[str]:
        """Why the plan ``schemes`` in ``form`` cannot run on this profile's target (one line), or ``None``:
        only kernel-form plans on CPU profiles have such limits (falcon's CPU kernel:
        :func:`falcon_mlir.decision.cpu_kernel.unfit`); elsewhere the rewrite or the kernels pad and peel.

        Raises:
            falcon_mlir.catalog.UnknownSchemeError: unknown scheme name.
        """
        if form != "kernel" or self.p.kind != "cpu":
            return None
        from . import cpu_kernel

        return cpu_kernel.unfit(pb, tuple(schemes))

    def _cpu_kernel_plan(self, pb: Problem, schemes: Tuple[str, ...], est: Estimate) -> Estimate:
        """Kernel form on a CPU profile: the plan as falcon's CPU kernel runs it, ``2 R`` dispatches with the
        combines fused (:func:`falcon_mlir.decision.cpu_kernel.price`; ``R`` where its products pack B inside,
        priced as ``2 R`` all the same); ``est.unfit`` says why the kernel cannot run it, if so. Compile time: the kernel is one object for every plan (compiled once, cached),
        and IREE compiles no code for its external dispatches; priced as the ``2 R`` dispatches' host-side
        ops (:data:`SECONDS_PER_EXTERNAL_DISPATCH`, not measured)."""
        from . import cpu_kernel

        est.unfit = cpu_kernel.unfit(pb, schemes)
        cpu_kernel.price(self, pb, schemes, est)
        est.compile_seconds = est.dispatches * SECONDS_PER_EXTERNAL_DISPATCH
        return est

    def _f32_products_factor(self, ops: str, Mb: int, Nb: int, Kb: int, R: int) -> float:
        """Time factor of a kernel-form plan's f32 products: 1.0 where the FMA kernel serves their blocks as
        the kernels round them (:data:`KERNEL_BLOCK_ALIGN`; whole :data:`FMA_TILE` tiles), else the profile's
        ``kernel_products_f32_triton`` (the Triton kernel runs them; the profile's f32 rates are the FMA
        kernel's). 1.0 for 16-bit products."""
        if ops != "f32":
            return 1.0
        up = lambda v: -(-v // KERNEL_BLOCK_ALIGN) * KERNEL_BLOCK_ALIGN  # noqa: E731
        if all(up(v) % t == 0 for v, t in zip((Mb, Nb, Kb), FMA_TILE)):
            return 1.0
        return float(self.p.forms.get("kernel_products_f32_triton", 1.0))

    def _grouped_level(self, M, N, K, pb, st: SchemeStats, est) -> None:
        """Grouped form on a divisible core: group combine A, B; one batched product; combine C."""
        B = pb.batch
        eacc = pb.acc
        esum = self._operands[0] if self._operands else eacc  # combined operands' type
        Mb, Nb, Kb = M // st.m, N // st.n, K // st.k
        ba, bb, bc, bs = _eb(pb.lhs), _eb(pb.rhs), _eb(eacc), _eb(esum)
        eff = self.p.form_efficiency("grouped")
        R = st.R
        # Bytes: on CPU as if every combined operand re-read its blocks (IREE's
        # CPU tiles do not keep a block row for all r; the fitted efficiency
        # absorbs the rest); on GPU (falcon-tiles: one thread forms all R) each
        # block is read once.
        reads_a = st.used_a * ba * (1 if self.p.fused_combine_c else R)
        reads_b = st.used_b * bb * (1 if self.p.fused_combine_c else R)
        self.stream(B * Mb * Kb * (reads_a + R * bs), est, "combine_a", eff,
                    flops=2.0 * B * R * st.used_a * Mb * Kb, acc=eacc)
        if not pb.const_rhs:
            self.stream(B * Kb * Nb * (reads_b + R * bs), est, "combine_b", eff,
                        flops=2.0 * B * R * st.used_b * Kb * Nb, acc=eacc)
        self.gemm(Mb, Nb, Kb, B * R, esum, eacc, est, "products",
                  scale=self.p.product_factor("grouped"))
        self._combine_c(B, Mb, Nb, bc, st, est, self.p.form_efficiency("per-product"), eacc)
        est.temp_bytes = max(est.temp_bytes,
                             B * R * ((Mb * Kb + Kb * Nb) * bs + Mb * Nb * bc))


