"""falcon-accuracy: measured vs predicted error of classical GEMM and LCMA plans.

Usage::

    python3 scripts/accuracy.py [--quick] [--sizes 64,128,256,512]
        [--dtypes f32,f16,bf16,f64] [--plans NAME,...] [--seeds 5] [--jobs 2]
        [--md docs/accuracy.md] [--png docs/accuracy.png] [--json FILE]

For each element type, square size S and plan it builds ``C = A @ B`` as
one ``linalg.matmul`` (S x S x S), rewrites it with ``lcma-rewrite`` (the
plan's schemes, peeling at the edges), compiles it with IREE for the host
CPU (:mod:`falcon_mlir.runner`), runs it on ``--seeds`` random normal inputs
(zero accumulator) and records the max-norm relative error
``max|C - C_ref| / max|C_ref|`` against a reference of the same rounded
inputs: float64 numpy for f32/f16/bf16, extended precision (``np.longdouble``)
for f64 (a float64 reference would be as wrong as what it checks).

Element types (``--dtypes``): ``f32`` (f32 x f32 -> f32), ``f16`` (f16
accumulated in f16), ``bf16`` (bf16 x bf16 -> f32), ``f64`` (compiled with
``--iree-input-demote-f64-to-f32=false``).

Plans (``--plans``): ``classical``, a scheme name (one level) or
``NAME^L`` (L levels of the same scheme), or ``a*b`` (one scheme per level).

Writes a markdown report (tables per element type: measured median error /
:func:`falcon_mlir.decision.numerics.predicted_error` per plan and size, E and E^L,
the calibration statistics) and a log-log plot (one panel per element type),
both headed by the command that made them.
"""

from __future__ import annotations

import io
import json
import math
import os
import shlex
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from falcon_mlir.cli import ArgumentParser, ToolError, run_tool
from falcon_mlir.compare import rel_err
from falcon_mlir.dtypes import np_type
from falcon_mlir.files import write_atomic

#: The docs folder of the repository this script lives in (the default output, wherever it is run from).
DOCS = Path(__file__).resolve().parents[1] / "docs"

DEFAULT_SIZES = (64, 128, 256, 512)
DEFAULT_PLANS = ("classical", "strassen", "winograd", "3x3x3:23", "2x3x4:20", "4x4x4:49",
                 "4x4x4:48", "strassen^2", "strassen^3", "winograd^2", "winograd^3")
#: f16 -> f16 left the default sweep when plans on bf16/f16 results began to
#: accumulate in f32 (the narrow-result section, ``--narrow``, covers it).
DEFAULT_DTYPES = ("f32", "bf16", "f64")
QUICK = {"sizes": (64, 128), "plans": ("classical", "strassen", "strassen^2", "3x3x3:23"),
         "seeds": 3}

#: name -> (input element type, accumulator element type)
DTYPES = {"f32": ("f32", "f32"), "f16": ("f16", "f16"), "bf16": ("bf16", "f32"),
          "f64": ("f64", "f64")}
DTYPE_LABEL = {"f32": "f32", "f16": "f16 -> f16 (classical: IREE's f16 accumulation; plans: f32, see --narrow)", "bf16": "bf16 inputs -> f32",
               "f64": "f64"}


# ----------------------------------------------------------------------------
# Building, rewriting, running
# ----------------------------------------------------------------------------

def plan_schemes(plan: str) -> List[str]:
    """``"classical"`` -> [], ``"strassen^2"`` -> ["strassen", "strassen"], ``"a*b"`` -> [a, b]."""
    if plan == "classical":
        return []
    if "^" in plan:
        name, _, levels = plan.partition("^")
        return [name] * int(levels)
    return plan.split("*")


def rewrite(text: str, schemes: List[str], extra: str = "") -> str:
    """Run lcma-rewrite with the given per-level schemes (and ``extra`` options);
    checks one contraction was rewritten."""
    from iree.compiler import ir

    from falcon_mlir.passes.lcma_rewrite import LcmaOptions, run_lcma_rewrite

    opts = LcmaOptions.parse(f"scheme={','.join(schemes)} levels={len(schemes)} {extra}".strip())
    with ir.Context():
        module = ir.Module.parse(text)
        report = run_lcma_rewrite(module.operation, opts)
        if len(report) != 1 or report[0]["plan"] == "classical":
            raise RuntimeError(f"plan {schemes} not applied: {report}")
        if not module.operation.verify():
            raise RuntimeError("rewritten module does not verify")
        return str(module)


