"""What the GPU-side modes of scripts/gpu_kernels.py share: the bundle's layout, inputs and float64
references, error measures, timers, IREE's device, and the result files.

Needs python3 and numpy (torch, and iree.runtime for ``run``, imported where
used); nothing from falcon-mlir. ``prepare`` copies it into the bundle with
the other GPU-side files (:data:`GPU_FILES`).

:data:`DEV` is the torch device of every mode: ``gpu_kernels_run.main`` sets
it (``"cpu"`` for a ``--cpu`` dry run), so the modes read it as ``common.DEV``.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
import traceback
from functools import partial
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


#: The GPU side's scripts: ``prepare`` copies them into every bundle, ``check`` wants them there.
GPU_FILES = ("gpu_kernels.py", "gpu_kernels_run.py", "gpu_kernels_common.py", "gpu_kernels_plans.py",
             "gpu_kernels_jit.py", "gpu_kernels_tune.py")


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


def plain_spec(M: int, N: int, K: int, dtype: str) -> dict:
    """The spec dict of ``C = A @ B``, all three of ``dtype``, no transposes, no batch (IEEE f32)."""
    return {"M": M, "N": N, "K": K, "batch": 1, "a_dtype": dtype, "b_dtype": dtype, "out_dtype": dtype,
            "trans_a": False, "trans_b": False, "f32_mode": "ieee"}


def check_rows(M: int, N: int, K: int, rows: int, seed: int):
    """Row indices of C checked against float64: all when the problem is small (``M N K <= 2^30``) or
    ``rows >= M``, else ``rows`` random rows (sorted)."""
    import torch
    if M * N * K <= 2**30 or rows >= M:
        return torch.arange(M, device=DEV)
    g = torch.Generator(device=DEV).manual_seed(seed + 1)
    return torch.randperm(M, generator=g, device=DEV)[:rows].sort().values


def ref_rows(spec: dict, a, b, rows: int, seed: int):
    """(index, float64 reference rows): all of C when small, else ``rows`` random rows per batch entry."""
    idx = check_rows(spec["M"], spec["N"], spec["K"], rows, seed)
    return idx, op(a, spec["trans_a"])[..., idx, :].double() @ op(b, spec["trans_b"]).double()


def time_alternating(fns: list, rounds: int, per_round: int) -> list:
    """Per function of ``fns``, the seconds of its synchronous calls when the functions take turns:
    ``rounds`` rounds, each calling every function ``per_round`` times in a row (one warm call each first).
    Alternating keeps slow drifts (clocks, temperature, other tenants) out of the ratio of their medians."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(rounds):
        for fn, t in zip(fns, times):
            for _ in range(per_round):
                t0 = time.perf_counter()
                fn()
                t.append(time.perf_counter() - t0)
    return times


def interleaved(args, base: dict, main, row: dict) -> None:
    """cuBLAS and the module ``main`` (a plan or a GEMM module) timed in ``args.interleave`` alternating
    rounds of ``args.repeat // args.interleave`` synchronous calls (wall clock per call); the medians go into
    ``row``: ``il_torch_ms``, ``il_plan_ms`` (the module's), ``il_calls``, ``vs_torch_interleaved`` = cuBLAS /
    module."""
    import torch
    a_dev, b_dev = base["a_dev"], base["b_dev"]

    def tcall():
        base["tfn"]()
        if DEV == "cuda":
            torch.cuda.synchronize()
    per = max(1, args.repeat // args.interleave)
    t_torch, t_plan = time_alternating([tcall, partial(main, a_dev, b_dev)], args.interleave, per)
    row["il_torch_ms"], row["il_plan_ms"] = float(np.median(t_torch) * 1e3), float(np.median(t_plan) * 1e3)
    row["il_calls"] = len(t_plan)
    row["vs_torch_interleaved"] = row["il_torch_ms"] / row["il_plan_ms"]


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


def event_ms(fn) -> float:
    """One call of ``fn`` timed by CUDA events (ms of GPU time)."""
    import torch
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e)


