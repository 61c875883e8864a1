"""falcon-kernels with arch=x86-avx512: which contractions falcon's CPU kernel serves, the module the
pass builds, its report, and the numerics of falcon-compile'd modules against float64.

The tests that build the kernel's object need an x86-64 machine with gcc (or ``$FALCON_CC``); those
that run it need AVX-512 F/BW/DQ/VL too (skipped otherwise)."""

from __future__ import annotations

import platform

import numpy as np
import pytest
from iree.compiler import ir

import falcon_mlir
from falcon_mlir.ir.contraction import find_contractions
from falcon_mlir.ir.matmul_text import matmul_mlir
from falcon_mlir.kernels import cpu_gemm, cpu_object
from falcon_mlir.options import OptionError
from falcon_mlir.passes import PassError
from falcon_mlir.passes.falcon_kernels.options import CPU_ISAS
from falcon_mlir.passes.falcon_kernels import KernelsOptions, run_falcon_kernels
from falcon_mlir.passes.falcon_kernels.options import CPU_MIN_FLOPS, MIN_FLOPS, MIN_INTENSITY
from falcon_mlir.passes.falcon_kernels.serve_cpu import serve_cpu
from falcon_mlir.pipeline import assemble
from falcon_mlir.runner import Module


def _have_cc() -> bool:
    try:
        cpu_object.compiler()
    except RuntimeError:
        return False
    return platform.machine().lower() in ("x86_64", "amd64")


needs_cc = pytest.mark.skipif(not _have_cc(), reason="needs an x86-64 machine with gcc")
needs_avx512 = pytest.mark.skipif(not (_have_cc() and cpu_object.host_has_avx512()),
                                  reason="needs gcc and an AVX-512 F/BW/DQ/VL CPU")
#: The ISA of the kernel falcon-compile runs on this machine (AVX-512, else the AVX2 build), and its arch.
HOST_ISA = cpu_object.host_isa() if _have_cc() else None
HOST_ARCH = next((arch for arch, isa in CPU_ISAS.items() if isa == HOST_ISA), None)
needs_host_kernel = pytest.mark.skipif(HOST_ISA is None, reason="needs gcc and a CPU with AVX-512, or AVX2 and FMA")

#: A named AVX-512 CPU: the pass's object key without depending on this machine's CPU.
ZNVER4 = ("--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
          "--iree-llvmcpu-target-cpu=znver4")

MM = """func.func @{fn}(%a: tensor<{M}x{K}x{t}>, %b: tensor<{K}x{N}x{t}>) -> tensor<{M}x{N}x{t}> {{
  %cst = arith.constant 0.0 : {t}
  %e = tensor.empty() : tensor<{M}x{N}x{t}>
  %f = linalg.fill ins(%cst : {t}) outs(%e : tensor<{M}x{N}x{t}>) -> tensor<{M}x{N}x{t}>
  %0 = linalg.matmul ins(%a, %b : tensor<{M}x{K}x{t}>, tensor<{K}x{N}x{t}>) outs(%f : tensor<{M}x{N}x{t}>) -> tensor<{M}x{N}x{t}>
  return %0 : tensor<{M}x{N}x{t}>
}}
"""

MM_ACC = """func.func @{fn}(%a: tensor<{M}x{K}xf32>, %b: tensor<{K}x{N}xf32>, %c: tensor<{M}x{N}xf32>) -> tensor<{M}x{N}xf32> {{
  %0 = linalg.matmul ins(%a, %b : tensor<{M}x{K}xf32>, tensor<{K}x{N}xf32>) outs(%c : tensor<{M}x{N}xf32>) -> tensor<{M}x{N}xf32>
  return %0 : tensor<{M}x{N}xf32>
}}
"""

MM_TB = """func.func @{fn}(%a: tensor<{M}x{K}xf32>, %b: tensor<{N}x{K}xf32>, %c: tensor<{M}x{N}xf32>) -> tensor<{M}x{N}xf32> {{
  %0 = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>] ins(%a, %b : tensor<{M}x{K}xf32>, tensor<{N}x{K}xf32>) outs(%c : tensor<{M}x{N}xf32>) -> tensor<{M}x{N}xf32>
  return %0 : tensor<{M}x{N}xf32>
}}
"""

MM_TA = """func.func @{fn}(%a: tensor<{K}x{M}xf32>, %b: tensor<{K}x{N}xf32>, %c: tensor<{M}x{N}xf32>) -> tensor<{M}x{N}xf32> {{
  %0 = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d2, d0)>, affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>] ins(%a, %b : tensor<{K}x{M}xf32>, tensor<{K}x{N}xf32>) outs(%c : tensor<{M}x{N}xf32>) -> tensor<{M}x{N}xf32>
  return %0 : tensor<{M}x{N}xf32>
}}
"""