@lru_cache(maxsize=None)
def inputs(dtype: str, size: int, seed: int):
    """Seeded normal operands rounded to the input type, zero C, and the reference."""
    lhs, acc = DTYPES[dtype]
    rng = np.random.default_rng([seed, size, sorted(DTYPES).index(dtype)])
    a = rng.standard_normal((size, size)).astype(np_type(lhs))
    b = rng.standard_normal((size, size)).astype(np_type(lhs))
    c = np.zeros((size, size), dtype=np_type(acc))
    wide = np.longdouble if acc == "f64" else np.float64
    ref = a.astype(wide) @ b.astype(wide)
    return a, b, c, ref


def measure(dtype: str, size: int, plan: str, seeds: int) -> dict:
    """Compile one (dtype, size, plan) cell and return its errors over the seeds."""
    from falcon_mlir.ir.matmul_text import matmul_mlir
    from falcon_mlir.runner import CPU_FLAGS, Module, compile_mlir

    lhs, acc = DTYPES[dtype]
    t0 = time.perf_counter()
    text = matmul_mlir(size, size, size, lhs, acc, func="f", init="arg")  # @f(A, B, C) -> C + A @ B
    schemes = plan_schemes(plan)
    if schemes:
        text = rewrite(text, schemes)
    flags = CPU_FLAGS + (("--iree-input-demote-f64-to-f32=false",) if acc == "f64" else ())
    module = Module(compile_mlir(text, flags))
    errs = []
    for seed in range(seeds):
        a, b, c, ref = inputs(dtype, size, seed)
        got = module("f", a, b, c)
        errs.append(rel_err(got, ref))  # in long double for f64 (the reference's type)
    return {"dtype": dtype, "size": size, "plan": plan, "errors": errs,
            "seconds": time.perf_counter() - t0}


#: iree-compile flag sets of the narrow-result sweep: IREE's defaults for the
#: host CPU, and with data tiling and microkernels (the main job's default,
#: falcon_mlir.models.main_job.DATA_TILING_FLAGS).
NARROW_FLAGS = {"default": (), "data-tiling": ("--iree-opt-data-tiling=true",
                                               "--iree-llvmcpu-enable-ukernels=all")}
NARROW_SHAPES = ((128, 256, 256), (128, 682, 256), (128, 683, 256), (128, 1024, 256),
                 (128, 4096, 256), (1024, 4096, 1024))
NARROW_PLANS = ("classical", "strassen", "strassen/input", "winograd", "winograd/input",
                "3x3x3:23", "2x4x4:26", "4x4x4:49", "strassen^2", "strassen^2/input", "strassen^3")
NARROW_TYPES = ("bf16", "f16")


def _narrow_errors(module, M: int, K: int, N: int, out: str, seeds: int) -> list:
    """Max-norm relative error of ``module``'s ``@f(A, B, 0)`` against float64, one per seed
    (random normal A (M x K), B (K x N) in the result type ``out``)."""
    errs = []
    for seed in range(seeds):
        rng = np.random.default_rng([seed, M, K, N])
        a = rng.standard_normal((M, K)).astype(np_type(out))
        b = rng.standard_normal((K, N)).astype(np_type(out))
        c = np.zeros((M, N), dtype=np_type(out))
        errs.append(rel_err(module("f", a, b, c), a.astype(np.float64) @ b.astype(np.float64)))
    return errs


def measure_narrow(out: str, shape: tuple, plan: str, flags: str, seeds: int) -> dict:
    """One cell of the narrow-result sweep: ``out x out -> out`` (bf16 or f16) of
    ``shape = (M, K, N)`` through ``plan`` (``NAME[^L][/input|/f32]``: ``/input`` forms
    the combined operands in the input type, else f32; ``/f32`` also extends the
    blocks a product reads alone, option ``products=f32``), compiled with the
    ``flags`` set of :data:`NARROW_FLAGS`; max-norm relative errors against a
    float64 product of the same rounded inputs, zero accumulator."""
    from falcon_mlir.ir.matmul_text import matmul_mlir
    from falcon_mlir.runner import CPU_FLAGS, Module, compile_mlir

    M, K, N = shape
    t0 = time.perf_counter()
    text = matmul_mlir(M, N, K, out, out, func="f", init="arg")
    name, _, sums = plan.partition("/")
    schemes = plan_schemes(name)
    if schemes:
        # barriers: data tiling needs them (falcon-compile's default inside IREE)
        opts = {"input": "sums=input", "f32": "sums=f32 products=f32"}.get(sums, "sums=f32")
        text = rewrite(text, schemes, f"{opts} barriers=true")
    module = Module(compile_mlir(text, CPU_FLAGS + NARROW_FLAGS[flags]))
    errs = _narrow_errors(module, M, K, N, out, seeds)
    return {"out": out, "shape": list(shape), "plan": plan, "flags": flags, "errors": errs,
            "seconds": time.perf_counter() - t0}