def torch_times(fn, warmup, repeat, budget_s) -> tuple:
    """(median ms by CUDA events, median ms wall clock per call until the GPU is done)."""
    import torch
    for _ in range(warmup):
        fn()
    ev, t_start = [], time.perf_counter()
    for i in range(repeat if DEV == "cuda" else 0):
        ev.append(event_ms(fn))
        if i >= 2 and time.perf_counter() - t_start > budget_s:
            break

    def synced():
        fn()
        if DEV == "cuda":
            torch.cuda.synchronize()
    wall = time_wall(synced, 1, repeat, budget_s)
    return float(np.median(ev)) if ev else float("nan"), float(np.median(wall) * 1e3)


def bench_factory():
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
            return float(np.median([event_ms(fn) for _ in range(3)]))
        return float(do_bench(fn, warmup=10, rep=50, return_mode="median"))
    return bench


def tolerance(spec: dict) -> float:
    """max|C - ref| / max|ref| allowed against float64 for this spec (TOL, or F32_MODE_TOL for f32 inputs)."""
    if spec["a_dtype"] == "f32":
        return max(TOL[spec["out_dtype"]], F32_MODE_TOL[spec.get("f32_mode", "ieee")])
    return TOL[spec["out_dtype"]]


def empty_cache():
    import torch
    if DEV == "cuda":
        torch.cuda.empty_cache()



def mark_failed(row: dict, ex: Exception) -> None:
    """``row`` of a module or plan that raised ``ex`` (call it while handling): not ok, the error (800
    characters at most), the traceback logged."""
    row["ok"] = False
    row["error"] = f"{type(ex).__name__}: {ex}"[:800]
    log(traceback.format_exc(limit=4))


def add_timing(row: dict, times: list, flops: float, torch_row: dict) -> None:
    """IREE's wall times (seconds per call) into ``row``, with the speed against the torch row's wall and events."""
    row["wall_ms"] = float(np.median(times) * 1e3)
    row["min_ms"] = float(np.min(times) * 1e3)
    row["reps"] = len(times)
    row["tflops"] = flops / row["wall_ms"] / 1e9
    row["torch_wall_ms"], row["torch_ev_ms"] = torch_row["wall_ms"], torch_row["ev_ms"]
    row["vs_torch_wall"] = torch_row["wall_ms"] / row["wall_ms"]
    row["vs_torch_events"] = torch_row["ev_ms"] / row["wall_ms"]


def open_module(config, path: Path):
    """(context, bound module): the .vmfb at ``path`` loaded into a fresh IREE context on ``config``'s device."""
    import iree.runtime as rt
    ctx = rt.SystemContext(config=config)
    vm = rt.VmModule.mmap(ctx.instance, str(path))
    ctx.add_vm_module(vm)
    return ctx, ctx.modules[vm.name]


def triton_side(args) -> tuple:
    """The start of the modes that JIT-run Triton (tune, jit): (bundle dir, manifest, triton, the bundle's kernel
    module, bench, SMs). On the CPU (dry run) Triton's interpreter, which must be chosen before triton is imported."""
    if DEV == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import triton

    d = Path(args.dir)
    manifest = load_manifest(d)
    sys.path.insert(0, str(d))
    import falcon_triton_gemm as ftg  # the bundle's copy of the kernel source

    torch_setup()
    bench = bench_factory()
    sms = torch.cuda.get_device_properties(0).multi_processor_count if DEV == "cuda" else 3
    return d, manifest, triton, ftg, bench, sms


_ENV = None


def write_results(args, mode: str, rows, skipped, table: str, partial: bool = False) -> Path:
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


def finish(args, mode: str, rows, skipped, table: str) -> int:
    out = write_results(args, mode, rows, skipped, table)
    if skipped:
        log(f"skipped (budget): {', '.join(skipped)}")
    log(table)
    bad = [r for r in rows if r.get("ok") is False]
    log(f"{mode}: {len(rows)} rows, {len(bad)} not ok; wrote {out}/gpu_kernels_{mode}.json")
    return 1 if bad else 0


