#!/usr/bin/env python3
"""The GPU side of scripts/gpu_kernels.py: run, tune and check a bundle of falcon's GEMM kernels.

Needs only python3, numpy, torch (and ml_dtypes) plus iree-base-runtime for
``run`` and Triton (3.6 on the H200 machine) for ``tune``; nothing from
falcon-mlir. ``prepare`` (scripts/gpu_kernels.py, here) copies this file,
gpu_kernels.py and the kernel source into the bundle.

* ``run DIR``: the correctness modules first, then the rest in the
  manifest's order. Per module, random normal inputs made on the GPU, the result
  checked against float64 (``--check-rows`` random rows; all rows for small
  problems) and against ``torch.matmul``, then timed: median of ``--repeat``
  synchronous calls after ``--warmup``, inputs and outputs resident on the
  device (IREE's CUDA HAL with ``--cuda_async_allocations=false`` and the
  caching allocator, falcon's runtime settings). Next to it torch.matmul
  (cuBLAS) on the same inputs in the same dtype (bf16 x bf16 -> bf16 with f32
  accumulation, reduced-precision reductions off; f32 with TF32 off; where C's
  type differs from the inputs', torch multiplies the widened inputs in f32),
  timed by CUDA events (GPU time) and like IREE's calls (wall clock per call
  until the GPU is done). Each line and table row gives IREE's wall time,
  torch's wall and event times, and the speed (torch time / IREE time) both
  wall against wall and against torch's events. Modules that hold
  ``@reference`` (IREE's own sm_80 code for the same product) are compared
  with it too.
* ``tune DIR``: the bundle's copy of the kernel source JIT-run on torch tensors
  over the manifest's tuning jobs (a shape and dtype each, with its candidate
  configurations; f32 jobs may add 3xTF32 candidates and cuBLAS TF32, for
  information), timed next to torch.matmul by one timer: ``do_bench``'s
  median (L2 flushed) below 20 ms a call, else the median of 3 event-timed
  calls. Each candidate's error against float64 (``--check-rows`` rows) is
  reported beside cuBLAS's. ``scripts/gpu_kernels.py pick`` turns the result
  into the configuration table.
* ``check DIR`` (anywhere): the bundle is complete; loads every module when
  iree.runtime is there (no device needed).
* ``--cpu`` (run, tune): a dry run of this script's logic here, on a bundle
  made by ``prepare --cpu`` (IREE's own llvm-cpu code as @main; Triton's
  interpreter for tune). It says nothing about the GPU.

Each mode prints a short table last and writes ``gpu_kernels_MODE.json`` and
``.md`` under ``--out`` if given, else ``$OUT``, else DIR, rewritten after
every problem (``"partial": true`` until the end), so a run stopped by a
timeout keeps what it measured. A failing module or configuration is
reported and the run goes on; ``--budget-s`` stops starting new work after
that many seconds (the rest is listed as skipped).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

MANIFEST = "manifest.json"
FORMAT = 1
KERNEL_FILE = "falcon_triton_gemm.py"
DTYPES = ("bf16", "f16", "f32")
#: torch device of the GPU-side modes; ``--cpu`` (a dry run of the logic here) makes it "cpu".
DEV = "cuda"
#: max|C - ref| / max|ref| allowed against float64 (the output type's rounding
#: dominates; f32 sees K-long f32 sums). Against torch and IREE's reference: twice these.
TOL = {"f32": 1e-4, "f16": 2e-3, "bf16": 1e-2}
#: The same for f32 inputs per f32_mode: 3xTF32 is near f32; plain TF32 rounds inputs to 10 bits.
F32_MODE_TOL = {"ieee": 1e-4, "tf32x3": 1e-4, "tf32": 1e-2}


def log(*a):
    print(*a, flush=True)


def parse_shape(text: str) -> tuple:
    """``MxNxK`` -> (M, N, K); raises ValueError with the reason."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"shape {text!r}: expected MxNxK with positive ints, e.g. 8192x4096x4096")
    return tuple(int(p) for p in parts)


def write_atomic(path: Path, data) -> None:
    """Write bytes or text to ``path`` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# --------------------------------------------------------------------------- shared GPU-side helpers

def load_manifest(d: Path) -> dict:
    m = json.loads((d / MANIFEST).read_text())
    if m.get("format") != FORMAT:
        raise SystemExit(f"{d / MANIFEST}: format {m.get('format')}, this script reads {FORMAT}")
    return m


def out_dir(args) -> Path:
    """``--out``, else ``$OUT``, else the bundle."""
    return Path(args.out or os.environ.get("OUT") or args.dir)


def env_info() -> dict:
    info = {"python": sys.version.split()[0], "platform": platform.platform(), "numpy": np.__version__,
            "date": time.strftime("%Y-%m-%d")}
    for mod in ("torch", "triton"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:
            pass
    try:
        from importlib.metadata import version
        info["iree_base_runtime"] = version("iree-base-runtime")
        import torch
        info["gpu"] = torch.cuda.get_device_name(0)
    except Exception:
        pass
    return info


def torch_dtype(name):
    import torch
    return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[name]


def make_inputs(spec: dict, seed: int):
    """A and B as stored (torch, on the GPU): standard normal, rounded to the spec's dtypes."""
    import torch
    g = torch.Generator(device=DEV).manual_seed(seed)
    batch = (spec["batch"],) if spec["batch"] > 1 else ()
    a_shape = batch + ((spec["K"], spec["M"]) if spec["trans_a"] else (spec["M"], spec["K"]))
    b_shape = batch + ((spec["N"], spec["K"]) if spec["trans_b"] else (spec["K"], spec["N"]))
    a = torch.randn(a_shape, generator=g, device=DEV).to(torch_dtype(spec["a_dtype"]))
    b = torch.randn(b_shape, generator=g, device=DEV).to(torch_dtype(spec["b_dtype"]))
    return a, b


