"""How to launch a plan's kernels by Triton's JIT or interpreter (no compiling): sources, constexprs, grids."""

from __future__ import annotations

from dataclasses import asdict
from typing import Optional

from ..configs import KernelConfig, choose_config
from .combine import (CombineConfig, CombineSpec, combine_launch, combine_specs, default_combine_config,
                      output_groups)
from .scale import ABSMAX_FN, ABSMAX_SOURCE, NP, AbsmaxConfig, AbsmaxSpec
from .source import COMBINE_FN, combine_source
from .spec import PlanSpec, plan_geometry, products_spec


def combine_launch_entry(cs: CombineSpec, config: CombineConfig) -> dict:
    """How to launch one combine kernel by Triton's JIT or interpreter: ``{"source": TEXT, "fn", "constexprs",
    "programs", "num_warps", "config" (label), "groups" (count), "traffic" (bytes read and written)}``."""
    groups = output_groups(cs, config.max_live)
    cx, programs = combine_launch(cs, config)
    return {"source": combine_source(cs, groups), "fn": COMBINE_FN[cs.role], "constexprs": cx,
            "programs": programs, "num_warps": config.num_warps, "config": config.label, "groups": len(groups),
            "traffic": cs.traffic_bytes(groups)}


def absmax_launch_entry(spec: AbsmaxSpec, config: Optional[AbsmaxConfig] = None) -> dict:
    """How to launch an absmax kernel: ``{"source", "fn", "constexprs", "programs", "num_warps", "config"}``."""
    config = config or AbsmaxConfig()
    return {"source": ABSMAX_SOURCE, "fn": ABSMAX_FN, "constexprs": spec.constexprs(), "programs": NP,
            "num_warps": config.num_warps, "config": config.label, "traffic": spec.traffic_bytes()}


def plan_launches(spec: PlanSpec, gemm_config: Optional[KernelConfig] = None,
                  combine_configs: Optional[dict] = None, scheme=None) -> dict:
    """How to launch a plan's kernels by Triton's JIT or interpreter (no compiling here).

    Returns:
        ``{"a"|"b"|"c": combine_launch_entry(...),
        "p": {"spec": GemmSpec dict, "config": KernelConfig dict}, "geometry": {...}, "spec": {...}}``;
        a scaled plan (:mod:`.scale`) also ``"ma"``, ``"mb"``: the absmax kernels of A and B
        (:func:`absmax_launch_entry`), whose partials combine A (B) and combine C read after their input.
    """
    css = combine_specs(spec, scheme)
    geo = plan_geometry(spec, scheme)
    combine_configs = combine_configs or {}
    out = {"spec": spec.to_dict(), "geometry": asdict(geo)}
    for role in ("a", "b", "c"):
        out[role] = combine_launch_entry(css[role], combine_configs.get(role) or default_combine_config(css[role]))
    if spec.scaled:
        out["ma"] = absmax_launch_entry(AbsmaxSpec(spec.M, spec.K, spec.dtype))
        out["mb"] = absmax_launch_entry(AbsmaxSpec(*spec.b_shape, spec.dtype))
    ps = products_spec(spec, geo)
    out["p"] = {"spec": ps.to_dict(), "config": (gemm_config or choose_config(ps)).to_dict()}
    return out
