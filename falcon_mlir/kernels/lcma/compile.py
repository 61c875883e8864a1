"""Compiled combine kernels and plans: cache keys, worker jobs, :class:`CombineKernel`, :class:`CompiledPlan`.

The generated source is written to the kernel cache named by its SHA-256
(:func:`source_path`) and compiled by Triton in the worker process like the
GEMM (:func:`~falcon_mlir.kernels.aot.compile_batch`); every uncached kernel of
a batch of plans in one child process.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from ..aot import (CompiledKernel, CompileRequest, H200_SMS, _check_arch, _write_atomic, cache_dir, compile_batch,
                   decode_cubin, encode_cubin, gemm_request, read_entry, triton_version)
from ..configs import KernelConfig
from ..launched import LaunchedKernel, launch_facts
from .combine import CombineConfig, CombineSpec, combine_launch, combine_specs, default_combine_config, output_groups
from .scale import ABSMAX_FN, ABSMAX_SOURCE, NP, AbsmaxConfig, AbsmaxSpec
from .source import COMBINE_FN, GENERATOR_VERSION, scale_pointers, combine_source, source_file_name
from .spec import PlanGeometry, PlanSpec, plan_geometry, products_spec, resolve_scheme


@dataclass(frozen=True)
class CombineKernel(LaunchedKernel):
    """A compiled combine kernel (or a scaled plan's absmax kernel, ``spec`` an
    :class:`~.scale.AbsmaxSpec`) and its launch facts (the fields are :class:`LaunchedKernel`'s; the same ABI
    as the GEMM: pointers ``x``, a scaled combine's absmax partials, ``y``, then Triton's global and profile
    scratch).

    Attributes:
        spec, config: what it computes and its tiling.
        source_sha256: SHA-256 of its generated source.
        constexprs: the source's ``tl.constexpr`` arguments.
    """

    spec: CombineSpec = field(repr=False)
    config: CombineConfig
    source_sha256: str = field(kw_only=True)
    constexprs: dict = field(kw_only=True)

    @property
    def in_shape(self) -> tuple:
        return self.spec.in_shape

    @property
    def out_shape(self) -> tuple:
        return self.spec.out_shape

    def metadata(self) -> dict:
        d = self._facts(("arch", "name", "num_warps", "shared", "global_scratch_size", "profile_scratch_size",
                         "num_programs", "triton_version", "key", "registers", "stack_bytes", "source_sha256"))
        d.update(constexprs=self.constexprs, role=self.spec.role)
        return d

    def _to_json(self) -> str:
        d = {k: getattr(self, k) for k in ("source_sha256", "constexprs", "arch", "name", "num_warps", "shared",
                                           "global_scratch_size", "global_scratch_align", "profile_scratch_size",
                                           "profile_scratch_align", "num_programs", "triton_version", "key",
                                           "registers", "stack_bytes", "compile_seconds")}
        d.update(format=GENERATOR_VERSION, **encode_cubin(self.cubin))
        return json.dumps(d, sort_keys=True)


_PRIVATE_SOURCES: Optional[Path] = None


def _private_sources() -> Path:
    """A folder of this process's own for generated sources (removed at exit)."""
    global _PRIVATE_SOURCES
    if _PRIVATE_SOURCES is None:
        import atexit
        import shutil
        import tempfile

        _PRIVATE_SOURCES = Path(tempfile.mkdtemp(prefix="falcon-sources-"))
        atexit.register(shutil.rmtree, _PRIVATE_SOURCES, True)
    return _PRIVATE_SOURCES


def source_path(text: str) -> Path:
    """Where a generated source lives: ``cache_dir()/sources/<sha256>.py`` (written once, atomically).

    Where the cache cannot be written (read-only, a file in its place, no
    such folder to make), a temporary folder of this process's own: the
    Triton child reads the source from that file, and an unwritable cache
    costs only the cache.
    """
    name = source_file_name(text)
    p = cache_dir() / "sources" / name
    try:
        if not (p.is_file() and p.read_text() == text):
            _write_atomic(p, text)
        return p
    except (OSError, UnicodeDecodeError):
        pass
    p = _private_sources() / name
    if not (p.is_file() and p.read_text() == text):
        _write_atomic(p, text)
    return p


_PTR = {"f32": "*fp32", "f16": "*fp16", "bf16": "*bf16"}