def op(t, trans: bool):
    return t.transpose(-1, -2) if trans else t


def torch_setup():
    """cuBLAS like our kernel: f32 accumulation throughout, no TF32 for f32."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False


def rel(x, ref) -> float:
    """max|x - ref| / max|ref|, by blocks of rows (the doubles of a 32768^2 C would be 8.6 GB each)."""
    if x.dim() < 2 or x.shape[-2] <= 4096:
        return float((x.double() - ref.double()).abs().max() / ref.double().abs().max())
    diff = scale = 0.0
    for i in range(0, x.shape[-2], 4096):
        xs, rs = x[..., i:i + 4096, :].double(), ref[..., i:i + 4096, :].double()
        diff = max(diff, float((xs - rs).abs().max()))
        scale = max(scale, float(rs.abs().max()))
    return diff / scale


def ref_rows(spec: dict, a, b, rows: int, seed: int):
    """(index, float64 reference rows): all of C when small, else ``rows`` random rows per batch entry."""
    import torch
    if spec["M"] * spec["N"] * spec["K"] <= 2**30 or rows >= spec["M"]:
        idx = torch.arange(spec["M"], device=DEV)
    else:
        g = torch.Generator(device=DEV).manual_seed(seed + 1)
        idx = torch.randperm(spec["M"], generator=g, device=DEV)[:rows].sort().values
    return idx, op(a, spec["trans_a"])[..., idx, :].double() @ op(b, spec["trans_b"]).double()


def time_wall(fn, warmup: int, repeat: int, budget_s: float) -> list:
    """Seconds of ``repeat`` synchronous calls after ``warmup`` (at least 3 once past ``budget_s``)."""
    for _ in range(warmup):
        fn()
    times, t_start = [], time.perf_counter()
    for i in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if i >= 2 and time.perf_counter() - t_start > budget_s:
            break
    return times


# --------------------------------------------------------------------------- run (GPU)

def iree_device():
    """IREE CUDA device with falcon's runtime settings (falcon_mlir.runner.device_config, copied)."""
    import iree.runtime as rt
    if DEV == "cpu":
        return rt.Config("local-task")
    rt.flags.parse_flags("--cuda_async_allocations=false")
    dev = rt.get_driver("cuda").create_default_device(allocators=["caching"])
    return rt.Config(device=dev)


def to_torch(arr: np.ndarray):
    import torch
    if arr.dtype.name == "bfloat16":
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16).to(DEV)
    return torch.from_numpy(np.ascontiguousarray(arr)).to(DEV)


def to_numpy(t) -> np.ndarray:
    import torch
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
    return t.cpu().numpy()


def torch_times(fn, warmup, repeat, budget_s) -> tuple:
    """(median ms by CUDA events, median ms wall clock per call until the GPU is done)."""
    import torch
    for _ in range(warmup):
        fn()
    ev, t_start = [], time.perf_counter()
    for i in range(repeat if DEV == "cuda" else 0):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ev.append(s.elapsed_time(e))
        if i >= 2 and time.perf_counter() - t_start > budget_s:
            break

    def synced():
        fn()
        if DEV == "cuda":
            torch.cuda.synchronize()
    wall = time_wall(synced, 1, repeat, budget_s)
    return float(np.median(ev)) if ev else float("nan"), float(np.median(wall) * 1e3)


def _entry_groups(manifest: dict, args) -> dict:
    """spec key -> entries, correctness modules (``kind == "check"``) first, then the manifest's order."""
    want = [parse_shape(x) for x in args.shapes] if args.shapes else None
    groups = {}
    for e in sorted(manifest["entries"], key=lambda e: 0 if e["kind"] == "check" else 1):  # stable
        s = e["spec"]
        if args.dtypes and s["a_dtype"] not in args.dtypes or want and (s["M"], s["N"], s["K"]) not in want:
            continue
        groups.setdefault(json.dumps(s, sort_keys=True), []).append(e)
    return groups


