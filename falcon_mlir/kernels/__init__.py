"""GEMM kernels of falcon's own for CUDA: generated with Triton, compiled ahead of time, run by IREE.

IREE 3.13's CUDA code generation has no sm_90 target (no wgmma, no TMA), so
its GEMMs run at 0.25-0.7x of cuBLAS on an H200. This package generates a
persistent TMA + wgmma GEMM with Triton (:mod:`.triton_gemm`), compiles it to
an sm_90a cubin on a machine without a GPU (:mod:`.aot`; what launching a
compiled kernel needs: :mod:`.launched`), and embeds it in an IREE module as
an external dispatch (:mod:`.embed`). What a kernel computes is a
:class:`GemmSpec` (:mod:`.spec`); how it is tiled, a :class:`KernelConfig`
chosen from a data table (:mod:`.configs`). :mod:`.lcma` runs a GEMM as a
grouped LCMA plan (Strassen-like scheme from the catalog): generated combine
kernels around the batched GEMM, four dispatches in one module.
``docs/kernels.md`` has the ABI, the cache and the GPU script.

For the CPU, :mod:`.cpu_gemm` generates falcon's own f32 GEMM as AVX-512 C
(compiled by gcc to an object) and :mod:`.cpu_embed` links it into an
llvm-cpu IREE module as an external dispatch (imported on their own; not
re-exported here).

Importing this package needs no Triton; compiling a kernel does
(``pip install 'falcon-mlir[cuda]'``), and runs it in a child process
(:mod:`._worker`: Triton after TensorFlow aborts a process).
"""

from .aot import CompiledKernel, compile_kernel, compile_kernels
from .configs import KernelConfig, choose_config
from .embed import (KERNEL_MODULE_FLAGS, compile_module, cuda_target_attribute, dispatch_text,
                    executable_source, gemm_module)
from .lcma import CombineConfig, CompiledPlan, PlanSpec, compile_plan, compile_plans, plan_module
from .spec import GemmSpec, require_supported, supports

__all__ = [
    "GemmSpec", "supports", "require_supported", "KernelConfig", "choose_config",
    "CompiledKernel", "compile_kernel", "compile_kernels", "cuda_target_attribute", "executable_source",
    "dispatch_text", "gemm_module", "compile_module", "KERNEL_MODULE_FLAGS",
    "PlanSpec", "CombineConfig", "CompiledPlan", "compile_plan", "compile_plans", "plan_module",
]
