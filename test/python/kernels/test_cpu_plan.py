"""LCMA plans on falcon's CPU kernel (falcon_mlir.kernels.cpu_plan): combines in the packs and the epilogue.

Numerics against float64 on random inputs at small shapes chosen to reach every path: edge tiles
(blocks not multiples of the 14 x 32 micro-tile), several K blocks with several destinations (the
workgroup's private tile), one K block, 2x2 schemes to three levels (8 terms), a 3x3 scheme,
classical blocking; a mutant of the term decoding is caught.
"""

from fractions import Fraction

import numpy as np
import pytest

from falcon_mlir.kernels import cpu_embed, cpu_gemm, cpu_object, cpu_plan, cpu_source
from falcon_mlir.kernels.cpu_gemm import MAX_TERMS, CpuGemmConfig
from falcon_mlir.kernels.cpu_plan import CpuPlan, encode_term
from falcon_mlir.runner import Module

needs_avx512 = pytest.mark.skipif(not cpu_object.host_has_avx512(), reason="falcon's CPU kernel needs AVX-512")
#: Small blocking: several workgroups and K blocks at test sizes.
_TINY = CpuGemmConfig(mc=28, nc=64, kc=64)


def _run(plan: CpuPlan, obj=None):
    """``(C, A, B)``: the plan's module on random normal inputs, A and B returned as ``(batch x) M x K``
    and ``(batch x) K x N`` (the kernel got them stored as the plan's layout says)."""
    rng = np.random.default_rng([plan.M, plan.N, plan.K, len(plan.scheme), plan.trans_a, plan.trans_b, plan.batch])
    a = rng.standard_normal(plan.spec.a_shape, dtype=np.float32)
    b = rng.standard_normal(plan.spec.b_shape, dtype=np.float32)
    mod = Module(cpu_embed.compile_module(cpu_plan.plan_module(plan, obj=obj)))
    t = lambda x, flag: np.swapaxes(x, -1, -2) if flag else x  # noqa: E731
    return mod("main", a, b), t(a, plan.trans_a), t(b, plan.trans_b)


def _rel_err(c, a, b) -> float:
    ref = a.astype(np.float64) @ b.astype(np.float64)
    return float(np.abs(c - ref).max() / np.abs(ref).max())


def _bound(plan: CpuPlan) -> float:
    """f32 error bound for the check: unit roundoff x K, times the scheme's growth per level (2x2
    schemes: a few units per level; generous, but orders below a wrong index's O(1))."""
    levels = max(1, round(np.log(plan.resolved.R) / np.log(7)))
    return 6e-8 * plan.K * 4 ** levels


def test_encode_term_round_trips_and_refuses():
    t = encode_term(3, 5, Fraction(-3, 4))
    assert (t >> 20) & 63 == 3 and (t >> 14) & 63 == 5
    assert ((t >> 4) & 1023) - 512 == -3 and t & 15 == 2
    assert encode_term(63, 63, 511) < 2 ** 26
    for row, col, coef in ((64, 0, 1), (0, -1, 1), (0, 0, 0), (0, 0, Fraction(1, 3)), (0, 0, 512),
                           (0, 0, Fraction(1, 2 ** 16))):
        with pytest.raises(ValueError):
            encode_term(row, col, coef)


def test_first_writes_are_marked_once_per_block_of_c():
    """Each block of C is stored by exactly one product (the first to reach it), added by the others."""
    for name in ("strassen", "strassen^2", "2x2x2:8", "3x3x3:23"):
        plan = CpuPlan(48, 48, 48, name)
        s = plan.resolved
        stores = {}
        for pr in plan.products:
            for t, term in enumerate(pr.c_terms):
                if pr.first >> t & 1:
                    key = ((term >> 20) & 63, (term >> 14) & 63)
                    assert key not in stores, (name, key)
                    stores[key] = True
        assert len(stores) == s.m * s.n
        assert [len(p.a_terms) for p in plan.products] == [int(np.count_nonzero(s.U[r])) for r in range(s.R)]


def test_bad_plans_are_refused():
    with pytest.raises(ValueError, match="multiple"):
        CpuPlan(65, 64, 64, "strassen")
    with pytest.raises(ValueError, match="positive"):
        CpuPlan(0, 64, 64, "strassen")
    with pytest.raises(ValueError, match="terms"):  # Strassen^4: 16 terms in a product's operand
        CpuPlan(64, 64, 64, "strassen^4")


