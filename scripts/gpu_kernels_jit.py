"""The GPU side of scripts/gpu_kernels.py, ``jit``: each LCMA plan's four kernels JIT-launched by the machine's
Triton and timed one by one (combine A, B, C with their bandwidth, the products with TFLOP/s), their sum
against cuBLAS by the same timer, and combine tile candidates for information. Nothing from falcon-mlir:
``prepare`` copies this file into the bundle.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import gpu_kernels_common as common
from gpu_kernels_common import (empty_cache, finish, log, make_inputs, mark_failed, plain_spec, rel, torch_dtype,
                                triton_side, write_results)
from gpu_kernels_plans import PLAN_TOL, plan_groups, plan_ref_rows


def _load_generated(path: Path, fn: str):
    """The ``@triton.jit`` function ``fn`` of a generated combine source in the bundle (imported once)."""
    import importlib.util
    name = "falcon_gen_" + path.stem
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return getattr(sys.modules[name], fn)


def _sync() -> None:
    """Wait for the GPU (nothing to wait for on the CPU)."""
    import torch
    torch.cuda.synchronize() if common.DEV == "cuda" else None


def jit(args) -> int:
    """Each plan's four kernels JIT-launched and timed one by one (the machine's Triton): combine A, B
    and C with their bandwidth (bytes moved / time), the products with TFLOP/s; their sum against
    cuBLAS by the same timer; combine tile candidates for information."""
    d, manifest, triton, ftg, bench, sms = triton_side(args)
    import torch

    groups = plan_groups(manifest, args)
    rows, skipped, t_all = [], [], time.perf_counter()
    log(f"jit: {sum(map(len, groups.values()))} plans; triton {triton.__version__}, {sms} SMs; "
        f"budget {args.budget_s:.0f}s")
    for gi, ((M, N, K, dtype), entries) in enumerate(groups.items()):
        if time.perf_counter() - t_all > args.budget_s:
            skipped += [e["name"] for e in entries]
            continue
        flops = 2 * M * N * K
        gspec = plain_spec(M, N, K, dtype)
        a, b = make_inputs(gspec, seed=2000 + gi)
        idx, ref = plan_ref_rows(M, N, K, a, b, args.check_rows, seed=2000 + gi)
        t_torch = bench(lambda: torch.matmul(a, b))
        rows.append({"name": "torch.matmul", "spec": gspec, "ms": t_torch, "tflops": flops / t_torch / 1e9})
        log(f"[{time.perf_counter() - t_all:5.0f}s] {dtype} {M}x{N}x{K}: cuBLAS {t_torch:.3f} ms "
            f"({flops / t_torch / 1e9:.1f} TFLOP/s)")
        problem = {"spec": gspec, "a": a, "b": b, "idx": idx, "ref": ref, "t_torch": t_torch, "flops": flops}
        for e in entries:
            if time.perf_counter() - t_all > args.budget_s or "a" not in e["jit"]:  # scaled: no JIT launches
                skipped.append(e["name"])
                continue
            rows.append(_jit_plan(args, d, e, problem, ftg, bench, sms, t_all))
            empty_cache()
            write_results(args, "jit", rows, skipped, _jit_table(rows), partial=True)
        a = b = ref = problem = None
        empty_cache()
    return finish(args, "jit", rows, skipped, _jit_table(rows))


def _buffers(ps: dict, g: dict, M: int, N: int) -> dict:
    """The tensors between a plan's kernels: combined operands, products, C."""
    import torch
    dev, tdt = common.DEV, torch_dtype
    return {"a_ops": torch.empty((g["R"], g["bm"], g["bk"]), dtype=tdt(ps["dtype"]), device=dev),
            "b_ops": torch.empty((g["R"], g["bk"], g["bn"]), dtype=tdt(ps["dtype"]), device=dev),
            "p": torch.empty((g["R"], g["bm"], g["bn"]), dtype=tdt(ps["product_dtype"]), device=dev),
            "c": torch.empty((M, N), dtype=tdt(ps["out_dtype"]), device=dev)}


def _jit_plan(args, d: Path, e: dict, problem: dict, ftg, bench, sms: int, t_all: float) -> dict:
    """One plan: its kernels in order, each timed (the default combine tiles feed the next kernel); C checked."""
    gspec, flops, t_torch = problem["spec"], problem["flops"], problem["t_torch"]
    ps, g = e["spec"], e["geometry"]
    row = {"name": e["name"], "spec": gspec, "plan": ps, "scheme": ps["scheme"], "kernels": {}}
    try:
        bufs = _buffers(ps, g, gspec["M"], gspec["N"])
        io = {"a": (problem["a"], bufs["a_ops"]), "b": (problem["b"], bufs["b_ops"]), "c": (bufs["p"], bufs["c"])}
        total = 0.0
        for role in ("a", "b", "p", "c"):
            if role == "p":
                total += _jit_products(e["jit"]["p"], bufs, ps, g, ftg, bench, sms, row)
            else:
                total += _jit_combine(args, d, role, e["jit"][role], *io[role], bench, row, t_all)
        _sync()
        row["rel_err_f64"] = rel(bufs["c"][problem["idx"]], problem["ref"])
        row["ms"] = total
        row["tflops"] = flops / total / 1e9
        row["cublas_ms"] = t_torch
        row["vs_torch"] = t_torch / total
        row["ok"] = bool(row["rel_err_f64"] <= PLAN_TOL[ps["out_dtype"]])
        log(f"[{time.perf_counter() - t_all:5.0f}s] plan {ps['scheme']} {e['label']}: sum of kernels "
            f"{total:.3f} ms = {row['tflops']:.1f} effective TFLOP/s, {row['vs_torch']:.3f}x cuBLAS; "
            f"rel_err_f64 {row['rel_err_f64']:.2e}" + ("" if row["ok"] else "  NOT OK"))
    except Exception as ex:
        mark_failed(row, ex)
    return row