def run(args) -> int:
    import iree.runtime as rt
    import torch

    d = Path(args.dir)
    manifest = load_manifest(d)
    torch_setup()
    config = iree_device()
    groups = _entry_groups(manifest, args)
    rows, skipped, t_all = [], [], time.perf_counter()
    log(f"run: {sum(map(len, groups.values()))} modules in {len(groups)} problems, correctness modules first; "
        f"budget {args.budget_s:.0f}s")
    for gi, (key, entries) in enumerate(groups.items()):
        spec = json.loads(key)
        if time.perf_counter() - t_all > args.budget_s:
            skipped += [e["name"] for e in entries]
            continue
        flops = 2 * spec["batch"] * spec["M"] * spec["N"] * spec["K"]
        out_t = torch_dtype(spec["out_dtype"])
        a = b = ta = tb = a_dev = b_dev = c_torch = ref = None
        try:
            a, b = make_inputs(spec, seed=gi)
            idx, ref = ref_rows(spec, a, b, args.check_rows, seed=gi)
            ta, tb = op(a, spec["trans_a"]), op(b, spec["trans_b"])
            if spec["out_dtype"] != spec["a_dtype"]:  # widen exactly, multiply in f32 (TF32 off), round once
                ta, tb = ta.float(), tb.float()

            def tfn():
                return torch.matmul(ta, tb)
            c_torch = tfn().to(out_t)
            torch_row = {"name": "torch.matmul", "spec": spec, "label": entries[0]["label"],
                         "kind": entries[0]["kind"], "config": "cuBLAS",
                         "rel_err_f64": rel(c_torch[..., idx, :], ref)}
            torch_row["ev_ms"], torch_row["wall_ms"] = torch_times(tfn, args.warmup, args.repeat, args.entry_budget_s)
            torch_row["tflops"] = flops / torch_row["wall_ms"] / 1e9
            a_dev = rt.asdevicearray(config.device, to_numpy(a))
            b_dev = rt.asdevicearray(config.device, to_numpy(b))
        except Exception as e:
            log(f"FAILED inputs/torch for {entries[0]['name']}: {type(e).__name__}: {e}")
            rows += [{"name": x["name"], "spec": spec, "error": f"inputs/torch: {type(e).__name__}: {e}"}
                     for x in entries]
            a = b = ta = tb = c_torch = ref = None
            _empty_cache()
            continue
        rows.append(torch_row)
        log(f"[{time.perf_counter() - t_all:5.0f}s] {_head(torch_row)}: torch.matmul wall "
            f"{torch_row['wall_ms']:.3f} ms, events {torch_row['ev_ms']:.3f} ms, "
            f"rel_err_f64 {torch_row['rel_err_f64']:.2e}")
        for e in entries:
            row = {"name": e["name"], "spec": spec, "label": e["label"], "kind": e["kind"],
                   "config": e["config_label"], "kernel": e["kernel"]}
            try:
                ctx = rt.SystemContext(config=config)
                vm = rt.VmModule.mmap(ctx.instance, str(d / e["file"]))
                ctx.add_vm_module(vm)
                main = ctx.modules[vm.name]["main"]
                c = to_torch(main(a_dev, b_dev).to_host())
                row["rel_err_f64"] = rel(c[..., idx, :], ref)
                row["rel_diff_torch"] = rel(c, c_torch)
                if e["reference"]:
                    c_ref = to_torch(ctx.modules[vm.name]["reference"](a_dev, b_dev).to_host())
                    row["rel_diff_iree_reference"] = rel(c, c_ref)
                    row["iree_reference_rel_err_f64"] = rel(c_ref[..., idx, :], ref)
                del c
                tol = tolerance(spec)
                row["ok"] = bool(row["rel_err_f64"] <= tol and row["rel_diff_torch"] <= 2 * tol
                                 and row.get("rel_diff_iree_reference", 0) <= 2 * tol)
                times = time_wall(lambda: main(a_dev, b_dev), args.warmup, args.repeat, args.entry_budget_s)
                row["wall_ms"] = float(np.median(times) * 1e3)
                row["min_ms"] = float(np.min(times) * 1e3)
                row["reps"] = len(times)
                row["tflops"] = flops / row["wall_ms"] / 1e9
                row["torch_wall_ms"], row["torch_ev_ms"] = torch_row["wall_ms"], torch_row["ev_ms"]
                row["vs_torch_wall"] = torch_row["wall_ms"] / row["wall_ms"]
                row["vs_torch_events"] = torch_row["ev_ms"] / row["wall_ms"]
                del ctx, vm, main
                config.device.allocator.trim()
            except Exception as ex:
                row["ok"] = False
                row["error"] = f"{type(ex).__name__}: {ex}"[:800]
                log(traceback.format_exc(limit=4))
            rows.append(row)
            log(f"[{time.perf_counter() - t_all:5.0f}s] {_run_line(row)}")
        a = b = ta = tb = a_dev = b_dev = c_torch = ref = None
        _empty_cache()
        _write_results(args, "run", rows, skipped, _run_table(rows), partial=True)
    run_plans(args, d, manifest, config, rows, skipped, t_all)
    return _finish(args, "run", rows, skipped, _run_table(rows))


# --------------------------------------------------------------------------- plans (GPU): run and jit

#: max|C - ref| / max|ref| against float64 for a plan's output, per output type: a sanity bound (a
#: wrong index gives O(1)); the measured errors are reported beside cuBLAS's.
PLAN_TOL = {"f32": 2e-4, "f16": 4e-3, "bf16": 4e-2}


def _plan_groups(manifest: dict, args) -> dict:
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
    if M * N * K <= 2**30 or rows >= M:
        idx = torch.arange(M, device=DEV)
    else:
        g = torch.Generator(device=DEV).manual_seed(seed + 1)
        idx = torch.randperm(M, generator=g, device=DEV)[:rows].sort().values
    ar = a[idx].double()
    ref = torch.empty((len(idx), N), dtype=torch.float64, device=DEV)
    for j in range(0, N, 8192):
        ref[:, j:j + 8192] = ar @ b[:, j:j + 8192].double()
    return idx, ref


def _plan_warmup(seconds_per_call: float, warmup: int) -> int:
    return 1 if seconds_per_call > 0.2 else warmup


