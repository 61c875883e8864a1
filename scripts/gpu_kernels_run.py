#!/usr/bin/env python3
"""The GPU side of scripts/gpu_kernels.py: run, tune and check a bundle of falcon's GEMM kernels.

Needs only python3, numpy, torch (and ml_dtypes) plus iree-base-runtime for
``run`` and Triton (3.6 on the H200 machine) for ``tune``; nothing from
falcon-mlir. ``prepare`` (scripts/gpu_kernels.py, here) copies the GPU-side
files and the kernel source into the bundle: this one (the command line,
``run`` of the GEMM modules, ``check``), ``gpu_kernels_common.py`` (what the
modes share), ``gpu_kernels_plans.py`` (``run`` of the plan modules),
``gpu_kernels_jit.py``, ``gpu_kernels_tune.py`` and ``gpu_kernels.py``.

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
  with it too. Then the LCMA plan modules, each against cuBLAS on shared inputs.
* ``jit DIR``: each LCMA plan's four kernels JIT-run by the machine's Triton
  and timed one by one, their sum against cuBLAS by the same timer.
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
* ``--cpu`` (run, tune, jit): a dry run of this script's logic here, on a bundle
  made by ``prepare --cpu`` (IREE's own llvm-cpu code as @main; Triton's
  interpreter for tune and jit). It says nothing about the GPU.

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
import sys
import time
from functools import partial
from pathlib import Path

import gpu_kernels_common as common
from gpu_kernels_common import (DTYPES, GPU_FILES, KERNEL_FILE, add_timing, empty_cache, finish, iree_device,
                                interleaved, load_manifest, log, make_inputs, mark_failed, op, open_module, parse_shape,
                                ref_rows,
                                rel, time_wall, to_numpy, to_torch, tolerance, torch_dtype, torch_setup, torch_times,
                                write_results)
from gpu_kernels_jit import jit
from gpu_kernels_plans import plan_table, run_plans
from gpu_kernels_tune import tune


# --------------------------------------------------------------------------- run (GPU)

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
    """The GEMM modules (correctness modules first), then the plan modules (gpu_kernels_plans.py)."""
    d = Path(args.dir)
    manifest = load_manifest(d)
    torch_setup()
    config = iree_device()
    groups = _entry_groups(manifest, args)
    rows, skipped, t_all = [], [], time.perf_counter()

    def save_partial():
        write_results(args, "run", rows, skipped, _run_table(rows), partial=True)
    log(f"run: {sum(map(len, groups.values()))} modules in {len(groups)} problems, correctness modules first; "
        f"budget {args.budget_s:.0f}s")
    for gi, (key, entries) in enumerate(groups.items()):
        spec = json.loads(key)
        if time.perf_counter() - t_all > args.budget_s:
            skipped += [e["name"] for e in entries]
            continue
        try:
            base = _baseline(args, config, spec, entries[0], gi)
        except Exception as e:
            log(f"FAILED inputs/torch for {entries[0]['name']}: {type(e).__name__}: {e}")
            rows += [{"name": x["name"], "spec": spec, "error": f"inputs/torch: {type(e).__name__}: {e}"}
                     for x in entries]
            base = None
        if base is None:
            empty_cache()
            continue
        torch_row = base["torch_row"]
        rows.append(torch_row)
        log(f"[{time.perf_counter() - t_all:5.0f}s] {_head(torch_row)}: torch.matmul wall "
            f"{torch_row['wall_ms']:.3f} ms, events {torch_row['ev_ms']:.3f} ms, "
            f"rel_err_f64 {torch_row['rel_err_f64']:.2e}")
        for e in entries:
            rows.append(_run_module(args, d, config, e, spec, base))
            log(f"[{time.perf_counter() - t_all:5.0f}s] {_run_line(rows[-1])}")
        base = torch_row = None
        empty_cache()
        save_partial()
    run_plans(args, d, manifest, config, rows, skipped, t_all, save_partial)
    return finish(args, "run", rows, skipped, _run_table(rows))


def _baseline(args, config, spec: dict, first: dict, gi: int) -> dict:
    """One problem's inputs (on the GPU and on IREE's device), float64 rows and torch.matmul row (``first``:
    the problem's first entry, for the row's label)."""
    import iree.runtime as rt
    import torch

    flops = 2 * spec["batch"] * spec["M"] * spec["N"] * spec["K"]
    out_t = torch_dtype(spec["out_dtype"])
    a, b = make_inputs(spec, seed=gi)
    idx, ref = ref_rows(spec, a, b, args.check_rows, seed=gi)
    ta, tb = op(a, spec["trans_a"]), op(b, spec["trans_b"])
    if spec["out_dtype"] != spec["a_dtype"]:  # widen exactly, multiply in f32 (TF32 off), round once
        ta, tb = ta.float(), tb.float()

    def tfn():
        return torch.matmul(ta, tb)
    c_torch = tfn().to(out_t)
    torch_row = {"name": "torch.matmul", "spec": spec, "label": first["label"],
                 "kind": first["kind"], "config": "cuBLAS",
                 "rel_err_f64": rel(c_torch[..., idx, :], ref)}
    torch_row["ev_ms"], torch_row["wall_ms"] = torch_times(tfn, args.warmup, args.repeat, args.entry_budget_s)
    torch_row["tflops"] = flops / torch_row["wall_ms"] / 1e9
    a_dev = rt.asdevicearray(config.device, to_numpy(a))
    b_dev = rt.asdevicearray(config.device, to_numpy(b))
    return {"idx": idx, "ref": ref, "c_torch": c_torch, "a_dev": a_dev, "b_dev": b_dev, "torch_row": torch_row,
            "flops": flops, "tfn": tfn}


def _run_module(args, d: Path, config, e: dict, spec: dict, base: dict) -> dict:
    """One GEMM module on the problem's inputs: checked against float64, torch and (where the module has it)
    IREE's own @reference, then timed."""
    a_dev, b_dev, idx, ref = base["a_dev"], base["b_dev"], base["idx"], base["ref"]
    row = {"name": e["name"], "spec": spec, "label": e["label"], "kind": e["kind"],
           "config": e["config_label"], "kernel": e["kernel"]}
    try:
        ctx, module = open_module(config, d / e["file"])
        main = module["main"]
        c = to_torch(main(a_dev, b_dev).to_host())
        row["rel_err_f64"] = rel(c[..., idx, :], ref)
        row["rel_diff_torch"] = rel(c, base["c_torch"])
        if e["reference"]:
            c_ref = to_torch(module["reference"](a_dev, b_dev).to_host())
            row["rel_diff_iree_reference"] = rel(c, c_ref)
            row["iree_reference_rel_err_f64"] = rel(c_ref[..., idx, :], ref)
        del c
        tol = tolerance(spec)
        row["ok"] = bool(row["rel_err_f64"] <= tol and row["rel_diff_torch"] <= 2 * tol
                         and row.get("rel_diff_iree_reference", 0) <= 2 * tol)
        times = time_wall(partial(main, a_dev, b_dev), args.warmup, args.repeat, args.entry_budget_s)
        add_timing(row, times, base["flops"], base["torch_row"])
        if args.interleave:
            interleaved(args, base, main, row)
        del ctx, module, main
        config.device.allocator.trim()
    except Exception as ex:
        mark_failed(row, ex)
    return row


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
            f"{r['vs_torch_events']:.3f}x vs events{extra}"
            + (f" | interleaved: torch {r['il_torch_ms']:.3f} ms, IREE {r['il_plan_ms']:.3f} ms, speed "
               f"{r['vs_torch_interleaved']:.3f}x ({r['il_calls']} calls each)" if "il_plan_ms" in r else "")
            + ("" if r.get("ok", True) else "  NOT OK"))