@needs_avx512
@pytest.mark.parametrize("M,N,K,scheme,config", [
    (2 * 45, 2 * 37, 2 * 150, "strassen", _TINY),          # edges, 3 K blocks, private tiles
    (2 * 45, 2 * 37, 2 * 150, "strassen", None),           # default blocking (one K block of 150)
    (2 * 30, 2 * 70, 2 * 90, "winograd", _TINY),
    (4 * 17, 4 * 33, 4 * 70, "strassen^2", _TINY),         # 4 terms per operand and destination
    (8 * 15, 8 * 9, 8 * 70, "strassen^3", _TINY),          # 8 terms: MAX_TERMS
    (3 * 20, 3 * 35, 3 * 50, "3x3x3:23", _TINY),            # not 2x2
    (2 * 29, 2 * 40, 2 * 100, "2x2x2:8", _TINY),            # classical blocking: K split over products
])
def test_plan_numerics_against_float64(M, N, K, scheme, config):
    plan = CpuPlan(M, N, K, scheme, config)
    assert max(len(p.a_terms) for p in plan.products) <= MAX_TERMS
    c, a, b = _run(plan)
    assert np.isfinite(c).all()
    assert _rel_err(c, a, b) < _bound(plan)


@needs_avx512
def test_wrong_block_column_is_caught():
    """The numerics check fails on a kernel that reads A's terms one block column off (mod 2)."""
    plan = CpuPlan(2 * 30, 2 * 40, 2 * 70, "strassen", _TINY)
    src = cpu_source.kernel_source(plan.config)
    bad = src.replace("+ term_col(ta[t]) * K)", "+ (term_col(ta[t]) ^ 1) * K)")
    assert bad != src
    c, a, b = _run(plan, obj=cpu_object.compile_source(bad, "mutant"))
    assert _rel_err(c, a, b) > 1e-2


@needs_avx512
def test_module_structure():
    """Two dispatches per product, C threaded through the products in place, no combine pass."""
    plan = CpuPlan(64, 64, 64, "strassen")
    text = cpu_plan.plan_module(plan)
    assert text.count("::@lcma_pack_b[") == 7 and text.count("::@lcma_gemm[") == 7
    assert "tensor.empty()" in text and "linalg" not in text
    lines, c = cpu_plan.plan_dispatch_lines("exe", plan)
    assert c == "%p_g6#0"
    assert "-> (%p_c0, " in lines[-13] or any("-> (%p_c0, " in ln for ln in lines)
    assert any("(%a, %p_bp6, %p_g5#0, " in ln and "-> (%p_g5#0, " in ln for ln in lines)


# -- B summed and packed inside (lcma_fgemm: one dispatch per product, one workgroup per panel) -------

@needs_avx512
@pytest.mark.parametrize("M,N,K,scheme,config", [
    (2 * 45, 2 * 37, 2 * 150, "strassen", _TINY),          # edges, 3 K blocks, 2 row blocks: private tile
    (2 * 45, 2 * 37, 2 * 128, "strassen", _TINY),          # 2 K blocks, the last a whole one
    (2 * 45, 2 * 37, 2 * 150, "strassen", None),           # default blocking for B inside (one K block)
    (2 * 120, 2 * 300, 2 * 600, "strassen", None),         # 3 K blocks of 256 over 2 row blocks of 112
    (4 * 17, 4 * 33, 4 * 70, "strassen^2", _TINY),         # 4 terms per operand and destination
    (8 * 15, 8 * 9, 8 * 70, "strassen^3", _TINY),          # 8 terms: MAX_TERMS
    (3 * 20, 3 * 35, 3 * 150, "3x3x3:23", _TINY),           # not 2x2; 3 K blocks
    (2 * 29, 2 * 40, 2 * 100, "2x2x2:8", _TINY),            # classical blocking: K split over products
])
def test_b_inside_plan_numerics_against_float64(M, N, K, scheme, config):
    plan = CpuPlan(M, N, K, scheme, config, b_inside=True)
    c, a, b = _run(plan)
    assert np.isfinite(c).all()
    assert _rel_err(c, a, b) < _bound(plan)