BMM = """func.func @{fn}(%a: tensor<{B}x{M}x{K}xf32>, %b: tensor<{B}x{K}x{N}xf32>, %c: tensor<{B}x{M}x{N}xf32>) -> tensor<{B}x{M}x{N}xf32> {{
  %0 = linalg.batch_matmul ins(%a, %b : tensor<{B}x{M}x{K}xf32>, tensor<{B}x{K}x{N}xf32>) outs(%c : tensor<{B}x{M}x{N}xf32>) -> tensor<{B}x{M}x{N}xf32>
  return %0 : tensor<{B}x{M}x{N}xf32>
}}
"""

# A 3-D x 2-D projection (x @ W over batch x tokens): M is two adjacent loop dimensions.
PROJ = """func.func @{fn}(%a: tensor<{B}x{M}x{K}xf32>, %b: tensor<{K}x{N}xf32>, %c: tensor<{B}x{M}x{N}xf32>) -> tensor<{B}x{M}x{N}xf32> {{
  %0 = linalg.generic {{indexing_maps = [affine_map<(b, m, n, k) -> (b, m, k)>, affine_map<(b, m, n, k) -> (k, n)>, affine_map<(b, m, n, k) -> (b, m, n)>], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}} ins(%a, %b : tensor<{B}x{M}x{K}xf32>, tensor<{K}x{N}xf32>) outs(%c : tensor<{B}x{M}x{N}xf32>) {{
  ^bb0(%x: f32, %y: f32, %z: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %z, %p : f32
    linalg.yield %s : f32
  }} -> tensor<{B}x{M}x{N}xf32>
  return %0 : tensor<{B}x{M}x{N}xf32>
}}
"""

def _generic(fn, maps, a_shape, b_shape, c_shape, iters=3):
    """A ``linalg.generic`` f32 contraction (what StableHLO's import makes of dot_general) with the loop
    dims ``(b.., m, n, k)`` and the operands' ``maps`` (their dims' names, e.g. ``"b, n, k"``); C an argument."""
    dims = ", ".join(["b", "b2"][:iters - 3] + ["m", "n", "k"])
    t = lambda s: f"tensor<{'x'.join(map(str, s))}xf32>"  # noqa: E731
    amap = lambda x: f"affine_map<({dims}) -> ({x})>"  # noqa: E731
    its = ", ".join(['"parallel"'] * (iters - 1) + ['"reduction"'])
    return f"""func.func @{fn}(%a: {t(a_shape)}, %b: {t(b_shape)}, %c: {t(c_shape)}) -> {t(c_shape)} {{
  %0 = linalg.generic {{indexing_maps = [{", ".join(amap(m) for m in maps)}], iterator_types = [{its}]}} ins(%a, %b : {t(a_shape)}, {t(b_shape)}) outs(%c : {t(c_shape)}) {{
  ^bb0(%x: f32, %y: f32, %z: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %z, %p : f32
    linalg.yield %s : f32
  }} -> {t(c_shape)}
  return %0 : {t(c_shape)}
}}
"""


#: C stored N x M: the kernel writes C row-major M x N.
CT = _generic("ct", ["m, k", "k, n", "n, m"], (64, 32), (32, 48), (48, 64))
#: The batch dimension in the middle of A.
BMID = _generic("bmid", ["m, b, k", "b, k, n", "b, m, n"], (64, 3, 32), (3, 32, 48), (3, 64, 48), iters=4)
#: Attention's Q K^T: batch_matmul with B stored N x K, as StableHLO's import writes it.
QKT = _generic("qkt", ["b, m, k", "b, n, k", "b, m, n"], (3, 37, 29), (3, 53, 29), (3, 37, 53), iters=4)
#: Two leading batch dimensions (heads x batch), A stored K x M.
B2TA = _generic("b2ta", ["b, b2, k, m", "b, b2, k, n", "b, b2, m, n"], (2, 3, 29, 37), (2, 3, 29, 53), (2, 3, 37, 53),
                iters=5)

DYN = """func.func @dyn(%a: tensor<?x64xf32>, %b: tensor<64x32xf32>, %c: tensor<?x32xf32>) -> tensor<?x32xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<?x64xf32>, tensor<64x32xf32>) outs(%c : tensor<?x32xf32>) -> tensor<?x32xf32>
  return %0 : tensor<?x32xf32>
}
"""


def _served(text: str):
    with ir.Context():
        m = ir.Module.parse(text)  # alive while serve_cpu reads the op
        return serve_cpu(find_contractions(m.operation)[0])