def _source_request(spec, config, text: str, fn: str, signature: dict, cx: dict, programs: int, what: str,
                    types: dict, arch: str):
    """The :class:`~falcon_mlir.kernels.aot.CompileRequest` of one generated-source kernel (a combine or an
    absmax): its cache key (generator version, source hash, constexprs, warps, ``types``, Triton, arch),
    the worker job, and how a result or a cache entry becomes a :class:`CombineKernel`."""
    capability = _check_arch(arch)
    sha = hashlib.sha256(text.encode()).hexdigest()
    key = hashlib.sha256(json.dumps({"format": GENERATOR_VERSION, "source": sha, "constexprs": cx,
                                     "num_warps": config.num_warps, **types, "triton": triton_version(),
                                     "arch": arch}, sort_keys=True).encode()).hexdigest()
    job = {"kind": "source", "path": str(source_path(text)), "fn": fn, "signature": signature, "constexprs": cx,
           "pointers": len(signature), "options": {"num_warps": config.num_warps, "num_stages": 1},
           "capability": capability, "label": what}

    def build(result: dict) -> CombineKernel:
        return CombineKernel(spec=spec, config=config, source_sha256=sha, constexprs=cx, arch=arch,
                             num_programs=programs, key=key, **launch_facts(what, result))

    def load(text_: str) -> CombineKernel:
        d = read_entry(text_)
        if d.pop("format") != GENERATOR_VERSION or d["key"] != key:
            raise ValueError("stale cache entry")
        d["cubin"] = decode_cubin(d)
        return CombineKernel(spec=spec, config=config, from_cache=True, **d)

    return CompileRequest(key=key, job=job, build=build, load=load, dump=lambda k: k._to_json())


def combine_request(cs: CombineSpec, config: Optional[CombineConfig] = None,
                    arch: str = "sm_90a") -> tuple:
    """(:class:`~falcon_mlir.kernels.aot.CompileRequest`, source text, groups) of one combine kernel."""
    config = config or default_combine_config(cs)
    groups = output_groups(cs, config.max_live)
    text = combine_source(cs, groups)
    cx, programs = combine_launch(cs, config)
    what = f"combine {cs.role.upper()} ({cs.direction}, {len(cs.coeffs)} outputs, {cs.rows}x{cs.cols} " \
           f"{cs.in_dtype}->{cs.out_dtype}) with {config.label}"
    signature = {"x_ptr": _PTR[cs.in_dtype], **{n: "*fp32" for n in scale_pointers(cs)}, "y_ptr": _PTR[cs.out_dtype]}
    req = _source_request(cs, config, text, COMBINE_FN[cs.role], signature, cx, programs, what,
                          {"in": cs.in_dtype, "out": cs.out_dtype}, arch)
    return req, text, groups


def absmax_request(spec: AbsmaxSpec, config: Optional[AbsmaxConfig] = None, arch: str = "sm_90a") -> tuple:
    """(:class:`~falcon_mlir.kernels.aot.CompileRequest`, source text) of a scaled plan's absmax kernel."""
    config = config or AbsmaxConfig()
    what = f"absmax of a {spec.rows}x{spec.cols} {spec.dtype} matrix with {config.label}"
    req = _source_request(spec, config, ABSMAX_SOURCE, ABSMAX_FN, {"x_ptr": _PTR[spec.dtype], "y_ptr": "*fp32"},
                          spec.constexprs(), NP, what, {"in": spec.dtype}, arch)
    return req, ABSMAX_SOURCE


# --------------------------------------------------------------------------- plans

@dataclass(frozen=True)
class CompiledPlan:
    """A plan's compiled kernels: ``combine_a``, ``combine_b``, ``products``, ``combine_c``, and for a scaled
    plan (:mod:`.scale`) ``absmax_a``, ``absmax_b`` (``None`` otherwise)."""

    spec: PlanSpec
    scheme_name: str
    geometry: PlanGeometry
    combine_a: CombineKernel
    combine_b: CombineKernel
    products: CompiledKernel
    combine_c: CombineKernel
    sources: dict = field(repr=False, default_factory=dict)  # role -> generated source text
    groups: dict = field(repr=False, default_factory=dict)   # role -> output groups
    absmax_a: Optional[CombineKernel] = None
    absmax_b: Optional[CombineKernel] = None

    @property
    def kernels(self) -> tuple:
        scaled = (self.absmax_a, self.absmax_b) if self.absmax_a is not None else ()
        return scaled + (self.combine_a, self.combine_b, self.products, self.combine_c)

    def traffic(self) -> dict:
        """Bytes each combine kernel reads and writes (see ``CombineSpec.traffic_bytes``)."""
        return {r: getattr(self, f"combine_{r}").spec.traffic_bytes(self.groups[r]) for r in ("a", "b", "c")}

    def metadata(self) -> dict:
        g = self.geometry
        kernels = {"combine_a": self.combine_a.metadata(), "combine_b": self.combine_b.metadata(),
                   "products": self.products.metadata(), "combine_c": self.combine_c.metadata()}
        if self.absmax_a is not None:
            kernels.update(absmax_a=self.absmax_a.metadata(), absmax_b=self.absmax_b.metadata())
        return {"spec": self.spec.to_dict(), "scheme": self.scheme_name, "geometry": asdict(g),
                "traffic": self.traffic(), "groups": {r: len(v) for r, v in self.groups.items()},
                "kernels": kernels}