@needs_avx512
@pytest.mark.parametrize("old, new", [
    ("+ term_col(tb[t]) * N;", "+ (term_col(tb[t]) ^ 1) * N;"),             # B's term one block column off
    ("pt + (i0 + i) * NC + j", "pt + i * NC + j"),                          # private tile shared by row blocks
    ("ldb, p0, kc, j0, nc, bp);", "ldb, 0, kc, j0, nc, bp);"),              # every K block packs the first
    ("int last = p0 + KC >= K;", "int last = p0 + KC > K;"),                # a whole last K block not last
], ids=["b_term", "tile_rows", "k_block", "last_block"])
def test_wrong_b_inside_product_is_caught(old, new):
    """The numerics check fails on a B-inside kernel with a wrong B term, private tile row or K block, or
    one that leaves a whole last K block in the private tile (K a multiple of KC)."""
    plan = CpuPlan(2 * 45, 2 * 37, 2 * 128, "strassen", _TINY, b_inside=True)
    src = cpu_source.kernel_source(plan.config)
    bad = src.replace(old, new)
    assert bad != src
    c, a, b = _run(plan, obj=cpu_object.compile_source(bad, "mutant"))
    assert _rel_err(c, a, b) > 1e-2


def test_b_inside_module_structure():
    """One dispatch per product reading B itself, C threaded through the products in place."""
    plan = CpuPlan(64, 64, 64, "strassen", b_inside=True)
    lines, c = cpu_plan.plan_dispatch_lines("exe", plan)
    assert c == "%p_g6#0"
    assert sum("@exe::@lcma_fgemm[%p_gn](%a, %b, " in ln for ln in lines) == 7
    assert not any("lcma_pack_b" in ln or "lcma_gemm" in ln for ln in lines)
    assert any("(%a, %b, %p_g5#0, " in ln and "-> (%p_g5#0, " in ln for ln in lines)


def test_b_inside_rule():
    """Where products run with B inside, on 2 workers: row blocks up to 512, blocks of B of 6M elements
    and more, 512-column panels where there are 8 and more, else 256 where they balance."""
    col = lambda M, N, K: cpu_gemm.plan_inside_columns(M, N, K, n_workers=2)  # noqa: E731
    assert col(512, 2048, 7168) == 256 and col(512, 3584, 8192) == 256
    assert col(512, 7168, 2048) == 512 and col(384, 4096, 2048) == 512 and col(256, 10240, 2560) == 512
    assert col(1024, 7168, 2048) == 0          # 1024-row blocks: two dispatches
    assert col(512, 1792, 1792) == 0           # B's block under 6M elements
    assert col(512, 1792, 7168) == 0           # 7 panels of 256 on 2 workers: 7/8 busy
    assert cpu_gemm.plan_inside_columns(512, 2048, 7168, "avx2", 2) == 0
    with pytest.raises(ValueError, match="n_workers"):
        cpu_gemm.plan_inside_columns(512, 2048, 7168, n_workers=-1)
    plan = CpuPlan(1024, 4096, 14336, "strassen")
    assert plan.b_inside == cpu_gemm.plan_b_inside(512, 2048, 7168)
    assert plan.config.nc == (cpu_gemm.plan_inside_columns(512, 2048, 7168) or cpu_gemm.PLAN_CONFIG.nc)
    assert not CpuPlan(1024, 4096, 14336, "strassen", trans_a=True).b_inside
    assert not CpuPlan(1024, 4096, 14336, "strassen", batch=2).b_inside
    for bad in (dict(trans_b=True, b_inside=True), dict(batch=2, b_inside=True), dict(b_inside=1)):
        with pytest.raises(ValueError, match="b_inside"):
            CpuPlan(1024, 4096, 14336, "strassen", **bad)


# -- transposed operands: a term's block (i, j) of A is block (j, i) of the stored K x M matrix ------

@needs_avx512
@pytest.mark.parametrize("trans_a, trans_b", [(True, False), (False, True), (True, True)], ids=["ta", "tb", "ta_tb"])
@pytest.mark.parametrize("M,N,K,scheme,config", [
    (2 * 45, 2 * 37, 2 * 150, "strassen", _TINY),          # edges, 3 K blocks, private tiles
    (2 * 37, 2 * 53, 2 * 29, "strassen", None),            # odd blocks (37 x 53 x 29), one K block
    (4 * 17, 4 * 33, 4 * 70, "strassen^2", _TINY),         # 4 terms per operand and destination
])
def test_transposed_plan_numerics_against_float64(trans_a, trans_b, M, N, K, scheme, config):
    plan = CpuPlan(M, N, K, scheme, config, trans_a=trans_a, trans_b=trans_b)
    c, a, b = _run(plan)
    assert np.isfinite(c).all() and _rel_err(c, a, b) < _bound(plan)


