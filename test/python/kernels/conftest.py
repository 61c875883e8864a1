"""Shared fixtures of the kernel tests: compiled kernels reused per session (the isolated kernel cache,
``kernel_cache``, is test/python/conftest.py's, for every test)."""

from __future__ import annotations

import sys

import pytest
from kernel_helpers import have

from falcon_mlir.kernels.aot import CompiledKernel
from falcon_mlir.kernels.configs import KernelConfig
from falcon_mlir.kernels.spec import GemmSpec


@pytest.fixture(scope="session", autouse=True)
def triton_stays_out():
    """No kernel test imports Triton into the pytest process: other tests may import TensorFlow, and
    Triton after TensorFlow aborts the process (both ship LLVM). Compiling and interpreting run in
    child processes."""
    yield
    # test/python/conftest.py blocks it with ``sys.modules["triton"] = None``
    assert sys.modules.get("triton") is None, "a kernel test imported triton into the pytest process"


_COMPILED = {}


@pytest.fixture(scope="session")
def compiled():
    """``compiled(spec, config=None)``: compile once per session (needs Triton)."""
    if not have("triton"):
        pytest.skip("needs triton")
    from falcon_mlir.kernels.aot import compile_kernel

    def get(spec: GemmSpec, config: KernelConfig = None) -> CompiledKernel:
        key = (spec, config)
        if key not in _COMPILED:
            _COMPILED[key] = compile_kernel(spec, config)
        return _COMPILED[key]
    return get
