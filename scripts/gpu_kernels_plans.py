"""The GPU side of scripts/gpu_kernels.py, LCMA plan modules in ``run``: each plan inside IREE (four
dispatches) against cuBLAS. The plans' groups, float64 rows and tolerance serve ``jit`` too
(gpu_kernels_jit.py). Nothing from falcon-mlir: ``prepare`` copies this file into the bundle.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import gpu_kernels_common as common
from gpu_kernels_common import (add_timing, check_rows, empty_cache, log, make_inputs, mark_failed, open_module,
                                interleaved, parse_shape, plain_spec, rel, time_wall, to_numpy, to_torch, torch_times)

#: max|C - ref| / max|ref| against float64 for a plan's output, per output type: a sanity bound (a
#: wrong index gives O(1)); the measured errors are reported beside cuBLAS's.
PLAN_TOL = {"f32": 2e-4, "f16": 4e-3, "bf16": 4e-2}


def plan_groups(manifest: dict, args) -> dict:
    """(M, N, K, dtype) -> plan entries, in the manifest's order (inputs and cuBLAS shared per group)."""
    want = [parse_shape(x) for x in args.shapes] if args.shapes else None
    groups = {}
    for e in manifest.get("plans", []):
        s = e["spec"]
        if args.dtypes and s["dtype"] not in args.dtypes or want and (s["M"], s["N"], s["K"]) not in want:
            continue
        if getattr(args, "plans", None) and not {e["scheme_name"], s["scheme"]} & set(args.plans):
            continue
        groups.setdefault((s["M"], s["N"], s["K"], s["dtype"]), []).append(e)
    return groups


def plan_ref_rows(M: int, N: int, K: int, a, b, rows: int, seed: int):
    """(row index, float64 rows of A @ B): all rows when small, else ``rows`` random rows, by column chunks."""
    import torch
    idx = check_rows(M, N, K, rows, seed)
    ar = a[idx].double()
    ref = torch.empty((len(idx), N), dtype=torch.float64, device=common.DEV)
    for j in range(0, N, 8192):
        ref[:, j:j + 8192] = ar @ b[:, j:j + 8192].double()
    return idx, ref


def _plan_warmup(seconds_per_call: float, warmup: int) -> int:
    return 1 if seconds_per_call > 0.2 else warmup


def run_plans(args, d: Path, manifest: dict, config, rows: list, skipped: list, t_all: float, save_partial) -> None:
    """The plan modules: per (shape, dtype) one set of inputs and one cuBLAS measurement, then each plan:
    error against float64 rows and cuBLAS's, IREE wall per call, effective TFLOP/s = 2MNK / time.
    ``save_partial()`` writes the results so far (after each plan)."""
    groups = plan_groups(manifest, args)
    if not groups:
        return
    log(f"plans: {sum(map(len, groups.values()))} plan modules in {len(groups)} problems")
    for gi, ((M, N, K, dtype), entries) in enumerate(groups.items()):
        if time.perf_counter() - t_all > args.budget_s:
            skipped += [e["name"] for e in entries]
            continue
        gspec = plain_spec(M, N, K, dtype)
        try:
            base = _baseline(args, config, gspec, gi, t_all)
        except Exception as e:
            log(f"FAILED inputs/torch for plans at {dtype} {M}x{N}x{K}: {type(e).__name__}: {e}")
            rows += [{"name": x["name"], "kind": "plan", "spec": gspec, "ok": False,
                      "error": f"inputs/torch: {type(e).__name__}: {e}"[:800]} for x in entries]
            base = None
        if base is None:
            empty_cache()
            continue
        rows.append(base["torch_row"])
        for e in entries:
            if time.perf_counter() - t_all > args.budget_s:
                skipped.append(e["name"])
                continue
            rows.append(_run_plan(args, d, config, e, gspec, base))
            log(f"[{time.perf_counter() - t_all:5.0f}s] {_plan_line(rows[-1])}")
            save_partial()
        base = None
        empty_cache()
        config.device.allocator.trim()


def _baseline(args, config, gspec: dict, gi: int, t_all: float) -> dict:
    """One problem's inputs (on the GPU and on IREE's device), float64 rows and cuBLAS row (logged)."""
    import iree.runtime as rt
    import torch

    M, N, K, dtype = gspec["M"], gspec["N"], gspec["K"], gspec["a_dtype"]
    flops = 2 * M * N * K
    t0 = time.perf_counter()
    a, b = make_inputs(gspec, seed=1000 + gi)
    idx, ref = plan_ref_rows(M, N, K, a, b, args.check_rows, seed=1000 + gi)

    def tfn():
        return torch.matmul(a, b)
    c_torch = tfn()
    t_call = time.perf_counter()
    torch.cuda.synchronize() if common.DEV == "cuda" else None
    warm = _plan_warmup(time.perf_counter() - t_call, args.warmup)
    torch_row = {"name": "torch.matmul", "kind": "plan", "spec": gspec, "label": f"{M}x{N}x{K} {dtype}",
                 "config": "cuBLAS", "rel_err_f64": rel(c_torch[idx], ref)}
    torch_row["ev_ms"], torch_row["wall_ms"] = torch_times(tfn, warm, args.repeat, args.entry_budget_s)
    torch_row["tflops"] = flops / torch_row["wall_ms"] / 1e9
    a_dev = rt.asdevicearray(config.device, to_numpy(a))
    b_dev = rt.asdevicearray(config.device, to_numpy(b))
    log(f"[{time.perf_counter() - t_all:5.0f}s] {dtype} {M}x{N}x{K}: torch.matmul wall "
        f"{torch_row['wall_ms']:.3f} ms, events {torch_row['ev_ms']:.3f} ms "
        f"({flops / torch_row['ev_ms'] / 1e9:.1f} TFLOP/s), rel_err_f64 {torch_row['rel_err_f64']:.2e}; "
        f"inputs and reference {time.perf_counter() - t0:.1f}s")
    return {"idx": idx, "ref": ref, "c_torch": c_torch, "a_dev": a_dev, "b_dev": b_dev, "torch_row": torch_row,
            "flops": flops, "tfn": tfn}


