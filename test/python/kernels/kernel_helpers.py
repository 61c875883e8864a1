"""Helpers of the kernel tests that are not fixtures."""

from __future__ import annotations

import hashlib
import importlib.util

import pytest

from falcon_mlir.kernels.aot import CompiledKernel
from falcon_mlir.kernels.configs import KernelConfig, choose_config
from falcon_mlir.kernels.spec import GemmSpec


def have(module: str) -> bool:
    """Whether ``module`` is installed, found without importing it.

    The kernel tests never import Triton (nor torch) into the pytest process: another test may
    have imported TensorFlow, and Triton after TensorFlow aborts the process (both ship LLVM).
    Whatever needs Triton runs in a child process (the compile worker, the interpreter runner).
    """
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def skip_without(*modules: str):
    """``pytest.mark.skipif`` for tests that need ``modules`` installed (checked without importing them)."""
    missing = [m for m in modules if not have(m)]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}")


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
