"""MLIR text of a compiled plan: its ``hal.executable.source`` ops and ``flow.dispatch`` lines (four, six for a
scaled plan), or a whole module.

The pieces are :mod:`falcon_mlir.kernels.embed`'s (the same ABI as the GEMM).
"""

from __future__ import annotations

from typing import Optional, Sequence

from ..embed import (DEFAULT_CUDA_FLAGS, cuda_target_attribute, executable_name, executable_source,
                     external_dispatch, external_executable, module_text, reference_func, scratch_bytes,
                     tensor_type)
from ..spec import GemmSpec
from .compile import CompiledPlan, compile_plan
from .scale import NP
from .spec import PlanSpec, b_ops_shape


def _exe_names(plan: CompiledPlan) -> dict:
    base = "falcon_lcma_" + "".join(c if c.isalnum() else "_" for c in plan.spec.name)
    names = {"a": f"{base}_a_{plan.combine_a.key[:8]}", "b": f"{base}_b_{plan.combine_b.key[:8]}",
             "p": executable_name(plan.products), "c": f"{base}_c_{plan.combine_c.key[:8]}"}
    if plan.absmax_a is not None:
        names.update(ma=f"{base}_max_a_{plan.absmax_a.key[:8]}", mb=f"{base}_max_b_{plan.absmax_b.key[:8]}")
    return names


_ROLES = {"ma": "absmax_a", "mb": "absmax_b", "a": "combine_a", "b": "combine_b", "c": "combine_c"}


def plan_executables(plan: CompiledPlan, target_attr: str) -> str:
    """The ``hal.executable.source`` ops of a plan (absmax A and B for a scaled plan, combine A, combine B,
    products, combine C)."""
    names = _exe_names(plan)
    parts = []
    for role in [r for r in ("ma", "mb") if r in names] + ["a", "b", "p", "c"]:
        if role == "p":
            parts.append(executable_source(plan.products, target_attr, names["p"]))
            continue
        k = getattr(plan, _ROLES[role])
        if role in ("ma", "mb"):
            what = f"absmax of {'AB'[role == 'mb']}, {k.config.label}"
            inputs = 1
        else:
            what = (f"combine {role.upper()}, {len(k.spec.coeffs)} outputs in {len(plan.groups[role])} group(s), "
                    f"tiles {k.config.label}" + (f", scaled by 2^{k.spec.scale}" if k.spec.scale else ""))
            inputs = 1 + (len(k.spec.scale) if k.spec.scale else 0)
        comment = f"{plan.spec.name} ({plan.scheme_name}): {what}; {k.arch} cubin from {k.compiler}"
        parts.append(external_executable(names[role], k.name, k.cubin, target_attr, inputs, 1, k.num_programs,
                                         k.threads, k.shared, comment))
    return "\n".join(parts)


def plan_dispatches(plan: CompiledPlan, a: str = "%a", b: str = "%b", prefix: str = "%lcma",
                    types: Optional[Sequence[str]] = None) -> tuple:
    """(lines, C value): the ``flow.dispatch`` lines of a plan reading ``a`` and ``b`` (four; six scaled).

    ``types``: the tensor types of A, B and C as the caller holds them (same
    elements as ``M x K``, ``K x N``, ``M x N``, e.g. with a unit batch
    dimension); default those 2-D types.
    """
    s, g = plan.spec, plan.geometry
    names = _exe_names(plan)
    a_t, b_t, c_t = types or (tensor_type((s.M, s.K), s.dtype), tensor_type(s.b_shape, s.dtype),
                              tensor_type((s.M, s.N), s.out_dtype))
    ao_t, bo_t = tensor_type(g.a_ops_shape, s.operand_dtype), tensor_type(b_ops_shape(s, g), s.operand_dtype)
    p_t = tensor_type(g.products_shape, s.product_dtype)
    ka, kb, kc = plan.combine_a, plan.combine_b, plan.combine_c
    lines, sa, sb = [], [], []
    if s.scaled:
        m_t = tensor_type((NP,), "f32")
        for role, x, x_t in (("ma", a, a_t), ("mb", b, b_t)):
            k = getattr(plan, _ROLES[role])
            lines.append(external_dispatch(names[role], k.name, [(x, x_t)], [m_t], scratch_bytes(k),
                                           f"{prefix}_{role}"))
        sa, sb = [(f"{prefix}_ma#0", m_t)], [(f"{prefix}_mb#0", m_t)]
    lines += [
        external_dispatch(names["a"], ka.name, [(a, a_t)] + sa, [ao_t], scratch_bytes(ka), f"{prefix}_a"),
        external_dispatch(names["b"], kb.name, [(b, b_t)] + sb, [bo_t], scratch_bytes(kb), f"{prefix}_b"),
        external_dispatch(names["p"], plan.products.name, [(f"{prefix}_a#0", ao_t), (f"{prefix}_b#0", bo_t)], [p_t],
                          scratch_bytes(plan.products), f"{prefix}_p"),
        external_dispatch(names["c"], kc.name, [(f"{prefix}_p#0", p_t)] + sa + sb, [c_t], scratch_bytes(kc),
                          f"{prefix}_c"),
    ]
    return lines, f"{prefix}_c#0"


def plan_module(plan, target_attr: Optional[str] = None, flags: Sequence[str] = None, reference: bool = False,
                func: str = "main", **compile_options) -> str:
    """A complete module ``func.func @{func}(%a: A, %b: B) -> C`` running the plan's kernels.

    Args:
        plan: a :class:`CompiledPlan`, or a :class:`PlanSpec` to compile first
            (``compile_options`` go to :func:`compile_plan`).
        target_attr: the object key (default: :func:`~falcon_mlir.kernels.embed.cuda_target_attribute`).
        flags: the IREE target flags (default ``embed.DEFAULT_CUDA_FLAGS``).
        reference: also emit ``@reference``, the classical product compiled by IREE itself.
        func: name of the plan's function.

    Returns:
        MLIR text for ``iree-compile`` with :data:`~falcon_mlir.kernels.embed.KERNEL_MODULE_FLAGS`.
    """
    if isinstance(plan, PlanSpec):
        plan = compile_plan(plan, **compile_options)
    target_attr = target_attr or cuda_target_attribute(tuple(flags or DEFAULT_CUDA_FLAGS))
    s = plan.spec
    a_t, b_t, c_t = (tensor_type((s.M, s.K), s.dtype), tensor_type(s.b_shape, s.dtype),
                     tensor_type((s.M, s.N), s.out_dtype))
    lines, c = plan_dispatches(plan)
    body = [plan_executables(plan, target_attr),
            f"func.func @{func}(%a: {a_t}, %b: {b_t}) -> {c_t} {{\n" + "".join(f"  {ln}\n" for ln in lines)
            + f"  return {c} : {c_t}\n}}\n"]
    if reference:
        body.append(reference_func(GemmSpec(s.M, s.N, s.K, s.dtype, s.dtype, s.out_dtype, trans_b=s.trans_b)))
    return module_text(body)
