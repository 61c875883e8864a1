#!/usr/bin/env python3
"""The GPU half of ``scripts/gpu_model.py``: time the Llama block through plain
IREE, falcon and JAX/XLA on one CUDA device and compare their outputs.

    python3 DIR/gpu_model_run.py DIR [--repeat 10] [--warmup 3] [--seed 0]
    python3 DIR/gpu_model_run.py DIR [--steps 20] [--warmup 3]     # a --train bundle

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

A training bundle (``gpu_model.py prepare --train``) runs ``--steps`` SGD
steps (default: the manifest's) of each variant from the same float32
master params (drawn as above), step ``s`` on the batch ``x`` ~ N(0, 1)
from ``default_rng((seed, s))``, ``target = 0.5 x + 0.1 roll(x, 1,
tokens)`` (as ``TrainStep.random_batch``), all batches on the device
before the clock starts; each variant is fed its own returned params.
``--warmup`` steps from the same start run first, untimed. A step's time
runs from the call to its loss on the host (JAX: all outputs ready);
per variant the median over the steps. Compared with JAX's run: the loss
at every step (max over steps of ``|l - l_jax| / |l_jax|``) and the
update ``final - initial`` params (max over params of the max-norm
relative difference). JAX allocates as it goes
(``XLA_PYTHON_CLIENT_PREALLOCATE=false`` unless set). Writes
``gpu_train.json`` and ``gpu_train.md``.
"""

from __future__ import annotations

import argparse
import gc
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


def _weights(rng, specs) -> list:
    out = []
    for name, shape in specs:
        w = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
        if name.endswith("scale"):
            w += np.float32(1.0)
        out.append(w)
    return out


def inputs(entry: dict, dtype: str, seed: int) -> list:
    """Random inputs (see the module docstring) in ``dtype``; for a training
    entry the float32 arguments of its first step (params, x, target)."""
    import ml_dtypes

    if "params" in entry:
        return train_params(entry, seed) + list(train_batch(entry, seed, 0))
    np_t = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}[dtype]
    rng = np.random.default_rng(seed)
    out = [rng.standard_normal(entry["input_shape"], dtype=np.float32)] + _weights(rng, entry["weights"])
    return [a.astype(np_t) for a in out]


def train_params(entry: dict, seed: int) -> list:
    """The float32 master params of a training entry (kernels ~ N(0, 0.02^2),
    RMSNorm scales 1 + N(0, 0.02^2)), in argument order."""
    return _weights(np.random.default_rng(seed), entry["params"])


def train_batch(entry: dict, seed: int, step: int) -> tuple:
    """``(x, target)`` of training step ``step``, float32 ``input_shape``:
    ``x`` ~ N(0, 1) from ``default_rng((seed, step))``, ``target = 0.5 x +
    0.1 roll(x, 1, tokens)``."""
    x = np.random.default_rng((int(seed), int(step))).standard_normal(entry["input_shape"], dtype=np.float32)
    return x, np.float32(0.5) * x + np.float32(0.1) * np.roll(x, 1, axis=1)


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


def each_variant(entry: dict, call, line, trim=None) -> dict:
    """``{name: call(name, file) or {"error": ...}}`` for JAX, plain IREE and falcon of one
    manifest entry, in that order, one process; a variant that was not built or fails gets its error
    and the run goes on. Each result is printed as ``line(name, result)``. ``trim``: an IREE config
    whose caching allocator is emptied after each variant."""
    res = {}
    for name in ("jax", "iree", "falcon"):
        v = entry.get(name, {})
        if "file" not in v:
            res[name] = {"error": v.get("error", "not built")}
            continue
        try:
            res[name] = call(name, v["file"])
        except Exception as e:  # noqa: BLE001 - one variant failing must not end the run
            res[name] = {"error": " ".join(str(e).split())[:300]}
        finally:
            if trim is not None:
                gc.collect()
                trim.device.allocator.trim()
        print(line(name, res[name]), flush=True)
    return res


