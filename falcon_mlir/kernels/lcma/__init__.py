"""Grouped LCMA plans as kernels of our own: combine A, combine B, R batched products, combine C.

A plan runs one bilinear scheme ``<m,k,n;R>`` (falcon's catalog; several levels
are one composed scheme, ``strassen^2`` = ``<4,4,4;49>`` by the catalog's
Kronecker product) on a GEMM ``C = A @ B`` (A ``M x K``, B ``K x N``) as four
kernels, the FalconGEMM paper's group-parallel execution:

1. **combine A** reads A once and writes the R combined operands
   ``A_r = sum_ij U[r,i,j] A_ij`` as one ``R x bm x bk`` tensor (each sum formed
   in f32 registers and rounded once to the operand type);
2. **combine B** likewise ``B_r = sum_jl V[r,j,l] B_jl``, ``R x bk x bn``;
3. **products**: the GEMM of :mod:`falcon_mlir.kernels.triton_gemm` with batch R,
   ``P_r = A_r @ B_r`` accumulated in f32 and stored in ``product_dtype``;
4. **combine C** reads the R products once and writes
   ``C_il = sum_r W[r,i,l] P_r`` (f32 registers, rounded once to C's type).

The combine kernels are **generated Triton source** per coefficient table
(never hand-expanded): every coefficient is a literal in the source, each
program loads the input tiles of one tile position of every block once and
writes every output that uses them from registers. Where the inputs (or, for
combine C, the accumulators) of all outputs would not fit in registers
(``CombineConfig.max_live``), the outputs are split into groups, greedily
sharing inputs, and a group's inputs are loaded again for it. The source is
written to the kernel cache named by its SHA-256 and compiled by Triton in
the worker process like the GEMM; sizes and tiles are ``tl.constexpr``.

Blocks: ``bm = ceil(M/m)``, ``bk = ceil(K/k)``, ``bn = ceil(N/n)``, each rounded up
to a multiple of ``PlanSpec.align`` (16 elements: TMA needs 16-byte row strides
for the products' operands). Sizes that do not fill the blocks are padded
inside the combine kernels: masked loads read zeros past A's and B's edges,
the combined operands are written whole (zeros included), and combine C's
masked stores leave out what lies past C's edges.

bf16 plans by default form their combined operands and products in f16,
**scaled** by powers of two into f16's range (:mod:`.scale`: two absmax
kernels run first, combine A/B scale down, combine C scales back): six
dispatches, about classical's error at the 16-bit rate
(``PlanSpec(operand_dtype="bf16")`` keeps bf16 operands: four dispatches).

Coefficients that are not integers are written as f32 literals (exact for
dyadic fractions such as 1/2; others round).

:func:`plan_module` gives a complete module ``@main(A, B) -> C`` with the
four dispatches (see :mod:`falcon_mlir.kernels.embed` for the ABI).

The package, by what each module holds (every public name is re-exported here):

* :mod:`.spec`: :class:`PlanSpec`, its blocks (:func:`plan_geometry`) and the products' GEMM;
* :mod:`.scale`: scaled f16 operands of bf16 plans: the absmax kernel, the shifts;
* :mod:`.combine`: the combine kernels' spec, tiling, output groups and launch grid;
* :mod:`.source`: their Triton source, generated from U, V and W;
* :mod:`.compile`: compile requests, :class:`CombineKernel`, :class:`CompiledPlan`, :func:`compile_plans`;
* :mod:`.reference`: the plan's stages in float64;
* :mod:`.embed`: MLIR text of the four dispatches (:func:`plan_module`);
* :mod:`.launches`: launch facts for Triton's JIT and interpreter (:func:`plan_launches`).
"""

from .combine import (LIVE_BUDGET, CombineConfig, CombineSpec, combine_launch, combine_specs, default_combine_config,
                      merge_coeffs, output_groups, split_coeffs)
from .compile import (CombineKernel, CompiledPlan, absmax_request, combine_request, compile_plan, compile_plans,
                      plan_requests, source_path)
from .embed import plan_dispatches, plan_executables, plan_module
from .launches import absmax_launch_entry, combine_launch_entry, plan_launches
from .scale import ABSMAX_FN, NP, AbsmaxConfig, AbsmaxSpec, max_exponent, operand_shifts
from .reference import combine_c_reference, pad_blocks, reference_stages
from .source import COMBINE_FN, GENERATOR_VERSION, combine_source, source_file_name
from .spec import (MAX_BLOCK_ELEMENTS, SCALED_OPERANDS, PlanGeometry, PlanSpec, b_ops_shape, default_operand_dtype,
                   plan_geometry, products_spec, resolve_scheme)

__all__ = [
    "PlanSpec", "PlanGeometry", "plan_geometry", "products_spec", "resolve_scheme", "MAX_BLOCK_ELEMENTS",
    "SCALED_OPERANDS", "default_operand_dtype", "b_ops_shape",
    "NP", "ABSMAX_FN", "AbsmaxSpec", "AbsmaxConfig", "operand_shifts", "max_exponent",
    "absmax_request", "absmax_launch_entry",
    "CombineConfig", "CombineSpec", "combine_specs", "split_coeffs", "merge_coeffs", "output_groups",
    "default_combine_config", "combine_launch", "LIVE_BUDGET",
    "COMBINE_FN", "GENERATOR_VERSION", "combine_source", "source_file_name",
    "CombineKernel", "CompiledPlan", "source_path", "combine_request", "plan_requests", "compile_plans",
    "compile_plan",
    "pad_blocks", "reference_stages", "combine_c_reference",
    "plan_executables", "plan_dispatches", "plan_module",
    "combine_launch_entry", "plan_launches",
]
