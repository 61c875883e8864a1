"""The IEEE f32 FMA kernel (falcon_mlir.kernels.fma_gemm): what it serves, its NVRTC cubin, its numerics
on the CPU (the generated CUDA C itself, run by fma_emulate.py), and the IREE module around it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fma_emulate import emulate, gxx
from kernel_helpers import have

from falcon_mlir.kernels import aot, embed, fma_gemm
from falcon_mlir.kernels.aot import FmaKernel
from falcon_mlir.kernels.fma_gemm import KERNEL_NAME, FmaConfig, fma_reason, kernel_source
from falcon_mlir.kernels.spec import GemmSpec

ROOT = Path(__file__).resolve().parents[3]
needs_nvrtc = pytest.mark.skipif(not fma_gemm.available(), reason="needs NVRTC (pip install 'falcon-mlir[cuda]')")


def f32(M, N, K, **kw) -> GemmSpec:
    return GemmSpec(M, N, K, "f32", "f32", "f32", **kw)


# --------------------------------------------------------------------------- what it serves

@pytest.mark.parametrize("spec,reason", [
    (f32(256, 384, 136), None),
    (f32(128, 128, 8, batch=3, trans_a=True, trans_b=True), None),
    (GemmSpec(256, 256, 64), "the FMA kernel multiplies f32 x f32 -> f32 only"),
    (GemmSpec(256, 256, 64, "f32", "f32", "f16"), "the FMA kernel multiplies f32 x f32 -> f32 only"),
    (f32(256, 256, 64, f32_mode="tf32"), "f32_mode=tf32 runs on tensor cores (the Triton kernel)"),
    (f32(256, 256, 64, f32_mode="tf32x3"), "f32_mode=tf32x3 runs on tensor cores (the Triton kernel)"),
    (f32(200, 256, 64), "M = 200 is not a multiple of 128 (the FMA kernel has no edge handling)"),
    (f32(256, 192, 64), "N = 192 is not a multiple of 128 (the FMA kernel has no edge handling)"),
    (f32(256, 256, 12), "K = 12 is not a multiple of 8 (the FMA kernel has no edge handling)"),
], ids=lambda x: x.name if isinstance(x, GemmSpec) else "")
def test_fma_reason(spec, reason):
    assert fma_reason(spec) == reason
    if reason:
        with pytest.raises(ValueError, match=f"GEMM {spec.name} not served by the FMA kernel: "):
            kernel_source(spec)


def test_config_label_and_other_tilings():
    assert FmaConfig().label == "fma128x128x8,g8" and FmaConfig(group_m=4).label == "fma128x128x8,g4"
    assert FmaConfig.from_dict(FmaConfig(group_m=2).to_dict()) == FmaConfig(group_m=2)
    for kw in (dict(block_m=64), dict(block_n=256), dict(block_k=16)):
        with pytest.raises(ValueError, match="only the 128x128x8 tile is generated"):
            FmaConfig(**kw)
    for g in (0, 65, True, 2.0):
        with pytest.raises(ValueError, match="group_m must be an int in 1..64"):
            FmaConfig(group_m=g)
    assert fma_gemm.num_programs(f32(384, 256, 136, batch=3)) == 3 * 3 * 2


def test_source_constants_and_index_width():
    src = kernel_source(f32(384, 256, 136, batch=3, trans_b=True))
    for line in ("#define M 384", "#define N 256", "#define K 136", "#define BATCH 3", "#define TRANS_A 0",
                 "#define TRANS_B 1", "#define GROUP_M 8", "typedef int idx_t;", f"{KERNEL_NAME}("):
        assert line in src, line
    # 32-bit offsets inside one batch entry where they fit (64-bit math made ptxas spill), 64-bit beyond
    assert "typedef int idx_t;" in kernel_source(f32(8192, 8192, 8192))
    assert "typedef long long idx_t;" in kernel_source(f32(65536, 128, 32768))  # M * K = 2^31


def test_use_fma_and_the_way_back_to_triton(monkeypatch):
    spec = f32(256, 256, 64)
    monkeypatch.setenv("FALCON_NVRTC", "/nonexistent/libnvrtc.so")
    assert not fma_gemm.available() and not aot.use_fma(spec)
    message = ("the f32 FMA kernel needs NVRTC ($FALCON_NVRTC=/nonexistent/libnvrtc.so is not a file): pip install "
               "'falcon-mlir[cuda]' (or nvidia-cuda-nvrtc-cu12==12.9.86), or FALCON_FMA_KERNEL=0 for the Triton kernel")
    with pytest.raises(ImportError) as e:
        fma_gemm.compile_cubin("extern \"C\" __global__ void k() {}")
    assert str(e.value) == message
    with pytest.raises(ImportError) as e:  # asked for explicitly: the same line, before any worker starts
        aot.gemm_request(spec, FmaConfig())
    assert str(e.value) == message
    if have("triton"):  # without NVRTC the default is Triton's kernel with the table's config
        assert aot.gemm_request(spec).job["kind"] == "gemm"
    monkeypatch.delenv("FALCON_NVRTC")
    if fma_gemm.available():
        assert aot.use_fma(spec) and aot.gemm_request(spec).job["kind"] == "nvrtc"
        monkeypatch.setenv("FALCON_FMA_KERNEL", "0")
        assert not aot.use_fma(spec)
    assert not aot.use_fma(f32(256, 256, 64, f32_mode="tf32x3")) and not aot.use_fma(f32(200, 256, 64))


@pytest.mark.parametrize("content", ["garbage", "libc"])
def test_falcon_nvrtc_that_is_not_nvrtc(monkeypatch, tmp_path, content):
    """A file that is no shared library, or a library without NVRTC's functions: one ImportError that says
    so, from every entry point (not ctypes' OSError or AttributeError)."""
    import ctypes.util

    if content == "libc":
        bad = ctypes.util.find_library("c")
        if bad is None or not Path(bad).is_absolute():
            import glob
            bad = next(iter(sorted(glob.glob("/lib/x86_64-linux-gnu/libc.so.6") + glob.glob("/usr/lib*/libc.so.6"))),
                       None)
        if bad is None:
            pytest.skip("no libc.so.6 by path")
        why = "undefined symbol: nvrtcVersion"
    else:
        bad = tmp_path / "libnvrtc.so"
        bad.write_text("not a library")
        why = ""
    monkeypatch.setenv("FALCON_NVRTC", str(bad))
    prefix = f"the f32 FMA kernel needs NVRTC ($FALCON_NVRTC={bad} is not an NVRTC library: "
    for call in (fma_gemm.require_nvrtc, fma_gemm.nvrtc_version, lambda: fma_gemm.compile_cubin("x"),
                 lambda: aot.gemm_request(f32(256, 256, 64))):
        with pytest.raises(ImportError) as e:
            call()
        assert str(e.value).startswith(prefix) and why in str(e.value), str(e.value)
        assert str(e.value).endswith("or FALCON_FMA_KERNEL=0 for the Triton kernel")


@needs_nvrtc
def test_f32_plan_products_default_to_it():
    """A kernel-form f32 plan's batched products are a GEMM like any other: the FMA kernel where it serves
    them (Strassen at 512^3: 7 x 256^3), Triton's where not (1000x1032x776: 512x528x400 blocks)."""
    if not have("triton"):
        pytest.skip("the combine kernels' requests need triton")
    from falcon_mlir.kernels import lcma

    kinds = {}
    for spec in (lcma.PlanSpec(512, 512, 512, "strassen", "f32"), lcma.PlanSpec(1000, 1032, 776, "strassen", "f32")):
        reqs, _, _ = lcma.plan_requests(spec)
        kinds[spec.M] = [r.job["kind"] for r in reqs]
    assert kinds == {512: ["source", "source", "nvrtc", "source"], 1000: ["source", "source", "gemm", "source"]}


def test_cuda_extra_pins_the_nvrtc_the_kernel_was_measured_with():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["cuda"]
    assert f"{fma_gemm.NVRTC_PACKAGE}=={fma_gemm.NVRTC_VERSION}" in extra


# --------------------------------------------------------------------------- the NVRTC cubin

SPECS = {"nn": f32(256, 256, 64), "nt": f32(256, 256, 64, trans_b=True), "tn": f32(256, 256, 64, trans_a=True),
         "tt": f32(256, 256, 64, trans_a=True, trans_b=True), "b3": f32(384, 256, 136, batch=3, trans_b=True),
         "8192^3": f32(8192, 8192, 8192)}


@pytest.fixture(scope="module")
def kernels():
    """The FMA kernels of SPECS, compiled by default (no config) in one worker."""
    if not fma_gemm.available():
        pytest.skip("needs NVRTC (pip install 'falcon-mlir[cuda]')")
    return dict(zip(SPECS, aot.compile_kernels([(s, None) for s in SPECS.values()])))


@pytest.mark.parametrize("which", list(SPECS))
def test_cubin(kernels, which):
    k, spec = kernels[which], SPECS[which]
    assert isinstance(k, FmaKernel) and k.config == FmaConfig() and k.spec == spec
    assert k.cubin[:4] == b"\x7fELF" and KERNEL_NAME.encode() in k.cubin and k.name == KERNEL_NAME
    assert k.compiler == f"nvrtc {fma_gemm.NVRTC_VERSION}" and k.arch == "sm_90a"
    assert k.threads == 256 and k.shared == 0 and k.global_scratch_size == 0  # static shared memory only
    assert k.num_programs == spec.batch * (spec.M // 128) * (spec.N // 128)
    assert k.metadata()["config"] == "fma128x128x8,g8"
    if aot.cuobjdump_path() is None:
        pytest.skip("no cuobjdump (Triton's package carries it)")
    usage = aot.resource_usage(k.cubin)
    assert usage["registers"] == k.registers <= 128, "__launch_bounds__(256, 2) allows 128 registers"
    assert usage["stack_bytes"] == k.stack_bytes == 0, "the FMA kernel spills"
    text = aot.sass(k)
    ops = aot.sass_opcodes(text)
    assert f"Function : {KERNEL_NAME}" in text
    assert ops["HGMMA"] == ops["HMMA"] == 0 and ops["LDL"] == ops["STL"] == 0
    # one K step of 8: 8 x 64 FMAs per thread, 8 x 4 float4 reads of shared memory, fully unrolled
    assert ops["FFMA"] == 512 and ops["LDS"] == 32


def test_cache_key_and_reload(kernels, kernel_cache):
    keys = {k.key for k in kernels.values()}
    assert len(keys) == len(SPECS)  # the key changes with the spec
    assert aot.fma_request(SPECS["nn"], FmaConfig(group_m=4), "sm_90a").key != kernels["nn"].key
    again = aot.compile_kernel(SPECS["b3"])
    assert isinstance(again, FmaKernel) and again.from_cache and again.config == FmaConfig()
    assert again.cubin == kernels["b3"].cubin and again.metadata() == kernels["b3"].metadata()
    assert (kernel_cache / f"{again.key}.json").is_file()


# --------------------------------------------------------------------------- numerics (CPU emulation)

EMULATED = {
    "nn-K136": f32(256, 256, 136),                    # 17 K steps: both shared buffers, odd count
    "nt": f32(128, 256, 64, trans_b=True),
    "tn": f32(256, 128, 64, trans_a=True),
    "tt-K8": f32(128, 128, 8, trans_a=True, trans_b=True),  # one K step: no prefetch
    "nt-b3": f32(128, 256, 16, batch=3, trans_b=True),
    "tn-b2": f32(256, 128, 16, batch=2, trans_a=True),
    "groups": f32(128 * 9, 256, 16),                  # TILES_M = 9 > GROUP_M = 8: a partial last group
}
needs_gxx = pytest.mark.skipif(gxx() is None, reason="the emulation needs g++ (C++20)")


def _inputs(spec: GemmSpec, seed: int):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(spec.a_shape).astype(np.float32),
            rng.standard_normal(spec.b_shape).astype(np.float32))


def _reference(spec: GemmSpec, a, b) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return (np.swapaxes(a64, -1, -2) if spec.trans_a else a64) @ (np.swapaxes(b64, -1, -2) if spec.trans_b else b64)


def _rel(c, ref) -> float:
    return float(np.linalg.norm(c.astype(np.float64) - ref) / np.linalg.norm(ref))


def _tolerance(K: int) -> float:
    """f32 sums of K fused products, random normal inputs: about 2^-24 sqrt(K) relative; 4x that."""
    return 4 * 2.0 ** -24 * K ** 0.5


@needs_gxx
@pytest.mark.parametrize("which", list(EMULATED))
def test_generated_source_computes_the_gemm(which, tmp_path):
    spec = EMULATED[which]
    a, b = _inputs(spec, seed=len(which))
    c = emulate(kernel_source(spec), KERNEL_NAME, a, b, spec.c_shape, tmp_path)
    assert not np.isnan(c).any(), "a tile of C was never written"
    assert _rel(c, _reference(spec, a, b)) < _tolerance(spec.K)


@needs_gxx
@pytest.mark.parametrize("spec", [f32(256, 128, 16, batch=2, trans_a=True), f32(128, 256, 24)],
                         ids=lambda s: s.name)
def test_64_bit_offsets_compute_the_gemm(spec, tmp_path):
    """The ``long long`` offsets of operands with 2^31 elements or more per batch entry, on a small
    analogue (the same text with ``idx_t`` forced to 64 bits): A read transposed (K*M offsets) and B not
    (K*N), the two that need them, and the batch offsets on top."""
    src = kernel_source(spec)
    assert src.count("typedef int idx_t;") == 1
    a, b = _inputs(spec, seed=3)
    c = emulate(src.replace("typedef int idx_t;", "typedef long long idx_t;"), KERNEL_NAME, a, b, spec.c_shape,
                tmp_path)
    assert not np.isnan(c).any() and _rel(c, _reference(spec, a, b)) < _tolerance(spec.K)


@needs_gxx
def test_emulation_catches_a_wrong_index(tmp_path):
    """The epilogue storing each thread's tile with tx and ty swapped (swapping them everywhere would only
    hand the tiles to other threads: still right) must fail the check above."""
    spec = EMULATED["nt"]
    right = "const int r = g * 64 + ty * 4 + i, c = h * 64 + tx * 4;"
    wrong = "const int r = g * 64 + tx * 4 + i, c = h * 64 + ty * 4;"
    src = kernel_source(spec)
    assert src.count(right) == 1
    a, b = _inputs(spec, seed=7)
    c = emulate(src.replace(right, wrong), KERNEL_NAME, a, b, spec.c_shape, tmp_path)
    assert _rel(c, _reference(spec, a, b)) > 0.5


# --------------------------------------------------------------------------- the IREE module

def _filecheck(text: str, checks: str, tmp_path: Path) -> None:
    path = tmp_path / "checks.txt"
    path.write_text(checks)
    r = subprocess.run([sys.executable, "-m", "filecheck", str(path)], input=text, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


MODULE_CHECKS = """
CHECK: hal.executable.source private @[[EXE:falcon_gemm_f32_384x256x136_nt_of32_b3_[0-9a-f]+]] <objects = #hal.executable.objects<{
CHECK-NEXT: #hal.executable.target<"cuda", "cuda-nvptx-fb"
CHECK-NEXT: #hal.executable.object<{path = "[[EXE]].cubin", data = dense<"0x7F454C46{{[0-9A-F]+}}"> : vector<{{[0-9]+}}xi8>}>]}>> {
CHECK-NEXT: // f32_384x256x136_nt_of32_b3 with fma128x128x8,g8: sm_90a cubin from nvrtc 12.9.86
CHECK-NEXT: hal.executable.export public @falcon_fma_gemm ordinal(0)
CHECK-NEXT: layout(#hal.pipeline.layout<bindings = [
CHECK-NEXT: #hal.pipeline.binding<storage_buffer, ReadOnly>,
CHECK-NEXT: #hal.pipeline.binding<storage_buffer, ReadOnly>,
CHECK-NEXT: #hal.pipeline.binding<storage_buffer>,
CHECK-NEXT: #hal.pipeline.binding<storage_buffer>,
CHECK-NEXT: #hal.pipeline.binding<storage_buffer>]>)
CHECK-NEXT: count(%device: !hal.device) -> (index, index, index) {
CHECK-NEXT: %x = arith.constant 18 : index
CHECK-NEXT: %c1 = arith.constant 1 : index
CHECK-NEXT: hal.return %x, %c1, %c1 : index, index, index
CHECK-NEXT: } <workgroup_size = [256 : index, 1 : index, 1 : index], workgroup_local_memory = 0>
CHECK: func.func @main(%a: tensor<3x384x136xf32>, %b: tensor<3x256x136xf32>) -> tensor<3x384x256xf32> {
CHECK-NEXT: %r:3 = flow.dispatch @[[EXE]]::@falcon_fma_gemm(%a, %b) : (tensor<3x384x136xf32>, tensor<3x256x136xf32>) -> (tensor<3x384x256xf32>, tensor<128xi8>, tensor<128xi8>)
CHECK-NEXT: return %r#0 : tensor<3x384x256xf32>
"""


@needs_nvrtc
def test_module_holds_the_fma_cubin_and_compiles(kernels, tmp_path):
    """gemm_module of a served f32 spec, no kernel given: the FMA cubin, A, B, C and the two scratch
    bindings it never touches, one block per 128 x 128 tile (3 x 3 x 2 = 18), 256 threads, no dynamic
    shared memory (the kernel's is static); IREE compiles the module (for CUDA, here on the CPU)."""
    spec, k = SPECS["b3"], kernels["b3"]
    text = embed.gemm_module(spec)
    _filecheck(text, MODULE_CHECKS, tmp_path)
    assert k.cubin.hex().upper() in text and text.count("hal.executable.source") == 1
    vmfb = embed.compile_module(text)
    assert k.cubin in vmfb
