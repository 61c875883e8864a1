"""The GPU side of scripts/gpu_kernels.py, ``tune``: the bundle's copy of the kernel source JIT-run on torch
tensors over the manifest's tuning jobs (a shape and dtype each, with its candidate configurations; f32 jobs
may add 3xTF32 candidates and cuBLAS TF32, for information), timed next to torch.matmul by one timer
(``gpu_kernels_common.bench_factory``), each candidate's error against float64 reported beside cuBLAS's.
``scripts/gpu_kernels.py pick`` turns the result into the configuration table. Nothing from falcon-mlir:
``prepare`` copies this file into the bundle.
"""

from __future__ import annotations

import time

import gpu_kernels_common as common
from gpu_kernels_common import (empty_cache, finish, log, make_inputs, parse_shape, plain_spec, ref_rows, rel,
                                tolerance, torch_dtype, triton_side, write_results)


def tune(args) -> int:
    """Every tuning job of the manifest (``--dtypes``, ``--shapes``, ``--configs`` select), cheapest first,
    until ``--budget-s``: cuBLAS, then each candidate configuration, and the job's best."""
    d, manifest, triton, ftg, bench, sms = triton_side(args)
    jobs = manifest["tune"]["jobs"]
    want = [parse_shape(x) for x in args.shapes] if args.shapes else None
    rows, skipped, t_all = [], [], time.perf_counter()
    log(f"tune: {len(jobs)} jobs, {sum(len(j['candidates']) for j in jobs)} candidates; triton {triton.__version__}, "
        f"{sms} SMs; budget {args.budget_s:.0f}s")
    for job in jobs:
        M, N, K, dtype = job["M"], job["N"], job["K"], job["dtype"]
        if args.dtypes and dtype not in args.dtypes or want and (M, N, K) not in want:
            continue
        cands = [c for c in job["candidates"] if not args.configs or c["label"] in args.configs]
        if time.perf_counter() - t_all > args.budget_s:
            skipped.append(f"{dtype} {M}x{N}x{K} ({len(cands)} candidates)")
            continue
        spec = plain_spec(M, N, K, dtype)
        try:
            base = _baseline(args, job, spec, bench, rows, t_all)
        except Exception as e:
            log(f"FAILED inputs/torch for {dtype} {M}x{N}x{K}: {type(e).__name__}: {e}")
            rows.append({"name": "torch.matmul", "job": job["label"], "spec": spec, "config": "cuBLAS",
                         "ok": False, "error": f"{type(e).__name__}: {e}"[:800]})
            base = None
        if base is None:
            empty_cache()
            continue
        for cand in cands:
            rows.append(_candidate(cand, job, spec, base, ftg, bench, sms))
        best = _best(rows, job["label"], dtype)
        if best:
            log(f"  best: {best['config']}{'' if best['f32_mode'] == 'ieee' else ' [' + best['f32_mode'] + ']'} "
                f"{best['ms']:.3f} ms = {best['vs_torch']:.3f}x torch")
        base = None
        empty_cache()
        write_results(args, "tune", rows, skipped, _tune_table(rows), partial=True)
    log(f"triton {triton.__version__}, {sms} SMs")
    return finish(args, "tune", rows, skipped, _tune_table(rows))


def _baseline(args, job: dict, spec: dict, bench, rows: list, t_all: float) -> dict:
    """A job's inputs, float64 rows and cuBLAS time (its row appended to ``rows``, and cuBLAS TF32's
    where the job asks, for information)."""
    import torch

    M, N, K, dtype = spec["M"], spec["N"], spec["K"], spec["a_dtype"]
    flops = 2 * M * N * K
    a, b = make_inputs(spec, seed=M + N + K)
    idx, ref = ref_rows(spec, a, b, args.check_rows, seed=M + N + K)
    c_ref = torch.matmul(a, b)
    t_torch = bench(lambda: torch.matmul(a, b))
    torch_row = {"name": "torch.matmul", "job": job["label"], "spec": spec, "config": "cuBLAS",
                 "ms": t_torch, "tflops": flops / t_torch / 1e9, "rel_err_f64": rel(c_ref[idx], ref)}
    rows.append(torch_row)
    log(f"[{time.perf_counter() - t_all:5.0f}s] {dtype} {M}x{N}x{K} ({job['label']}): torch.matmul "
        f"{t_torch:.3f} ms, rel_err_f64 {torch_row['rel_err_f64']:.1e}")
    if job.get("torch_tf32") and common.DEV == "cuda":  # information: cuBLAS on TF32 tensor cores
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            c32 = torch.matmul(a, b)
            t32 = bench(lambda: torch.matmul(a, b))
            rows.append({"name": "torch.matmul", "job": job["label"], "spec": dict(spec, f32_mode="tf32"),
                         "config": "cuBLAS TF32 (information)", "ms": t32, "tflops": flops / t32 / 1e9,
                         "vs_torch": t_torch / t32, "rel_err_f64": rel(c32[idx], ref)})
            log(f"  {'cuBLAS TF32 (information)':<34} {t32:.3f} ms ({t_torch / t32:.3f}x), "
                f"rel_err_f64 {rows[-1]['rel_err_f64']:.1e}")
            c32 = None
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False
    return {"a": a, "b": b, "c_ref": c_ref, "idx": idx, "ref": ref, "t_torch": t_torch, "flops": flops}