def _run_plan(args, d: Path, config, e: dict, gspec: dict, base: dict) -> dict:
    """One plan module on the problem's inputs: checked against float64 and cuBLAS, then timed."""
    ps, torch_row = e["spec"], base["torch_row"]
    a_dev, b_dev, idx, ref = base["a_dev"], base["b_dev"], base["idx"], base["ref"]
    row = {"name": e["name"], "kind": "plan", "spec": gspec, "plan": ps, "scheme": ps["scheme"],
           "catalog_scheme": e["scheme_name"],
           "label": e["label"], "config": ps["scheme"], "geometry": e["geometry"],
           "kernels": {k: v.get("config") for k, v in e["kernels"].items()}}
    try:
        ctx, module = open_module(config, d / e["file"])
        main = module["main"]
        t0 = time.perf_counter()
        c = to_torch(main(a_dev, b_dev).to_host())
        first = time.perf_counter() - t0
        row["rel_err_f64"] = rel(c[idx], ref)
        row["torch_rel_err_f64"] = torch_row["rel_err_f64"]
        row["rel_diff_torch"] = rel(c, base["c_torch"])
        row["ok"] = bool(row["rel_err_f64"] <= PLAN_TOL[ps["out_dtype"]])
        del c
        times = time_wall(partial(main, a_dev, b_dev), _plan_warmup(first, args.warmup), args.repeat,
                          args.entry_budget_s)
        add_timing(row, times, base["flops"], torch_row)
        if getattr(args, "interleave", 0):
            interleaved(args, base, main, row)
        del ctx, module, main
        config.device.allocator.trim()
    except Exception as ex:
        mark_failed(row, ex)
    return row


def _plan_line(r: dict) -> str:
    head = f"plan {r['scheme']} {r['label']}"
    if "error" in r:
        return f"{head}: FAILED {r['error'][:300]}"
    return (f"{head}: IREE {r['wall_ms']:.3f} ms wall = {r['tflops']:.1f} effective TFLOP/s | cuBLAS "
            f"{r['torch_wall_ms']:.3f} wall, {r['torch_ev_ms']:.3f} events | speed {r['vs_torch_wall']:.3f}x "
            f"wall/wall, "
            f"{r['vs_torch_events']:.3f}x vs events | rel_err_f64 {r['rel_err_f64']:.2e} (cuBLAS "
            f"{r['torch_rel_err_f64']:.2e}), diff torch {r['rel_diff_torch']:.2e}"
            + (f" | interleaved: cuBLAS {r['il_torch_ms']:.3f} ms, plan {r['il_plan_ms']:.3f} ms, speed "
               f"{r['vs_torch_interleaved']:.3f}x ({r['il_calls']} calls each)" if "il_plan_ms" in r else "")
            + ("" if r["ok"] else "  NOT OK"))


def plan_table(rows) -> str:
    plans = [r for r in rows if r.get("kind") == "plan" and r["name"] != "torch.matmul"]
    if not plans:
        return ""
    lines = ["", "LCMA plans inside IREE (four dispatches, six with scaled operands): effective TFLOP/s = 2MNK / "
             "IREE wall per call; speed = cuBLAS time / plan time.", "",
             "| dtype | shape | plan | operands | products | out | IREE ms (wall) | eff. TFLOP/s | cuBLAS ms (wall) "
             "| cuBLAS ms (events) | speed wall/wall | speed vs events | speed interleaved | rel err f64 "
             "| cuBLAS rel err f64 | ok |",
             "|" + "---|" * 16]
    for r in plans:
        s = r["spec"]
        p = r.get("plan", {})
        ops = p.get("operand_dtype", p.get("dtype", ""))
        ops += " (scaled)" if ops and ops != p.get("dtype") else ""
        head = (f"| {s['a_dtype']} | {s['M']}x{s['N']}x{s['K']} | {r.get('scheme', '')} | {ops} | "
                f"{p.get('product_dtype', '')} | {p.get('out_dtype', '')} | ")
        if "error" in r:
            lines.append(head + f"FAILED: {r['error'][:60]} | | | | | | | | | NO |")
            continue
        lines.append(head + f"{r['wall_ms']:.3f} | {r['tflops']:.1f} | {r['torch_wall_ms']:.3f} | "
                     f"{r['torch_ev_ms']:.3f} | {r['vs_torch_wall']:.3f}x | {r['vs_torch_events']:.3f}x | "
                     + (f"{r['vs_torch_interleaved']:.3f}x" if "vs_torch_interleaved" in r else "-") + " | "
                     f"{r['rel_err_f64']:.1e} | {r['torch_rel_err_f64']:.1e} | {'yes' if r['ok'] else 'NO'} |")
    return "\n".join(lines) + "\n"