def run_plans(args, d: Path, manifest: dict, config, rows: list, skipped: list, t_all: float) -> None:
    """The plan modules: per (shape, dtype) one set of inputs and one cuBLAS measurement, then each plan:
    error against float64 rows and cuBLAS's, IREE wall per call, effective TFLOP/s = 2MNK / time."""
    import iree.runtime as rt
    import torch

    groups = _plan_groups(manifest, args)
    if not groups:
        return
    log(f"plans: {sum(map(len, groups.values()))} plan modules in {len(groups)} problems")
    for gi, ((M, N, K, dtype), entries) in enumerate(groups.items()):
        if time.perf_counter() - t_all > args.budget_s:
            skipped += [e["name"] for e in entries]
            continue
        flops = 2 * M * N * K
        gspec = {"M": M, "N": N, "K": K, "batch": 1, "a_dtype": dtype, "b_dtype": dtype, "out_dtype": dtype,
                 "trans_a": False, "trans_b": False, "f32_mode": "ieee"}
        a = b = c_torch = ref = a_dev = b_dev = None
        try:
            t0 = time.perf_counter()
            a, b = make_inputs(gspec, seed=1000 + gi)
            idx, ref = plan_ref_rows(M, N, K, a, b, args.check_rows, seed=1000 + gi)

            def tfn():
                return torch.matmul(a, b)
            c_torch = tfn()
            t_call = time.perf_counter()
            torch.cuda.synchronize() if DEV == "cuda" else None
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
        except Exception as e:
            log(f"FAILED inputs/torch for plans at {dtype} {M}x{N}x{K}: {type(e).__name__}: {e}")
            rows += [{"name": x["name"], "kind": "plan", "spec": gspec, "ok": False,
                      "error": f"inputs/torch: {type(e).__name__}: {e}"[:800]} for x in entries]
            a = b = c_torch = ref = a_dev = b_dev = None
            _empty_cache()
            continue
        rows.append(torch_row)
        for e in entries:
            if time.perf_counter() - t_all > args.budget_s:
                skipped.append(e["name"])
                continue
            ps = e["spec"]
            row = {"name": e["name"], "kind": "plan", "spec": gspec, "plan": ps, "scheme": ps["scheme"],
                   "catalog_scheme": e["scheme_name"],
                   "label": e["label"], "config": ps["scheme"], "geometry": e["geometry"],
                   "kernels": {k: v.get("config") for k, v in e["kernels"].items()}}
            try:
                ctx = rt.SystemContext(config=config)
                vm = rt.VmModule.mmap(ctx.instance, str(d / e["file"]))
                ctx.add_vm_module(vm)
                main = ctx.modules[vm.name]["main"]
                t0 = time.perf_counter()
                c = to_torch(main(a_dev, b_dev).to_host())
                first = time.perf_counter() - t0
                row["rel_err_f64"] = rel(c[idx], ref)
                row["torch_rel_err_f64"] = torch_row["rel_err_f64"]
                row["rel_diff_torch"] = rel(c, c_torch)
                row["ok"] = bool(row["rel_err_f64"] <= PLAN_TOL[ps["out_dtype"]])
                del c
                times = time_wall(lambda: main(a_dev, b_dev), _plan_warmup(first, args.warmup), args.repeat,
                                  args.entry_budget_s)
                row["wall_ms"] = float(np.median(times) * 1e3)
                row["min_ms"] = float(np.min(times) * 1e3)
                row["reps"] = len(times)
                row["tflops"] = flops / row["wall_ms"] / 1e9
                row["torch_wall_ms"], row["torch_ev_ms"] = torch_row["wall_ms"], torch_row["ev_ms"]
                row["vs_torch_wall"] = torch_row["wall_ms"] / row["wall_ms"]
                row["vs_torch_events"] = torch_row["ev_ms"] / row["wall_ms"]
                del ctx, vm, main
                config.device.allocator.trim()
            except Exception as ex:
                row["ok"] = False
                row["error"] = f"{type(ex).__name__}: {ex}"[:800]
                log(traceback.format_exc(limit=4))
            rows.append(row)
            log(f"[{time.perf_counter() - t_all:5.0f}s] {_plan_line(row)}")
            _write_results(args, "run", rows, skipped, _run_table(rows), partial=True)
        a = b = c_torch = ref = a_dev = b_dev = None
        _empty_cache()
        config.device.allocator.trim()


def _plan_line(r: dict) -> str:
    head = f"plan {r['scheme']} {r['label']}"
    if "error" in r:
        return f"{head}: FAILED {r['error'][:300]}"
    return (f"{head}: IREE {r['wall_ms']:.3f} ms wall = {r['tflops']:.1f} effective TFLOP/s | cuBLAS "
            f"{r['torch_wall_ms']:.3f} wall, {r['torch_ev_ms']:.3f} events | speed {r['vs_torch_wall']:.3f}x "
            f"wall/wall, "
            f"{r['vs_torch_events']:.3f}x vs events | rel_err_f64 {r['rel_err_f64']:.2e} (cuBLAS "
            f"{r['torch_rel_err_f64']:.2e}), diff torch {r['rel_diff_torch']:.2e}" + ("" if r["ok"] else "  NOT OK"))


