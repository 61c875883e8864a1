#!/usr/bin/env python3
"""Check and time falcon's generated GEMM kernels on a GPU, from a bundle built here; refill the table.

``prepare DIR`` (HERE, with falcon-mlir, Triton 3.6 and the IREE compiler):
for each shape x dtype x configuration, compile the kernel to an sm_90a cubin
and a module ``@main(A, B) -> C`` that runs it
(``falcon_mlir.kernels.gemm_module``), as ``DIR/modules/NAME.vmfb``; plus three
small correctness modules (transposed, batched, f32 output, odd sizes) that
also hold ``@reference``, the same product compiled by IREE itself (sm_80),
listed first so that ``run`` does them first. Copies this script, the GPU
side (``gpu_kernels_run.py`` and the files it imports,
``gpu_kernels_common.GPU_FILES``) and the kernel source
(``falcon_triton_gemm.py``) into DIR and writes ``manifest.json`` last; DIR
gets a ``.gitignore`` of ``*`` (a bundle inside a checkout stays out of git and
travels to the GPU machine only when named in ``carry``).

Options: ``--shapes MxNxK ...`` (16-bit modules; default: 8192^3, 16384^3 and
the Llama-3-8B / 70B weight shapes of workloads.md at M = 8192),
``--f32-shapes`` (f32 modules; default the two squares, or ``--shapes`` when
given), ``--dtypes`` (bf16 f16 f32; inputs and output of one type),
``--configs LABEL ...`` (``KernelConfig`` labels such as
``128x256x64,s3,w8,g8``; ``table``, the default, is the table's choice per
shape), ``--no-checks``, ``--cpu`` (a bundle for a dry run of the GPU side
here). A configuration that fails to compile is listed in the manifest and
skipped.

Tuning jobs (what ``tune`` runs there, cheapest first): ``--tune-shapes``
(16-bit, default: the Llama shapes, two DeepSeek-V3 shapes with awkward N and
16384^3), ``--tune-f32-shapes`` (default the squares; IEEE candidates plus,
unless ``--no-tf32x3``, 3xTF32 candidates and cuBLAS TF32 for information),
``--tune-dtypes``, ``--tune-configs LABEL ...`` (these candidates for every
job), ``--no-tune``. The candidates come per output-size class
(``gpu_kernels_pick.MN_CLASSES``); each is compiled here once first (``--no-tune-check`` skips
that) and dropped if it fails or does not fit, its registers and stack noted.

``pick RESULTS.json`` (HERE): from a ``tune`` result, the fastest candidate
per dtype and output-size class (geometric mean of its speed against cuBLAS
over the class's shapes) written into ``configs.json`` as ``tuned-*`` entries
with a ``source`` note (date, GPU, Triton, numbers); ``--table`` another
table, ``--dry-run`` prints without writing (``gpu_kernels_pick.py``).

``run DIR``, ``tune DIR``, ``check DIR``: the GPU side, see
``gpu_kernels_run.py`` (this script forwards to it; there it needs no
falcon-mlir).

Usage::

    python scripts/gpu_kernels.py prepare .kbundle                      # here
    python scripts/gpu_kernels.py check .kbundle                        # here
    python3 .kbundle/gpu_kernels.py run .kbundle --budget-s 120         # on the GPU machine
    python3 .kbundle/gpu_kernels.py tune .kbundle --budget-s 230        # on the GPU machine
    python scripts/gpu_kernels.py pick results/gpu_kernels_tune.json    # here, afterwards
    python scripts/gpu_kernels.py prepare /tmp/dry --cpu --shapes 256x192x128 \
        && python3 /tmp/dry/gpu_kernels.py run /tmp/dry --cpu          # dry run here
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_kernels_run as gpu  # noqa: E402  (the GPU side; copied into the bundle with this file)
from gpu_kernels_common import (DTYPES, FORMAT, GPU_FILES, KERNEL_FILE, MANIFEST, log, parse_shape,  # noqa: E402
                                write_atomic)

#: workloads.md weight shapes (K, N) with M = 8192, as MxNxK, plus the squares.
LLAMA = {"Llama-3-8B q/o": (4096, 4096), "Llama-3-8B k,v": (4096, 1024),
         "Llama-3-8B gate,up": (4096, 14336), "Llama-3-8B down": (14336, 4096),
         "Llama-3-70B q/o": (8192, 8192), "Llama-3-70B k,v": (8192, 1024),
         "Llama-3-70B gate,up": (8192, 28672), "Llama-3-70B down": (28672, 8192)}
#: DeepSeek-V3 weight shapes (K, N) with awkward N (workloads.md), for tuning.
DEEPSEEK = {"DeepSeek-V3 kv_a": (7168, 576), "DeepSeek-V3 q_a": (7168, 1536)}
SQUARES = {"square 8192": (8192, 8192, 8192), "square 16384": (16384, 16384, 16384)}
#: Small correctness modules (with IREE's own @reference): dtype, M, N, K, batch, trans_a, trans_b, out.
CHECKS = [("bf16", 1000, 1000, 1000, 1, True, False, "f32"),
          ("f16", 1000, 1032, 776, 3, False, True, "f16"),
          ("f32", 1000, 1000, 1000, 1, False, False, "f32"),
          # whole 128 x 128 tiles: falcon's f32 FMA kernel (the sizes above go to the Triton kernel)
          ("f32", 384, 256, 136, 3, False, True, "f32"),
          ("f32", 256, 384, 1032, 1, True, False, "f32")]
#: IREE flags of ``--cpu`` (dry-run) bundles.
CPU_FLAGS = ("--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
             "--iree-llvmcpu-target-cpu=host")
#: Tuning candidates (KernelConfig labels) per 16-bit output-size class (``gpu_kernels_pick.MN_CLASSES``): few
#: tiles want smaller tiles (more waves over 132 SMs), many tiles the big ones.
TUNE_16BIT = {
    "mn-small": ["128x256x64,s3,w8,g8", "128x128x64,s4,w8,g8", "128x128x128,s3,w8,g8",
                 "128x128x64,s4,w4,g8", "128x64x64,s4,w4,g8", "256x128x64,s3,w8,g8"],
    "mn-mid": ["128x256x64,s3,w8,g8", "128x256x64,s3,w8,g16", "256x128x64,s3,w8,g8",
               "128x256x64,s4,w8,g8,sub", "128x128x64,s4,w8,g8", "128x128x128,s3,w8,g8"],
    "mn-large": ["128x256x64,s3,w8,g8", "128x256x64,s3,w8,g16", "256x128x64,s3,w8,g8",
                 "128x256x64,s4,w8,g8,sub", "128x128x64,s4,w8,g8", "128x128x128,s3,w8,g8"],
}
#: IEEE f32 (FMA) candidates: none spills under Triton 3.6 (128x128x32,s3 was 0.836x of cuBLAS by JIT).
TUNE_F32 = ["128x128x32,s3,w8,g8", "128x128x16,s4,w8,g8", "128x128x64,s2,w8,g8", "64x256x32,s3,w8,g8",
            "128x256x16,s3,w8,g8", "128x128x32,s3,w8,g16"]
#: 3xTF32 candidates (information only: not IEEE FMA).
TUNE_TF32X3 = ["128x128x32,s3,w8,g8", "128x128x32,s2,w8,g8", "128x64x32,s4,w4,g8"]
#: The default LCMA plans (``--plans default``): SCHEME@MxNxK/DTYPE[/PRODUCT_DTYPE[/OPERAND_DTYPE]], in the order
#: run does them (grouped by shape and dtype). bf16: one to three levels with scaled f16 operands (the
#: default, ``/bf16``), one and two with bf16 operands (``/bf16/bf16/bf16``) beside them; f32 (IEEE FMA
#: products): one to three levels.
PLAN_DEFAULTS = (
    "strassen@16384x16384x16384/bf16", "strassen@16384x16384x16384/bf16/bf16/bf16",
    "strassen^2@16384x16384x16384/bf16", "strassen^2@16384x16384x16384/bf16/bf16/bf16",
    "strassen^3@16384x16384x16384/bf16", "strassen@8192x8192x8192/bf16",
    "strassen@32768x32768x32768/bf16", "strassen^2@32768x32768x32768/bf16",
    "strassen^3@32768x32768x32768/bf16",
    "strassen@8192x8192x8192/f32", "strassen^2@16384x16384x16384/f32", "strassen^3@32768x32768x32768/f32",
)
#: Plans with more products than this get no combine tile candidates (their kernels take long to JIT-compile).
CANDIDATE_MAX_R = 49
#: Rough rates (FLOP/s) to order tuning jobs cheapest first.
RATE = {"bf16": 650e12, "f16": 650e12, "f32": 45e12}


def default_shapes() -> dict:
    """label -> (M, N, K): the squares and the Llama weight shapes at M = 8192 (duplicates merged)."""
    labels = {}
    for label, mnk in list(SQUARES.items()) + [(k, (8192, n, kk)) for k, (kk, n) in LLAMA.items()]:
        labels.setdefault(mnk, []).append(label)
    return {"; ".join(names): mnk for mnk, names in labels.items()}


def default_tune_shapes() -> dict:
    """label -> (M, N, K) of the 16-bit tuning jobs: Llama shapes, two DeepSeek shapes, 16384^3."""
    shapes = default_shapes()
    for label, (k, n) in DEEPSEEK.items():
        shapes[label] = (8192, n, k)
    return shapes


def _labels(shapes: dict) -> dict:
    return {mnk: label for label, mnk in shapes.items()}


# --------------------------------------------------------------------------- prepare (here)

def tune_jobs(args, known: dict) -> list:
    """The tuning jobs, cheapest first: 16-bit shapes x dtypes, then f32 shapes (+ 3xTF32)."""
    from falcon_mlir.kernels.configs import KernelConfig
    from gpu_kernels_pick import mn_class

    def cand(label, mode="ieee"):
        return {"label": label, "f32_mode": mode, "config": KernelConfig.parse(label).to_dict()}
    jobs = []
    for dtype in args.tune_dtypes:
        shapes = args.tune_f32_shapes if dtype == "f32" else args.tune_shapes
        for (M, N, K) in shapes:
            if args.tune_configs:
                cands = [cand(c) for c in args.tune_configs]
            elif dtype == "f32":
                cands = [cand(c) for c in TUNE_F32] + ([cand(c, "tf32x3") for c in TUNE_TF32X3]
                                                       if args.tf32x3 else [])
            else:
                cands = [cand(c) for c in TUNE_16BIT[mn_class(M, N)]]
            jobs.append({"label": known.get((M, N, K), f"{M}x{N}x{K}"), "M": M, "N": N, "K": K, "dtype": dtype,
                         "class": "f32" if dtype == "f32" else mn_class(M, N), "candidates": cands,
                         "torch_tf32": dtype == "f32" and args.tf32x3})
    return sorted(jobs, key=lambda j: 2 * j["M"] * j["N"] * j["K"] / RATE[j["dtype"]])  # stable


def check_candidates(jobs: list) -> list:
    """Compile each distinct candidate here once (bf16 stands for f16), at the first job's shape that
    uses it, all in one Triton child process; drop those that fail (shared memory, Triton); note
    registers, stack and shared memory."""
    from falcon_mlir.kernels import GemmSpec
    from falcon_mlir.kernels.aot import compile_kernels
    from falcon_mlir.kernels.configs import KernelConfig

    first = {}
    for job in jobs:
        dtype = "bf16" if job["dtype"] == "f16" else job["dtype"]
        for c in job["candidates"]:
            key = (dtype, c["f32_mode"], job["class"], c["label"])
            if key not in first:
                first[key] = (GemmSpec(job["M"], job["N"], job["K"], dtype, dtype, dtype, f32_mode=c["f32_mode"]),
                              KernelConfig.parse(c["label"]))
    seen = {}
    for key, k in zip(first, compile_kernels(list(first.values()), errors="return")):
        dtype, _, _, label = key
        if isinstance(k, Exception):
            seen[key] = {"error": f"{type(k).__name__}: {k}"[:300]}
            log(f"  tune candidate {dtype} {label} dropped: {seen[key]['error']}")
        else:
            seen[key] = {"registers": k.registers, "stack_bytes": k.stack_bytes, "shared": k.shared,
                         "num_warps": k.num_warps}
            log(f"  tune candidate {dtype} {key[1]} {label}: {k.registers} registers, stack {k.stack_bytes}, "
                f"shared {k.shared} B")
    for job in jobs:
        dtype = "bf16" if job["dtype"] == "f16" else job["dtype"]
        job["candidates"] = [dict(c, aot=seen[(dtype, c["f32_mode"], job["class"], c["label"])])
                             for c in job["candidates"]
                             if "error" not in seen[(dtype, c["f32_mode"], job["class"], c["label"])]]
    return jobs


def prepare(args) -> int:
    from falcon_mlir.kernels import GemmSpec
    from falcon_mlir.kernels.aot import KERNEL_SOURCE, compile_kernels, default_config
    from falcon_mlir.kernels.configs import KernelConfig, adapt

    shapes = ({s: parse_shape(s) for s in args.shapes} if args.shapes else default_shapes())
    f32_shapes = ({s: parse_shape(s) for s in args.f32_shapes} if args.f32_shapes
                  else shapes if args.shapes else dict(SQUARES))
    configs = [None if c == "table" else KernelConfig.parse(c) for c in args.configs]
    plan_specs = parse_plan_items(args.plans, list(shapes.values()), args.dtypes) if args.plans else []
    out = Path(args.dir)
    if (out / MANIFEST).is_file():  # an older bundle of ours: its modules go
        for old in list((out / "modules").glob("*.vmfb")) + list((out / "plans").glob("*.vmfb")):
            old.unlink()
    out.mkdir(parents=True, exist_ok=True)
    (out / ".gitignore").write_text("# a build output (scripts/gpu_kernels.py prepare): never committed\n*\n")
    entries, failures, t_all = [], [], time.perf_counter()

    # What to build: the correctness modules first (run does them first, so a budget never skips them).
    todo = []
    if not args.no_checks:
        for dtype, M, N, K, batch, ta, tb, o in CHECKS:
            if dtype in args.dtypes:
                todo.append(("check", GemmSpec(M, N, K, dtype, dtype, o, batch=batch, trans_a=ta, trans_b=tb),
                             None, "check", True))
    if not args.no_gemm:
        for dtype in [d for d in args.dtypes if d != "f32"] + [d for d in args.dtypes if d == "f32"]:
            for label, (M, N, K) in (f32_shapes if dtype == "f32" else shapes).items():
                for config in configs:
                    todo.append((label, GemmSpec(M, N, K, dtype, dtype, dtype), config, "perf", False))
    # Every kernel in one Triton child process (the cached ones in none).
    items = []
    for _, spec, cfg, _, _ in todo:
        try:
            items.append((spec, adapt(spec, cfg) if cfg is not None else default_config(spec)))
        except ValueError as e:
            items.append(e)
    live = [it for it in items if not isinstance(it, Exception)]
    done = iter([_dry_kernel(spec, cfg) for spec, cfg in live] if args.cpu
                else compile_kernels(live, errors="return"))
    kernels = [it if isinstance(it, Exception) else next(done) for it in items]
    for (label, spec, config, kind, reference), kernel in zip(todo, kernels):
        _build_module(out, args, entries, failures, label, spec, config, kind, reference, kernel)
    for options in args.falcon_compile or []:
        for dtype in args.dtypes:
            for label, (M, N, K) in (f32_shapes if dtype == "f32" else shapes).items():
                _falcon_compile_module(out, args, entries, failures, label, GemmSpec(M, N, K, dtype, dtype, dtype),
                                       options)
    plan_entries = prepare_plans(out, args, plan_specs, failures) if plan_specs else []
    known = _labels(default_tune_shapes())
    jobs = [] if args.no_tune else tune_jobs(args, known)
    if jobs and not args.cpu and not args.no_tune_check:
        jobs = check_candidates(jobs)
    shutil.copyfile(KERNEL_SOURCE, out / KERNEL_FILE)
    here = Path(__file__).resolve().parent
    for script in GPU_FILES:
        shutil.copyfile(here / script, out / script)
    manifest = {"format": FORMAT, "made": time.strftime("%Y-%m-%d %H:%M:%S"), "entries": entries,
                "plans": plan_entries, "failures": failures, "tune": {"jobs": jobs},
                "kernel_sha256": hashlib.sha256((out / KERNEL_FILE).read_bytes()).hexdigest()}
    write_atomic(out / MANIFEST, json.dumps(manifest, indent=1))
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    log(f"prepared {len(entries)} modules, {len(plan_entries)} plan modules ({len(failures)} failed) and "
        f"{len(jobs)} tuning jobs "
        f"({sum(len(j['candidates']) for j in jobs)} candidates) in {time.perf_counter() - t_all:.0f}s: "
        f"{out} holds {size / 2**20:.1f} MiB")
    return 0 if entries or jobs or plan_entries else 1


def parse_plan_items(items, shapes, dtypes) -> list:
    """``--plans`` items -> PlanSpecs. An item is ``SCHEME[@MxNxK][/DTYPE[/PRODUCT_DTYPE[/OPERAND_DTYPE]]]`` or ``default``
    (``PLAN_DEFAULTS``); commas separate items. Types left out are PlanSpec's defaults: bf16 plans form
    scaled f16 operands and products (``/bf16/bf16/bf16``: bf16 operands). Without ``@`` an item is built for every ``--shapes``
    shape, without ``:DTYPE`` for every ``--dtypes`` dtype.

    Raises:
        ValueError: a malformed item (the message quotes it).
    """
    from falcon_mlir.catalog import UnknownSchemeError
    from falcon_mlir.kernels.lcma import PlanSpec, resolve_scheme

    specs = []
    for raw in [x for it in items for x in it.split(",") if x.strip()]:
        for item in (PLAN_DEFAULTS if raw.strip() == "default" else (raw.strip(),)):
            head, _, types = item.partition("/")
            scheme, _, shape = head.partition("@")
            parts = types.split("/") if types else []
            if len(parts) > 3 or any(p not in DTYPES for p in parts):
                raise ValueError(f"plan {item!r}: expected SCHEME[@MxNxK][/DTYPE[/PRODUCT_DTYPE[/OPERAND_DTYPE]]], "
                                 f"dtypes {', '.join(DTYPES)}")
            try:
                resolve_scheme(scheme)
            except UnknownSchemeError as e:
                raise ValueError(f"plan {item!r}: {e}") from None
            for mnk in ([parse_shape(shape)] if shape else list(shapes)):
                for dt in ([parts[0]] if parts else list(dtypes)):
                    try:
                        specs.append(PlanSpec(*mnk, scheme=scheme, dtype=dt,
                                              product_dtype=parts[1] if len(parts) > 1 else None,
                                              operand_dtype=parts[2] if len(parts) > 2 else None))
                    except ValueError as e:
                        raise ValueError(f"plan {item!r}: {e}") from None
    return specs


def combine_candidates(default) -> list:
    """Combine tile configurations the GPU's ``jit`` mode times besides the default (for information)."""
    from dataclasses import replace
    out = [default]
    for tile_r, warps in ((default.tile_r // 2, 4), (default.tile_r * 2, 4), (default.tile_r * 2, 8)):
        if 1 <= tile_r <= 256:
            cand = replace(default, tile_r=tile_r, num_warps=warps)
            if cand not in out:
                out.append(cand)
    return out


def prepare_plans(out: Path, args, specs: list, failures: list) -> list:
    """Compile the plans (every kernel in one Triton child), their modules, and the JIT launch facts
    (generated sources copied into ``out/sources``); the manifest's ``plans`` entries."""
    from falcon_mlir.kernels.lcma import compile_plans

    plans = [None] * len(specs) if args.cpu else compile_plans(specs, errors="return")
    entries = []
    for spec, plan in zip(specs, plans):
        try:
            if isinstance(plan, Exception):
                raise plan
            entries.append(_plan_entry(out, args, spec, plan))
        except Exception as e:  # one failing plan must not stop the bundle
            failures.append({"label": "plan", "spec": spec.name, "config": spec.scheme,
                             "error": f"{type(e).__name__}: {e}"})
            log(f"  FAILED plan {spec.name}: {type(e).__name__}: {e}")
    return entries


def _plan_entry(out: Path, args, spec, plan) -> dict:
    """One plan's module (``plan`` None: a ``--cpu`` bundle) and launch facts into the bundle; its manifest entry."""
    from falcon_mlir.kernels import compile_module
    from falcon_mlir.kernels.embed import reference_func
    from falcon_mlir.kernels.lcma import plan_module
    from falcon_mlir.kernels.spec import GemmSpec

    t0 = time.perf_counter()
    if args.cpu:  # dry run: @main is IREE's own classical product (jit runs the kernels interpreted)
        vmfb = compile_module(reference_func(GemmSpec(spec.M, spec.N, spec.K, spec.dtype, spec.dtype,
                                                      spec.out_dtype), "main"), CPU_FLAGS)
    else:
        vmfb = compile_module(plan_module(plan))
    write_atomic(out / "plans" / f"{spec.name}.vmfb", vmfb)
    jit = _combine_launches(out, spec, plan)
    md, products = (plan.metadata(), plan.products.config) if plan is not None else _dry_plan_metadata(spec, jit)
    jit["p"] = {"config": products.to_dict(), "label": products.label}
    label = f"{spec.dtype} {spec.M}x{spec.N}x{spec.K} products {spec.product_dtype} out {spec.out_dtype}" + \
        (f" operands {spec.operand_dtype} (scaled)" if spec.scaled else "")
    entry = {"name": spec.name, "label": label, "file": f"plans/{spec.name}.vmfb",
             "spec": spec.to_dict(), "scheme_name": md["scheme"], "geometry": md["geometry"],
             "kernels": md["kernels"], "traffic": md["traffic"], "jit": jit, "vmfb_bytes": len(vmfb)}
    ks = md["kernels"]
    log(f"  plan {spec.name}: iree {time.perf_counter() - t0:.1f}s, {len(vmfb)} B; " + "; ".join(
        f"{r} {ks[r].get('config')} {ks[r].get('registers')} regs, stack {ks[r].get('stack_bytes')}"
        for r in ("combine_a", "combine_b", "products", "combine_c")))
    return entry


def _combine_launches(out: Path, spec, plan) -> dict:
    """Role -> JIT launches of the plan's combine kernels: its tiles first, then (R <= ``CANDIDATE_MAX_R``)
    the other candidates; each source written once into ``out/sources``."""
    from falcon_mlir.kernels.lcma import combine_launch_entry, combine_specs, default_combine_config, source_file_name

    css = combine_specs(spec)
    jit = {}
    if spec.scaled:  # the JIT runner has no absmax partials to pass: scaled plans run from their modules only
        return jit
    for role in ("a", "b", "c"):
        default = getattr(plan, f"combine_{role}").config if plan else default_combine_config(css[role])
        cands = combine_candidates(default) if css[role].planes <= CANDIDATE_MAX_R else [default]
        jit[role] = []
        for cfg in cands:
            launch = combine_launch_entry(css[role], cfg)
            src = f"sources/{source_file_name(launch['source'])}"
            if not (out / src).is_file():
                write_atomic(out / src, launch["source"])
            jit[role].append(dict(launch, source=src))
    return jit


def _dry_plan_metadata(spec, jit: dict) -> tuple:
    """(metadata, products' config) of a ``--cpu`` bundle's plan (nothing compiled: the configurations only)."""
    from dataclasses import asdict

    from falcon_mlir.kernels.configs import choose_config
    from falcon_mlir.kernels.lcma import (combine_specs, default_combine_config, plan_geometry, products_spec,
                                          resolve_scheme)

    geo = plan_geometry(spec)
    products = choose_config(products_spec(spec, geo))
    css = combine_specs(spec)
    md = {"scheme": resolve_scheme(spec.scheme).name, "geometry": asdict(geo), "traffic": None,
          "kernels": {"combine_a": {"config": default_combine_config(css["a"]).label},
                      "combine_b": {"config": default_combine_config(css["b"]).label},
                      "products": {"config": products.label},
                      "combine_c": {"config": default_combine_config(css["c"]).label}}}
    return md, products


def _build_module(out, args, entries, failures, label, spec, config, kind, reference, kernel) -> None:
    """Compile one GEMM module (``kernel`` compiled already, or the exception that stopped it) into the bundle."""
    from falcon_mlir.kernels import compile_module, gemm_module
    from falcon_mlir.kernels.embed import reference_func

    cfg_label = getattr(config, "label", "table")
    try:
        if isinstance(kernel, Exception):
            raise kernel
        config = kernel.config
        t0 = time.perf_counter()
        if args.cpu:
            vmfb = compile_module(reference_func(spec, "main") + (reference_func(spec) if reference else ""),
                                  CPU_FLAGS)
        else:
            vmfb = compile_module(gemm_module(spec, kernel=kernel, reference=reference))
        name = f"{spec.name}__{config.label.replace(',', '_')}"
        write_atomic(out / "modules" / f"{name}.vmfb", vmfb)
        entries.append({"name": name, "label": label, "kind": kind, "file": f"modules/{name}.vmfb",
                        "spec": spec.to_dict(), "config": config.to_dict(), "config_label": config.label,
                        "kernel": kernel.metadata(), "reference": reference, "vmfb_bytes": len(vmfb)})
        log(f"  {name}: triton {kernel.compile_seconds:.1f}s{' (cached)' if kernel.from_cache else ''}, "
            f"iree {time.perf_counter() - t0:.1f}s, cubin {len(kernel.cubin)} B, shared {kernel.shared} B, "
            f"{kernel.threads} threads, {kernel.registers} registers, stack {kernel.stack_bytes}, "
            f"{kernel.num_programs} programs")
    except Exception as e:  # one failing configuration must not stop the bundle
        failures.append({"label": label, "spec": spec.name, "config": cfg_label,
                         "error": f"{type(e).__name__}: {e}"})
        log(f"  FAILED {spec.name} {cfg_label}: {type(e).__name__}: {e}")


def matmul_mlir(spec) -> str:
    """``func.func @main(A, B) -> C``: a plain ``linalg.matmul`` (C zero-filled, every operand in
    ``spec.a_dtype``), what a user hands to falcon-compile."""
    from falcon_mlir.kernels.embed import tensor_type

    a_t, b_t = tensor_type(spec.a_shape, spec.a_dtype), tensor_type(spec.b_shape, spec.a_dtype)
    c_t = tensor_type(spec.c_shape, spec.a_dtype)
    return (f"func.func @main(%a: {a_t}, %b: {b_t}) -> {c_t} {{\n"
            f"  %z = arith.constant 0.0 : {spec.a_dtype}\n"
            f"  %e = tensor.empty() : {c_t}\n"
            f"  %c = linalg.fill ins(%z : {spec.a_dtype}) outs(%e : {c_t}) -> {c_t}\n"
            f"  %r = linalg.matmul ins(%a, %b : {a_t}, {b_t}) outs(%c : {c_t}) -> {c_t}\n"
            f"  return %r : {c_t}\n}}\n")


def _falcon_compile_flags(args) -> list:
    return list(CPU_FLAGS) if args.cpu else ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"]


def _falcon_compile_kernels(args):
    """falcon-compile's ``kernels``: the target's default, except in ``--cpu`` (dry-run) bundles, whose
    modules are IREE's own code (falcon's CPU kernel would stand in for what the GPU runs)."""
    return None if args.cpu else "auto"


def check_falcon_compile(args) -> None:
    """Check ``--falcon-compile``'s options before anything is built (a typo found after the GEMM modules,
    once per shape and dtype, left a bundle without them).

    Raises:
        ValueError: options given twice (they would name one module file twice) or options
            falcon-compile refuses for this bundle's target (``OptionError``, a ValueError).
    """
    from falcon_mlir.pipeline.assemble import rewrite_stages

    seen: dict = {}
    for options in args.falcon_compile or []:
        tag = _falcon_compile_tag(options)
        if tag in seen:
            raise ValueError(f"--falcon-compile {options!r} names the module of {seen[tag]!r} again")
        seen[tag] = options
        try:
            rewrite_stages(options, "auto", _falcon_compile_flags(args), kernels=_falcon_compile_kernels(args))
        except ValueError as e:
            raise ValueError(f"--falcon-compile {options!r}: {e}") from None


def _falcon_compile_tag(options: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", options.lower()).strip("_")


def _falcon_compile_module(out, args, entries, failures, label, spec, options: str) -> None:
    """One module through falcon-compile's pipeline (``options``: lcma-rewrite's), entered like a GEMM
    module (kind ``falcon-compile``; the report's plan and kernels in the entry)."""
    import falcon_mlir

    name = f"fc_{spec.name}__{_falcon_compile_tag(options)}"
    try:
        t0 = time.perf_counter()
        report: list = []
        vmfb = falcon_mlir.compile_str(matmul_mlir(spec), extra_args=_falcon_compile_flags(args), lcma=options,
                                       kernels=_falcon_compile_kernels(args), report=report)
        write_atomic(out / "modules" / f"{name}.vmfb", vmfb)
        plan = report[0].get("plan") if report else None
        entries.append({"name": name, "label": label, "kind": "falcon-compile", "file": f"modules/{name}.vmfb",
                        "spec": spec.to_dict(), "config": {}, "config_label": f"falcon-compile {options}",
                        "kernel": {}, "reference": False, "vmfb_bytes": len(vmfb), "report": report})
        log(f"  {name}: falcon-compile {time.perf_counter() - t0:.1f}s, {len(vmfb)} B, plan {plan}")
    except Exception as e:  # one failing module must not stop the bundle
        failures.append({"label": label, "spec": spec.name, "config": f"falcon-compile {options}",
                         "error": f"{type(e).__name__}: {e}"})
        log(f"  FAILED {name}: {type(e).__name__}: {e}")


def _dry_kernel(spec, config):
    """For ``--cpu`` bundles: @main is IREE's own linalg code, so no kernel; the metadata is empty."""
    from falcon_mlir.kernels.aot import CompiledKernel
    return CompiledKernel(spec=spec, config=config, arch="none", name="none", cubin=b"", num_warps=0,
                          shared=0, global_scratch_size=0, global_scratch_align=1, profile_scratch_size=0,
                          profile_scratch_align=1, num_programs=0, triton_version="none", key="dry-run")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in ("prepare", "pick"):
        return gpu.main(argv)  # run, tune, check
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    pp = sub.add_parser("prepare", help="build the bundle here")
    pp.add_argument("dir")
    pp.add_argument("--shapes", nargs="+", help="MxNxK ... (default: squares and Llama weights at M=8192)")
    pp.add_argument("--f32-shapes", nargs="+", help="MxNxK of the f32 modules (default: the squares, "
                    "or --shapes when given)")
    pp.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    pp.add_argument("--configs", nargs="+", default=["table"], help="KernelConfig labels or 'table'")
    pp.add_argument("--tune-shapes", nargs="+", help="16-bit tuning shapes (default: Llama, DeepSeek kv_a/q_a, "
                    "the squares)")
    pp.add_argument("--tune-f32-shapes", nargs="+", help="f32 tuning shapes (default: the squares)")
    pp.add_argument("--tune-dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    pp.add_argument("--no-tf32x3", dest="tf32x3", action="store_false",
                    help="leave 3xTF32 and cuBLAS TF32 (information) out of the f32 tuning jobs")
    pp.add_argument("--tune-configs", nargs="+", metavar="LABEL",
                    help="tuning candidates (KernelConfig labels) for every tuning job, in place of the "
                         "per-class lists (TUNE_16BIT, TUNE_F32)")
    pp.add_argument("--no-tune", action="store_true", help="no tuning jobs")
    pp.add_argument("--no-tune-check", action="store_true", help="do not compile the tuning candidates here")
    pp.add_argument("--no-checks", action="store_true", help="leave out the small correctness modules")
    pp.add_argument("--no-gemm", action="store_true", help="no GEMM modules for --shapes (e.g. a plans-only bundle)")
    pp.add_argument("--plans", nargs="+", help="LCMA plan modules: SCHEME[@MxNxK][/DTYPE[/PRODUCT_DTYPE]] items "
                    "(commas allowed; without @ for every --shapes shape, without /DTYPE for every --dtypes "
                    "dtype), or 'default' (PLAN_DEFAULTS)")
    pp.add_argument("--falcon-compile", nargs="+", metavar="OPTIONS",
                    help="also compile a plain linalg.matmul of each --shapes shape and dtype through "
                         "falcon-compile's pipeline (falcon_mlir.compile_str, cuda, sm_80 for IREE's own "
                         "dispatches) with these lcma-rewrite options each, e.g. auto or \"scheme=strassen "
                         "levels=2 form=kernel operands=f16\": the module a user gets, run like a GEMM module")
    pp.add_argument("--cpu", action="store_true",
                    help="dry-run bundle: @main is IREE's own llvm-cpu code (tests the run logic here)")
    pk = sub.add_parser("pick", help="write the tune result's winners into the configuration table")
    pk.add_argument("results", help="gpu_kernels_tune.json")
    pk.add_argument("--table", help="table to rewrite (default: the package's configs.json)")
    pk.add_argument("--dry-run", action="store_true", help="print the entries, write nothing")
    pk.add_argument("--date", help="date of the measurement for the notes (default: the result's, else today)")
    args = p.parse_args(argv)
    try:
        if args.mode == "pick":
            from gpu_kernels_pick import pick
            return pick(args)
        for s in (args.shapes or []) + (args.f32_shapes or []) + (args.tune_shapes or []) + \
                (args.tune_f32_shapes or []):
            parse_shape(s)
        args.tune_shapes = ([parse_shape(s) for s in args.tune_shapes] if args.tune_shapes
                            else list(default_tune_shapes().values()))
        args.tune_f32_shapes = ([parse_shape(s) for s in args.tune_f32_shapes] if args.tune_f32_shapes
                                else list(SQUARES.values()))
        check_falcon_compile(args)
        return prepare(args)
    except ValueError as e:
        log(f"error: {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