def narrow_predicted(out: str, shape, plan: str) -> float:
    """:func:`falcon_mlir.decision.numerics.rounded_plan_error` of a narrow-sweep cell."""
    from falcon_mlir.decision import numerics

    name, _, sums = plan.partition("/")
    schemes = plan_schemes(name)  # per-product form: one rounding of the sums per level
    return numerics.rounded_plan_error(schemes, shape[1], out,
                                       sums=out if sums == "input" else "f32",
                                       sum_roundings=len(schemes))


def _narrow_star(args):
    return measure_narrow(*args)


#: Markers of the narrow-result section in ``--md`` (``--narrow`` rewrites
#: only what lies between them; the main sweep keeps it).
NARROW_BEGIN = "<!-- narrow-results: begin (python3 scripts/accuracy.py --narrow) -->"
NARROW_END = "<!-- narrow-results: end -->"


def _splice(path: str, section: str) -> str:
    """The text of ``path`` with its narrow-result section replaced by
    ``section`` (appended where it has none; ``section`` alone if no file)."""
    old = open(path).read() if os.path.exists(path) else ""
    if NARROW_BEGIN in old and NARROW_END in old:
        head, rest = old.split(NARROW_BEGIN, 1)
        return head + section + rest.split(NARROW_END, 1)[1]
    return old.rstrip("\n") + "\n\n" + section + "\n"


def check_markers(path: str) -> None:
    """Raise a one-line :class:`ToolError` (status 2) unless ``path`` (if it exists) holds the narrow-result
    markers once each, begin before end, or neither: with one of them missing, a main sweep dropped the
    narrow section and every hand-written section after it, and ``--narrow`` appended a second section whose
    next splice cut out everything between the two begin markers."""
    old = open(path).read() if os.path.exists(path) else ""
    begins, ends = old.count(NARROW_BEGIN), old.count(NARROW_END)
    if (begins, ends) == (0, 0) or (begins, ends) == (1, 1) and old.index(NARROW_BEGIN) < old.index(NARROW_END):
        return
    raise ToolError(f"falcon-accuracy: error: {path}: the narrow-result markers are {begins} begin and {ends} "
                    f"end line(s){' (end first)' if (begins, ends) == (1, 1) else ''}; expected one of each, "
                    f"begin first, or none ({NARROW_BEGIN} ... {NARROW_END})", 2)


def _kept_narrow(path: str) -> str:
    """What a main sweep keeps of ``path``: its narrow-result section with the markers and everything
    after it (hand-written sections: bf16 on the CPU, the CUDA kernels, scaled operands); "" if it has no
    narrow-result section."""
    old = open(path).read() if os.path.exists(path) else ""
    if NARROW_BEGIN in old and NARROW_END in old:
        return (NARROW_BEGIN + old.split(NARROW_BEGIN, 1)[1]).rstrip("\n")
    return ""


