#!/usr/bin/env python3
"""The GPU half of ``scripts/gpu_model.py``: time the Llama block through plain
IREE, falcon and JAX/XLA on one CUDA device and compare their outputs.

    python3 DIR/gpu_model_run.py DIR [--repeat 10] [--warmup 3] [--seed 0]

Needs numpy, ml_dtypes, iree-base-runtime and jax (with CUDA); not
falcon_mlir (the bundle carries copies of the standalone library modules it
imports). Inputs: x ~ N(0, 1), projection kernels ~ N(0, 0.02^2), RMSNorm
scales 1 + N(0, 0.02^2), drawn in float32 from ``--seed`` and cast to the
variant's dtype. Each IREE module runs on a CUDA device with falcon's
runtime settings (:func:`falcon_mlir.runner.device_config`); times are the
median of synchronous calls with inputs and outputs on the device; JAX's
are medians of calls ended by ``block_until_ready``. Errors: max-norm
relative difference of each output from JAX's output at the same dtype.
Writes ``gpu_model.json`` and ``gpu_model.md`` to ``$OUT`` (or the bundle).
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

try:  # falcon_mlir installed
    from falcon_mlir import compare, files, runner
except ImportError:  # in a bundle: the copies beside this file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import falcon_compare as compare
    import falcon_files as files
    import falcon_runner as runner


def inputs(entry: dict, dtype: str, seed: int) -> list:
    """Random inputs (see the module docstring) in ``dtype``."""
    import ml_dtypes

    np_t = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}[dtype]
    rng = np.random.default_rng(seed)
    out = [rng.standard_normal(entry["input_shape"], dtype=np.float32)]
    for name, shape in entry["weights"]:
        w = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
        if name.endswith("scale"):
            w += np.float32(1.0)
        out.append(w)
    return [a.astype(np_t) for a in out]


def time_iree(dir_: Path, file: str, host_args: list, config, warmup: int, repeat: int) -> tuple:
    """(median seconds, all seconds, output as float32 numpy) of one IREE module."""
    m = runner.Module((dir_ / file).read_bytes(), config=config)
    fn = m.functions["main"]
    args = m.on_device(*host_args)
    for _ in range(warmup):
        out = fn(*args)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*args)
        times.append(time.perf_counter() - t0)
    out = out[0] if isinstance(out, (tuple, list)) else out
    return statistics.median(times), times, np.asarray(out.to_host()).astype(np.float32)


def time_jax(dir_: Path, file: str, host_args: list, warmup: int, repeat: int) -> tuple:
    import jax

    exp = jax.export.deserialize(bytearray((dir_ / file).read_bytes()))
    f = jax.jit(exp.call)
    args = [jax.device_put(a) for a in host_args]
    for _ in range(warmup):
        f(*args).block_until_ready()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f(*args).block_until_ready()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, np.asarray(f(*args)).astype(np.float32)


def run(dir_: Path, repeat: int, warmup: int, seed: int) -> dict:
    man = json.loads((dir_ / "manifest.json").read_text())
    config = runner.device_config("cuda")
    rows = []
    for dtype, entry in man["variants"].items():
        host = inputs(entry, dtype, seed)
        res = {}
        for name in ("jax", "iree", "falcon"):
            v = entry.get(name, {})
            if "file" not in v:
                res[name] = {"error": v.get("error", "not built")}
                continue
            try:
                if name == "jax":
                    t, ts, y = time_jax(dir_, v["file"], host, warmup, repeat)
                else:
                    t, ts, y = time_iree(dir_, v["file"], host, config, warmup, repeat)
                res[name] = {"seconds": t, "all": ts, "out": y}
            except Exception as e:  # noqa: BLE001 - one variant failing must not end the run
                res[name] = {"error": " ".join(str(e).split())[:300]}
            print(f"{dtype} {name}: " + (f"{res[name]['seconds'] * 1e3:.3f} ms"
                                         if "seconds" in res[name] else res[name]["error"]), flush=True)
        ref = res.get("jax", {}).get("out")
        for name, r in res.items():
            row = {"dtype": dtype, "variant": name, "tokens": man["tokens"]}
            if "seconds" in r:
                row.update(ms=r["seconds"] * 1e3, tflops=entry["flops"] / r["seconds"] / 1e12,
                           times_ms=[x * 1e3 for x in r["all"]])
                if ref is not None and name != "jax":
                    row["rel_diff_vs_jax"] = compare.rel_err(r["out"], ref)
            else:
                row["error"] = r["error"]
            rows.append(row)
    return {"rows": rows, "tokens": man["tokens"], "repeat": repeat, "seed": seed}


def table(result: dict) -> str:
    by = {(r["dtype"], r["variant"]): r for r in result["rows"]}
    lines = ["| dtype | variant | ms (median) | eff. TFLOP/s | vs plain IREE f16 | vs JAX (same dtype) "
             "| rel. diff vs JAX |", "|---|---|---|---|---|---|---|"]
    base = by.get(("float16", "iree"), {}).get("ms")
    for r in result["rows"]:
        if "ms" not in r:
            lines.append(f"| {r['dtype']} | {r['variant']} | does not run: {r['error'][:90]} | | | | |")
            continue
        jax_ms = by.get((r["dtype"], "jax"), {}).get("ms")
        lines.append(f"| {r['dtype']} | {r['variant']} | {r['ms']:.3f} | {r['tflops']:.0f} | "
                     + (f"{base / r['ms']:.2f}x" if base else "-") + " | "
                     + (f"{jax_ms / r['ms']:.2f}x" if jax_ms else "-") + " | "
                     + (f"{r['rel_diff_vs_jax']:.1e}" if "rel_diff_vs_jax" in r else "-") + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="gpu_model_run.py")
    p.add_argument("dir")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--once", nargs=2, metavar=("VARIANT", "DTYPE"),
                   help="call one IREE variant (iree or falcon) once and stop: for a profiler "
                        "(ncu --csv --clock-control none --metrics gpu__time_duration.sum ...)")
    args = p.parse_args(argv)
    dir_ = Path(args.dir)
    if args.once:
        name, dtype = args.once
        entry = json.loads((dir_ / "manifest.json").read_text())["variants"][dtype]
        m = runner.Module((dir_ / entry[name]["file"]).read_bytes(), config=runner.device_config("cuda"))
        out = m.functions["main"](*m.on_device(*inputs(entry, dtype, args.seed)))
        out = out[0] if isinstance(out, (tuple, list)) else out
        print(f"{name} {dtype}: one call, output {out.shape}")
        return 0
    result = run(dir_, args.repeat, args.warmup, args.seed)
    md = table(result)
    out = Path(os.environ.get("OUT") or dir_)
    files.write_atomic(str(out / "gpu_model.json"), (json.dumps(result, indent=1) + "\n").encode())
    files.write_atomic(str(out / "gpu_model.md"), (md + "\n").encode())
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
