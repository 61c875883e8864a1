"""Run the Triton kernel under Triton's CPU interpreter, in a subprocess: numerics without a GPU.

Triton chooses between compiling and interpreting when a ``@triton.jit``
function is defined (``TRITON_INTERPRET=1`` at import time), and its own
library functions (``tl.zeros``, ...) are defined when ``triton`` is
imported. So one process cannot both compile kernels ahead of time and
interpret them; :func:`run_interpreted` starts ``python -m
falcon_mlir.kernels.interpret DIR`` with ``TRITON_INTERPRET=1`` for a batch of
jobs, leaving the caller's Triton untouched (it also keeps Triton out of a
process that may have imported TensorFlow, see :mod:`._worker`).
:func:`run_plans_interpreted` does the same for LCMA plans (:mod:`.lcma`):
the generated combine kernels, the batched GEMM and combine C in turn,
returning every stage. The child needs torch (the interpreter reads tensors
through ``data_ptr``) and Triton. Triton's interpreter rounds f32 to bf16 by
truncation (the GPU rounds to nearest even).

Arrays cross as ``.npy`` files; bf16 travels as its uint16 bit pattern
(``ml_dtypes.bfloat16`` on the caller's side).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from .configs import KernelConfig
from .spec import GemmSpec

#: Programs of the persistent grid in interpreter runs: few, so that every
#: program walks several tiles (the persistent loop is exercised).
INTERPRET_SMS = 3


def _np_dtype(name: str):
    if name == "bf16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype({"f32": np.float32, "f16": np.float16}[name])


def _save(path: Path, x: np.ndarray, dtype: str) -> None:
    x = np.ascontiguousarray(x, dtype=_np_dtype(dtype))
    np.save(path, x.view(np.uint16) if dtype == "bf16" else x)


def _load(path: Path, dtype: str) -> np.ndarray:
    x = np.load(path)
    return x.view(_np_dtype(dtype)) if dtype == "bf16" else x


def _run_child(d: Path, timeout: float) -> dict:
    """Run this module on the folder ``d`` in a child under Triton's interpreter; the errors it noted per job.

    Raises:
        RuntimeError: the child failed as a whole (its stderr tail in the message).
    """
    env = dict(os.environ, TRITON_INTERPRET="1", TRITON_DEFAULT_FP_FUSION="1")
    r = subprocess.run([sys.executable, "-m", "falcon_mlir.kernels.interpret", str(d)], env=env,
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        tail = "\n".join(r.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"interpreter subprocess failed (exit {r.returncode}):\n{tail}")
    return json.loads((d / "errors.json").read_text())


def run_interpreted(jobs: Sequence[tuple], num_sms: int = INTERPRET_SMS, timeout: float = 600.0) -> list:
    """Run each ``(spec, config, a, b)`` job through the interpreted kernel; return C per job.

    Args:
        jobs: ``(GemmSpec, KernelConfig, a, b)`` with ``a``, ``b`` numpy arrays
            shaped ``spec.a_shape`` / ``spec.b_shape`` (converted to the spec's dtypes).
        num_sms: programs of the persistent grid at most.
        timeout: seconds for the whole batch.

    Returns:
        One entry per job: C as a numpy array of ``spec.c_shape`` in
        ``out_dtype`` (bf16 as ``ml_dtypes.bfloat16``), or the error message
        (str) of a job that failed. Jobs fail independently.

    Raises:
        ValueError: an input of the wrong shape.
        RuntimeError: the child process failed as a whole (its stderr tail in the message).
    """
    with tempfile.TemporaryDirectory(prefix="falcon-interp-") as d:
        d = Path(d)
        manifest = []
        for i, (spec, config, a, b) in enumerate(jobs):
            if tuple(np.shape(a)) != spec.a_shape or tuple(np.shape(b)) != spec.b_shape:
                raise ValueError(f"job {i} ({spec.name}): a {np.shape(a)} / b {np.shape(b)} do not match "
                                 f"{spec.a_shape} / {spec.b_shape}")
            _save(d / f"a{i}.npy", a, spec.a_dtype)
            _save(d / f"b{i}.npy", b, spec.b_dtype)
            manifest.append({"spec": spec.to_dict(), "config": config.to_dict()})
        (d / "jobs.json").write_text(json.dumps({"num_sms": num_sms, "jobs": manifest}))
        errors = _run_child(d, timeout)
        out = []
        for i, (spec, _, _, _) in enumerate(jobs):
            out.append(errors[str(i)] if str(i) in errors else _load(d / f"c{i}.npy", spec.out_dtype))
        return out


def run_plans_interpreted(jobs: Sequence[tuple], num_sms: int = INTERPRET_SMS, timeout: float = 900.0) -> list:
    """Run LCMA plans (:mod:`.lcma`) through the interpreted kernels, stage by stage.

    Args:
        jobs: ``(launches, a, b)`` with ``launches`` from :func:`falcon_mlir.kernels.lcma.plan_launches`
            and ``a`` (M x K), ``b`` (K x N) numpy arrays (converted to the plan's dtype).

    Returns:
        Per job a dict of numpy arrays ``a_ops``, ``b_ops``, ``products``, ``c`` (bf16 as
        ``ml_dtypes.bfloat16``), or the error message (str) of a job that failed.

    Raises:
        RuntimeError: the child process failed as a whole.
    """
    with tempfile.TemporaryDirectory(prefix="falcon-interp-plan-") as d:
        d = Path(d)
        manifest = []
        for i, (launch, a, b) in enumerate(jobs):
            s = launch["spec"]
            _save(d / f"a{i}.npy", a, s["dtype"])
            _save(d / f"b{i}.npy", b, s["dtype"])
            for role in ("a", "b", "c", "ma", "mb"):
                if role in launch:
                    (d / f"src{i}{role}.py").write_text(launch[role]["source"])
            manifest.append(launch)
        (d / "plans.json").write_text(json.dumps({"num_sms": num_sms, "plans": manifest}))
        errors = _run_child(d, timeout)
        out = []
        for i, (launch, _, _) in enumerate(jobs):
            if str(i) in errors:
                out.append(errors[str(i)])
                continue
            s = launch["spec"]
            dt = {"a_ops": s["operand_dtype"], "b_ops": s["operand_dtype"], "products": s["product_dtype"],
                  "c": s["out_dtype"]}
            out.append({k: _load(d / f"{k}{i}.npy", v) for k, v in dt.items()})
        return out


def _load_generated(path: Path, fn: str):
    import importlib.util
    name = f"falcon_interp_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return getattr(mod, fn)


def _each_job(d: Path, jobs: list, run_one, frames: int) -> int:
    """The child's loop: ``run_one(i, job)`` for every job; a failing job's error (and ``frames`` frames of
    its traceback) goes to ``d/errors.json``, and the others go on."""
    import traceback

    errors = {}
    for i, job in enumerate(jobs):
        try:
            run_one(i, job)
        except Exception as e:  # one failing job must not stop the others
            errors[str(i)] = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=frames)}"
    (d / "errors.json").write_text(json.dumps(errors))
    return 0


def _child_plans(d: Path) -> int:
    """The subprocess for plans: combine A, combine B, products, combine C of each plan in ``d/plans.json``."""
    import torch

    from . import triton_gemm

    tdt = _torch_dtypes()
    job_file = json.loads((d / "plans.json").read_text())

    def run_one(i: int, launch: dict) -> None:
        s, g = launch["spec"], launch["geometry"]
        a = _to_torch(np.load(d / f"a{i}.npy"), s["dtype"])
        b = _to_torch(np.load(d / f"b{i}.npy"), s["dtype"])
        a_ops = torch.empty((g["R"], g["bm"], g["bk"]), dtype=tdt[s["operand_dtype"]])
        b_ops = torch.empty((g["R"], g["bn"], g["bk"]) if s.get("trans_b") else (g["R"], g["bk"], g["bn"]),
                            dtype=tdt[s["operand_dtype"]])
        prods = torch.empty((g["R"], g["bm"], g["bn"]), dtype=tdt[s["product_dtype"]])
        c = torch.empty((s["M"], s["N"]), dtype=tdt[s["out_dtype"]])
        partials = {}  # a scaled plan: the absmax partials of A and B, read after each combine's input
        for role, x in (("ma", a), ("mb", b)):
            if role in launch:
                L = launch[role]
                partials[role] = torch.empty((L["programs"],), dtype=torch.float32)
                triton_gemm.patch_interpreter()
                _load_generated(d / f"src{i}{role}.py", L["fn"])[(L["programs"],)](x, partials[role],
                                                                                   **L["constexprs"])
        sa, sb = [partials[r] for r in ("ma",) if r in partials], [partials[r] for r in ("mb",) if r in partials]
        for role, x, y, extra in (("a", a, a_ops, sa), ("b", b, b_ops, sb)):
            L = launch[role]
            _load_generated(d / f"src{i}{role}.py", L["fn"])[(L["programs"],)](x, *extra, y, **L["constexprs"])
        cfg = KernelConfig.from_dict(launch["p"]["config"])
        ps = GemmSpec.from_dict(launch["p"]["spec"])
        triton_gemm.launch(a_ops, b_ops, prods, trans_b=ps.trans_b, f32_mode=ps.f32_mode,
                           num_sms=job_file["num_sms"],
                           interpret=True, **cfg.to_dict())
        L = launch["c"]
        _load_generated(d / f"src{i}c.py", L["fn"])[(L["programs"],)](prods, *sa, *sb, c, **L["constexprs"])
        for name, t, dt in (("a_ops", a_ops, s["operand_dtype"]), ("b_ops", b_ops, s["operand_dtype"]),
                            ("products", prods, s["product_dtype"]), ("c", c, s["out_dtype"])):
            np.save(d / f"{name}{i}.npy", _to_numpy(t, dt))
    return _each_job(d, job_file["plans"], run_one, frames=5)  # 4 before, +1: the job body is a frame now


def _torch_dtypes() -> dict:
    """torch's dtype per falcon dtype name (torch is imported only in the child)."""
    import torch
    return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def _to_torch(x: np.ndarray, dtype: str):
    import torch
    if dtype == "bf16":
        return torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(x.copy())


def _to_numpy(t, dtype: str) -> np.ndarray:
    import torch
    if dtype == "bf16":
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _child(d: Path) -> int:
    """The subprocess: run every job in ``d/jobs.json`` (needs ``TRITON_INTERPRET=1``)."""
    import torch

    from . import triton_gemm

    torch_dtype = _torch_dtypes()
    job_file = json.loads((d / "jobs.json").read_text())

    def run_one(i: int, job: dict) -> None:
        spec = GemmSpec.from_dict(job["spec"])
        cfg = KernelConfig.from_dict(job["config"])
        a = _to_torch(np.load(d / f"a{i}.npy"), spec.a_dtype)
        b = _to_torch(np.load(d / f"b{i}.npy"), spec.b_dtype)
        c = torch.empty(spec.c_shape, dtype=torch_dtype[spec.out_dtype])
        triton_gemm.launch(a, b, c, trans_a=spec.trans_a, trans_b=spec.trans_b,
                           f32_mode=spec.f32_mode, num_sms=job_file["num_sms"], interpret=True,
                           **cfg.to_dict())
        np.save(d / f"c{i}.npy", _to_numpy(c, spec.out_dtype))
    return _each_job(d, job_file["jobs"], run_one, frames=4)  # 3 before, +1: the job body is a frame now


if __name__ == "__main__":
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        sys.exit("run with TRITON_INTERPRET=1 (falcon_mlir.kernels.interpret.run_interpreted does)")
    sys.exit(_child_plans(Path(sys.argv[1])) if (Path(sys.argv[1]) / "plans.json").is_file()
             else _child(Path(sys.argv[1])))
