"""falcon's CPU GEMM built for AVX2 and FMA (``isa="avx2"``: ymm registers, the 6 x 16 micro-kernel).

The same generated C as the AVX-512 build (:mod:`falcon_mlir.kernels.cpu_source`) with 8-float vectors,
vector masks for the edges and an element-wise 16 x 16 transpose. The tests that run it need gcc and a
CPU with AVX2 and FMA (every x86-64 CI machine has them); numerics against float64 on random inputs,
with blockings that reach every edge, the transposed and batched layouts, B packed inside, LCMA plans;
mutants of the AVX2-only code (the edge masks, the transpose) are caught.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from falcon_mlir.kernels import cpu_embed, cpu_gemm, cpu_object, cpu_source
from falcon_mlir.kernels.cpu_gemm import AVX2_CONFIG, CpuGemmConfig
from falcon_mlir.kernels.cpu_plan import CpuPlan, plan_module
from falcon_mlir.runner import Module

needs_avx2 = pytest.mark.skipif(not cpu_object.host_has("avx2") or shutil.which("gcc") is None,
                                reason="needs gcc and a CPU with AVX2 and FMA")
#: Blocks smaller than the test shapes: several workgroups and K blocks, row blocks not multiples of 16,
#: K blocks not multiples of 16, pack rows not 16 (the transposes' edges), 48-column panels (2 x 48: six
#: accumulators per row, an edge of six vectors).
_EDGES = CpuGemmConfig(mr=2, nr=48, kc=40, mc=18, nc=96, pack_rows=7, isa="avx2")
_TINY = CpuGemmConfig(mr=6, nr=16, kc=64, mc=24, nc=64, isa="avx2")
#: An AVX2 device target as IREE prints one (texts only: nothing compiles it).
_TARGET = ('#hal.executable.target<"llvm-cpu", "embedded-elf-x86_64", {cpu_features = "+avx,+avx2,+bmi2,+f16c,+fma", '
           'target_triple = "x86_64-unknown-unknown-eabi-elf"}>')


def _inputs(shape_a, shape_b, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape_a, dtype=np.float32), rng.standard_normal(shape_b, dtype=np.float32)


def _check(text, a, b, trans_a=False, trans_b=False):
    """Relative max-norm error of the module's ``@main`` on ``a``, ``b`` (stored as the layout says)
    against float64."""
    c = Module(cpu_embed.compile_module(text))("main", a, b)
    t = lambda x, flag: np.swapaxes(x, -1, -2) if flag else x  # noqa: E731
    ref = t(a, trans_a).astype(np.float64) @ t(b, trans_b).astype(np.float64)
    assert c.shape == ref.shape
    return float(np.abs(c - ref).max() / np.abs(ref).max())


def _gemm(M, N, K, config=None, trans_a=False, trans_b=False, batch=1, obj=None, seed=0):
    config = config or cpu_gemm.classical_config(M, N, K, batch, trans_a, trans_b, isa="avx2")
    lead = (batch,) if batch > 1 else ()
    a, b = _inputs(lead + ((K, M) if trans_a else (M, K)), lead + ((N, K) if trans_b else (K, N)), [seed, M, N, K])
    text = cpu_embed.gemm_module(M, N, K, config, trans_a=trans_a, trans_b=trans_b, batch=batch, obj=obj)
    return _check(text, a, b, trans_a, trans_b)


def test_config_rules():
    assert AVX2_CONFIG.isa == "avx2" and AVX2_CONFIG.mr * AVX2_CONFIG.nr // 8 == 12
    assert AVX2_CONFIG.label == "cpu6x16,k256,96x512,avx2" and CpuGemmConfig().label == "cpu14x32,k256,112x512"
    assert cpu_gemm.entry_names(AVX2_CONFIG) == ("falcon_cpu_pack_b_6x16_k256_96x512_p16_avx2",
                                                 "falcon_cpu_gemm_6x16_k256_96x512_p16_avx2")
    for bad in (dict(mr=7), dict(nr=8, mr=6), dict(isa="sse4"), dict(isa="AVX2")):
        with pytest.raises(ValueError):
            CpuGemmConfig(**{**dict(mr=6, nr=16, mc=96, isa="avx2"), **bad})
    # 14 x 32 is 56 ymm accumulators: an AVX-512 blocking is no AVX2 one
    with pytest.raises(ValueError, match="mr\\*nr/8 <= 12"):
        CpuGemmConfig(isa="avx2")


def test_blockings_follow_the_isa():
    for M, N, K in ((4096, 4096, 4096), (256, 256, 256), (1024, 4096, 4096)):
        for f in (cpu_gemm.choose_config, cpu_gemm.classical_config, cpu_gemm.choose_plan_config):
            assert f(M, N, K, isa="avx2").isa == "avx2" and f(M, N, K).isa == "avx512"
    assert cpu_gemm.choose_plan_config(2048, 2048, 2048, isa="avx2") == cpu_gemm.AVX2_PLAN_CONFIG
    assert cpu_gemm.choose_config(256, 256, 256, isa="avx2") == cpu_gemm.AVX2_SMALL_CONFIG
    assert CpuPlan(64, 64, 64, "strassen", isa="avx2").config.isa == "avx2"
    with pytest.raises(ValueError, match="isa='avx2' but the config is for avx512"):
        CpuPlan(64, 64, 64, "strassen", CpuGemmConfig(), isa="avx2")
    with pytest.raises(ValueError, match="no CPU kernel for ISA"):
        cpu_gemm.default_config("neon")


def test_source_and_object_hold_no_avx512():
    src = cpu_source.kernel_source(_EDGES)
    assert "_mm512" not in src and "__m512" not in src and "__mmask16" not in src
    assert "_mm256_fmadd_ps" in src and "_mm256_maskstore_ps" in src
    assert cpu_object.MARCH["avx2"] == "-march=x86-64-v3"
    if shutil.which("gcc") is None or shutil.which("objdump") is None:
        pytest.skip("needs gcc and objdump")
    text = subprocess.run(["objdump", "-d", str(cpu_source.compile_object(_EDGES))], capture_output=True,
                          text=True, check=True).stdout
    assert "ymm" in text and "zmm" not in text and "%k" not in text


def test_host_and_target_checks_name_the_isa(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("flags\t\t: fpu sse avx avx2 fma f16c bmi2\nflags\t\t: fpu sse avx avx2 fma f16c bmi2\n")
    assert cpu_object.host_has("avx2", str(info)) and not cpu_object.host_has("avx512", str(info))
    assert cpu_object.host_isa(str(info)) == "avx2"
    info.write_text("flags\t\t: fpu sse avx avx2 f16c bmi2\n")  # no FMA
    assert cpu_object.host_isa(str(info)) is None
    attr = '#hal.executable.target<"llvm-cpu", "x", {cpu_features = "+avx,+avx2,+f16c", target_triple = "x86_64"}>'
    assert cpu_object.missing_target_features(attr, "avx2") == ["+fma", "+bmi2"]
    with pytest.raises(RuntimeError, match=r"needs AVX2 and FMA \(x86-64-v3\); the IREE target lacks \+fma, \+bmi2"):
        cpu_embed.check_target((), attr, "avx2")
    # features in order, as LLVM reads them: a later -fma takes back +fma (break-it review: haswell with
    # --iree-llvmcpu-target-cpu-features=-avx2,-fma was given the AVX2 object)
    attr = '{cpu_features = "+avx,+avx2,+fma,+f16c,+bmi2,-fma,-avx512f"}'
    assert cpu_object.missing_target_features(attr, "avx2") == ["+fma"]
    assert cpu_object.missing_target_features('{cpu_features = "+avx512f,+avx512bw,+avx512dq,+avx512vl,-avx512f"}') \
        == ["+avx512f"]


@needs_avx2
@pytest.mark.parametrize("shape, config", [
    ((100, 70, 50), None), ((257, 129, 300), None), ((6, 16, 1), None), ((1, 1000, 513), None),
    ((77, 201, 95), _EDGES), ((13, 31, 257), _TINY), ((97, 47, 130), _TINY),
], ids=str)
def test_numerics_against_float64(shape, config):
    assert _gemm(*shape, config) < 2e-6


@needs_avx2
@pytest.mark.parametrize("trans_a, trans_b", [(True, False), (False, True), (True, True)], ids=["ta", "tb", "ta_tb"])
@pytest.mark.parametrize("shape, config", [((37, 53, 29), None), ((77, 201, 95), _EDGES), ((31, 1, 300), _TINY)],
                         ids=str)
def test_transposed_against_float64(trans_a, trans_b, shape, config):
    assert _gemm(*shape, config, trans_a, trans_b) < 2e-6


@needs_avx2
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, True)], ids=["plain", "ta_tb"])
def test_batch_against_float64(trans_a, trans_b):
    assert _gemm(77, 201, 95, _EDGES, trans_a, trans_b, batch=5) < 2e-6


@needs_avx2
@pytest.mark.parametrize("shape, config", [((30, 3000, 2100), _EDGES), ((100, 3000, 2100), None)], ids=str)
def test_b_inside_against_float64(shape, config):
    M, N, K = shape
    assert cpu_gemm.b_inside(M, N, K)
    assert "::@fgemm[" in cpu_embed.gemm_module(M, N, K, config or AVX2_CONFIG, target_attr=_TARGET, obj="/tmp/k.o",
                                                flags=())
    assert _gemm(M, N, K, config) < 2e-6


@needs_avx2
@pytest.mark.parametrize("scheme, M, N, K, config, trans", [
    ("strassen", 2 * 45, 2 * 37, 2 * 150, _TINY, False),     # edges, 3 K blocks, private tiles
    ("strassen", 2 * 37, 2 * 53, 2 * 29, None, True),        # odd blocks, transposed A and B
    ("strassen^2", 4 * 17, 4 * 33, 4 * 70, _TINY, False),    # 4 terms per operand and destination
])
def test_plan_against_float64(scheme, M, N, K, config, trans):
    plan = CpuPlan(M, N, K, scheme, config, trans_a=trans, trans_b=trans, isa="avx2")
    a, b = _inputs(plan.spec.a_shape, plan.spec.b_shape, [M, N, K])
    assert _check(plan_module(plan), a, b, trans, trans) < 6e-8 * K * 16


@needs_avx2
@pytest.mark.parametrize("what, old, new, trans", [
    # the edge mask one lane too wide: a column past N of the tile is stored (and packed B read past N)
    ("edge mask", "_mm256_set1_epi32((int)(n < 0 ? 0 : n > 8 ? 8 : n))", "_mm256_set1_epi32((int)(n < 0 ? 1 : n > 7 ? 8 : n + 1))",
     False),
    # the transpose reads the next column of the source
    ("transpose", "s = w[0] * src[0][i * ld + q];", "s = w[0] * src[0][i * ld + (q + 1) % 16];", True),
])
def test_mutants_of_the_avx2_code_are_caught(what, old, new, trans):
    src = cpu_source.kernel_source(_EDGES)
    bad = src.replace(old, new)
    assert bad != src, what
    obj = cpu_object.compile_source(bad, "mutant", isa="avx2")
    err = _gemm(77, 201, 95, _EDGES, trans, trans, obj=obj)
    assert not err < 1e-2, (what, err)