def test_serves_row_major_f32_with_unit_batch_and_folded_m():
    s, kind = _served(MM.format(fn="mm", M=67, N=45, K=83, t="f32"))
    assert kind == "classical" and (s.M, s.N, s.K, s.accumulate) == (67, 45, 83, False)
    assert s.config == cpu_gemm.choose_config(67, 45, 83) and s.flops == 2 * 67 * 45 * 83
    s, _ = _served(BMM.format(fn="bmm", B=1, M=40, N=24, K=56))
    assert (s.M, s.N, s.K, s.accumulate) == (40, 24, 56, True)  # C is an argument: accumulated
    s, _ = _served(PROJ.format(fn="proj", B=3, M=20, N=24, K=56))
    assert (s.M, s.N, s.K) == (60, 24, 56)  # batch x tokens rows of one row-major A


@pytest.mark.parametrize("text, M, N, K, layout", [
    (MM_TB.format(fn="tb", M=64, N=48, K=32), 64, 48, 32, (False, True, 1)),
    (MM_TA.format(fn="ta", M=64, N=48, K=32), 64, 48, 32, (True, False, 1)),
    (BMM.format(fn="bmm", B=3, M=64, N=48, K=32), 64, 48, 32, (False, False, 3)),
    (QKT, 37, 53, 29, (False, True, 3)),
    (B2TA, 37, 53, 29, (True, False, 6)),          # two batch dimensions fold into one leading batch
], ids=["tb", "ta", "bmm", "qkt", "b2ta"])
def test_serves_transposed_and_batched(text, M, N, K, layout):
    s, kind = _served(text)
    assert kind == "classical" and (s.M, s.N, s.K) == (M, N, K)
    assert (s.trans_a, s.trans_b, s.batch) == layout
    assert s.flops == 2 * layout[2] * M * N * K and s.config == cpu_gemm.choose_config(M, N, K, layout[2])


@pytest.mark.parametrize("text, why", [
    (CT, "C is transposed (stored N x M): falcon's CPU kernel writes C as M x N, row-major"),
    (BMID, "batch dimensions that are not the leading dimensions of A, B and C in one order: falcon's CPU kernel "
           "reads a leading batch"),
    (MM.format(fn="mm", M=64, N=48, K=32, t="f64"), "f64 x f64 -> f64: falcon's CPU kernel takes f32 x f32 -> f32"),
    (MM.format(fn="mm", M=64, N=48, K=32, t="bf16"), "bf16 x bf16 -> bf16: falcon's CPU kernel takes f32"),
    (DYN, "dynamic M: falcon's CPU kernel is built for static sizes"),
])
def test_what_is_left_to_iree_says_why(text, why):
    s, reason = _served(text)
    assert s is None and reason.startswith(why)


def test_options_arch_cpu_flags_and_per_arch_thresholds():
    o = KernelsOptions.parse("x86-avx512 cpu-flags=--iree-llvmcpu-target-cpu=znver4,"
                             "--iree-llvmcpu-target-cpu-features=+avx512f,+avx512bw")
    assert o.arch == "x86-avx512" and o.on_cpu
    assert o.cpu_flags == ("--iree-llvmcpu-target-cpu=znver4", "--iree-llvmcpu-target-cpu-features=+avx512f,+avx512bw")
    from falcon_mlir.options import to_text

    assert KernelsOptions.parse(to_text(o)) == o  # the text form reads back
    assert (o.flops_threshold(), o.intensity_threshold()) == (CPU_MIN_FLOPS, 0.0)
    cuda = KernelsOptions.parse("sm_90a")
    assert (cuda.flops_threshold(), cuda.intensity_threshold()) == (MIN_FLOPS, MIN_INTENSITY)
    assert KernelsOptions.parse("x86-avx512 min-flops=5 min-intensity=2").flops_threshold() == 5
    with pytest.raises(OptionError, match="cpu-flags: 'znver4' is not an iree-compile flag"):
        KernelsOptions.parse("cpu-flags=znver4")


def _run_pass(text: str, options: str = "x86-avx512 min-flops=0"):
    opts = KernelsOptions.parse(options + " cpu-flags=" + ",".join(ZNVER4))
    with ir.Context():
        m = ir.Module.parse(text)
        rep = run_falcon_kernels(m.operation, opts)
        out = str(m)
        ir.Module.parse(out)  # the printed module parses back
    return rep, out