def _plan_table(rows) -> str:
    plans = [r for r in rows if r.get("kind") == "plan" and r["name"] != "torch.matmul"]
    if not plans:
        return ""
    lines = ["", "LCMA plans inside IREE (four dispatches): effective TFLOP/s = 2MNK / IREE wall per call; speed = "
             "cuBLAS time / plan time.", "",
             "| dtype | shape | plan | products | out | IREE ms (wall) | eff. TFLOP/s | cuBLAS ms (wall) "
             "| cuBLAS ms (events) | speed wall/wall | speed vs events | rel err f64 | cuBLAS rel err f64 | ok |",
             "|" + "---|" * 14]
    for r in plans:
        s = r["spec"]
        p = r.get("plan", {})
        head = (f"| {s['a_dtype']} | {s['M']}x{s['N']}x{s['K']} | {r.get('scheme', '')} | "
                f"{p.get('product_dtype', '')} | {p.get('out_dtype', '')} | ")
        if "error" in r:
            lines.append(head + f"FAILED: {r['error'][:60]} | | | | | | | | NO |")
            continue
        lines.append(head + f"{r['wall_ms']:.3f} | {r['tflops']:.1f} | {r['torch_wall_ms']:.3f} | "
                     f"{r['torch_ev_ms']:.3f} | {r['vs_torch_wall']:.3f}x | {r['vs_torch_events']:.3f}x | "
                     f"{r['rel_err_f64']:.1e} | {r['torch_rel_err_f64']:.1e} | {'yes' if r['ok'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def _load_generated(path: Path, fn: str):
    import importlib.util
    name = "falcon_gen_" + path.stem
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return getattr(sys.modules[name], fn)


def jit(args) -> int:
    """Each plan's four kernels JIT-launched and timed one by one (the machine's Triton): combine A, B
    and C with their bandwidth (bytes moved / time), the products with TFLOP/s; their sum against
    cuBLAS by the same timer; combine tile candidates for information."""
    if DEV == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import triton

    d = Path(args.dir)
    manifest = load_manifest(d)
    sys.path.insert(0, str(d))
    import falcon_triton_gemm as ftg

    torch_setup()
    bench = _bench_factory()
    sms = torch.cuda.get_device_properties(0).multi_processor_count if DEV == "cuda" else 3
    groups = _plan_groups(manifest, args)
    rows, skipped, t_all = [], [], time.perf_counter()
    log(f"jit: {sum(map(len, groups.values()))} plans; triton {triton.__version__}, {sms} SMs; "
        f"budget {args.budget_s:.0f}s")
    tdt = torch_dtype
    for gi, ((M, N, K, dtype), entries) in enumerate(groups.items()):
        if time.perf_counter() - t_all > args.budget_s:
            skipped += [e["name"] for e in entries]
            continue
        flops = 2 * M * N * K
        gspec = {"M": M, "N": N, "K": K, "batch": 1, "a_dtype": dtype, "b_dtype": dtype, "out_dtype": dtype,
                 "trans_a": False, "trans_b": False, "f32_mode": "ieee"}
        a, b = make_inputs(gspec, seed=2000 + gi)
        idx, ref = plan_ref_rows(M, N, K, a, b, args.check_rows, seed=2000 + gi)
        t_torch = bench(lambda: torch.matmul(a, b))
        rows.append({"name": "torch.matmul", "spec": gspec, "ms": t_torch, "tflops": flops / t_torch / 1e9})
        log(f"[{time.perf_counter() - t_all:5.0f}s] {dtype} {M}x{N}x{K}: cuBLAS {t_torch:.3f} ms "
            f"({flops / t_torch / 1e9:.1f} TFLOP/s)")
        for e in entries:
            if time.perf_counter() - t_all > args.budget_s:
                skipped.append(e["name"])
                continue
            ps, g = e["spec"], e["geometry"]
            row = {"name": e["name"], "spec": gspec, "plan": ps, "scheme": ps["scheme"], "kernels": {}}
            bufs = {}
            try:
                bufs["a_ops"] = torch.empty((g["R"], g["bm"], g["bk"]), dtype=tdt(ps["dtype"]), device=DEV)
                bufs["b_ops"] = torch.empty((g["R"], g["bk"], g["bn"]), dtype=tdt(ps["dtype"]), device=DEV)
                bufs["p"] = torch.empty((g["R"], g["bm"], g["bn"]), dtype=tdt(ps["product_dtype"]), device=DEV)
                bufs["c"] = torch.empty((M, N), dtype=tdt(ps["out_dtype"]), device=DEV)
                io = {"a": (a, bufs["a_ops"]), "b": (b, bufs["b_ops"]), "c": (bufs["p"], bufs["c"])}
                total = 0.0
                for role in ("a", "b", "p", "c"):
                    if role == "p":
                        P = e["jit"]["p"]

                        def prod():
                            ftg.launch(bufs["a_ops"], bufs["b_ops"], bufs["p"], num_sms=sms,
                                       f32_mode=ps["f32_mode"], **P["config"])
                        t0 = time.perf_counter()
                        prod()
                        torch.cuda.synchronize() if DEV == "cuda" else None
                        ms = bench(prod)
                        pf = 2 * g["R"] * g["bm"] * g["bn"] * g["bk"]
                        row["kernels"]["products"] = {"ms": ms, "tflops": pf / ms / 1e9, "config": P["label"],
                                                      "compile_s": time.perf_counter() - t0}
                        total += ms
                        log(f"    products {P['label']:<22} {ms:8.3f} ms  {pf / ms / 1e9:7.1f} TFLOP/s")
                        continue
                    x, y = io[role]
                    for ci, cand in enumerate(e["jit"][role][:max(1, args.candidates)]):
                        if ci and time.perf_counter() - t_all > args.budget_s:
                            break
                        fn = _load_generated(d / cand["source"], cand["fn"])

                        def comb(fn=fn, cand=cand):
                            fn[(cand["programs"],)](x, y, num_warps=cand["num_warps"], **cand["constexprs"])
                        try:
                            t0 = time.perf_counter()
                            comb()
                            torch.cuda.synchronize() if DEV == "cuda" else None
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
                            total += ms
                            comb()  # the default's output feeds the next kernel
                torch.cuda.synchronize() if DEV == "cuda" else None
                row["rel_err_f64"] = rel(bufs["c"][idx], ref)
                row["ms"] = total
                row["tflops"] = flops / total / 1e9
                row["cublas_ms"] = t_torch
                row["vs_torch"] = t_torch / total
                row["ok"] = bool(row["rel_err_f64"] <= PLAN_TOL[ps["out_dtype"]])
                log(f"[{time.perf_counter() - t_all:5.0f}s] plan {ps['scheme']} {e['label']}: sum of kernels "
                    f"{total:.3f} ms = {row['tflops']:.1f} effective TFLOP/s, {row['vs_torch']:.3f}x cuBLAS; "
                    f"rel_err_f64 {row['rel_err_f64']:.2e}" + ("" if row["ok"] else "  NOT OK"))
            except Exception as ex:
                row["ok"] = False
                row["error"] = f"{type(ex).__name__}: {ex}"[:800]
                log(traceback.format_exc(limit=4))
            rows.append(row)
            bufs.clear()
            _empty_cache()
            _write_results(args, "jit", rows, skipped, _jit_table(rows), partial=True)
        a = b = ref = None
        _empty_cache()
    return _finish(args, "jit", rows, skipped, _jit_table(rows))


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


def tolerance(spec: dict) -> float:
    """max|C - ref| / max|ref| allowed against float64 for this spec (TOL, or F32_MODE_TOL for f32 inputs)."""
    if spec["a_dtype"] == "f32":
        return max(TOL[spec["out_dtype"]], F32_MODE_TOL[spec.get("f32_mode", "ieee")])
    return TOL[spec["out_dtype"]]


def _empty_cache():
    import torch
    if DEV == "cuda":
        torch.cuda.empty_cache()


def _head(r: dict) -> str:
    s = r["spec"]
    mode = s.get("f32_mode", "ieee")
    dt = s["a_dtype"] + ("" if mode == "ieee" or s["a_dtype"] != "f32" else f"({mode})")
    shape = f"{s['M']}x{s['N']}x{s['K']}" + (f" b{s['batch']}" if s["batch"] > 1 else "") + \
        " " + ("t" if s["trans_a"] else "n") + ("t" if s["trans_b"] else "n")
    return f"{dt}->{s['out_dtype']} {shape}"


def _run_line(r: dict) -> str:
    """One module: IREE wall, torch wall and events, both speed ratios (torch time / IREE time), errors."""
    head = f"{_head(r)} {r.get('config', '')}"
    if "error" in r:
        return f"{head}: FAILED {r['error'][:200]}"
    extra = "".join(f", {k} {r[k]:.2e}" for k in ("rel_err_f64", "rel_diff_torch", "rel_diff_iree_reference")
                    if k in r)
    return (f"{head}: IREE {r['wall_ms']:.3f} ms wall ({r['tflops']:.1f} TFLOP/s) | torch {r['torch_wall_ms']:.3f} "
            f"wall, {r['torch_ev_ms']:.3f} events | speed vs torch {r['vs_torch_wall']:.3f}x wall/wall, "
            f"{r['vs_torch_events']:.3f}x vs events{extra}" + ("" if r.get("ok", True) else "  NOT OK"))


def _run_table(rows) -> str:
    return _gemm_table([r for r in rows if r.get("kind") != "plan"]) + _plan_table(rows)


def _gemm_table(rows) -> str:
    if not rows:
        return ""
    lines = ["Speed = torch time / IREE time (> 1: IREE faster); IREE is wall clock per synchronous call.", "",
             "| dtype | shape (MxNxK) | label | config | triton | IREE ms (wall) | TFLOP/s | torch ms (wall) "
             "| torch ms (events) | speed wall/wall | speed vs events | rel err f64 | rel diff torch | ok |",
             "|" + "---|" * 14]
    for r in rows:
        if r["name"] == "torch.matmul":
            continue
        s = r["spec"]
        head = _head(r).split(" ", 1)
        dt, shape = head[0].replace(f"->{s['out_dtype']}", "" if s["out_dtype"] == s["a_dtype"]
                                    else f"->{s['out_dtype']}"), head[1]
        if "error" in r:
            lines.append(f"| {dt} | {shape} | {r.get('label', '')} | {r.get('config', '')} | | FAILED: "
                         f"{r['error'][:60]} | | | | | | | | NO |")
            continue
        tv = r.get("kernel", {}).get("triton_version", "")
        lines.append(f"| {dt} | {shape} | {r['label']} | {r['config']} | {tv} | {r['wall_ms']:.3f} | "
                     f"{r['tflops']:.1f} | {r['torch_wall_ms']:.3f} | {r['torch_ev_ms']:.3f} | "
                     f"{r['vs_torch_wall']:.3f}x | {r['vs_torch_events']:.3f}x | {r['rel_err_f64']:.1e} | "
                     f"{r['rel_diff_torch']:.1e} | {'yes' if r['ok'] else 'NO'} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- tune (GPU)

def _bench_factory():
    """``bench(fn) -> ms``: do_bench's median (L2 flushed between calls) for calls under 20 ms;
    for bigger problems the median of 3 event-timed calls after one warm call (do_bench would
    spend seconds estimating); three timed calls on the CPU (dry run)."""
    import torch

    def bench(fn) -> float:
        if DEV == "cpu":
            return float(np.median(time_wall(fn, 1, 3, 60.0)) * 1e3)
        from triton.testing import do_bench
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        if time.perf_counter() - t0 > 0.02:
            times = []
            for _ in range(3):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e))
            return float(np.median(times))
        return float(do_bench(fn, warmup=10, rep=50, return_mode="median"))
    return bench