def narrow_markdown(results: List[dict], command: str, wall: float, seeds: int) -> str:
    """The narrow-result section: per result type a table of plans x shapes,
    each cell ``max measured / predicted (max / classical's max)``, classical
    under both flag sets, plans with data tiling; and the workload rows
    (``auto`` on workloads.md shapes) when present."""
    from falcon_mlir.decision import numerics

    cells = {(r["out"], tuple(r["shape"]), r["plan"], r["flags"]): r for r in results}
    L = [NARROW_BEGIN, "", "## bf16 and f16 results (bf16 x bf16 -> bf16, f16 x f16 -> f16)", "",
         f"Generated by `{command}` ({wall / 60:.1f} min wall, {os.cpu_count()} CPUs); "
         "re-run the command to update this section (the rest of the file is the main sweep's).",
         "",
         "A plan on a bf16/f16 result accumulates its products in f32, runs combine C in f32 "
         "and rounds C once at the end; its combined operands are f32 (`plan`) or rounded once "
         "to the input type (`plan/input`, option `sums=input`); `plan/f32` also extends the "
         "blocks a product reads alone to f32 (option `products=f32`: every product f32 x f32). "
         "Each cell: **max** over "
         f"{seeds} seeds of `max|C - C_ref| / max|C_ref|` (normal inputs, zero C, float64 "
         "reference of the same rounded inputs) / **predicted** "
         "`numerics.rounded_plan_error(plan, K, out, sums)`, and in brackets the ratio to "
         "classical's max with data tiling on the same shape. `default`: IREE's default "
         "llvm-cpu flags for the host; `data-tiling`: with `--iree-opt-data-tiling=true "
         "--iree-llvmcpu-enable-ukernels=all` (the main job's default). Plans run under "
         "`data-tiling` (the plans' numbers do not depend on the flags: their products have "
         "f32 results). `(!)` marks a plan cell over its prediction (classical under `default` is not the modelled code: there IREE keeps the bf16/f16 accumulator between K tiles, so its error grows with K). The default budget of auto "
         "plans is `numerics.narrow_max_error` = 1.5 x classical's prediction.", ""]
    for out in NARROW_TYPES:
        shapes = sorted({tuple(r["shape"]) for r in results if r["out"] == out
                         and r["plan"] != "auto"}, key=lambda t: (t[0] * t[2], t[1]))
        if not shapes:
            continue
        u = numerics.unit_roundoff(out)
        L += ["", f"### {out} x {out} -> {out}  (u = {u:.3g})", "",
              "| plan | flags | " + " | ".join(f"{m}x{k}x{n}" for m, k, n in shapes) + " |",
              "|---|---|" + "---|" * len(shapes)]
        extra = [r["plan"] for r in results if r["out"] == out and r["plan"] != "auto"
                 and r["plan"] not in NARROW_PLANS]  # e.g. strassen/f32
        rows = [("classical", "default"), ("classical", "data-tiling")] + \
            [(p, "data-tiling") for p in list(NARROW_PLANS) + list(dict.fromkeys(extra))
             if p != "classical"]
        for plan, fl in rows:
            line = []
            for sh in shapes:
                r = cells.get((out, sh, plan, fl))
                if r is None:
                    line.append("")
                    continue
                mx = max(r["errors"])
                pred = narrow_predicted(out, sh, plan)
                c = cells.get((out, sh, "classical", "data-tiling"))
                ratio = f" ({mx / max(c['errors']):.2f}x)" if c else ""
                flag = " (!)" if mx > pred and not (plan == "classical" and fl == "default") else ""
                line.append(f"{mx:.2g} / {pred:.2g}{ratio}{flag}")
            if any(line):
                L.append(f"| {plan} | {fl} | " + " | ".join(line) + " |")
    auto = [r for r in results if r["plan"] == "auto"]
    if auto:
        L += ["", "### auto on workloads.md shapes (M = 1024, data tiling)", "",
              "The plan lcma-rewrite's `auto` picks on the host profile for the bf16 -> bf16 "
              "contraction, and for its f32 version; measured max error over the seeds of the "
              "plan and of classical (both data tiling) and the plan's predicted error.", "",
              "| M x K x N | f32 plan | bf16 plan (sums) | predicted | measured | classical | ratio |",
              "|---|---|---|---|---|---|---|"]
        for r in auto:
            c = cells.get((r["out"], tuple(r["shape"]), "classical", "data-tiling"))
            cm = max(c["errors"]) if c else float("nan")
            m, k, n = r["shape"]
            L.append(f"| {m}x{k}x{n} | {r['f32_plan']} | {r['auto_plan']} ({r.get('sums')}) | "
                     f"{r['predicted']:.2g} | {max(r['errors']):.2g} | {cm:.2g} | "
                     f"{max(r['errors']) / cm:.2f} |")
    L += ["", "The main sweep's f16 table above (if present) was measured when plans on f16 "
          "results accumulated in f16; plans now accumulate in f32 as this section shows.",
          "", NARROW_END]
    return "\n".join(L)