def plan_requests(spec: PlanSpec, gemm_config: Optional[KernelConfig] = None,
                  combine_configs: Optional[dict] = None, scheme=None, arch: str = "sm_90a",
                  num_sms: int = H200_SMS) -> tuple:
    """(requests in the order a, b, products, c, then absmax A and B for a scaled plan; sources; groups) for
    :func:`compile_plans`."""
    css = combine_specs(spec, scheme)
    geo = plan_geometry(spec, scheme)
    combine_configs = combine_configs or {}
    reqs, sources, groups = {}, {}, {}
    for role in ("a", "b", "c"):
        reqs[role], sources[role], groups[role] = combine_request(css[role], combine_configs.get(role), arch)
    reqs["p"] = gemm_request(products_spec(spec, geo), gemm_config, arch, num_sms)
    out = [reqs["a"], reqs["b"], reqs["p"], reqs["c"]]
    if spec.scaled:
        for rows, cols in ((spec.M, spec.K), spec.b_shape):
            req, sources["absmax"] = absmax_request(AbsmaxSpec(rows, cols, spec.dtype), arch=arch)
            out.append(req)
    return out, sources, groups


def compile_plans(items: Sequence, arch: str = "sm_90a", num_sms: int = H200_SMS, cache: bool = True,
                  errors: str = "raise") -> list:
    """Compile several plans, every uncached kernel of all of them in one Triton child process.

    Args:
        items: :class:`PlanSpec`, or ``(spec, options)`` with options a dict of
            :func:`compile_plan`'s keywords (``gemm_config``, ``combine_configs``, ``scheme``).
        errors: ``"raise"`` or ``"return"`` (a failed plan's entry is the exception).

    Returns:
        One :class:`CompiledPlan` (or exception) per item.
    """
    prepared, flat = [], []
    for it in items:
        spec, opts = (it, {}) if isinstance(it, PlanSpec) else it
        try:
            reqs, sources, groups = plan_requests(spec, arch=arch, num_sms=num_sms, **opts)
            scheme = opts.get("scheme")
            name = scheme.name if scheme is not None else resolve_scheme(spec.scheme).name
            prepared.append((spec, name, reqs, sources, groups, opts))
            flat.extend(reqs)
        except ValueError as e:
            if errors == "raise":
                raise
            prepared.append(e)
    done = iter(compile_batch(flat, cache=cache, errors=errors))
    out = []
    for p in prepared:
        if isinstance(p, Exception):
            out.append(p)
            continue
        spec, name, reqs, sources, groups, opts = p
        ks = [next(done) for _ in reqs]
        bad = [k for k in ks if isinstance(k, Exception)]
        if bad:
            out.append(bad[0])
            continue
        out.append(CompiledPlan(spec=spec, scheme_name=name, geometry=plan_geometry(spec, opts.get("scheme")),
                                combine_a=ks[0], combine_b=ks[1], products=ks[2], combine_c=ks[3],
                                sources=sources, groups=groups, absmax_a=ks[4] if spec.scaled else None,
                                absmax_b=ks[5] if spec.scaled else None))
    return out


def compile_plan(spec: PlanSpec, gemm_config: Optional[KernelConfig] = None,
                 combine_configs: Optional[dict] = None, scheme=None, arch: str = "sm_90a",
                 num_sms: int = H200_SMS, cache: bool = True) -> CompiledPlan:
    """Generate and compile the four kernels of ``spec`` (one Triton child process for all of them).

    Args:
        spec: the plan.
        gemm_config: the products' GEMM configuration (default: the table's for the batched products).
        combine_configs: ``{"a"|"b"|"c": CombineConfig}`` (default :func:`default_combine_config`).
        scheme: a :class:`~falcon_mlir.catalog.Scheme` to use instead of the catalog's ``spec.scheme``.
        arch, num_sms, cache: as :func:`~falcon_mlir.kernels.aot.compile_kernel`.

    Raises:
        ValueError, RuntimeError: a kernel cannot be built (one line naming it).
    """
    opts = {"gemm_config": gemm_config, "combine_configs": combine_configs, "scheme": scheme}
    return compile_plans([(spec, opts)], arch=arch, num_sms=num_sms, cache=cache)[0]
