#!/usr/bin/env python3
"""The GPU half of ``scripts/gpu_rep.py``: per-product times of plain IREE and
falcon modules inside one call, next to cuBLAS (torch.matmul, CUDA events).

    python3 DIR/gpu_rep_run.py DIR [--repeat 5] [--budget-s 300]

Per module: ``t(R)`` and ``t(1)`` medians of ``--repeat`` synchronous calls
(after one warm-up each), per product ``(t(R) - t(1)) / (R - 1)``; cuBLAS:
the median event time of torch.matmul at the same dtypes (16-bit inputs:
reduced-precision reductions off, f32 accumulation; f32: TF32 off); the
falcon module's result checked against torch's (max-norm relative).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

try:
    from falcon_mlir import compare, files, runner
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import falcon_compare as compare
    import falcon_files as files
    import falcon_runner as runner


def _median_call(fn, args, repeat: int) -> float:
    fn(*args)
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(*args)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _torch(M, N, K, dtype, a, b, repeat):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    tt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dtype]
    ta = torch.from_numpy(a.astype(np.float32)).to("cuda", tt)
    tb = torch.from_numpy(b.astype(np.float32)).to("cuda", tt)
    c = torch.matmul(ta, tb)
    torch.cuda.synchronize()
    ts = []
    for _ in range(max(repeat, 5)):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        c = torch.matmul(ta, tb)
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    return statistics.median(ts), c.float().cpu().numpy()


def main(argv=None) -> int:
    import ml_dtypes

    p = argparse.ArgumentParser(prog="gpu_rep_run.py")
    p.add_argument("dir")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--budget-s", type=float, default=300)
    p.add_argument("--once", nargs="+", metavar="FILE",
                   help="call @rep1 of these modules once each and stop (for a profiler: ncu)")
    args = p.parse_args(argv)
    dir_ = Path(args.dir)
    man = json.loads((dir_ / "manifest.json").read_text())
    config = runner.device_config("cuda")
    np_t = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}
    if args.once:
        by_file = {v["file"]: e for e in man["entries"] for k, v in e.items()
                   if isinstance(v, dict) and "file" in v}
        for f in args.once:
            e = by_file[f]
            m = runner.Module((dir_ / f).read_bytes(), config=config)
            rng = np.random.default_rng(0)
            a = rng.standard_normal((e["M"], e["K"]), dtype=np.float32).astype(np_t[e["dtype"]])
            b = rng.standard_normal((e["K"], e["N"]), dtype=np.float32).astype(np_t[e["dtype"]])
            m.functions["rep1"](*m.on_device(a, b))
            print(f"{f}: one call of @rep1", flush=True)
        return 0
    rows, t_start = [], time.perf_counter()
    for e in man["entries"]:
        if time.perf_counter() - t_start > args.budget_s:
            print(f"budget: skipped {e['dtype']} {e['M']}x{e['N']}x{e['K']}", flush=True)
            continue
        M, N, K, dt, R = e["M"], e["N"], e["K"], e["dtype"], e["reps"]
        rng = np.random.default_rng(0)
        a = rng.standard_normal((M, K), dtype=np.float32).astype(np_t[dt])
        b = rng.standard_normal((K, N), dtype=np.float32).astype(np_t[dt])
        row = {"dtype": dt, "M": M, "N": N, "K": K, "reps": R, "flops": 2.0 * M * N * K}
        try:
            row["cublas_s"], ref = _torch(M, N, K, dt, a, b, args.repeat)
        except Exception as ex:  # noqa: BLE001
            row["cublas_error"], ref = str(ex)[:200], None
        for name in ("iree", "falcon"):
            v = e.get(name, {})
            if "file" not in v:
                row[name + "_error"] = v.get("error", "not built")
                continue
            try:
                m = runner.Module((dir_ / v["file"]).read_bytes(), config=config)
                da, db = m.on_device(a, b)
                t1 = _median_call(m.functions["rep1"], (da, db), args.repeat)
                tr = _median_call(m.functions[f"rep{R}"], (da, db), args.repeat)
                row[name + "_s"] = max((tr - t1) / (R - 1), 1e-9)
                row[name + "_call1_s"] = t1
                if name == "falcon" and ref is not None:
                    out = np.asarray(m.functions["rep1"](da, db).to_host()).astype(np.float32)
                    row["falcon_rel_diff_cublas"] = compare.rel_err(out, ref)
            except Exception as ex:  # noqa: BLE001
                row[name + "_error"] = " ".join(str(ex).split())[:200]
        rows.append(row)
        show = {k: (f"{v * 1e3:.3f} ms" if k.endswith("_s") else v) for k, v in row.items()
                if k.endswith(("_s", "_error", "rel_diff_cublas"))}
        print(f"{dt} {M}x{N}x{K}: {show}", flush=True)
    lines = ["| dtype | MxNxK | plain IREE ms | falcon ms | cuBLAS ms | falcon vs IREE | falcon vs cuBLAS "
             "| falcon TFLOP/s | rel diff vs cuBLAS |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f, i, c = r.get("falcon_s"), r.get("iree_s"), r.get("cublas_s")
        cell = lambda x: f"{x * 1e3:.3f}" if x else "-"
        lines.append(f"| {r['dtype']} | {r['M']}x{r['N']}x{r['K']} | {cell(i)} | {cell(f)} | {cell(c)} | "
                     + (f"{i / f:.2f}x" if f and i else "-") + " | " + (f"{c / f:.3f}x" if f and c else "-")
                     + " | " + (f"{r['flops'] / f / 1e12:.0f}" if f else "-") + " | "
                     + (f"{r['falcon_rel_diff_cublas']:.1e}" if "falcon_rel_diff_cublas" in r else "-") + " |")
    md = "\n".join(lines)
    out = Path(os.environ.get("OUT") or dir_)
    files.write_atomic(str(out / "gpu_rep.json"), (json.dumps(rows, indent=1) + "\n").encode())
    files.write_atomic(str(out / "gpu_rep.md"), (md + "\n").encode())
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