def run(dir_: Path, repeat: int, warmup: int, seed: int) -> dict:
    man = json.loads((dir_ / "manifest.json").read_text())
    config = runner.device_config("cuda")
    rows = []
    for dtype, entry in man["variants"].items():
        host = inputs(entry, dtype, seed)

        def call(name, file):
            t, ts, y = (time_jax(dir_, file, host, warmup, repeat) if name == "jax"
                        else time_iree(dir_, file, host, config, warmup, repeat))
            return {"seconds": t, "all": ts, "out": y}
        res = each_variant(entry, call, lambda name, r: f"{dtype} {name}: " + (
            f"{r['seconds'] * 1e3:.3f} ms" if "seconds" in r else r["error"]))
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


def train_iree(dir_: Path, file: str, params: list, batches: list, config, warmup: int) -> dict:
    """Steps of one IREE training module: ``{"times": seconds per step,
    "loss": per step, "final": final params (numpy)}`` (see the module doc)."""
    m = runner.Module((dir_ / file).read_bytes(), config=config)
    fn = m.functions["main"]
    start = m.on_device(*params)
    dev = [m.on_device(x, t) for x, t in batches]
    n = len(params)
    state = start
    for s in range(warmup):
        state = list(fn(*state, *dev[s % len(dev)])[1:1 + n])
    state, times, losses = start, [], []
    for xt in dev:
        t0 = time.perf_counter()
        out = fn(*state, *xt)
        loss = float(np.asarray(out[0].to_host()))
        times.append(time.perf_counter() - t0)
        losses.append(loss)
        state = list(out[1:1 + n])
    return {"times": times, "loss": losses, "final": [np.asarray(a.to_host()) for a in state]}


def train_jax(dir_: Path, file: str, params: list, batches: list, warmup: int) -> dict:
    """The same as :func:`train_iree` for the ``jax.export`` of the step."""
    import jax

    exp = jax.export.deserialize(bytearray((dir_ / file).read_bytes()))
    f = jax.jit(exp.call)
    start = [jax.device_put(a) for a in params]
    dev = [(jax.device_put(x), jax.device_put(t)) for x, t in batches]
    state = start
    for s in range(warmup):
        state = list(f(state, *dev[s % len(dev)])[1])
    jax.block_until_ready(state)
    state, times, losses = start, [], []
    for x, t in dev:
        t0 = time.perf_counter()
        out = jax.block_until_ready(f(state, x, t))
        loss = float(out[0])
        times.append(time.perf_counter() - t0)
        losses.append(loss)
        state = list(out[1])
    return {"times": times, "loss": losses, "final": [np.asarray(a) for a in state]}


def run_train(dir_: Path, steps: int, warmup: int, seed: int) -> dict:
    """All training variants of the bundle: rows of times, losses and their
    differences from JAX's (see the module doc)."""
    man = json.loads((dir_ / "manifest.json").read_text())
    # JAX would take 75% of the GPU at its first call, before the IREE modules
    # (whose attention transients are GBs at 4096 tokens) run in this process.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    config = runner.device_config(man.get("driver", "cuda"))
    rows = []
    for dtype, entry in man["variants"].items():
        params = train_params(entry, seed)
        batches = [train_batch(entry, seed, s) for s in range(steps)]

        def call(name, file):
            return (train_jax(dir_, file, params, batches, warmup) if name == "jax"
                    else train_iree(dir_, file, params, batches, config, warmup))
        # IREE's caching allocator keeps a variant's blocks after it is done; with XLA's pool beside it
        # the next variant ran out of memory (run 19: falcon f16 at 8192 tokens, 32 GB alone).
        res = each_variant(entry, call, lambda name, r: f"train {dtype} {name}: " + (
            f"{statistics.median(r['times']) * 1e3:.3f} ms/step, loss " + " ".join(f"{x:.6g}" for x in r["loss"])
            if "times" in r else r["error"]), trim=config)
        ref = res.get("jax", {})
        for name, r in res.items():
            row = {"dtype": dtype, "variant": name, "tokens": man["tokens"], "train": True}
            if "times" in r:
                sec = statistics.median(r["times"])
                row.update(ms=sec * 1e3, tflops=entry["flops"] / sec / 1e12,
                           times_ms=[x * 1e3 for x in r["times"]], loss=r["loss"])
                if "loss" in ref and name != "jax":
                    row["loss_rel_diff_vs_jax"] = max(abs(a - b) / abs(b) for a, b in zip(r["loss"], ref["loss"]))
                    row["update_rel_diff_vs_jax"] = max(
                        compare.rel_err(f - p, g - p) for f, g, p in zip(r["final"], ref["final"], params))
            else:
                row["error"] = r["error"]
            rows.append(row)
        del res
    return {"rows": rows, "tokens": man["tokens"], "steps": steps, "warmup": warmup, "seed": seed,
            "lr": man.get("lr"), "train": True}