def _jit_products(P: dict, bufs: dict, ps: dict, g: dict, ftg, bench, sms: int, row: dict) -> float:
    """The batched products by the bundle's GEMM kernel: ms (into ``row``, with TFLOP/s and compile time)."""
    def prod():
        ftg.launch(bufs["a_ops"], bufs["b_ops"], bufs["p"], num_sms=sms, f32_mode=ps["f32_mode"], **P["config"])
    t0 = time.perf_counter()
    prod()
    _sync()
    ms = bench(prod)
    pf = 2 * g["R"] * g["bm"] * g["bn"] * g["bk"]
    row["kernels"]["products"] = {"ms": ms, "tflops": pf / ms / 1e9, "config": P["label"],
                                  "compile_s": time.perf_counter() - t0}
    log(f"    products {P['label']:<22} {ms:8.3f} ms  {pf / ms / 1e9:7.1f} TFLOP/s")
    return ms


def _jit_combine(args, d: Path, role: str, cands: list, x, y, bench, row: dict, t_all: float) -> float:
    """One combine kernel, its tile candidates (``--candidates``, the default first) each timed into ``row``;
    the default's ms (0.0 if it failed), its output left in ``y`` for the next kernel."""
    default_ms = 0.0
    for ci, cand in enumerate(cands[:max(1, args.candidates)]):
        if ci and time.perf_counter() - t_all > args.budget_s:
            break
        fn = _load_generated(d / cand["source"], cand["fn"])

        def comb(fn=fn, cand=cand):
            fn[(cand["programs"],)](x, y, num_warps=cand["num_warps"], **cand["constexprs"])
        try:
            t0 = time.perf_counter()
            comb()
            _sync()
            cs = time.perf_counter() - t0
            ms = bench(comb)
        except Exception as ex:
            log(f"    combine {role.upper()} {cand['config']}: FAILED {type(ex).__name__}: {ex}"[:300])
            continue
        nbytes = cand["traffic"]["read"] + cand["traffic"]["written"]
        r = {"ms": ms, "gbps": nbytes / ms / 1e6, "config": cand["config"], "groups": cand["groups"],
             "bytes": nbytes, "default": ci == 0, "compile_s": cs}
        row["kernels"].setdefault(f"combine_{role}", []).append(r)
        tag = " (default)" if ci == 0 else " " * 10
        log(f"    combine {role.upper()} {cand['config']:<16}{tag} "
            f"{ms:8.3f} ms  {nbytes / ms / 1e6:7.0f} GB/s  {cand['groups']} group(s)")
        if ci == 0:
            default_ms = ms
            comb()  # the default's output feeds the next kernel
    return default_ms


def _jit_table(rows) -> str:
    lines = ["Each kernel of a plan JIT-launched and timed alone (do_bench median, L2 flushed; 3 event-timed calls "
             "over 20 ms). Combine bandwidth = bytes read and written / time.", "",
             "| dtype | shape | plan | products | combine A ms (GB/s) | combine B ms (GB/s) | products ms (TFLOP/s) "
             "| combine C ms (GB/s) | sum ms | eff. TFLOP/s | cuBLAS ms | vs cuBLAS | rel err f64 | ok |",
             "|" + "---|" * 14]
    for r in rows:
        if r["name"] == "torch.matmul":
            continue
        s, p = r["spec"], r.get("plan", {})
        head = (f"| {s['a_dtype']} | {s['M']}x{s['N']}x{s['K']} | {r.get('scheme', '')} | "
                f"{p.get('product_dtype', '')} | ")
        if "error" in r:
            lines.append(head + f"FAILED: {r['error'][:60]} | | | | | | | | | NO |")
            continue
        k = r["kernels"]

        def comb(role):
            d = next((x for x in k.get(f"combine_{role}", []) if x["default"]), None)
            return f"{d['ms']:.3f} ({d['gbps']:.0f})" if d else "-"
        pr = k.get("products")
        lines.append(head + f"{comb('a')} | {comb('b')} | {pr['ms']:.3f} ({pr['tflops']:.0f}) | {comb('c')} | "
                     f"{r['ms']:.3f} | {r['tflops']:.1f} | {r['cublas_ms']:.3f} | {r['vs_torch']:.3f}x | "
                     f"{r['rel_err_f64']:.1e} | {'yes' if r['ok'] else 'NO'} |")
    cands = [(r, role, x) for r in rows if r["name"] != "torch.matmul" and "error" not in r
             for role in "abc" for x in r["kernels"].get(f"combine_{role}", [])]
    if any(not x["default"] for _, _, x in cands):
        lines += ["", "Combine tile candidates:", "", "| plan | kernel | config | groups | ms | GB/s | default |",
                  "|" + "---|" * 7]
        for r, role, x in cands:
            lines.append(f"| {r['name']} | combine {role.upper()} | {x['config']} | {x['groups']} | {x['ms']:.3f} | "
                         f"{x['gbps']:.0f} | {'yes' if x['default'] else ''} |")
    return "\n".join(lines) + "\n"

