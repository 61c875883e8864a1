"""falcon-kernels: which contractions are served, how the module looks, what the report says.

CI has no GPU: the kernels' numerics are checked under Triton's interpreter
(test/python/kernels); here the pass's choices and the modules it builds
(which iree-compile turns into a .vmfb for CUDA without a GPU)."""

from __future__ import annotations

import json

import pytest
from iree.compiler import ir

from falcon_mlir.ir.contraction import find_contractions
from falcon_mlir.passes.falcon_kernels import KernelsOptions, OptionError, run_falcon_kernels, \
    triton_available
from falcon_mlir.passes.falcon_kernels.serve import intensity, iree_cannot, serve, zero_init

needs_triton = pytest.mark.skipif(not triton_available(), reason="needs the cuda extra (Triton)")

MM = """func.func @mm(%a: tensor<{M}x{K}x{t}>, %b: tensor<{K}x{N}x{t}>) -> tensor<{M}x{N}x{acc}> {{
  %cst = arith.constant 0.0 : {acc}
  %e = tensor.empty() : tensor<{M}x{N}x{acc}>
  %f = linalg.fill ins(%cst : {acc}) outs(%e : tensor<{M}x{N}x{acc}>) -> tensor<{M}x{N}x{acc}>
  %0 = linalg.matmul ins(%a, %b : tensor<{M}x{K}x{t}>, tensor<{K}x{N}x{t}>) outs(%f : tensor<{M}x{N}x{acc}>) -> tensor<{M}x{N}x{acc}>
  return %0 : tensor<{M}x{N}x{acc}>
}}
"""

BMM_T = """func.func @bmm(%a: tensor<3x{K}x{M}xf16>, %b: tensor<3x{N}x{K}xf16>, %c: tensor<3x{M}x{N}xf32>) -> tensor<3x{M}x{N}xf32> {{
  %0 = linalg.generic {{indexing_maps = [affine_map<(b, m, n, k) -> (b, k, m)>, affine_map<(b, m, n, k) -> (b, n, k)>, affine_map<(b, m, n, k) -> (b, m, n)>], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}} ins(%a, %b : tensor<3x{K}x{M}xf16>, tensor<3x{N}x{K}xf16>) outs(%c : tensor<3x{M}x{N}xf32>) {{
  ^bb0(%x: f16, %y: f16, %z: f32):
    %xe = arith.extf %x : f16 to f32
    %ye = arith.extf %y : f16 to f32
    %p = arith.mulf %xe, %ye : f32
    %s = arith.addf %z, %p : f32
    linalg.yield %s : f32
  }} -> tensor<3x{M}x{N}xf32>
  return %0 : tensor<3x{M}x{N}xf32>
}}
"""


def _served(text: str):
    with ir.Context():
        m = ir.Module.parse(text)
        c = find_contractions(m.operation)[0]
        return serve(c)


def test_plain_matmul_is_served_with_zero_init():
    s, kind = _served(MM.format(M=512, N=384, K=256, t="bf16", acc="f32"))
    assert kind == "classical"
    spec = s.spec
    assert (spec.M, spec.N, spec.K, spec.batch) == (512, 384, 256, 1)
    assert (spec.a_dtype, spec.b_dtype, spec.out_dtype) == ("bf16", "bf16", "f32")
    assert not spec.trans_a and not spec.trans_b and not s.accumulate


def test_batched_generic_with_transposed_operands_is_read_in_place():
    s, kind = _served(BMM_T.format(M=256, N=192, K=320))
    spec = s.spec
    assert kind == "classical" and spec.batch == 3 and spec.trans_a and spec.trans_b
    assert (spec.M, spec.N, spec.K) == (256, 192, 320)
    assert s.accumulate  # C is a function argument, not a zero fill


@pytest.mark.parametrize("text, why", [
    (MM.format(M=64, N=64, K=64, t="f64", acc="f64"), "the kernels take f32, f16 or bf16"),
    (MM.format(M=64, N=64, K=63, t="bf16", acc="f32"), "multiple of"),  # A's row of 63 bf16: not 16 bytes
    # Were served: the op rounds f32 operands to f16 first (1e5 is inf there: IREE's result is inf
    # where the kernel's f32 product is finite), f16 ones to bf16 (3 mantissa bits each).
    (MM.format(M=64, N=64, K=64, t="f32", acc="f16"), "rounds its operands to f16 before the multiply"),
    (MM.format(M=64, N=64, K=64, t="f32", acc="bf16"), "rounds its operands to bf16"),
    (MM.format(M=64, N=64, K=64, t="f16", acc="bf16"), "rounds its operands to bf16"),
])
def test_unserved_contractions_say_why(text, why):
    s, reason = _served(text)
    assert s is None and why in reason


def test_zero_init_only_for_a_zero_fill():
    with ir.Context():
        m = ir.Module.parse(MM.format(M=8, N=8, K=8, t="f32", acc="f32").replace("0.0 : f32", "1.0 : f32"))
        assert not zero_init(find_contractions(m.operation)[0].op.operands[2])
        m = ir.Module.parse(MM.format(M=8, N=8, K=8, t="f32", acc="f32"))
        assert zero_init(find_contractions(m.operation)[0].op.operands[2])


