"""How to launch a plan's kernels by Triton's JIT or interpreter (no compiling): sources, constexprs, grids."""

from __future__ import annotations

from dataclasses import asdict
from typing import Optional

from ..configs import KernelConfig, choose_config
from .combine import combine_launch, combine_specs, default_combine_config, output_groups
from .source import COMBINE_FN, combine_source
from .spec import PlanSpec, plan_geometry, products_spec


def plan_launches(spec: PlanSpec, gemm_config: Optional[KernelConfig] = None,
                  combine_configs: Optional[dict] = None, scheme=None) -> dict:
    """How to launch a plan's kernels by Triton's JIT or interpreter (no compiling here).

    Returns:
        ``{"a"|"b"|"c": {"source": TEXT, "fn", "constexprs", "programs", "num_warps", "config", "groups"},
        "p": {"spec": GemmSpec dict, "config": KernelConfig dict}, "geometry": {...}, "spec": {...}}``.
    """
    css = combine_specs(spec, scheme)
    geo = plan_geometry(spec, scheme)
    combine_configs = combine_configs or {}
    out = {"spec": spec.to_dict(), "geometry": asdict(geo)}
    for role in ("a", "b", "c"):
        cs = css[role]
        cfg = combine_configs.get(role) or default_combine_config(cs)
        groups = output_groups(cs, cfg.max_live)
        cx, programs = combine_launch(cs, cfg)
        out[role] = {"source": combine_source(cs, groups), "fn": COMBINE_FN[role], "constexprs": cx,
                     "programs": programs, "num_warps": cfg.num_warps, "config": cfg.label, "groups": len(groups),
                     "traffic": cs.traffic_bytes(groups)}
    ps = products_spec(spec, geo)
    out["p"] = {"spec": ps.to_dict(), "config": (gemm_config or choose_config(ps)).to_dict()}
    return out
