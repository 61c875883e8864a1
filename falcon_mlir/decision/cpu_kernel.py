"""The kernel form on CPU profiles: LCMA plans on falcon's own CPU kernel, combines fused.

A kernel-form plan on a profile of kind ``cpu`` (``x86-falcon``) runs as
:class:`falcon_mlir.kernels.cpu_plan.CpuPlan` does it: ``C = A @ B`` (f32,
row-major C; A and B row-major or stored transposed; optionally a batch of
them, a leading dimension of all three) by one scheme ``<m,k,n;R>`` (the plan's levels composed: two
Strassen levels are ``<4,4,4;49>``) as ``2 R`` dispatches, product by
product: ``lcma_pack_b`` packs ``B_r = sum V[r] B_jl`` (reads ``nnz(V[r])``
blocks ``Kb x Nb``, writes one), then ``lcma_gemm`` sums ``A_r`` from
``nnz(U[r])`` blocks inside its packing of A and writes its product with W's
coefficients into the ``nnz(W[r])`` blocks of C in its epilogue; or, at blocks
of at most 512 rows with a large block of B (``falcon_mlir.kernels.cpu_gemm.plan_b_inside``),
as ``R``, each product summing and packing its B inside the GEMM. :func:`price` prices
both alike (the pack's extra reads, the products at the classical kernel's rate): what
the one-dispatch form saves at small row blocks is left to the profile's block
rules, which were set with the two-dispatch form (docs/benchmarks.md, *LCMA products
with B inside*).

The decision does not import the kernels (it must load without them); this
module mirrors what ``CpuPlan`` refuses (:func:`unfit`; a test holds the two
equal: ``test/python/decision/test_cpu_kernel_form.py``) and prices the
``2 R`` dispatches (:func:`price`; ``R`` where the products pack B inside, priced the same) from the
profile's figures only.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import FrozenSet, Optional, Sequence, Tuple

__all__ = ["MAX_TERMS", "MAX_COEF_NUM", "MAX_COEF_SHIFT", "MAX_GRID", "COLUMN_BLOCK", "TermStats", "term_stats",
           "coef_ok", "unfit", "narrow_factor", "price"]

#: Most blocks one product's A sum, B sum or C destinations may have (``falcon_mlir.kernels.cpu_gemm.MAX_TERMS``).
MAX_TERMS = 8
#: Coefficients the kernel takes: ``num / 2^s`` with ``|num| <= MAX_COEF_NUM`` and ``s <= MAX_COEF_SHIFT``
#: (``falcon_mlir.kernels.cpu_plan.encode_term``).
MAX_COEF_NUM = 511
MAX_COEF_SHIFT = 15
#: Blocks per dimension of the composed format the kernel's terms can address (``encode_term``: 0..63).
MAX_GRID = 64
#: Product width (columns of C) below which :func:`narrow_factor` prices a kernel-form product up: the
#: column block of the products' default blocking (``falcon_mlir.kernels.cpu_gemm.PLAN_CONFIG.nc``).
COLUMN_BLOCK = 512
#: Bytes of an f32 element: the kernel's only type.
F32 = 4


@dataclass(frozen=True)
class TermStats:
    """What the CPU kernel form needs of a (composed) scheme <m,k,n;R>.

    Attributes:
        m, k, n, R: the composed format and rank.
        terms: ``(sum_r nnz(U[r]), sum_r nnz(V[r]), sum_r nnz(W[r]))``: blocks the R products read of A
            and of B, and write of C, in all.
        most: the most terms of one product's A sum, B sum and C destinations (``max_r nnz``).
        coefs: every nonzero coefficient of U, V and W.
    """

    m: int
    k: int
    n: int
    R: int
    terms: Tuple[int, int, int]
    most: Tuple[int, int, int]
    coefs: FrozenSet[Fraction]


@lru_cache(maxsize=1024)
def _level_stats(name: str) -> TermStats:
    from falcon_mlir.catalog import get_scheme

    s = get_scheme(name)
    nnz = [[int((X[r] != 0).sum()) for r in range(s.R)] for X in (s.U, s.V, s.W)]
    coefs = frozenset(Fraction(x) for X in (s.U, s.V, s.W) for x in X.ravel() if x != 0)
    return TermStats(s.m, s.k, s.n, s.R, tuple(sum(c) for c in nnz), tuple(max(c) for c in nnz), coefs)


@lru_cache(maxsize=4096)
def term_stats(schemes: Tuple[str, ...]) -> TermStats:
    """:class:`TermStats` of the levels ``schemes`` (outer first) composed by Kronecker product: a composed
    product's U (V, W) is the outer product of the levels' ones, so its nnz, their sums and maxima are the
    products of the levels' and its coefficients are products of theirs (computed without composing).

    Raises:
        falcon_mlir.catalog.UnknownSchemeError: an unknown name.
    """
    out = TermStats(1, 1, 1, 1, (1, 1, 1), (1, 1, 1), frozenset({Fraction(1)}))
    for name in schemes:
        s = _level_stats(name)
        out = TermStats(out.m * s.m, out.k * s.k, out.n * s.n, out.R * s.R,
                        tuple(a * b for a, b in zip(out.terms, s.terms)),
                        tuple(a * b for a, b in zip(out.most, s.most)),
                        frozenset(a * b for a in out.coefs for b in s.coefs))
    return out


def coef_ok(c) -> bool:
    """Whether the kernel takes coefficient ``c`` (a nonzero number): ``num / 2^s`` with
    ``|num| <= MAX_COEF_NUM``, ``s <= MAX_COEF_SHIFT``."""
    c = Fraction(c)
    s = c.denominator.bit_length() - 1
    return c.denominator == 1 << s and s <= MAX_COEF_SHIFT and abs(c.numerator) <= MAX_COEF_NUM


def unfit(pb, schemes: Sequence[str]) -> Optional[str]:
    """Why falcon's CPU kernel cannot run the plan ``schemes`` (levels composed) on the contraction ``pb``
    (:class:`~falcon_mlir.decision.cost.Problem`), or ``None`` where it can. What ``CpuPlan`` and
    falcon-kernels refuse: other than f32 x f32 -> f32, C stored transposed or batch dimensions that do not
    lead (``pb.transposed`` has ``"out"`` or ``"batch"``: the kernel writes a row-major C and reads a leading
    batch; falcon-kernels would leave the contraction to IREE; A and B stored transposed it reads), sizes that
    are not exact multiples of the composed format (the kernel pads nothing), a format over 64 blocks per
    dimension, a
    product with more than :data:`MAX_TERMS` blocks in its A sum, B sum or destinations, a coefficient not
    ``num / 2^s`` with ``|num| <= 511``, ``s <= 15``. One line, naming the numbers.

    Raises:
        falcon_mlir.catalog.UnknownSchemeError: an unknown name.
    """
    types = (str(pb.lhs), str(pb.rhs), str(pb.acc))
    if types != ("f32", "f32", "f32"):
        return f"falcon's CPU kernel multiplies f32 x f32 -> f32 only, not {types[0]} x {types[1]} -> {types[2]}"
    if "out" in pb.transposed:
        return "falcon's CPU kernel writes C as M x N, row-major; C is stored transposed (N x M)"
    if "batch" in pb.transposed:
        return ("falcon's CPU kernel reads a batch as the leading dimension of A, B and C; the batch "
                "dimensions do not lead")
    name = "*".join(schemes)
    st = term_stats(tuple(schemes))
    if max(st.m, st.k, st.n) > MAX_GRID:
        return (f"{name}'s format <{st.m},{st.k},{st.n}> has more than {MAX_GRID} blocks per dimension "
                "(falcon's CPU kernel)")
    if pb.M % st.m or pb.K % st.k or pb.N % st.n:
        return (f"{pb.M}x{pb.N}x{pb.K} (MxNxK) is not a multiple of {name}'s format <{st.m},{st.k},{st.n}> "
                "(falcon's CPU kernel pads nothing)")
    if max(st.most) > MAX_TERMS:
        return (f"{name} has a product with {max(st.most)} terms in one operand or destination "
                f"(falcon's CPU kernel takes 1 to {MAX_TERMS})")
    bad = sorted((c for c in st.coefs if not coef_ok(c)), key=abs)
    if bad:
        return (f"{name} has coefficient {bad[0]}, not num / 2^s with |num| <= {MAX_COEF_NUM}, "
                f"s <= {MAX_COEF_SHIFT} (falcon's CPU kernel)")
    return None


def narrow_factor(Nb: int) -> float:
    """Time factor of a product ``Nb`` columns wide on the kernel against the profile's rate for its size:
    ``max(1, COLUMN_BLOCK / Nb)`` (dimensionless, >= 1).

    Why: the profile's rate is looked up at the product's equivalent square size, which says a narrow
    product runs like a big one; on the kernel it does not. Measured on a 2-core Intel Xeon, 2026-12-03
    (falcon-bench, medians of 7): DeepSeek-V3's kv_a at 2048 tokens, 2048x576x7168, ran 0.109 s on the
    classical kernel (155 GFLOP/s) and 0.118 s as Strassen, whose 1024x288x3584 products ran at 103
    GFLOP/s alone (0.665 of the whole GEMM's rate; ``COLUMN_BLOCK / Nb`` says 0.56), where the model
    had predicted Strassen faster; the M = 2048 workloads run had measured 0.904x. Products 512 wide
    (Llama-3-70B's k, v at 2048 tokens, 2048x1024x8192) measured 1.018x, and are not scaled. A bound
    on the safe side from one measurement, not the kernel's mechanism (a product with few blocks of C
    runs on the small blocking, 256 columns, ``cpu_gemm.choose_plan_config``), and only the plan's
    products are scaled, not a classical GEMM as narrow: plans whose products are under 512 columns
    stay classical unless they gain more than the factor costs.
    """
    return max(1.0, COLUMN_BLOCK / max(Nb, 1))


def price(cm, pb, schemes: Sequence[str], est) -> None:
    """Add the predicted seconds of the plan ``schemes`` on falcon's CPU kernel to ``est``
    (:class:`~falcon_mlir.decision.cost.Estimate`; ``cm`` the :class:`~falcon_mlir.decision.cost.CostModel`,
    whose profile gives every figure). Blocks ``Mb x Kb``, ``Kb x Nb`` (the sizes over the composed format,
    rounded up where they do not divide: such a plan is :func:`unfit`, priced only to say what it would cost):

    Each term below is for one product of the batch (``pb.batch``) and scales with it; the dispatches do not
    (each of the ``2 R`` runs every entry). A and B stored transposed cost the same (the packs transpose).

    * ``combine_b``: what the R packs of B (one dispatch each) move beyond a plain pack: the extra
      terms' reads, ``(sum_r nnz(V[r]) - R) Kb Nb 4`` bytes, at the profile's ``bandwidth`` times
      ``forms.kernel_combine``. The plain pack (one block read, one written) is part of the classical
      kernel's measured rate, which ``products`` already charges; counting all
      ``(sum_r nnz(V[r]) + R)`` blocks here counted it twice (1024x14336x4096: Strassen predicted 361
      ms against the classical kernel's 337, where the 2-core Zen 5 measured 343 against 390);
    * ``products``: R GEMMs of ``Mb x Kb`` by ``Kb x Nb`` at the profile's f32 GEMM rate at that size (the
      classical kernel's, which includes its own plain pack of B) times ``forms.kernel_products`` per
      level (what summing A in the A pack and writing several destinations costs a product; each level
      multiplies a product's terms and destinations: Strassen has 12/7 per product, Strassen^2 2.9,
      whose products measured 1.09x the classical kernel's time at the same size on the Zen 5,
      docs/kernels.md), one dispatch each, and by :func:`narrow_factor` where a product is narrower
      than the kernel's column block;
    * ``combine_c``: the destinations' traffic, ``sum_r nnz(W[r]) Mb Nb 4 2`` bytes (each destination
      block read and written once) at ``bandwidth``, no dispatch of its own. An upper bound of what
      reaches memory: the epilogue touches its tiles of C once per K block of the kernel, but they mostly
      hit cache, and the classical rate already counts one write of C per product.

    ``combine_a`` is 0: A's sums are formed in the products' packing (their extra reads, ``nnz(U[r]) - 1``
    blocks once per column block of the kernel, overlap the micro-kernel and are left to
    ``kernel_products``). Temporaries: the R packed B blocks (an upper bound: each product's is its own
    value in the module; IREE may reuse them).
    """
    p = cm.p
    st = term_stats(tuple(schemes))
    Mb, Nb, Kb = -(-pb.M // st.m), -(-pb.N // st.n), -(-pb.K // st.k)
    R, B = st.R, pb.batch
    _, tb, tc = st.terms
    cm.stream(B * (tb - R) * Kb * Nb * F32, est, "combine_b", p.form_efficiency("kernel"), dispatches=R)
    cm.gemm(Mb, Nb, Kb, B * R, "f32", "f32", est, "products",
            scale=p.product_factor("kernel") ** len(schemes) * narrow_factor(Nb))
    est.add("products", (R - 1) * p.dispatch_overhead, R - 1)  # cm.gemm counted one dispatch for the R
    est.add("combine_c", B * tc * Mb * Nb * F32 * 2 / p.bandwidth)
    est.temp_bytes = max(est.temp_bytes, B * R * Kb * Nb * F32)
    est.operands = "f32"