def test_intensity_and_what_iree_cannot_compile():
    from falcon_mlir.kernels import GemmSpec

    # attention scores of Llama-3-8B at 4096 tokens: 62 FLOP/byte (memory-bound)
    assert intensity(GemmSpec(4096, 4096, 128, "f16", "f16", "f32", batch=32)) == pytest.approx(62.06, abs=0.01)
    # the q projection: 1365 FLOP/byte
    assert intensity(GemmSpec(4096, 4096, 4096, "bf16", "bf16", "bf16")) == pytest.approx(1365.3, abs=0.1)
    with ir.Context():
        bf = find_contractions(ir.Module.parse(MM.format(M=8, N=8, K=8, t="bf16", acc="bf16")).operation)[0]
        f16 = find_contractions(ir.Module.parse(MM.format(M=8, N=8, K=8, t="f16", acc="f16")).operation)[0]
        assert iree_cannot(bf) and not iree_cannot(f16)


def test_options_parse_and_reject():
    o = KernelsOptions.parse("arch=sm_90a f32-mode=tf32x3 min-flops=0 min-intensity=10")
    assert (o.arch, o.f32_mode, o.min_flops, o.min_intensity) == ("sm_90a", "tf32x3", 0, 10.0)
    assert KernelsOptions.parse("none").arch == "none"
    with pytest.raises(OptionError, match="arch"):
        KernelsOptions.parse("arch=sm_80")
    with pytest.raises(OptionError, match="f32-mode"):
        KernelsOptions.parse("f32-mode=fast")


def _run_pass(text: str):
    """falcon-kernels (every size served: min-flops=0 min-intensity=0) on ``text``: (report, output text)."""
    with ir.Context():
        m = ir.Module.parse(text)
        rep = run_falcon_kernels(m.operation, KernelsOptions.parse("min-flops=0 min-intensity=0"))
        return rep, str(m)


def test_arch_none_does_nothing():
    with ir.Context():
        m = ir.Module.parse(MM.format(M=512, N=384, K=256, t="bf16", acc="f32"))
        assert run_falcon_kernels(m.operation, KernelsOptions.parse("none")) == []
        assert "linalg.matmul" in str(m)


@needs_triton
def test_pass_replaces_served_ops_and_leaves_the_rest():
    text = MM.format(M=512, N=384, K=256, t="bf16", acc="f32") + \
        MM.format(M=64, N=64, K=64, t="f64", acc="f64").replace("@mm", "@mm64")
    rep, out = _run_pass(text)
    assert [e["kernel"] for e in rep] == ["classical", None]
    assert rep[0]["config"] and rep[0]["arch"] == "sm_90a" and rep[0]["programs"] >= 1
    assert "left to IREE" in rep[1]["reason"]
    assert out.count("flow.dispatch @falcon_gemm_bf16_512x384x256_nn_of32_") == 1
    assert out.count("linalg.matmul") == 1  # the f64 one
    with ir.Context():
        ir.Module.parse(out)  # the printed module parses back (the object names a path)


@needs_triton
def test_f32_contractions_get_the_fma_kernel_where_it_serves(monkeypatch):
    from falcon_mlir.kernels import fma_gemm

    if not fma_gemm.available():
        pytest.skip("needs NVRTC (the cuda extra)")
    # 256x384x136: whole 128 x 128 tiles, K a multiple of 8 -> the CUDA C FMA kernel;
    # 200x384x136: M not in whole tiles -> the Triton kernel with the table's configuration
    text = MM.format(M=256, N=384, K=136, t="f32", acc="f32") + \
        MM.format(M=200, N=384, K=136, t="f32", acc="f32").replace("@mm", "@mm2")
    rep, out = _run_pass(text)
    assert [e["kernel"] for e in rep] == ["classical", "classical"]
    assert rep[0]["config"] == "fma128x128x8,g8" and rep[0]["programs"] == 2 * 3
    assert rep[1]["config"] == "128x128x32,s3,w8,g8"  # the table's f32 entry (N = 384 stores by TMA)
    assert out.count("flow.dispatch @falcon_gemm_f32_") == 2 and "linalg.matmul" not in out
    monkeypatch.setenv("FALCON_FMA_KERNEL", "0")
    rep, _ = _run_pass(MM.format(M=256, N=384, K=136, t="f32", acc="f32"))
    assert not rep[0]["config"].startswith("fma")