@needs_avx512
@pytest.mark.parametrize("old, new, trans_a, trans_b", [
    ("trans_a ? term_col(ta[t]) * K * lda + term_row(ta[t]) * M", "trans_a ? term_col(ta[t]) * K * lda + "
     "(term_row(ta[t]) ^ 1) * M", True, False),
    ("trans_b ? term_col(tb[t]) * N * ldb + term_row(tb[t]) * K", "trans_b ? term_row(tb[t]) * N * ldb + "
     "term_col(tb[t]) * K", False, True),
])
def test_wrong_transposed_block_is_caught(old, new, trans_a, trans_b):
    """The check fails on a kernel that finds a transposed operand's block one block off (A) or at the
    block of the plain layout (B: row and column not swapped)."""
    plan = CpuPlan(2 * 30, 2 * 40, 2 * 70, "strassen", _TINY, trans_a=trans_a, trans_b=trans_b)
    src = cpu_source.kernel_source(plan.config)
    bad = src.replace(old, new)
    assert bad != src
    c, a, b = _run(plan, obj=cpu_object.compile_source(bad, "mutant"))
    assert _rel_err(c, a, b) > 1e-2


def test_plan_flags_are_bools():
    with pytest.raises(ValueError, match="trans_a must be a bool"):
        CpuPlan(64, 64, 64, "strassen", trans_a=1)


# -- batches: each product's 2 dispatches run every entry (pack: workgroup y; GEMM: workgroup z) -----

@needs_avx512
@pytest.mark.parametrize("M,N,K,scheme,config,trans_a,trans_b,batch,groups", [
    (2 * 37, 2 * 53, 2 * 29, "strassen", None, False, False, 3, 3),     # one batch group per entry
    (2 * 45, 2 * 37, 2 * 150, "strassen", _TINY, False, True, 3, 3),    # private tiles, B stored N x K
    (2 * 150, 2 * 150, 2 * 40, "strassen", _TINY, True, False, 5, 4),   # 6 x 3 blocks: group 0 runs 2 entries
    (4 * 17, 4 * 33, 4 * 70, "strassen^2", _TINY, True, True, 2, 2),
])
def test_batched_plan_numerics_against_float64(M, N, K, scheme, config, trans_a, trans_b, batch, groups):
    plan = CpuPlan(M, N, K, scheme, config, trans_a=trans_a, trans_b=trans_b, batch=batch)
    assert cpu_gemm.batch_groups(plan.Mb, plan.Nb, batch, plan.config) == groups
    c, a, b = _run(plan)
    assert c.shape == (batch, M, N) and np.isfinite(c).all()
    assert _rel_err(c, a, b) < _bound(plan)


@needs_avx512
def test_wrong_batch_entry_of_a_plan_is_caught():
    """The check fails on a kernel whose LCMA GEMM reads every entry's A terms from entry 0."""
    plan = CpuPlan(2 * 30, 2 * 40, 2 * 70, "strassen", _TINY, batch=3)
    src = cpu_source.kernel_source(plan.config)
    bad = src.replace("a[t] = a_ptr + a_off + bi * sa +", "a[t] = a_ptr + a_off + 0 * sa +")
    assert bad != src
    c, a, b = _run(plan, obj=cpu_object.compile_source(bad, "mutant"))
    assert _rel_err(c, a, b) > 1e-2


def test_batched_plan_module_text():
    plan = CpuPlan(64, 64, 64, "strassen", batch=4, trans_b=True)
    assert plan.flops == 2 * 4 * 64 ** 3
    lines, _ = cpu_plan.plan_dispatch_lines("exe", plan)
    text = "\n".join(lines)
    assert "%p_batch = arith.constant 4 : index" in text and "%p_zb = arith.constant 16384 : index" in text
    assert "@exe::@lcma_pack_b[%p_gp, %p_batch](%b, %p_Kb, %p_Nb, %p_ldb, %p_tb, %p_sb," in text
    assert "@exe::@lcma_gemm[%p_gm, %p_gn, %p_gz](%a, %p_bp0, %p_c0, " in text
    assert "tensor<4x64x64xf32>" in text
    with pytest.raises(ValueError, match="batch must be a positive int"):
        CpuPlan(64, 64, 64, "strassen", batch=0)