def measure_auto(out: str, shape: tuple, seeds: int) -> dict:
    """A workload cell: the ``auto`` plan of ``out x out -> out`` (data tiling,
    barriers on, as falcon-compile emits it) and the plan ``auto`` picks for
    the f32 version of the same shape (``"classical"`` where none)."""
    from iree.compiler import ir

    from falcon_mlir.ir.matmul_text import matmul_mlir
    from falcon_mlir.passes.lcma_rewrite import LcmaOptions, run_lcma_rewrite
    from falcon_mlir.runner import CPU_FLAGS, Module, compile_mlir

    M, K, N = shape
    t0 = time.perf_counter()
    names = {}
    texts = {}
    for t in ("f32", out):
        with ir.Context():
            module = ir.Module.parse(matmul_mlir(M, N, K, t, t, func="f", init="arg"))
            rep = run_lcma_rewrite(module.operation, LcmaOptions.parse("barriers=true"))[0]
            plan = rep["plan"]
            names[t] = "classical" if plan == "classical" else "+".join(plan["schemes"])
            texts[t] = str(module)
            if t == out:
                pred = rep["predicted_error"].get("plan", rep["predicted_error"]["classical"])
                sums = (rep.get("rounding") or {}).get("sums")
    module = Module(compile_mlir(texts[out], CPU_FLAGS + NARROW_FLAGS["data-tiling"]))
    errs = _narrow_errors(module, M, K, N, out, seeds)
    return {"out": out, "shape": list(shape), "plan": "auto", "flags": "data-tiling",
            "errors": errs, "auto_plan": names[out], "f32_plan": names["f32"], "sums": sums,
            "predicted": pred, "seconds": time.perf_counter() - t0}


#: (K, N) of docs' workloads (workloads.md: GPT-2, Llama-3-8B, Qwen2.5-7B,
#: Llama-3-70B, DeepSeek-V3), distinct pairs; M = 1024 in the sweep.
WORKLOAD_KN = ((768, 2304), (768, 768), (768, 3072), (3072, 768), (4096, 4096), (4096, 1024),
               (4096, 14336), (14336, 4096), (3584, 3584), (3584, 512), (3584, 18944),
               (18944, 3584), (8192, 8192), (8192, 1024), (8192, 28672), (28672, 8192),
               (7168, 1536), (1536, 24576), (7168, 576), (512, 32768), (16384, 7168),
               (7168, 18432), (18432, 7168), (7168, 2048), (2048, 7168))


def _auto_star(args):
    return measure_auto(*args)


def narrow_main(args, argv_list: list) -> int:
    """``--narrow``: the narrow-result sweep, spliced into ``--md``."""
    command = "python3 scripts/accuracy.py" + " " + shlex.join(argv_list)
    seeds = args.seeds or 3
    types = args.dtypes or list(NARROW_TYPES)
    plans = args.plans or list(NARROW_PLANS)
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes] if args.shapes \
        else list(NARROW_SHAPES)
    tasks = []
    for out in types:
        if out not in NARROW_TYPES:
            raise ToolError(f"falcon-accuracy: error: --narrow types are bf16, f16 (got {out!r})", 2)
        for sh in shapes:
            tasks.append((out, sh, "classical", "default", seeds))
            for p in ["classical"] + [p for p in plans if p != "classical"]:
                tasks.append((out, sh, p, "data-tiling", seeds))
    kn = WORKLOAD_KN if args.workloads in (None, "all") else \
        [tuple(int(x) for x in w.split("x")) for w in _csv(args.workloads)]
    auto = [("bf16", (1024, k, n), 1) for k, n in kn] if args.workloads else []
    t0 = time.perf_counter()
    results = []
    if args.from_json:
        with open(args.from_json) as f:
            data = json.load(f)
        results, command, wall = data["results"], data["command"], data["wall_s"]
    else:
        with ProcessPoolExecutor(args.jobs) as pool:
            for r in list(pool.map(_narrow_star, tasks)) + list(pool.map(_auto_star, auto)):
                results.append(r)
            for r in results:
                print(f"{r['out']:5} {'x'.join(map(str, r['shape'])):16} {r['plan']:18} "
                      f"{r['flags']:12} max {max(r['errors']):.3g} ({r['seconds']:.1f} s)",
                      flush=True)
        if args.workloads:  # classical of each workload shape, the auto rows' reference
            with ProcessPoolExecutor(args.jobs) as pool:
                results += list(pool.map(_narrow_star, [("bf16", sh, "classical", "data-tiling", 1)
                                                        for _, sh, _ in auto]))
        wall = time.perf_counter() - t0
        if args.json:
            write_atomic(args.json, json.dumps({"command": command, "wall_s": wall,
                                                "results": results}, indent=1).encode())
    section = narrow_markdown(results, command, wall, seeds)
    write_atomic(args.md, _splice(args.md, section).encode())
    over = [r for r in results if r["plan"] not in ("classical", "auto")
            and max(r["errors"]) > narrow_predicted(r["out"], r["shape"], r["plan"])]
    print(f"wrote the narrow-result section of {args.md} in {wall:.0f} s; "
          f"{len(over)} plan cell(s) over the prediction")
    return 0


def _measure_star(args):
    return measure(*args)


# ----------------------------------------------------------------------------
# Model columns
# ----------------------------------------------------------------------------