def tune(args) -> int:
    if DEV == "cpu":  # dry run: Triton's interpreter, which must be chosen before triton is imported
        os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import triton

    d = Path(args.dir)
    manifest = load_manifest(d)
    sys.path.insert(0, str(d))
    import falcon_triton_gemm as ftg  # the bundle's copy of the kernel source

    torch_setup()
    bench = _bench_factory()
    sms = torch.cuda.get_device_properties(0).multi_processor_count if DEV == "cuda" else 3
    jobs = manifest["tune"]["jobs"]
    want = [parse_shape(x) for x in args.shapes] if args.shapes else None
    rows, skipped, t_all = [], [], time.perf_counter()
    log(f"tune: {len(jobs)} jobs, {sum(len(j['candidates']) for j in jobs)} candidates; triton {triton.__version__}, "
        f"{sms} SMs; budget {args.budget_s:.0f}s")
    for ji, job in enumerate(jobs):
        M, N, K, dtype = job["M"], job["N"], job["K"], job["dtype"]
        if args.dtypes and dtype not in args.dtypes or want and (M, N, K) not in want:
            continue
        cands = [c for c in job["candidates"] if not args.configs or c["label"] in args.configs]
        if time.perf_counter() - t_all > args.budget_s:
            skipped.append(f"{dtype} {M}x{N}x{K} ({len(cands)} candidates)")
            continue
        spec = {"M": M, "N": N, "K": K, "batch": 1, "a_dtype": dtype, "b_dtype": dtype, "out_dtype": dtype,
                "trans_a": False, "trans_b": False, "f32_mode": "ieee"}
        flops = 2 * M * N * K
        a = b = c_ref = ref = None
        try:
            a, b = make_inputs(spec, seed=M + N + K)
            idx, ref = ref_rows(spec, a, b, args.check_rows, seed=M + N + K)
            c_ref = torch.matmul(a, b)
            t_torch = bench(lambda: torch.matmul(a, b))
            torch_row = {"name": "torch.matmul", "job": job["label"], "spec": spec, "config": "cuBLAS",
                         "ms": t_torch, "tflops": flops / t_torch / 1e9, "rel_err_f64": rel(c_ref[idx], ref)}
            rows.append(torch_row)
            log(f"[{time.perf_counter() - t_all:5.0f}s] {dtype} {M}x{N}x{K} ({job['label']}): torch.matmul "
                f"{t_torch:.3f} ms, rel_err_f64 {torch_row['rel_err_f64']:.1e}")
            if job.get("torch_tf32") and DEV == "cuda":  # information: cuBLAS on TF32 tensor cores
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
        except Exception as e:
            log(f"FAILED inputs/torch for {dtype} {M}x{N}x{K}: {type(e).__name__}: {e}")
            rows.append({"name": "torch.matmul", "job": job["label"], "spec": spec, "config": "cuBLAS",
                         "ok": False, "error": f"{type(e).__name__}: {e}"[:800]})
            a = b = c_ref = ref = None
            _empty_cache()
            continue
        for cand in cands:
            mode = cand.get("f32_mode", "ieee")
            cfg = cand["config"]
            row = {"name": "falcon_gemm (JIT)", "job": job["label"], "spec": dict(spec, f32_mode=mode),
                   "config": cand["label"], "f32_mode": mode, "aot": cand.get("aot")}
            label = cand["label"] + ("" if mode == "ieee" or dtype != "f32" else f" [{mode}]")
            try:
                c = torch.empty((M, N), dtype=torch_dtype(dtype), device=DEV)
                t0 = time.perf_counter()
                ftg.launch(a, b, c, num_sms=sms, f32_mode=mode, **cfg)
                if DEV == "cuda":
                    torch.cuda.synchronize()
                row["compile_s"] = time.perf_counter() - t0
                row["rel_diff_torch"] = rel(c, c_ref)
                row["rel_err_f64"] = rel(c[idx], ref)
                row["ms"] = bench(lambda: ftg.launch(a, b, c, num_sms=sms, f32_mode=mode, **cfg))
                row["tflops"] = flops / row["ms"] / 1e9
                row["vs_torch"] = t_torch / row["ms"]
                row["ok"] = row["rel_err_f64"] <= tolerance(row["spec"])
                log(f"  {label:<34} {row['ms']:.3f} ms ({row['vs_torch']:.3f}x torch), rel_err_f64 "
                    f"{row['rel_err_f64']:.1e}, diff torch {row['rel_diff_torch']:.1e}, compile {row['compile_s']:.1f}s"
                    + ("" if row["ok"] else "  NOT OK"))
                c = None
            except Exception as e:
                row["ok"] = False
                row["error"] = f"{type(e).__name__}: {e}"[:800]
                log(f"  {label:<34} FAILED {row['error'][:300]}")
            rows.append(row)
        best = _best(rows, job["label"], dtype)
        if best:
            log(f"  best: {best['config']}{'' if best['f32_mode'] == 'ieee' else ' [' + best['f32_mode'] + ']'} "
                f"{best['ms']:.3f} ms = {best['vs_torch']:.3f}x torch")
        a = b = c_ref = ref = None
        _empty_cache()
        _write_results(args, "tune", rows, skipped, _tune_table(rows), partial=True)
    log(f"triton {triton.__version__}, {sms} SMs")
    return _finish(args, "tune", rows, skipped, _tune_table(rows))


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