@needs_cc
def test_report_and_explain_say_b_inside():
    """Where B is packed inside the GEMM (cpu_gemm.fuse_b_inside: one dispatch, @fgemm) the report's
    ``dispatches`` is 1 and the explanation says so; it said "pack B and GEMM dispatches" for those too."""
    from falcon_mlir.decision.explain import explain

    text = MM.format(fn="inside", M=113, N=2049, K=2929, t="f32") + MM.format(fn="two", M=67, N=45, K=83, t="f32")
    rep, out = _run_pass(text)
    assert [e["dispatches"] for e in rep] == [1, 2]
    assert out.count("_fgemm[") == 1 and out.count("_pack_b[") == 1
    lines = explain(rep)
    assert "kernels: falcon's CPU GEMM cpu14x32,k256,112x512 (x86-avx512, one dispatch, B packed inside the GEMM)" \
        in lines
    assert "kernels: falcon's CPU GEMM cpu14x32,k256,28x256 (x86-avx512, pack B and GEMM dispatches)" in lines


@needs_cc
def test_pass_report_and_one_executable_per_blocking():
    """Two blockings (a small shape and one of >= 40 blocks of 112 x 512) in one module: two
    executables with their own export names (IREE links them into one); a transposed C left to IREE."""
    text = MM.format(fn="small", M=67, N=45, K=83, t="f32") + MM.format(fn="big", M=1200, N=2100, K=64, t="f32") \
        + MM.format(fn="small2", M=67, N=45, K=83, t="f32") + CT
    rep, out = _run_pass(text)
    assert [e["kernel"] for e in rep] == ["classical", "classical", "classical", None]
    assert [e.get("config") for e in rep] == ["cpu14x32,k256,28x256", "cpu14x32,k256,112x512",
                                              "cpu14x32,k256,28x256", None]
    assert rep[0]["arch"] == "x86-avx512" and rep[0]["reason"] == "falcon's CPU GEMM kernel"
    assert rep[0]["accumulate"] is False
    assert rep[3]["reason"].startswith("left to IREE: C is transposed")
    from falcon_mlir.decision.explain import explain

    assert "kernels: falcon's CPU GEMM cpu14x32,k256,112x512 (x86-avx512, pack B and GEMM dispatches)" \
        in explain(rep)
    assert out.count("stream.executable private @falcon_cpu_sgemm_") == 2
    wrappers = [ln for ln in out.splitlines() if ln.strip().startswith("func.func private @falcon_cpu_sgemm_")]
    assert len(wrappers) == 2 and out.count("_67x45x83_call(%arg0, %arg1)") == 2  # one wrapper, two calls
    assert out.count("flow.dispatch") == 4 and out.count("linalg.matmul") == 0 and out.count("linalg.generic") == 1
    for exe in ("falcon_cpu_sgemm_14x32_k256_28x256_p16_", "falcon_cpu_sgemm_14x32_k256_112x512_p16_"):
        name = out.split(f"stream.executable private @{exe}")[1].split()[0]
        assert f"stream.executable.export public @{exe}{name}_pack_b workgroups" in out
        assert 'objects<{#executable_target_embedded_elf_x86_64 = [' in out and 'target_triple = "x86_64-unknown-unknown-eabi-elf"}>' in out
    key = [ln for ln in out.splitlines() if ln.startswith("#executable_target_embedded_elf_x86_64 = ")]
    assert len(key) == 1 and '{cpu_features = "' in key[0] and "+avx512f," in key[0]  # the object's CPU, not any x86-64


@needs_cc
def test_default_min_flops_and_intensity():
    rep, out = _run_pass(MM.format(fn="mm", M=128, N=128, K=128, t="f32") +
                         MM.format(fn="mm2", M=256, N=256, K=256, t="f32"), "x86-avx512")
    assert rep[0]["reason"] == "left to IREE: 4.19e+06 FLOP < min-flops 3.36e+07"
    assert rep[1]["kernel"] == "classical"  # 2 x 256^3: the threshold itself is served
    rep, _ = _run_pass(MM.format(fn="mm", M=16, N=512, K=512, t="f32"), "x86-avx512 min-flops=0 min-intensity=20")
    assert rep[0]["reason"] == "left to IREE: memory-bound (8 FLOP/byte < min-intensity 20)"


@needs_cc
def test_target_without_avx512_is_one_pass_error():
    opts = KernelsOptions.parse("x86-avx512 min-flops=0 cpu-flags=--iree-hal-target-device=local,"
                                "--iree-hal-local-target-device-backends=llvm-cpu,--iree-llvmcpu-target-cpu=haswell")
    with ir.Context():
        m = ir.Module.parse(MM.format(fn="mm", M=67, N=45, K=83, t="f32"))
        with pytest.raises(PassError, match=r"^falcon-kernels: arch=x86-avx512 needs AVX-512 F/BW/DQ/VL .* "
                                            r"lacks \+avx512f, \+avx512bw, \+avx512dq, \+avx512vl$"):
            run_falcon_kernels(m.operation, opts)