def model_numbers(plan: str, K: int, dtype: str) -> dict:
    from falcon_mlir.decision import numerics

    schemes = plan_schemes(plan)
    lhs, acc = DTYPES[dtype]
    E = 1
    for s in schemes:
        E *= numerics.scheme_factors(s)["E"]
    if schemes and numerics.is_narrow_result(acc):  # plans accumulate in f32 (--narrow)
        pred = numerics.rounded_plan_error(schemes, K, acc)
    else:
        pred = numerics.predicted_error(schemes, K, acc, lhs)
    return {"pred": pred, "unit": pred / numerics.CALIBRATION, "E_L": E,
            "E": numerics.scheme_factors(schemes[0])["E"] if schemes else 1,
            "G_L": numerics.growth_factor(schemes), "levels": len(schemes)}


def _fmt_e(x) -> str:
    x = float(x)
    return str(int(x)) if x == int(x) else f"{x:.3g}"


# ----------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------

def summarize(results: List[dict]) -> dict:
    """Calibration statistics over all cases: coverage, ratios, suggested constant."""
    from falcon_mlir.decision import numerics

    ratios_unit, cover, over_median = [], [], []
    for r in results:
        m = model_numbers(r["plan"], r["size"], r["dtype"])
        for e in r["errors"]:
            ratios_unit.append(e / m["unit"])
            cover.append(e <= m["pred"])
        over_median.append(m["pred"] / statistics.median(r["errors"]))
    q = float(np.quantile(ratios_unit, 0.995)) if ratios_unit else float("nan")
    return {"cases": len(cover), "covered": int(sum(cover)),
            "fraction": (sum(cover) / len(cover)) if cover else float("nan"),
            "p995_unit_ratio": q, "max_unit_ratio": max(ratios_unit, default=float("nan")),
            "pred_over_median_max": max(over_median, default=float("nan")),
            "pred_over_median_median": statistics.median(over_median) if over_median else float("nan"),
            "pred_over_median_min": min(over_median, default=float("nan")),
            "calibration": numerics.CALIBRATION}


def write_markdown(path: str, results: List[dict], command: str, wall: float, args) -> None:
    from falcon_mlir.decision import numerics

    cells: Dict[tuple, dict] = {(r["dtype"], r["size"], r["plan"]): r for r in results}
    sizes = sorted({r["size"] for r in results})
    plans = [p for p in args.plans if any(r["plan"] == p for r in results)]
    dtypes = [d for d in args.dtypes if any(r["dtype"] == d for r in results)]
    st = summarize(results)
    L = []
    L.append("# Accuracy of classical GEMM and LCMA plans (IREE llvm-cpu)\n")
    L.append(f"Generated by `{command}` ({wall / 60:.1f} min wall, {args.jobs} job(s), "
             f"{os.cpu_count()} CPUs). Do not edit by hand; re-run the command.\n")
    L.append("Each cell: **measured median** max-norm relative error "
             f"`max|C - C_ref| / max|C_ref|` over {args.seeds} seeds (normal inputs, "
             "zero accumulator, square S x S x S) / **predicted** "
             "`falcon_mlir.decision.numerics.predicted_error(plan, K=S, acc)`. The reference is "
             "float64 numpy of the same rounded inputs (long double for f64). "
             "`E` is the scheme's stability factor (Ballard, Benson, Druinsky, Lipshitz, "
             "Schwartz, SIMAX 2016), `E^L` its product over the levels (the growth of the "
             "worst-case bound); `G^L` is the growth of the random-sign model "
             "(`numerics.growth_factor`). Sizes not divisible by a scheme's blocks are "
             "peeled (the edges run classically). `x classical` is the median over "
             "sizes of (plan median / classical median).\n")
    for d in dtypes:
        lhs, acc = DTYPES[d]
        L.append(f"\n## {DTYPE_LABEL[d]}  (u = 2^{int(round(math.log2(numerics.unit_roundoff(acc))))}"
                 f" = {numerics.unit_roundoff(acc):.3g})\n")
        head = "| plan | E | E^L | G^L | " + " | ".join(f"S={s}" for s in sizes) + " | x classical |"
        L.append(head)
        L.append("|" + "---|" * (5 + len(sizes)))
        for p in plans:
            m = model_numbers(p, sizes[0], d)
            row = [p, _fmt_e(m["E"]) if m["levels"] else "-", _fmt_e(m["E_L"]) if m["levels"] else "-",
                   f"{m['G_L']:.3g}" if m["levels"] else "-"]
            rel = []
            for s in sizes:
                r = cells.get((d, s, p))
                if r is None:
                    row.append("")
                    continue
                med = statistics.median(r["errors"])
                pred = model_numbers(p, s, d)["pred"]
                flag = "" if max(r["errors"]) <= pred else " (!)"
                row.append(f"{med:.2g} / {pred:.2g}{flag}")
                c = cells.get((d, s, "classical"))
                if c is not None:
                    rel.append(med / statistics.median(c["errors"]))
            row.append(f"{statistics.median(rel):.2f}" if rel else "")
            L.append("| " + " | ".join(row) + " |")
    L.append("\n`(!)` marks a cell where some seed's error exceeds the prediction.\n")
    L.append("## Calibration of `numerics.predicted_error`\n")
    L.append(f"- cases (cells x seeds): {st['cases']}; measured <= predicted in "
             f"{st['covered']} ({100 * st['fraction']:.1f}%)")
    L.append(f"- CALIBRATION = {st['calibration']}; the 99.5th percentile of "
             f"measured / (u sqrt(K_L + sum Q) prod G) over all cases is "
             f"{st['p995_unit_ratio']:.3g} (max {st['max_unit_ratio']:.3g})")
    L.append(f"- predicted / measured median per cell: min {st['pred_over_median_min']:.2g}, "
             f"median {st['pred_over_median_median']:.2g}, max {st['pred_over_median_max']:.2g}")
    L.append("\n## Raw medians and maxima\n")
    L.append("| dtype | plan | S | median | max | predicted | compile+run s |")
    L.append("|---|---|---|---|---|---|---|")
    for r in sorted(results, key=lambda r: (dtypes.index(r["dtype"]), plans.index(r["plan"]), r["size"])):
        pred = model_numbers(r["plan"], r["size"], r["dtype"])["pred"]
        L.append(f"| {r['dtype']} | {r['plan']} | {r['size']} | {statistics.median(r['errors']):.3g} | "
                 f"{max(r['errors']):.3g} | {pred:.3g} | {r['seconds']:.1f} |")
    kept = _kept_narrow(path)  # the --narrow section and what follows it survive a main sweep
    if kept:
        L += ["", kept]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_atomic(path, ("\n".join(L) + "\n").encode())