@needs_triton
def test_a_broken_nvrtc_is_one_pass_error(monkeypatch, tmp_path):
    """$FALCON_NVRTC naming a file that is not NVRTC: one PassError saying so (it was an OSError out of
    ctypes, which falcon-opt printed as an internal error and falcon-compile as 'lcma rewrite failed')."""
    from falcon_mlir.passes import PassError

    bad = tmp_path / "libnvrtc.so"
    bad.write_text("not a library")
    monkeypatch.setenv("FALCON_NVRTC", str(bad))
    monkeypatch.setenv("FALCON_KERNEL_CACHE", str(tmp_path / "cache"))
    with ir.Context():
        m = ir.Module.parse(MM.format(M=256, N=384, K=136, t="f32", acc="f32"))
        with pytest.raises(PassError, match=r"^falcon-kernels: the f32 FMA kernel needs NVRTC \(\$FALCON_NVRTC="
                           + f"{bad} is not an NVRTC library: .*FALCON_FMA_KERNEL=0 for the Triton kernel$"):
            run_falcon_kernels(m.operation, KernelsOptions.parse("min-flops=0 min-intensity=0"))


@needs_triton
def test_falcon_compile_cuda_builds_a_vmfb_with_our_cubin_and_reports_it():
    import falcon_mlir

    text = MM.format(M=1024, N=1024, K=1024, t="f16", acc="f16")
    vmfb, rep = falcon_mlir.compile_str(text, target_backends=["cuda"], return_report=True,
                                        extra_args=["--iree-cuda-target=sm_80"])
    k = rep[0]["kernels"][0]
    assert k["kernel"] == "classical" and k["defaults"]["arch"].startswith("sm_90a")
    assert rep[0]["defaults"]["profile"].startswith("h200-falcon")
    assert b"\x7fELF" in vmfb  # the sm_90a cubin travels inside the module
    plain = falcon_mlir.compile_str(text, target_backends=["cuda"], kernels="none",
                                    extra_args=["--iree-cuda-target=sm_80"])
    assert b"falcon_gemm" not in plain and b"falcon_gemm" in vmfb


@needs_triton
@pytest.mark.parametrize("t, dispatches", [("f16", 4), ("bf16", 6)])
def test_kernel_form_plan_dispatches(t, dispatches):
    """f16: combine A, B, products, combine C; bf16 (scaled f16 operands, the default): the two absmax
    kernels first."""
    from falcon_mlir.passes.lcma_rewrite import LcmaOptions, run_lcma_rewrite

    text = MM.format(M=512, N=512, K=512, t=t, acc=t)
    with ir.Context():
        m = ir.Module.parse(text)
        rep = run_lcma_rewrite(m.operation, LcmaOptions.parse("scheme=strassen form=kernel"))
        assert rep[0]["handoff"] == "falcon-kernels" and rep[0]["products"] == 7
        assert rep[0]["operands"]["type"] == "f16" and rep[0]["operands"]["scaled"] == (t == "bf16")
        assert "falcon.plan" in str(m)
        krep = run_falcon_kernels(m.operation, KernelsOptions.parse("min-flops=0"))
        out = str(m)
    assert krep[0]["kernel"] == "plan" and krep[0]["plan"]["R"] == 7
    assert out.count("flow.dispatch") == dispatches and "falcon.plan" not in out
    assert "linalg.matmul" not in out
    assert (out.count("@falcon_absmax(") == 2) == (t == "bf16")
    assert krep[0]["plan"]["operands"] == ("f16 (scaled)" if t == "bf16" else "f16")


MM_TB = """func.func @mm(%a: tensor<{M}x{K}xbf16>, %b: tensor<{N}x{K}xbf16>) -> tensor<{M}x{N}xbf16> {{
  %cst = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<{M}x{N}xbf16>
  %f = linalg.fill ins(%cst : bf16) outs(%e : tensor<{M}x{N}xbf16>) -> tensor<{M}x{N}xbf16>
  %0 = linalg.generic {{indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (m, n)>], iterator_types = ["parallel", "parallel", "reduction"]}} ins(%a, %b : tensor<{M}x{K}xbf16>, tensor<{N}x{K}xbf16>) outs(%f : tensor<{M}x{N}xbf16>) {{
  ^bb0(%x: bf16, %y: bf16, %z: bf16):
    %p = arith.mulf %x, %y : bf16
    %s = arith.addf %z, %p : bf16
    linalg.yield %s : bf16
  }} -> tensor<{M}x{N}xbf16>
  return %0 : tensor<{M}x{N}xbf16>
}}
"""


@needs_triton
def test_kernel_form_plan_with_transposed_b():
    """x @ W^T (W stored N x K, as a torch linear layer keeps it): served as a plan whose combine B reads W
    as stored, not as the classical kernel."""
    from falcon_mlir.passes.lcma_rewrite import LcmaOptions, run_lcma_rewrite

    with ir.Context():
        m = ir.Module.parse(MM_TB.format(M=512, N=384, K=256))
        rep = run_lcma_rewrite(m.operation, LcmaOptions.parse("scheme=strassen form=kernel operands=input"))
        assert rep[0]["handoff"] == "falcon-kernels"
        krep = run_falcon_kernels(m.operation, KernelsOptions.parse("min-flops=0"))
        out = str(m)
    assert krep[0]["kernel"] == "plan", krep[0]
    assert "(tensor<384x256xbf16>) -> (tensor<7x192x128xbf16>" in out  # combine B reads W as stored