def test_no_compiler_leaves_every_contraction_to_iree(monkeypatch):
    monkeypatch.setenv("FALCON_CC", "no-such-cc-falcon")
    rep, out = _run_pass(MM.format(fn="mm", M=67, N=45, K=83, t="f32"))
    assert rep[0]["kernel"] is None and "linalg.matmul" in out
    assert rep[0]["reason"] == ("left to IREE: no C compiler 'no-such-cc-falcon' for falcon's CPU kernel: "
                                "install gcc or set FALCON_CC")


@needs_cc
def test_explain_lines_of_cpu_plans():
    """--lcma-explain on the CPU kernel's plan entries. Were: a plan read "plan strassen (R = 7, operands
    None, products in None, GEMM None) as 4 x86-avx512 dispatches" (the CUDA line: 14 dispatches here),
    and a plan run classically lost its reason (the line was the plain kernel's)."""
    from falcon_mlir.decision.explain import explain

    plan = '{falcon.plan = {schemes = ["strassen"], form = "kernel"}} ins'
    text = MM_ACC.format(fn="acc", M=64, N=128, K=96).replace("linalg.matmul ins", "linalg.matmul " + plan) \
        + MM.format(fn="odd", M=66, N=128, K=96, t="f32").replace(
            "linalg.matmul ins", "linalg.matmul " + plan.replace('"strassen"', '"3x3x3:23"'))
    rep, _ = _run_pass(text)
    assert [e["kernel"] for e in rep] == ["plan", "classical"]
    lines = explain(rep)
    assert ("kernels: plan strassen (R = 7) on falcon's CPU kernel cpu14x32,k256,28x256 as 14 x86-avx512 "
            "dispatches (per product: pack B with combine B, GEMM with combine A and C), C added") in lines
    assert ("kernels: falcon's CPU GEMM cpu14x32,k256,28x256 (x86-avx512, pack B and GEMM dispatches); "
            "kernel-form plan 3x3x3:23 does not run on falcon's CPU kernel (CpuPlan: 66x128x96 (MxNxK) is "
            "not a multiple of 3x3x3:23's format <3,3,3>); classical kernel") in lines
    assert "None" not in lines


# -- falcon-compile / the API -------------------------------------------------------------------------
def _inputs(*shapes, seed=0):
    rng = np.random.default_rng([seed, *[d for s in shapes for d in s]])
    return [rng.standard_normal(s, dtype=np.float32) for s in shapes]


def _check(out, ref, K):
    """Max-norm relative error within a classical f32 bound that grows with K."""
    err = float(np.abs(out - ref).max() / np.abs(ref).max())
    assert err < 2 * K * 2.0 ** -24, err


@needs_host_kernel
@pytest.mark.parametrize("M, N, K", [(67, 45, 83), (130, 260, 70)])
def test_falcon_compile_numerics_and_report(M, N, K):
    """On this machine's kernel: the AVX-512 one, or the AVX2 build where the CPU has no AVX-512."""
    text = MM.format(fn="mm", M=M, N=N, K=K, t="f32") + MM_ACC.format(fn="acc", M=M, N=N, K=K)
    vmfb, rep = falcon_mlir.compile_str(text, kernels="min-flops=0", return_report=True)
    ks = [e["kernels"][0] for e in rep]
    assert [k["kernel"] for k in ks] == ["classical", "classical"]
    assert [k["accumulate"] for k in ks] == [False, True]
    assert ks[0]["config"] == cpu_gemm.choose_config(M, N, K, isa=HOST_ISA).label
    assert ks[0]["defaults"]["arch"].startswith(f"{HOST_ARCH} (llvm-cpu target CPU with ")
    profile = "x86-falcon" if HOST_ISA == "avx512" else "x86-falcon-avx2"
    assert rep[0]["defaults"]["profile"].startswith(f"{profile} (falcon-kernels on ({HOST_ARCH})")
    a, b, c = _inputs((M, K), (K, N), (M, N))
    mod = Module(vmfb)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    _check(mod("mm", a, b), ref, K)
    _check(mod("acc", a, b, c), ref + c, K)


@needs_host_kernel
def test_kernels_none_leaves_iree_code():
    text = MM.format(fn="mm", M=67, N=45, K=83, t="f32")
    with_kernel = falcon_mlir.compile_str(text, kernels="min-flops=0")
    plain, rep = falcon_mlir.compile_str(text, kernels="none", return_report=True)
    assert b"falcon_cpu_sgemm" in with_kernel and b"falcon_cpu_sgemm" not in plain
    assert all("kernels" not in e for e in rep)


