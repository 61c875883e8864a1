"""Ahead-of-time compilation for sm_90a (no GPU): cubin, metadata, cache, and the SASS it holds."""

from __future__ import annotations

import pytest
from kernel_helpers import skip_without

from falcon_mlir.kernels import aot
from falcon_mlir.kernels.configs import KernelConfig, choose_config, estimate_shared_bytes
from falcon_mlir.kernels.spec import GemmSpec

pytestmark = skip_without("triton")

BF16 = GemmSpec(1024, 1024, 512)


def _sass_ops(kernel):
    if aot.cuobjdump_path() is None:
        pytest.skip("no cuobjdump")
    return aot.sass_opcodes(aot.sass(kernel))


def test_bf16_cubin_and_metadata(compiled):
    k = compiled(BF16)
    assert k.cubin[:4] == b"\x7fELF"
    assert k.name == "falcon_gemm" and k.arch == "sm_90a"
    assert k.config.label == "128x256x64,s3,w8,g8"
    assert k.num_warps == 8 and k.threads == 256
    # Shared memory: 3 stages of A and B tiles plus the C staging tile, and a few barrier bytes.
    est = estimate_shared_bytes(BF16, k.config)
    assert est <= k.shared <= est + 1024
    # Device-side descriptors for A, B and C live in the global scratch, per program.
    assert k.global_scratch_size >= 3 * 128 and k.global_scratch_align >= 64
    assert k.profile_scratch_size == 0
    assert k.num_programs == (1024 // 128) * (1024 // 256) == 32
    assert k.global_scratch_bytes == 32 * k.global_scratch_size
    md = k.metadata()
    assert md["cubin_bytes"] == len(k.cubin) and md["config"] == k.config.label


def test_bf16_sass_has_wgmma_and_tma(compiled):
    ops = _sass_ops(compiled(BF16))
    assert ops["HGMMA"] > 0, "no wgmma in the bf16 kernel"
    assert ops["UTMALDG"] > 0, "no TMA loads"
    assert ops["UTMASTG"] > 0, "no TMA store"


def test_f16_sass_has_wgmma(compiled):
    assert _sass_ops(compiled(GemmSpec(1024, 1024, 512, "f16", "f16", "f16")))["HGMMA"] > 0


def test_pinned_triton_version():
    assert aot.triton_version() == aot.TRITON_VERSION == "3.6.0", (
        "the kernels are compiled and tuned with Triton 3.6 (3.9 spills the IEEE f32 kernel)")


def test_f32_ieee_is_fma_not_tensor_cores(compiled):
    """Triton's IEEE f32 kernel (passed its config: by default these sizes go to the FMA kernel of
    test_fma_gemm.py)."""
    spec = GemmSpec(1024, 1024, 512, "f32", "f32", "f32")
    k = compiled(spec, choose_config(spec))
    assert isinstance(k.config, KernelConfig) and k.compiler.startswith("Triton")
    ops = _sass_ops(k)
    assert ops["HGMMA"] == 0 and ops["FFMA"] > 0 and ops["UTMALDG"] > 0
    # The run-1 regression (Triton 3.9): 32 registers, 5.5 KB of stack, ~2,200 LDL and STL.
    assert ops["LDL"] == 0 and ops["STL"] == 0, "the f32 FMA kernel spills to local memory"
    assert k.stack_bytes == 0 and k.registers > 128


@pytest.mark.parametrize("spec", [GemmSpec(8192, 8192, 8192), GemmSpec(8192, 1024, 4096, "f16", "f16", "f16"),
                                  GemmSpec(8192, 8192, 8192, "f32", "f32", "f32")], ids=lambda s: s.name)
def test_table_configs_do_not_spill(compiled, spec):
    if aot.cuobjdump_path() is None:
        pytest.skip("no cuobjdump")
    k = compiled(spec, choose_config(spec))  # the table's Triton config (f32 8192^3 defaults to the FMA kernel)
    assert k.stack_bytes == 0, f"{spec.name} with {k.config.label}: {k.stack_bytes} stack bytes"
    assert k.metadata()["registers"] == k.registers <= 255


def test_tf32_modes_use_tensor_cores(compiled):
    cfg = KernelConfig.parse("128x128x32,s3,w8,g8")
    tf32 = compiled(GemmSpec(1024, 1024, 512, "f32", "f32", "f32", f32_mode="tf32"), cfg)
    x3 = compiled(GemmSpec(1024, 1024, 512, "f32", "f32", "f32", f32_mode="tf32x3"), cfg)
    ops, ops3 = _sass_ops(tf32), _sass_ops(x3)
    assert ops["HGMMA"] > 0 and ops["FFMA"] == 0
    # 3xTF32: three tensor-core products per K step (hi*hi, hi*lo, lo*hi), not FMA.
    assert ops3["HGMMA"] == 3 * ops["HGMMA"] and ops3["FFMA"] == 0
    assert x3.cubin != tf32.cubin and x3.key != tf32.key
    assert x3.stack_bytes in (0, None)
    assert choose_config(x3.spec).label == "128x64x32,s4,w4,g8"  # the table's tuned tf32x3 entry


def test_masked_store_and_batch(compiled):
    spec = GemmSpec(130, 70, 96, trans_b=True, out_dtype="f32", batch=2)
    k = compiled(spec, choose_config(spec))
    assert not k.config.tma_store
    ops = _sass_ops(k)
    assert ops["UTMASTG"] == 0 and ops["UTMALDG"] > 0 and ops["HGMMA"] > 0
    assert k.num_programs == 2 * 2 * 1


def test_warp_specialized_runs_twelve_warps(compiled):
    k = compiled(BF16, KernelConfig.parse("128x256x64,s3,w4,g8,ws"))
    assert k.num_warps == 12 and k.threads == 384


def test_cache_round_trip(compiled, kernel_cache):
    k = compiled(BF16)
    again = aot.compile_kernel(BF16)
    assert again.from_cache and again.cubin == k.cubin and again.key == k.key
    assert again.metadata() == k.metadata()
    entries = list(kernel_cache.iterdir())
    assert (kernel_cache / f"{k.key}.json") in entries
    assert not [p for p in entries if p.name.endswith(".tmp")]
    # A different configuration is a different entry.
    assert aot.cache_key(BF16, KernelConfig.parse("128x128x64,s4,w8,g8"), "sm_90a", 132) != k.key
    # A damaged entry is compiled again, not trusted.
    (kernel_cache / f"{k.key}.json").write_text("{not json")
    fresh = aot.compile_kernel(BF16)
    assert not fresh.from_cache and fresh.cubin[:4] == b"\x7fELF"


def test_bad_requests():
    with pytest.raises(ValueError, match="arch 'sm_80' not served"):
        aot.compile_kernel(BF16, arch="sm_80")
    with pytest.raises(ValueError, match="not served: B is stored K x N"):
        aot.compile_kernel(GemmSpec(130, 70, 96))
    with pytest.raises(ValueError, match="TMA cannot store it"):
        aot.compile_kernel(GemmSpec(128, 70, 64, trans_b=True, out_dtype="f32"), KernelConfig())
    with pytest.raises(ValueError, match="num_sms"):
        aot.compile_kernel(BF16, num_sms=0)


def test_shared_memory_limit_is_enforced():
    # f32 C staged whole with 128x256 tiles: 278,552 bytes > 232,448.
    spec = GemmSpec(256, 256, 128, out_dtype="f32")
    with pytest.raises(ValueError, match="bytes of shared memory"):
        aot.compile_kernel(spec, KernelConfig.parse("128x256x64,s3,w8,g8"), cache=False)