def _run_table(rows) -> str:
    return _gemm_table([r for r in rows if r.get("kind") != "plan"]) + plan_table(rows)


def _gemm_table(rows) -> str:
    if not rows:
        return ""
    lines = ["Speed = torch time / IREE time (> 1: IREE faster); IREE is wall clock per synchronous call.", "",
             "| dtype | shape (MxNxK) | label | config | triton | IREE ms (wall) | TFLOP/s | torch ms (wall) "
             "| torch ms (events) | speed wall/wall | speed vs events | speed interleaved | rel err f64 | rel diff torch "
             "| ok |",
             "|" + "---|" * 15]
    for r in rows:
        if r["name"] == "torch.matmul":
            continue
        s = r["spec"]
        head = _head(r).split(" ", 1)
        dt, shape = head[0].replace(f"->{s['out_dtype']}", "" if s["out_dtype"] == s["a_dtype"]
                                    else f"->{s['out_dtype']}"), head[1]
        if "error" in r:
            lines.append(f"| {dt} | {shape} | {r.get('label', '')} | {r.get('config', '')} | | FAILED: "
                         f"{r['error'][:60]} | | | | | | | | | NO |")
            continue
        tv = r.get("kernel", {}).get("triton_version", "")
        lines.append(f"| {dt} | {shape} | {r['label']} | {r['config']} | {tv} | {r['wall_ms']:.3f} | "
                     f"{r['tflops']:.1f} | {r['torch_wall_ms']:.3f} | {r['torch_ev_ms']:.3f} | "
                     f"{r['vs_torch_wall']:.3f}x | {r['vs_torch_events']:.3f}x | "
                     + (f"{r['vs_torch_interleaved']:.3f}x" if "vs_torch_interleaved" in r else "-") + " | "
                     f"{r['rel_err_f64']:.1e} | {r['rel_diff_torch']:.1e} | {'yes' if r['ok'] else 'NO'} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- check (anywhere)

def check(args) -> int:
    d = Path(args.dir)
    manifest = load_manifest(d)
    problems = []
    for f in GPU_FILES + (KERNEL_FILE,):
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
            for cand in e["jit"].get(role, ()):  # scaled plans have no JIT launches
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
            q.add_argument("--interleave", type=int, default=0, metavar="ROUNDS",
                           help="plan modules: also time cuBLAS and the plan in ROUNDS alternating rounds of "
                                "--repeat/ROUNDS calls each (both see the same clocks and temperature); the "
                                "ratio of those medians is the row's vs_torch_interleaved")
        elif name == "tune":
            q.add_argument("--configs", nargs="+", help="only these candidate labels (from the manifest)")
    c = sub.add_parser("check", help="check the bundle's files (no GPU)")
    c.add_argument("dir")
    args = p.parse_args(argv)
    common.DEV = "cpu" if getattr(args, "cpu", False) else "cuda"
    try:
        for s in getattr(args, "shapes", None) or []:
            parse_shape(s)
        if args.mode == "run":
            check_counts(args)
        return {"run": run, "tune": tune, "jit": jit, "check": check}[args.mode](args)
    except ValueError as e:
        log(f"error: {e}")
        return 2


def check_counts(args) -> None:
    """``run``'s counts: ``--repeat`` at least 1, ``--warmup`` at least 0, ``--interleave`` from 0 (off) to
    ``--repeat`` (rounds of ``repeat // interleave`` calls: more rounds than calls made one call per round, up
    to ROUNDS calls outside ``--entry-budget-s``; negative ones timed nothing and printed nan).

    Raises:
        ValueError: a count out of range (one line)."""
    if args.repeat < 1:
        raise ValueError(f"--repeat {args.repeat}: at least 1 timed call")
    if args.warmup < 0:
        raise ValueError(f"--warmup {args.warmup}: at least 0")
    if not 0 <= args.interleave <= args.repeat:
        raise ValueError(f"--interleave {args.interleave}: 0 (off) to --repeat ({args.repeat}) rounds of "
                         f"--repeat/ROUNDS calls each")


if __name__ == "__main__":
    sys.exit(main())