def test_target_defaults_for_cpus(monkeypatch):
    """An x86 CPU without AVX2 states why the kernel is off; one with AVX2 and FMA but not AVX-512
    (haswell) gets the kernel's AVX2 build and its profile; no C compiler likewise off; the AVX-512
    kernel sets lcma-rewrite's profile to x86-falcon; a form=kernel plan needs the kernels to run."""
    nehalem = list(ZNVER4[:2]) + ["--iree-llvmcpu-target-cpu=nehalem"]
    haswell = list(ZNVER4[:2]) + ["--iree-llvmcpu-target-cpu=haswell"]
    assert assemble.kernels_options("auto", nehalem) is None
    text = MM.format(fn="mm", M=64, N=48, K=32, t="f32")
    _, rep = falcon_mlir.compile_str(text, extra_args=nehalem, target_backends=(), return_report=True)
    k = rep[0]["kernels"][0]
    assert k["kernel"] is None and k["reason"] == ("left to IREE: llvm-cpu target, an x86-64 CPU without "
                                                  "AVX2 and FMA: falcon's CPU kernel needs them (or AVX-512)")
    assert k["defaults"]["arch"].startswith("none (llvm-cpu target, an x86-64 CPU without AVX2 and FMA")
    if _have_cc():
        assert assemble.kernels_options("auto", haswell).arch == "x86-avx2"
        stages = assemble.rewrite_stages("auto", "auto", haswell)
        assert stages[-1].text.startswith("falcon-kernels{arch=x86-avx2 ")
        assert stages[0].options.profile == "x86-falcon-avx2"
        assert stages[0].report_extra["defaults"]["profile"].startswith("x86-falcon-avx2 (falcon-kernels on (x86-avx2)")
        # named CPUs, so on any host: haswell's AVX2 build runs a forced kernel-form plan, nehalem has none
        assert assemble.rewrite_stages("scheme=strassen form=kernel", "auto", haswell)[-1].name == "falcon-kernels"
        with pytest.raises(OptionError, match="form=kernel needs the falcon-kernels pass, which does not run "
                                              "here"):
            assemble.rewrite_stages("scheme=strassen form=kernel", "auto", nehalem)
    if _have_cc() and cpu_object.host_has_avx512():
        host = assemble.with_default_target([])
        stages = assemble.rewrite_stages("auto", "auto", host)
        assert stages[-1].text.startswith("falcon-kernels{arch=x86-avx512 cpu-flags=--iree-hal-target-device=local")
        assert stages[0].report_extra["defaults"]["profile"].startswith("x86-falcon")
        forced = assemble.rewrite_stages("scheme=strassen form=kernel", "auto", host)
        assert forced[-1].name == "falcon-kernels"  # the CPU kernel runs kernel-form plans
        monkeypatch.setenv("FALCON_CC", "no-such-cc-falcon")
        assert assemble.kernels_options("auto", host) is None
        assert assemble.cpu_kernel_blocker(tuple(host)) == "compiler"


@pytest.mark.skipif(not _have_cc(), reason="needs a C compiler (the AVX2 kernel's default)")
def test_avx2_kernel_defaults_from_the_break_it_review(monkeypatch):
    """Were (break-it review of the AVX2 build): on haswell (AVX2, bf16 emulated) bf16 2048^3 stayed
    classical, 1091 ms, where Strassen in the per-product form ran 424 ms (x86-falcon-avx2 allowed the
    f32-only kernel form alone); $FALCON_PROFILE lost to the target CPU's x86-avx2; without a C compiler
    the kernels were off with no reason given."""
    monkeypatch.delenv("FALCON_PROFILE", raising=False)
    haswell = list(ZNVER4[:2]) + ["--iree-llvmcpu-target-cpu=haswell", "--compile-to=global-optimization"]
    text = matmul_mlir(2048, 2048, 2048, "bf16", "f32")
    _, rep = falcon_mlir.compile_str(text, extra_args=haswell, target_backends=(), return_report=True)
    assert rep[0]["predicted_time"]["profile"] == "x86-falcon-avx2"
    assert rep[0]["plan"]["schemes"] == ["strassen"] and rep[0]["plan"]["form"] == "per-product", rep[0]["plan"]
    monkeypatch.setenv("FALCON_PROFILE", "x86-dev")
    st = assemble.rewrite_stages("auto", None, haswell[:3])[0]
    assert st.name == "lcma-rewrite" and st.options.profile in (None, "auto", "host")  # left to $FALCON_PROFILE
    assert "profile" not in st.report_extra.get("defaults", {})
    monkeypatch.delenv("FALCON_PROFILE")
    monkeypatch.setenv("FALCON_CC", "no-such-cc-falcon")
    _, applied = assemble._kernels("auto", haswell[:3])
    assert applied["arch"].startswith("none (llvm-cpu target, but no C compiler for falcon's CPU kernel")