def _candidate(cand: dict, job: dict, spec: dict, base: dict, ftg, bench, sms: int) -> dict:
    """One candidate configuration JIT-run on the job's inputs: checked against float64 and cuBLAS, timed."""
    import torch

    a, b, c_ref, idx, ref = base["a"], base["b"], base["c_ref"], base["idx"], base["ref"]
    mode = cand.get("f32_mode", "ieee")
    cfg = cand["config"]
    row = {"name": "falcon_gemm (JIT)", "job": job["label"], "spec": dict(spec, f32_mode=mode),
           "config": cand["label"], "f32_mode": mode, "aot": cand.get("aot")}
    label = cand["label"] + ("" if mode == "ieee" or spec["a_dtype"] != "f32" else f" [{mode}]")
    try:
        c = torch.empty((spec["M"], spec["N"]), dtype=torch_dtype(spec["a_dtype"]), device=common.DEV)
        t0 = time.perf_counter()
        ftg.launch(a, b, c, num_sms=sms, f32_mode=mode, **cfg)
        if common.DEV == "cuda":
            torch.cuda.synchronize()
        row["compile_s"] = time.perf_counter() - t0
        row["rel_diff_torch"] = rel(c, c_ref)
        row["rel_err_f64"] = rel(c[idx], ref)
        row["ms"] = bench(lambda: ftg.launch(a, b, c, num_sms=sms, f32_mode=mode, **cfg))
        row["tflops"] = base["flops"] / row["ms"] / 1e9
        row["vs_torch"] = base["t_torch"] / row["ms"]
        row["ok"] = row["rel_err_f64"] <= tolerance(row["spec"])
        log(f"  {label:<34} {row['ms']:.3f} ms ({row['vs_torch']:.3f}x torch), rel_err_f64 "
            f"{row['rel_err_f64']:.1e}, diff torch {row['rel_diff_torch']:.1e}, compile {row['compile_s']:.1f}s"
            + ("" if row["ok"] else "  NOT OK"))
        c = None
    except Exception as e:
        row["ok"] = False
        row["error"] = f"{type(e).__name__}: {e}"[:800]
        log(f"  {label:<34} FAILED {row['error'][:300]}")
    return row


def _best(rows, job_label: str, dtype: str, mode: str = "ieee"):
    """The fastest correct IEEE/16-bit candidate of a job (its label and dtype: jobs of one shape share
    the label), or None."""
    ok = [r for r in rows if r.get("job") == job_label and r["spec"]["a_dtype"] == dtype
          and r["name"] != "torch.matmul" and r.get("ok") and r.get("f32_mode", "ieee") == mode]
    return min(ok, key=lambda r: r["ms"]) if ok else None


def _tune_table(rows) -> str:
    lines = ["vs torch = torch time / kernel time (> 1: faster), both by the same timer (do_bench median, L2 "
             "flushed, or 3 event-timed calls for problems over 20 ms).", "",
             "| dtype | shape | job | config | ms | TFLOP/s | vs torch | rel err f64 | rel diff torch | ok |",
             "|" + "---|" * 10]
    for r in rows:
        s = r["spec"]
        mode = s.get("f32_mode", "ieee")
        dt = s["a_dtype"] + ("" if s["a_dtype"] != "f32" or mode == "ieee" else f" ({mode})")
        cells = f"| {dt} | {s['M']}x{s['N']}x{s['K']} | {r.get('job', '')} | {r['config']} | "
        if "error" in r:
            lines.append(cells + f"FAILED: {r['error'][:60]} | | | | | NO |")
            continue
        vs = f"{r['vs_torch']:.3f}x" if "vs_torch" in r else "1"
        diff = f"{r['rel_diff_torch']:.1e}" if "rel_diff_torch" in r else "-"
        ok = "" if "ok" not in r else ("yes" if r["ok"] else "NO")
        lines.append(cells + f"{r['ms']:.3f} | {r['tflops']:.1f} | {vs} | {r['rel_err_f64']:.1e} | {diff} | {ok} |")
    return "\n".join(lines) + "\n"