def write_plot(path: str, results: List[dict], command: str, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from falcon_mlir.decision import numerics

    dtypes = [d for d in args.dtypes if any(r["dtype"] == d for r in results)]
    plans = [p for p in args.plans if any(r["plan"] == p for r in results)]
    cols = min(2, len(dtypes))
    rows = math.ceil(len(dtypes) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.6 * rows), squeeze=False)
    cmap = plt.get_cmap("tab20")
    for ax, d in zip(axes.flat, dtypes):
        for i, p in enumerate(plans):
            pts = sorted((r["size"], statistics.median(r["errors"]), max(r["errors"]))
                         for r in results if r["dtype"] == d and r["plan"] == p)
            if not pts:
                continue
            xs, med, mx = zip(*pts)
            style = dict(color="black", lw=2.2) if p == "classical" else dict(color=cmap(i % 20), lw=1.3)
            ax.plot(xs, med, marker="o", ms=3.5, label=p, **style)
        xs = sorted({r["size"] for r in results if r["dtype"] == d})
        acc = DTYPES[d][1]
        ax.plot(xs, [numerics.classical_error(x, acc) for x in xs], "k--", lw=1,
                label="predicted classical")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels([str(x) for x in xs])
        ax.set_title(DTYPE_LABEL[d])
        ax.set_xlabel("S (M = N = K)")
        ax.set_ylabel("median max-norm relative error")
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(dtypes):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize=8)
    fig.suptitle(f"falcon-mlir accuracy (IREE llvm-cpu): {command}", fontsize=8)
    fig.tight_layout(rect=(0, 0.08 if rows > 1 else 0.14, 1, 0.97))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, dpi=110, format="png")
    plt.close(fig)
    write_atomic(path, buf.getvalue())


# ----------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------

def _csv(text: str) -> list:
    return [x for x in text.split(",") if x]