@needs_host_kernel
@pytest.mark.parametrize("lcma, M, N, K, kernel", [
    ("scheme=strassen form=kernel", 2 * 67, 2 * 45, 2 * 150, "plan"),          # several K blocks
    ("scheme=strassen levels=2 form=kernel", 4 * 33, 4 * 17, 4 * 40, "plan"),  # four terms per operand
    ("scheme=strassen levels=2 form=kernel", 130, 4 * 17, 4 * 40, "classical"),  # 130 rows: no 4 blocks
])
def test_kernel_form_plans_on_the_cpu_kernel(lcma, M, N, K, kernel):
    """falcon-compile with a forced kernel-form plan on the host: the plan runs on falcon's CPU kernel
    (combines inside it) where its format divides the sizes, else on the classical kernel with the
    reason; the result against float64 within a bound that allows the plan's growth."""
    text = MM.format(fn="mm", M=M, N=N, K=K, t="f32")
    vmfb, rep = falcon_mlir.compile_str(text, lcma=lcma, return_report=True)
    k = rep[0]["kernels"][0]
    assert k["kernel"] == kernel, k
    assert rep[0]["defaults"]["profile"].startswith("x86-falcon")
    if kernel == "plan":
        assert k["plan"]["dispatches"] == 2 * k["plan"]["R"] and k["reason"].startswith("kernel-form plan on")
    else:
        assert "does not run on falcon's CPU kernel" in k["reason"]
    a, b = _inputs((M, K), (K, N), seed=3)
    out = Module(vmfb)("mm", a, b)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = float(np.abs(out - ref).max() / np.abs(ref).max())
    assert err < 16 * K * 2.0 ** -24, err


@needs_cc
def test_pass_serves_layouts_with_their_own_wrappers():
    """Each layout its own wrapper (named by it) on one executable, the report saying how the kernel reads."""
    from falcon_mlir.decision.explain import explain

    text = MM_TA.format(fn="ta", M=64, N=48, K=32) + MM_TB.format(fn="tb", M=64, N=48, K=32) + QKT
    rep, out = _run_pass(text)
    assert [e["kernel"] for e in rep] == ["classical"] * 3
    assert [e.get("layout") for e in rep] == ["A stored K x M", "B stored N x K", "B stored N x K, batch 3"]
    for name in ("_64x48x32_ta_call(", "_64x48x32_tb_call(", "_37x53x29_b3_tb_call("):
        assert out.count(name) == 2, name  # the wrapper and its call
    assert out.count("stream.executable private @falcon_cpu_sgemm_") == 1 and out.count("_general_gemm[") == 3
    assert "kernels: falcon's CPU GEMM cpu14x32,k256,28x256 (x86-avx512, pack B and GEMM dispatches, B stored N x K, " \
           "batch 3, C added)" in explain(rep)


@needs_host_kernel
@pytest.mark.parametrize("text, shapes, ta, tb", [
    (MM_TA.format(fn="f", M=37, N=53, K=29), ((29, 37), (29, 53), (37, 53)), True, False),
    (MM_TB.format(fn="f", M=37, N=53, K=29), ((37, 29), (53, 29), (37, 53)), False, True),
    (BMM.format(fn="f", B=3, M=37, N=53, K=29), ((3, 37, 29), (3, 29, 53), (3, 37, 53)), False, False),
    (QKT.replace("@qkt", "@f"), ((3, 37, 29), (3, 53, 29), (3, 37, 53)), False, True),
    (B2TA.replace("@b2ta", "@f"), ((2, 3, 29, 37), (2, 3, 29, 53), (2, 3, 37, 53)), True, False),
], ids=["ta", "tb", "bmm", "qkt", "b2ta"])
def test_falcon_compile_numerics_of_layouts(text, shapes, ta, tb):
    """falcon-compile'd modules with transposed operands and batches on falcon's kernel against float64 (C an
    argument: the kernel's result plus C)."""
    vmfb, rep = falcon_mlir.compile_str(text, kernels="min-flops=0", return_report=True)
    assert rep[0]["kernels"][0]["kernel"] == "classical" and rep[0]["kernels"][0]["accumulate"] is True
    a, b, c = _inputs(*shapes, seed=5)
    t = lambda x, flag: np.swapaxes(x, -1, -2) if flag else x  # noqa: E731
    ref = t(a, ta).astype(np.float64) @ t(b, tb).astype(np.float64) + c
    _check(Module(vmfb)("f", a, b, c), ref, 29)


