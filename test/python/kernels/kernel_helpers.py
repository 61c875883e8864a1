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
    import importlib.machinery

    # PathFinder, not importlib.util.find_spec: test/python/conftest.py puts
    # ``triton = None`` into sys.modules, for which find_spec answers None.
    return importlib.machinery.PathFinder.find_spec(module) is not None


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


def fake_plan(spec, gemm_config: KernelConfig = None):
    """A CompiledPlan with made-up cubins (like :func:`fake_kernel`), for MLIR-text and iree-compile tests."""
    from falcon_mlir.kernels import lcma

    css = lcma.combine_specs(spec)
    geo = lcma.plan_geometry(spec)
    kernels, groups, sources = {}, {}, {}
    for role in ("a", "b", "c"):
        cs = css[role]
        cfg = lcma.default_combine_config(cs)
        groups[role] = lcma.output_groups(cs, cfg.max_live)
        sources[role] = lcma.combine_source(cs, groups[role])
        cx, programs = lcma.combine_launch(cs, cfg)
        cubin = b"\x7fELF" + hashlib.sha256((spec.name + role).encode()).digest() * 4
        kernels[role] = lcma.CombineKernel(
            spec=cs, config=cfg, source_sha256=hashlib.sha256(sources[role].encode()).hexdigest(), constexprs=cx,
            arch="sm_90a", name=lcma.COMBINE_FN[role], cubin=cubin, num_warps=cfg.num_warps, shared=0,
            global_scratch_size=0, global_scratch_align=1, profile_scratch_size=0, profile_scratch_align=1,
            num_programs=programs, triton_version="fake", key=hashlib.sha256(cubin).hexdigest())
    products = fake_kernel(lcma.products_spec(spec, geo), gemm_config)
    if spec.scaled:
        for role, (rows, cols) in (("ma", (spec.M, spec.K)), ("mb", (spec.K, spec.N))):
            ms, cfg = lcma.AbsmaxSpec(rows, cols, spec.dtype), lcma.AbsmaxConfig()
            cubin = b"\x7fELF" + hashlib.sha256((spec.name + role).encode()).digest() * 4
            kernels[role] = lcma.CombineKernel(
                spec=ms, config=cfg, source_sha256="0" * 64, constexprs=ms.constexprs(), arch="sm_90a",
                name=lcma.ABSMAX_FN, cubin=cubin, num_warps=cfg.num_warps, shared=0, global_scratch_size=0,
                global_scratch_align=1, profile_scratch_size=0, profile_scratch_align=1, num_programs=lcma.NP,
                triton_version="fake", key=hashlib.sha256(cubin).hexdigest())
    return lcma.CompiledPlan(spec=spec, scheme_name=lcma.resolve_scheme(spec.scheme).name, geometry=geo,
                             combine_a=kernels["a"], combine_b=kernels["b"], products=products,
                             combine_c=kernels["c"], sources=sources, groups=groups,
                             absmax_a=kernels.get("ma"), absmax_b=kernels.get("mb"))
