"""Helpers of the kernel tests that are not fixtures."""

from __future__ import annotations

import hashlib

from falcon_mlir.kernels.aot import CompiledKernel
from falcon_mlir.kernels.configs import KernelConfig, choose_config
from falcon_mlir.kernels.spec import GemmSpec


def fake_kernel(spec: GemmSpec, config: KernelConfig = None, cubin: bytes = None) -> CompiledKernel:
    """A CompiledKernel with made-up bytes for MLIR-text and iree-compile tests (IREE does not
    look inside the object at compile time), so those tests run where Triton is missing."""
    config = config or choose_config(spec)
    cubin = cubin if cubin is not None else b"\x7fELF" + hashlib.sha256(spec.name.encode()).digest() * 8
    return CompiledKernel(spec=spec, config=config, arch="sm_90a", name="falcon_gemm", cubin=cubin,
                          num_warps=config.num_warps, shared=213016, global_scratch_size=384,
                          global_scratch_align=128, profile_scratch_size=0, profile_scratch_align=1,
                          num_programs=min(132, spec.batch * -(-spec.M // config.block_m)
                                           * -(-spec.N // config.block_n)),
                          triton_version="fake", key=hashlib.sha256(cubin).hexdigest())