@needs_cc
def test_forced_kernel_form_plan_the_kernel_does_not_take_is_remarked(tmp_path, capfd):
    """falcon-compile --lcma-rewrite="scheme=strassen form=kernel" on a contraction falcon's CPU kernel
    leaves to IREE (C stored N x M): one remark line naming the reason, exit 0 (were: nothing said, the
    report's plan strassen while the op compiled classical)."""
    from falcon_mlir.tools import falcon_compile

    src = tmp_path / "ct.mlir"
    src.write_text(CT)
    rc = falcon_compile.main([str(src), "-o", str(tmp_path / "ct.vmfb"), "--lcma-rewrite=scheme=strassen form=kernel",
                              "--falcon-kernels=x86-avx512 min-flops=0"])
    err = capfd.readouterr().err
    assert rc == 0, err
    assert err.splitlines() == [
        f"{src}:2:8: remark: lcma-rewrite: strassen (kernel form) handed to falcon-kernels, which did not build it "
        "(left to IREE: C is transposed (stored N x M): falcon's CPU kernel writes C as M x N, row-major); "
        "kept classical"], err


@needs_avx512
def test_split_compile_links_for_the_same_cpu_only():
    """A module compiled in two halves (``--compile-to=input``, then iree-compile ``--compile-from=input``,
    as the training job does): a back half for the same CPU with a flag that enters the target (the
    stack limit) links the kernel and runs right against float64 (Q K^T, B stored N x K, a batch, C
    added); a back half for a CPU without AVX-512 fails to link, where the object keyed by the target
    triple alone went into that module silently (AVX-512 code for a haswell)."""
    from iree.compiler import CompilerToolError, compile_str

    text = QKT.replace("@qkt", "@f")
    mid = falcon_mlir.compile_str(text, kernels="min-flops=0", extra_args=["--compile-to=input"])
    local = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu"]
    vmfb = compile_str(mid, extra_args=local + ["--iree-llvmcpu-target-cpu=host", "--compile-from=input",
                                                "--iree-llvmcpu-stack-allocation-limit=2097152"])
    a, b, c = _inputs((3, 37, 29), (3, 53, 29), (3, 37, 53), seed=7)
    ref = a.astype(np.float64) @ np.swapaxes(b, -1, -2).astype(np.float64) + c
    _check(Module(vmfb)("f", a, b, c), ref, 29)
    with pytest.raises(CompilerToolError, match="undefined symbol: falcon_cpu_general_"):
        compile_str(mid, extra_args=local + ["--iree-llvmcpu-target-cpu=haswell", "--compile-from=input"])


@needs_host_kernel
@pytest.mark.parametrize("text, shapes, ta, tb, kernel", [
    (MM_TA.format(fn="f", M=2 * 37, N=2 * 53, K=2 * 29), ((58, 74), (58, 106), (74, 106)), True, False, "plan"),
    (_generic("f", ["b, m, k", "b, n, k", "b, m, n"], (3, 68, 60), (3, 44, 60), (3, 68, 44), iters=4),
     ((3, 68, 60), (3, 44, 60), (3, 68, 44)), False, True, "plan"),
], ids=["ta", "qkt"])
def test_kernel_form_plans_on_layouts(text, shapes, ta, tb, kernel):
    """A kernel-form Strassen plan forced on a transposed or batched contraction runs on falcon's kernel
    (the blocks of a term found in the stored layout), against float64."""
    vmfb, rep = falcon_mlir.compile_str(text, lcma="scheme=strassen form=kernel", return_report=True)
    k = rep[0]["kernels"][0]
    assert k["kernel"] == kernel, k
    a, b, c = _inputs(*shapes, seed=6)
    t = lambda x, flag: np.swapaxes(x, -1, -2) if flag else x  # noqa: E731
    ref = t(a, ta).astype(np.float64) @ t(b, tb).astype(np.float64) + c
    out = Module(vmfb)("f", a, b, c)
    err = float(np.abs(out - ref).max() / np.abs(ref).max())
    assert err < 16 * 60 * 2.0 ** -24, err


@pytest.mark.parametrize("text, transposed", [(QKT, ("rhs",)), (B2TA, ("lhs",)), (CT, ("out",)), (BMID, ("batch",)),
                                              (BMM.format(fn="bmm", B=3, M=64, N=48, K=32), ())],
                         ids=["qkt", "b2ta", "ct", "bmid", "bmm"])
def test_the_decision_sees_what_the_kernel_cannot_read(text, transposed):
    """lcma-rewrite's view of the layout (decision.Problem.transposed): C stored N x M and batch dimensions
    that do not lead are what cpu_kernel.unfit refuses, as serve_cpu does."""
    from falcon_mlir.decision import Problem, cpu_kernel
    from falcon_mlir.passes.lcma_rewrite.planning import transposed_operands

    with ir.Context():
        m = ir.Module.parse(text)
        c = find_contractions(m.operation)[0]
        assert transposed_operands(c) == transposed
        served, _ = serve_cpu(c)
    refused = cpu_kernel.unfit(Problem(64, 64, 64, transposed=transposed), ("strassen",)) is not None
    assert refused == (served is None)