def _parser() -> ArgumentParser:
    ap = ArgumentParser(prog="falcon-accuracy", usage_status=2,
                                 description="measured vs predicted error of LCMA plans")
    ap.add_argument("--quick", action="store_true",
                    help="CI subset: sizes 64,128; classical, strassen, strassen^2, 3x3x3:23; 3 seeds")
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in _csv(s)], default=None)
    ap.add_argument("--dtypes", type=_csv, default=None, help="f32,f16,bf16,f64")
    ap.add_argument("--plans", type=_csv, default=None)
    ap.add_argument("--seeds", type=int, default=None, help="inputs per cell (default 5)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                    help="parallel compile processes (default min(2, CPUs))")
    ap.add_argument("--md", default=str(DOCS / "accuracy.md"), help="default: this repository's docs/accuracy.md")
    ap.add_argument("--png", default=str(DOCS / "accuracy.png"), help="default: this repository's docs/accuracy.png")
    ap.add_argument("--json", default=None, help="also write the raw errors here")
    ap.add_argument("--narrow", action="store_true",
                    help="the bf16/f16-result sweep (bf16 x bf16 -> bf16, f16 -> f16): rewrites "
                         "only that section of --md (--dtypes bf16,f16; --shapes MxKxN,...)")
    ap.add_argument("--shapes", type=_csv, default=None, help="--narrow: MxKxN,...")
    ap.add_argument("--workloads", nargs="?", const="all", default=None, metavar="KxN,...",
                    help="--narrow: also auto on the workloads.md shapes at M = 1024 (bf16); "
                         "all of them, or the (K, N) listed")
    ap.add_argument("--from-json", default=None,
                    help="re-render the report from a --json file of an earlier run (no compiling)")
    return ap


def main(argv: Optional[List[str]] = None) -> int:
    """The command line (see the module docstring); returns the exit status
    (2 for a bad command line)."""
    return run_tool("falcon-accuracy", _main, argv)


def _main(argv_list: list) -> int:
    args = _parser().parse_args(argv_list)
    for out in (args.md, args.png, args.json):  # fail before minutes of measuring, not after
        if out and not Path(out).resolve().parent.is_dir():
            raise ToolError(f"falcon-accuracy: error: {out}: no such directory to write into", 2)
    if args.md:
        check_markers(args.md)  # the hand-written sections after the narrow section must survive
    if args.narrow:
        return narrow_main(args, argv_list)
    command = "python3 scripts/accuracy.py" + ("" if not argv_list else " " + shlex.join(argv_list))
    args.sizes = args.sizes or list(QUICK["sizes"] if args.quick else DEFAULT_SIZES)
    args.plans = args.plans or list(QUICK["plans"] if args.quick else DEFAULT_PLANS)
    args.dtypes = args.dtypes or list(DEFAULT_DTYPES)
    args.seeds = args.seeds or (QUICK["seeds"] if args.quick else 5)
    for d in args.dtypes:
        if d not in DTYPES:
            raise ToolError(f"falcon-accuracy: error: unknown dtype {d!r} (expected {', '.join(DTYPES)})", 2)
    # Largest cells first, so the pool's tail is short.
    tasks = [(d, s, p, args.seeds) for d in args.dtypes for s in args.sizes for p in args.plans]
    tasks.sort(key=lambda t: (-t[1], args.dtypes.index(t[0]), -len(plan_schemes(t[2]))))
    t0 = time.perf_counter()
    results = []
    if args.from_json:
        with open(args.from_json) as f:
            data = json.load(f)
        results, command, wall = data["results"], data["command"], data["wall_s"]
        keep = lambda r: r["dtype"] in args.dtypes and r["size"] in args.sizes and r["plan"] in args.plans
        results = [r for r in results if keep(r)]
        args.seeds = len(results[0]["errors"]) if results else args.seeds
    elif args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            for r in pool.map(_measure_star, tasks):
                results.append(r)
                print(f"{r['dtype']:5} {r['size']:5} {r['plan']:12} median {statistics.median(r['errors']):.3g} "
                      f"({r['seconds']:.1f} s)", flush=True)
    else:
        for t in tasks:
            r = measure(*t)
            results.append(r)
            print(f"{r['dtype']:5} {r['size']:5} {r['plan']:12} median {statistics.median(r['errors']):.3g} "
                  f"({r['seconds']:.1f} s)", flush=True)
    if not args.from_json:
        wall = time.perf_counter() - t0
    if args.json and not args.from_json:
        write_atomic(args.json, json.dumps({"command": command, "wall_s": wall, "results": results},
                                           indent=1).encode())
    write_markdown(args.md, results, command, wall, args)
    write_plot(args.png, results, command, args)
    st = summarize(results)
    print(f"wrote {args.md} and {args.png} in {wall:.0f} s; measured <= predicted in "
          f"{st['covered']}/{st['cases']} cases; 99.5th pct unit ratio {st['p995_unit_ratio']:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
