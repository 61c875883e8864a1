"""falcon's own CPU GEMM (generated AVX-512 C, gcc, linked into an llvm-cpu IREE module).

The tests that run the kernel need gcc and an AVX-512F CPU (skipped otherwise);
the others check the configuration, the object and the module text.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from falcon_mlir.kernels import cpu_embed, cpu_gemm
from falcon_mlir.kernels.cpu_gemm import CpuGemmConfig
from falcon_mlir.runner import BEST_CPU_FLAGS, Module

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
needs_avx512 = pytest.mark.skipif(not cpu_gemm.host_has_avx512() or shutil.which("gcc") is None,
                                  reason="needs gcc and an AVX-512F CPU")


def _inputs(M, N, K, seed=0):
    rng = np.random.default_rng([seed, M, N, K])
    return (rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32))


def _rel_err(c, a, b):
    ref = a.astype(np.float64) @ b.astype(np.float64)
    return float(np.abs(c - ref).max() / np.abs(ref).max())


def _run(text, M, N, K, fn="main"):
    a, b = _inputs(M, N, K)
    mod = Module(cpu_embed.compile_module(text))
    return mod(fn, a, b), a, b, mod


@pytest.mark.parametrize("bad", [dict(nr=24), dict(mr=15), dict(mc=100), dict(nc=500), dict(kc=0),
                                 dict(mr=True)])
def test_config_rejects(bad):
    with pytest.raises(ValueError, match="CpuGemmConfig"):
        CpuGemmConfig(**bad)


def test_grid_and_buffers():
    c = CpuGemmConfig(pack_rows=64)  # 14x32, kc 256, 112x512
    assert cpu_gemm.grid(257, 129, 300, c) == (5, 3, 1)
    assert cpu_gemm.packed_b_floats(129, 300, c) == 5 * 300 * 32
    assert cpu_gemm.scratch_floats(257, 1025, 300, c) == 3 * 3 * 112 * (256 + 16)


def test_choose_config_by_block_count():
    assert cpu_gemm.choose_config(1024, 1024, 1024) == cpu_gemm.SMALL_CONFIG  # 10 x 2 blocks of 112 x 512
    assert cpu_gemm.choose_config(2048, 2048, 64) == CpuGemmConfig()  # 19 x 4
    assert cpu_gemm.choose_config(100, 70, 50).label == "cpu14x32,k256,28x256"


@needs_gcc
def test_object_has_no_undefined_symbols():
    obj = cpu_gemm.compile_object()
    assert obj.is_file() and obj.read_bytes()[:4] == b"\x7fELF"
    assert cpu_gemm.undefined_symbols(obj) == []
    assert cpu_gemm.compile_object() == obj  # cached by source hash


def test_missing_compiler_is_one_line(monkeypatch):
    monkeypatch.setenv("FALCON_CC", "no-such-cc-falcon")
    with pytest.raises(RuntimeError, match="^no C compiler 'no-such-cc-falcon'.*FALCON_CC$"):
        cpu_gemm.compile_object()


@needs_gcc
def test_compiler_error_is_reported():
    with pytest.raises(RuntimeError, match="failed on falcon's CPU kernel"):
        cpu_gemm.compile_source("int f( {", "broken")


@needs_gcc
def test_library_call_is_refused():
    with pytest.raises(RuntimeError, match="cannot link: .*memcpy"):
        cpu_gemm.compile_source("void *memcpy(void *, const void *, unsigned long);\n"
                                "void f(float *a, float *b) { memcpy(a, b, 64); }", "libc")


def test_module_text_keys_the_object_by_the_device_target(monkeypatch, tmp_path):
    obj = tmp_path / "k.o"
    text = cpu_embed.gemm_module(100, 70, 50, target_attr="#fake", obj=obj, flags=())
    assert f'#fake = [\n      #hal.executable.object<{{path = "{obj}"}}>' in text
    assert "flow.dispatch @falcon_cpu_sgemm::@pack_b[%r_gp](%b, %r_M, %r_N, %r_K)" in text
    assert "-> (tensor<100x70xf32>, tensor<30464xf32>)" in text  # C; 4 workgroups of 28 x (256 + 16) A slots
    assert "%slot = arith.constant 7616" in text and "hal.interface.workgroup.id[1]" in text


@needs_avx512
@pytest.mark.parametrize("shape", [(100, 70, 50), (257, 129, 300), (14, 32, 1), (1, 1000, 513),
                                   (1024, 1024, 1024)])
def test_numerics_against_float64(shape):
    M, N, K = shape
    c, a, b, _ = _run(cpu_embed.gemm_module(M, N, K), M, N, K)
    assert c.shape == (M, N)
    assert _rel_err(c, a, b) < 2e-6


@needs_avx512
def test_small_blocks_cover_every_edge():
    """Blocks smaller than the shape: several workgroups, K blocks, column and row edges."""
    cfg = CpuGemmConfig(mr=6, nr=48, kc=40, mc=18, nc=96, pack_rows=7)
    M, N, K = 77, 201, 95
    c, a, b, _ = _run(cpu_embed.gemm_module(M, N, K, cfg), M, N, K)
    assert _rel_err(c, a, b) < 2e-6


BEST_FLAGS = cpu_embed.DEFAULT_CPU_FLAGS[:2] + BEST_CPU_FLAGS


@needs_avx512
@pytest.mark.parametrize("flags", [cpu_embed.DEFAULT_CPU_FLAGS, BEST_FLAGS], ids=["host", "data-tiling"])
def test_next_to_iree_own_dispatch(flags):
    """One module holds IREE's own GEMM (@reference) and ours (@main): the object key is the device's
    exact target, which differs between IREE's default and best (data tiling, ukernels) flags."""
    M, N, K = 130, 96, 64
    a, b = _inputs(M, N, K)
    mod = Module(cpu_embed.compile_module(cpu_embed.gemm_module(M, N, K, reference=True, flags=flags), flags))
    c, r = mod("main", a, b), mod("reference", a, b)
    assert _rel_err(c, a, b) < 2e-6 and _rel_err(r, a, b) < 2e-6


@needs_avx512
def test_wrong_index_is_caught():
    """The numerics test fails on a kernel that packs A from the wrong column (k + 1)."""
    src = cpu_gemm.kernel_source()
    bad = src.replace("dst[k] = src[k];", "dst[k] = src[k + (k + 1 < kc)];")
    assert bad != src
    obj = cpu_gemm.compile_source(bad, "mutant")
    M, N, K = 100, 70, 50
    c, a, b, _ = _run(cpu_embed.gemm_module(M, N, K, obj=obj), M, N, K)
    assert _rel_err(c, a, b) > 1e-2