def train_table(result: dict) -> str:
    """Markdown table of :func:`run_train`'s result."""
    by = {(r["dtype"], r["variant"]): r for r in result["rows"]}
    lines = [f"| dtype | variant | ms/step (median of {result['steps']}) | eff. TFLOP/s "
             "| vs plain IREE (same dtype, else f16) | vs JAX (same dtype) "
             "| loss rel. diff vs JAX (max over steps) | update rel. diff vs JAX |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        if "ms" not in r:
            lines.append(f"| {r['dtype']} | {r['variant']} | does not run: {r['error'][:90]} | | | | | |")
            continue
        base = by.get((r["dtype"], "iree"), {}).get("ms") or by.get(("float16", "iree"), {}).get("ms")
        jax_ms = by.get((r["dtype"], "jax"), {}).get("ms")
        lines.append(f"| {r['dtype']} | {r['variant']} | {r['ms']:.3f} | {r['tflops']:.0f} | "
                     + (f"{base / r['ms']:.2f}x" if base else "-") + " | "
                     + (f"{jax_ms / r['ms']:.2f}x" if jax_ms else "-") + " | "
                     + (f"{r['loss_rel_diff_vs_jax']:.1e}" if "loss_rel_diff_vs_jax" in r else "-") + " | "
                     + (f"{r['update_rel_diff_vs_jax']:.1e}" if "update_rel_diff_vs_jax" in r else "-") + " |")
    return "\n".join(lines)


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
    # --repeat: forward bundles only; a training bundle times --steps steps
    p.add_argument("dir")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=None,
                   help="training bundle: timed SGD steps per variant (default: the manifest's)")
    p.add_argument("--once", nargs=2, metavar=("VARIANT", "DTYPE"),
                   help="call one IREE variant (iree or falcon) once and stop: for a profiler "
                        "(ncu --csv --clock-control none --metrics gpu__time_duration.sum ...)")
    args = p.parse_args(argv)
    dir_ = Path(args.dir)
    man = json.loads((dir_ / "manifest.json").read_text())
    if args.once:
        name, dtype = args.once
        entry = man["variants"][dtype]
        m = runner.Module((dir_ / entry[name]["file"]).read_bytes(),
                          config=runner.device_config(man.get("driver", "cuda")))
        out = m.functions["main"](*m.on_device(*inputs(entry, dtype, args.seed)))
        out = out[0] if isinstance(out, (tuple, list)) else out
        print(f"{name} {dtype}: one call, output {out.shape}")
        return 0
    if man.get("train"):
        steps = args.steps if args.steps is not None else man.get("steps", 10)
        if steps < 1 or args.warmup < 0:
            p.error("--steps must be >= 1 and --warmup >= 0")
        result, stem = run_train(dir_, steps, args.warmup, args.seed), "gpu_train"
        md = train_table(result)
    else:
        result, stem = run(dir_, args.repeat, args.warmup, args.seed), "gpu_model"
        md = table(result)
    out = Path(os.environ.get("OUT") or dir_)
    out.mkdir(parents=True, exist_ok=True)
    files.write_atomic(str(out / f"{stem}.json"), (json.dumps(result, indent=1) + "\n").encode())
    files.write_atomic(str(out / f"{stem}.md"), (md + "\n").encode())
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