# --------------------------------------------------------------------------- check (anywhere)

def check(args) -> int:
    d = Path(args.dir)
    manifest = load_manifest(d)
    problems = []
    for f in ("gpu_kernels.py", "gpu_kernels_run.py", KERNEL_FILE):
        if not (d / f).is_file():
            problems.append(f"missing {f}")
    if (d / KERNEL_FILE).is_file() and \
            hashlib.sha256((d / KERNEL_FILE).read_bytes()).hexdigest() != manifest["kernel_sha256"]:
        problems.append(f"{KERNEL_FILE} differs from the one the modules were built from")
    try:
        import iree.runtime as rt
        inst = rt.VmInstance()
    except Exception:
        rt = None
    for e in manifest.get("plans", []):
        p = d / e["file"]
        if not p.is_file() or p.stat().st_size != e["vmfb_bytes"]:
            problems.append(f"{e['file']}: missing or wrong size")
        for role in "abc":
            for cand in e["jit"][role]:
                if not (d / cand["source"]).is_file():
                    problems.append(f"{cand['source']}: missing")
        if rt is not None and p.is_file() and \
                "main" not in rt.VmModule.copy_buffer(inst, p.read_bytes()).function_names:
            problems.append(f"{e['file']}: no main")
    for e in manifest["entries"]:
        p = d / e["file"]
        if not p.is_file() or p.stat().st_size != e["vmfb_bytes"]:
            problems.append(f"{e['file']}: missing or wrong size")
        elif rt is not None:
            names = rt.VmModule.copy_buffer(inst, p.read_bytes()).function_names
            want = {"main", "reference"} if e["reference"] else {"main"}
            if not want <= set(names):
                problems.append(f"{e['file']}: functions {names}")
    size = sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
    log(f"{len(manifest['entries'])} modules, {len(manifest.get('plans', []))} plan modules, "
        f"{len(manifest['failures'])} failed at prepare, "
        f"{size / 2**20:.1f} MiB; modules loaded: {'yes' if rt else 'no (no iree.runtime)'}")
    for p in problems:
        log("PROBLEM:", p)
    return 1 if problems else 0


