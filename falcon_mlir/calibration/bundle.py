"""The compiling half of falcon-calibrate: which micro-benchmark modules to
build for a device, compiled here exactly as falcon compiles for the target
(``falcon_mlir.compile_str(lcma=None)``, with falcon's tile choices where
falcon attaches them), written with a manifest and the measuring half into a
bundle folder (:func:`prepare_bundle`).

A bundle folder holds ``manifest.json``, one ``.vmfb`` per module,
``calibrate_run.py`` (a copy of :mod:`falcon_mlir.calibration.measure`) and
copies of the standalone library modules that file imports
(:mod:`falcon_mlir.bundles`), so it can be measured on a machine without
falcon_mlir: ``python3 DIR/calibrate_run.py DIR -o PROFILE.json``.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import platform
import shutil
import time
from pathlib import Path
from typing import Callable, List, Optional

from falcon_mlir.bundles import copy_standalone
from falcon_mlir.calibration import measure
from falcon_mlir.calibration.assemble import FORMAT, CalibrationError, iree_version
from falcon_mlir.calibration.measure import MANIFEST, PROG, RUNNER
from falcon_mlir.calibration.microbench import (DISPATCH_ELEMENTS, add_chain_mlir, dispatch_chain_mlir,
                                                ew_add_mlir, gemm_mlir, grouped_mlir, per_product_mlir)
from falcon_mlir.cli import error_line

__all__ = ["DTYPES", "DEVICE_FLAGS", "DEFAULT_SIZES", "QUICK_SIZES", "DEFAULT_DTYPES",
           "DEFAULT_BANDWIDTH_MB", "QUICK_BANDWIDTH_MB", "plan_modules", "prepare_bundle"]

#: Input element type -> (MLIR input type, MLIR accumulator type).
DTYPES = {
    "f32": ("f32", "f32"),
    "f16": ("f16", "f16"),
    "bf16": ("bf16", "f32"),
    "f64": ("f64", "f64"),
    "i8": ("i8", "i32"),
}

#: iree-compile flags per device (falcon's classical compile for the target).
DEVICE_FLAGS = {
    "local-task": ["--iree-hal-target-device=local",
                   "--iree-hal-local-target-device-backends=llvm-cpu",
                   "--iree-llvmcpu-target-cpu=host",
                   "--iree-opt-data-tiling=true",
                   "--iree-llvmcpu-enable-ukernels=all"],
    "cuda": ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"],
}

#: Defaults per device: GEMM sizes n, quick sizes, dtypes, MB per bandwidth vector.
DEFAULT_SIZES = {"local-task": [128, 256, 512, 1024, 2048, 4096], "cuda": [512, 1024, 2048, 4096, 8192]}
QUICK_SIZES = {"local-task": [128, 256, 512, 1024], "cuda": [512, 1024, 2048]}
DEFAULT_DTYPES = {"local-task": ["f32"], "cuda": ["f32", "f16"]}
DEFAULT_BANDWIDTH_MB = {"local-task": 64, "cuda": 256}
QUICK_BANDWIDTH_MB = {"local-task": 32, "cuda": 64}
#: Elements of the in-cache combine chain and its length, per device.
ADD_ELEMENTS = {"local-task": 1 << 18, "cuda": 1 << 22}
ADD_CHAIN = {"local-task": 64, "cuda": 256}
#: Ops of the two dispatch-chain modules.
DISPATCH_COUNTS = (1, 65)


def plan_modules(device: str, dtypes, sizes, bandwidth_mb: int) -> List[dict]:
    """The modules to compile: dicts with ``role``, parameters, ``function``,
    ``text`` (MLIR) and ``file`` (``NN_key.vmfb``)."""
    mods = []
    for dt in dtypes:
        tin, tacc = DTYPES[dt]
        for n in sizes:
            mods.append({"role": "gemm", "dtype": dt, "in": tin, "acc": tacc, "n": n,
                         "function": "gemm", "text": gemm_mlir(n, tin, tacc)})
        el, ch = ADD_ELEMENTS[device], ADD_CHAIN[device]
        mods.append({"role": "add", "dtype": dt, "in": tin, "acc": tacc, "elements": el, "chain": ch,
                     "function": "add", "text": add_chain_mlir(el, tin, tacc, ch)})
    elements = bandwidth_mb * 2**20 // 4
    mods.append({"role": "bandwidth", "dtype": "f32", "elements": elements, "function": "ew_add",
                 "text": ew_add_mlir(elements)})
    for count in DISPATCH_COUNTS:
        mods.append({"role": "dispatch", "count": count, "elements": DISPATCH_ELEMENTS,
                     "function": "chain", "text": dispatch_chain_mlir(count)})
    b = 1 << int(round(math.log2(math.sqrt(elements))))
    mods.append({"role": "per_product", "block": b, "function": "per_product", "text": per_product_mlir(b)})
    mods.append({"role": "grouped", "block": b, "R": 7, "used": 4, "function": "grouped",
                 "text": grouped_mlir(b)})
    for i, m in enumerate(mods):
        key = {"gemm": f"gemm_{m.get('dtype')}_{m.get('n')}", "add": f"add_{m.get('dtype')}",
               "dispatch": f"dispatch_{m.get('count')}"}.get(m["role"], m["role"])
        m["file"] = f"{i:02d}_{key}.vmfb"
    return mods


def _count_dispatches(text: str, flags) -> int:
    """Dispatches IREE forms for ``text`` (``flow.dispatch`` ops at ``--compile-to=flow``)."""
    from iree.compiler import compile_str

    flow = compile_str(text, extra_args=list(flags) + ["--compile-to=flow"])
    flow = flow.decode() if isinstance(flow, bytes) else flow
    return sum(1 for ln in flow.splitlines() if "flow.dispatch @" in ln)


def _compile(m: dict, flags: List[str], out: Path) -> dict:
    """Compile module ``m`` into ``out``; its manifest entry (no text; sha256,
    bytes, compile_s, the tile choices falcon made)."""
    import falcon_mlir

    t0 = time.perf_counter()
    tiles: list = []
    mflags = list(flags)
    if m.get("dtype") == "f64":  # IREE demotes f64 to f32 unless told not to
        mflags.append("--iree-input-demote-f64-to-f32=false")
        m["extra_flags"] = mflags[len(flags):]
    try:
        vmfb = falcon_mlir.compile_str(m["text"], target_backends=[], extra_args=mflags,
                                       lcma=None, tiles_report=tiles)
        if m["role"] in ("dispatch", "add"):
            m["dispatches"] = _count_dispatches(m["text"], mflags)
    except Exception as e:  # CompileError and friends: one line
        raise CalibrationError(f"compiling {m['file'][3:-5]} failed: {error_line(e)}") from None
    if m["role"] == "dispatch" and m["dispatches"] != m["count"]:
        raise CalibrationError(f"dispatch module of {m['count']} ops formed {m['dispatches']} "
                               "dispatches (fusion not prevented)")
    (out / m["file"]).write_bytes(vmfb)
    e = {k: v for k, v in m.items() if k != "text"}
    e.update(sha256=hashlib.sha256(vmfb).hexdigest(), bytes=len(vmfb),
             compile_s=round(time.perf_counter() - t0, 3))
    chosen = [t["tiles"]["name"] for t in tiles if isinstance(t.get("tiles"), dict)]
    if chosen:
        e["tiles"] = chosen
    return e


def prepare_bundle(outdir, *, device: str, dtypes, sizes, bandwidth_mb: int, seconds: float,
                   name: Optional[str] = None, quick: bool = False,
                   progress: Optional[Callable] = None) -> dict:
    """Compile every module of :func:`plan_modules` into ``outdir`` (created);
    write ``manifest.json``, ``calibrate_run.py`` and the standalone modules
    it imports. ``seconds`` per measurement is recorded for the run;
    ``progress(total, desc)`` makes a :class:`~falcon_mlir.calibration.measure.Progress`.

    Returns:
        The manifest (dict; ``modules``: one entry per ``.vmfb``).

    Raises:
        CalibrationError: a module failed to compile or formed the wrong dispatch count.
        OSError: a file cannot be written.
    """
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    flags = DEVICE_FLAGS[device]
    mods = plan_modules(device, dtypes, sizes, bandwidth_mb)
    bar = progress(len(mods), "compile") if progress else None
    entries = []
    for m in mods:
        entries.append(_compile(m, flags, out))
        if bar:
            bar.step(f"compiled {m['file']}")
    if bar:
        bar.close()
    manifest = {
        "format": FORMAT, "tool": PROG, "device": device, "kind": "cpu" if device == "local-task" else "gpu",
        "name": name, "flags": flags, "iree_compiler": iree_version("iree-base-compiler"),
        "compiled_on": platform.node(), "compiled_at": datetime.date.today().isoformat(),
        "seconds": seconds, "quick": bool(quick), "modules": entries,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    runner = Path(measure.__file__).resolve()
    if (out / RUNNER).resolve() != runner:
        shutil.copyfile(runner, out / RUNNER)
    copy_standalone(out, ["falcon_mlir.cli", "falcon_mlir.compare", "falcon_mlir.dtypes", "falcon_mlir.files",
                          "falcon_mlir.calibration.assemble"])
    return manifest