_ENV = None


def _write_results(args, mode: str, rows, skipped, table: str, partial: bool = False) -> Path:
    """``gpu_kernels_MODE.json`` and ``.md`` (rewritten after every problem, so a run cut short keeps its rows)."""
    global _ENV
    if _ENV is None:
        _ENV = env_info()
    out = out_dir(args)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / f"gpu_kernels_{mode}.json",
                 json.dumps({"env": _ENV, "mode": mode, "partial": partial, "rows": rows, "skipped": skipped},
                            indent=1))
    write_atomic(out / f"gpu_kernels_{mode}.md", table)
    return out


def _finish(args, mode: str, rows, skipped, table: str) -> int:
    out = _write_results(args, mode, rows, skipped, table)
    if skipped:
        log(f"skipped (budget): {', '.join(skipped)}")
    log(table)
    bad = [r for r in rows if r.get("ok") is False]
    log(f"{mode}: {len(rows)} rows, {len(bad)} not ok; wrote {out}/gpu_kernels_{mode}.json")
    return 1 if bad else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    for name, helptext in (("run", "check and time the modules (GPU)"), ("tune", "JIT-time configurations (GPU)"),
                           ("jit", "JIT-time each kernel of the LCMA plans (GPU)")):
        q = sub.add_parser(name, help=helptext)
        q.add_argument("dir")
        q.add_argument("--dtypes", nargs="+", choices=DTYPES)
        q.add_argument("--shapes", nargs="+", help="only these MxNxK")
        q.add_argument("--budget-s", type=float, default=420.0, help="start no new work after this")
        q.add_argument("--out", help="results folder (default $OUT, else the bundle)")
        q.add_argument("--check-rows", type=int, default=16, help="rows checked against float64 (big problems)")
        q.add_argument("--cpu", action="store_true", help="dry run on the CPU (torch CPU, local-task, "
                       "Triton's interpreter): tests this script's logic without a GPU")
        if name in ("run", "jit"):
            q.add_argument("--plans", nargs="+", help="only these plans (scheme names)")
        if name == "jit":
            q.add_argument("--candidates", type=int, default=4,
                           help="combine tile configurations timed per kernel, the default first")
        if name == "run":
            q.add_argument("--repeat", type=int, default=20)
            q.add_argument("--warmup", type=int, default=3)
            q.add_argument("--entry-budget-s", type=float, default=15.0, help="timed seconds per module")
        elif name == "tune":
            q.add_argument("--configs", nargs="+", help="only these candidate labels (from the manifest)")
    c = sub.add_parser("check", help="check the bundle's files (no GPU)")
    c.add_argument("dir")
    args = p.parse_args(argv)
    global DEV
    DEV = "cpu" if getattr(args, "cpu", False) else "cuda"
    try:
        for s in getattr(args, "shapes", None) or []:
            parse_shape(s)
        return {"run": run, "tune": tune, "jit": jit, "check": check}[args.mode](args)
    except ValueError as e:
        log(f"error: {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
