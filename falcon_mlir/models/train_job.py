"""The training job: a training step of the Llama block compiled by plain
IREE and by falcon, run for the same steps on the CPU, compared (the library
behind ``python3 tools/run_model.py --train``).

The step (:mod:`falcon_mlir.models.train_step`: loss, ``jax.value_and_grad``,
SGD) is exported to StableHLO once and compiled twice by :func:`compile_step`,
both builds the same way: the front half (StableHLO import to IREE's
``input`` phase) by the main job's functions
(:func:`~falcon_mlir.models.main_job.compile_classical`: plain iree-compile;
:func:`~falcon_mlir.models.main_job.compile_falcon`: ``falcon_mlir.api.compile_str``
with ``lcma``, whose rewrite runs after ``input``), the back half (``input``
to the vmfb) by one iree-compile process each with the main job's flags plus
:data:`TRAIN_FLAGS`, so those global LLVM options never touch the calling
process (nothing is set process-wide: later compiles in it are unchanged). Both
modules start from the same params; step ``s`` feeds both the same batch
(:meth:`TrainStep.random_batch`) and each module its own returned params (kept
on the device). The two modules' steps are interleaved (step ``s`` classical,
then falcon), each step timed with its loss read back to the host; times are
medians over the steps.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from falcon_mlir.compare import rel_err
from falcon_mlir.files import write_files_atomic
from falcon_mlir.models.main_job import (BASE_FLAGS, DATA_TILING_FLAGS, SPLIT_PHASE, compile_split, fmt_s,
                                         plan_text)

#: Added to both builds of the training step: plain IREE 3.13 with data
#: tiling refuses the k/v weight gradients of the full-size block
#: (``dot_general`` contracting batch x tokens, result 8x128x4096, its
#: operand's producer fused into the packing: "One or more operations with
#: large vector sizes (32768 bytes) were found", and in another run of the
#: same compile "exceeded stack allocation limit of 32768 bytes for
#: function. Got 131072 bytes"; the q and o gradients, 32x128x4096, want
#: 524288 bytes) unless told not to fail on large vectors and given a 2 MiB
#: stack limit; the task workers then get :data:`WORKER_STACK_FLAGS` (IREE's
#: default worker stack is 128 KiB). They are global LLVM options, which an
#: in-process session cannot carry; :func:`compile_step` gives them to the
#: iree-compile process of each build's back half only.
TRAIN_FLAGS = ("--iree-llvmcpu-fail-on-large-vector=false", "--iree-llvmcpu-stack-allocation-limit=2097152")


#: Runtime flags for the task workers running the training step (both
#: modules, one device made for them): stacks of 8 MiB for
#: :data:`TRAIN_FLAGS`' stack limit; :data:`DEFAULT_WORKER_STACK_FLAGS`
#: (IREE's default) is put back once that device is made.
WORKER_STACK_FLAGS = ("--task_worker_stack_size=8388608",)
DEFAULT_WORKER_STACK_FLAGS = ("--task_worker_stack_size=131072",)

__all__ = ["TRAIN_FLAGS", "SPLIT_PHASE", "WORKER_STACK_FLAGS", "TrainJob", "compile_step", "run_train_job",
           "run_steps", "train_device", "weights_bound", "print_train_contractions", "train_result_lines"]


@dataclass
class TrainJob:
    """What :func:`run_train_job` measured: ``data`` (JSON-ready: model,
    config, layers, lr, steps, lcma, flags, compile_s, step_s (medians) and
    steps_s (every step) in seconds, loss (both curves), loss_rel_diff (max
    over steps of ``|l_f - l_c| / |l_c|``), weights_rel_err (max over params
    of the max-norm relative difference of the final params),
    update_rel_err (the same for ``final - initial``), weights_bound,
    report, classes (phase and role per report entry), summary)."""

    data: dict
    classes: List[dict] = field(default_factory=list)


_train_device = None


def train_device():
    """The local-task ``iree.runtime`` HAL device the training steps run on:
    made once per process, from a new, uncached local-task driver whose task
    workers have :data:`WORKER_STACK_FLAGS`' stacks (IREE's local-task driver
    reads its executor's flags when it is made, so a fresh one is needed
    where the process made a local-task driver before). The runtime flags
    are put back to :data:`DEFAULT_WORKER_STACK_FLAGS` right after, so
    drivers made later in the process get IREE's default. The driver and
    device are kept for the process (freeing them while buffers or modules
    still refer to them crashes IREE)."""
    global _train_device
    if _train_device is None:
        import iree.runtime as rt
        from iree.runtime._binding import create_hal_driver

        rt.flags.parse_flags(*WORKER_STACK_FLAGS)
        try:
            drv = create_hal_driver("local-task")
            _train_device = (drv, drv.create_default_device())
        finally:
            rt.flags.parse_flags(*DEFAULT_WORKER_STACK_FLAGS)
    return _train_device[1]


def compile_step(text: str, flags: Sequence[str], lcma=None, *, falcon: bool = True,
                 extra_flags: Sequence[str] = TRAIN_FLAGS, kernels="auto") -> Tuple[bytes, List[dict]]:
    """:func:`~falcon_mlir.models.main_job.compile_split` with
    :data:`TRAIN_FLAGS` as the back half's extra flags by default: ``(vmfb,
    report)``, both builds the same path, only the rewrite differs."""
    return compile_split(text, flags, lcma, falcon=falcon, extra_flags=extra_flags, kernels=kernels)


def run_steps(vmfbs: Sequence[bytes], params: Sequence[np.ndarray], batches: Callable[[int], tuple],
              steps: int, n_out_params: Optional[int] = None, log: Optional[Callable[[str], None]] = None):
    """Runs ``steps`` training steps of each module in ``vmfbs`` (interleaved
    per step), each from ``params``, all on one device of :func:`train_device`.

    ``batches(s)`` gives step ``s``'s ``(x, target)`` (numpy float32);
    the modules' ``main(*params, x, target)`` return ``(loss, *new_params,
    *rest)``; ``n_out_params`` defaults to ``len(params)``.

    Returns ``(losses, times, finals, extras)``: per module the list of the
    losses (float), of the step times (seconds, loss read back included), the
    final params and the ``rest`` outputs of the last step (numpy).

    Raises:
        RuntimeError: a non-finite loss.
    """
    import iree.runtime as rt

    from falcon_mlir.runner import Module

    config = rt.Config(device=train_device())
    n = len(params) if n_out_params is None else n_out_params
    mods = [Module(vm, config=config) for vm in vmfbs]
    state = [m.on_device(*params) for m in mods]
    losses: list = [[] for _ in mods]
    times: list = [[] for _ in mods]
    rest: list = [[] for _ in mods]
    for s in range(steps):
        x, t = batches(s)
        for i, m in enumerate(mods):
            xt = m.on_device(x, t)
            t0 = time.perf_counter()
            out = m.functions["main"](*state[i], *xt)
            loss = float(np.asarray(out[0].to_host()))
            times[i].append(time.perf_counter() - t0)
            if not np.isfinite(loss):
                raise RuntimeError(f"module {i}: non-finite loss {loss} at step {s}")
            losses[i].append(loss)
            state[i] = list(out[1:1 + n])
            rest[i] = list(out[1 + n:])
        if log:
            log(f"step {s}: loss " + ", ".join(f"{ls[-1]:.7g}" for ls in losses) + "; "
                + ", ".join(fmt_s(ts[-1]) for ts in times))
    finals = [[np.asarray(a.to_host()) for a in st] for st in state]
    extras = [[np.asarray(a.to_host()) for a in r] for r in rest]
    return losses, times, finals, extras


def weights_bound(report: Sequence[dict]) -> float:
    """The error model's bound on the final weights' relative difference:
    the largest predicted relative error of a rewritten contraction's plan
    (``predicted_error.plan`` in falcon's report; a gradient is one
    contraction's output and an SGD update adds ``lr`` times it to a weight
    of larger norm), at least that of classical GEMM in the report; 0.0 for
    an empty report."""
    vals = []
    for r in report:
        pe = r.get("predicted_error") or {}
        key = "classical" if r.get("plan") in (None, "classical") else "plan"
        v = pe.get(key)
        if isinstance(v, (int, float)):
            vals.append(float(v))
    return max(vals, default=0.0)


def _max_rel(a_list, b_list) -> float:
    return max((rel_err(a, b) for a, b in zip(a_list, b_list)), default=0.0)


def run_train_job(*, tokens: int = 1024, steps: int = 20, layers: int = 1, lr: float = 0.5,
                  lcma: Optional[str] = "auto", seed: int = 0, small: bool = False,
                  data_tiling: bool = True, iree_flags: Sequence[str] = (),
                  save_dir: Optional[str] = None, log: Optional[Callable[[str], None]] = None) -> TrainJob:
    """Export the training step, compile it both ways, run ``steps`` steps of
    each from the same params (``seed + 1``) and batches (``seed``), compare.

    ``tokens``: sequence length (K of the dW contractions); ``layers``:
    stacked blocks; ``lr``: SGD rate; ``lcma``: falcon's option string (as
    :func:`~falcon_mlir.models.main_job.run_main_job`); ``small``: the small
    test config; ``save_dir``: also write step.mlir, classical.vmfb,
    falcon.vmfb and report.json there.

    Raises:
        ValueError: ``steps < 1`` (and :class:`TrainStep`'s checks).
        RuntimeError: a non-finite loss; anything the export, compilers or
            runtime raise.
    """
    from falcon_mlir.models.llama_block import LLAMA3_8B, SMALL, library_versions
    from falcon_mlir.models.train_step import TrainStep, classify_contractions

    if steps < 1:
        raise ValueError(f"steps must be >= 1, not {steps}")
    log = log or (lambda msg: None)
    spec = (lcma or "").strip()
    spec = None if spec.lower() in ("none", "off", "") else spec
    flags = list(BASE_FLAGS) + (list(DATA_TILING_FLAGS) if data_tiling else []) + list(iree_flags)
    cfg = (SMALL if small else LLAMA3_8B).with_tokens(tokens)
    t0 = time.perf_counter()
    ts = TrainStep(cfg, layers=layers, lr=lr)
    text = ts.export_mlir()
    debug_text = ts.export_mlir(debug_info=True)
    names = [n for n, _ in ts.param_specs()]
    log(f"exported the {cfg.name} training step ({layers} block(s), {len(text.splitlines())} lines of "
        f"StableHLO, {sum(int(np.prod(s)) for _, s in ts.param_specs()) / 1e6:.0f} M params) in "
        f"{time.perf_counter() - t0:.1f} s; {library_versions()}")
    params = ts.random_params(seed + 1)

    t0 = time.perf_counter()
    vm_c, _ = compile_step(text, flags, falcon=False)
    t_cc = time.perf_counter() - t0
    log(f"classical compile {t_cc:.1f} s")
    t0 = time.perf_counter()
    vm_f, report = compile_step(text, flags, spec)
    t_cf = time.perf_counter() - t0
    log(f"falcon compile {t_cf:.1f} s ({len(report)} contractions in the report)")
    classes = classify_contractions(report, text, debug_text, names)
    if save_dir:
        os.makedirs(save_dir, exist_ok=True)
        write_files_atomic([(os.path.join(save_dir, name), data) for name, data in (
            ("step.mlir", text.encode()), ("classical.vmfb", vm_c), ("falcon.vmfb", vm_f),
            ("report.json", json.dumps(report, indent=1).encode()))])

    (l_c, l_f), (t_c, t_f), (w_c, w_f), _ = run_steps(
        [vm_c, vm_f], params, lambda s: ts.random_batch(s, seed), steps, log=log)
    loss_rel = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(l_f, l_c))
    upd_c = [w - p for w, p in zip(w_c, params)]
    upd_f = [w - p for w, p in zip(w_f, params)]
    res = {
        "model": cfg.name, "config": {k: getattr(cfg, k) for k in (
            "hidden", "intermediate", "heads", "kv_heads", "head_dim", "tokens", "batch")},
        "layers": layers, "lr": lr, "steps": steps, "lcma": lcma, "flags": flags + list(TRAIN_FLAGS),
        "compile_s": {"classical": t_cc, "falcon": t_cf},
        "step_s": {"classical": statistics.median(t_c), "falcon": statistics.median(t_f)},
        "steps_s": {"classical": t_c, "falcon": t_f},
        "loss": {"classical": l_c, "falcon": l_f},
        "loss_rel_diff": loss_rel,
        "weights_rel_err": _max_rel(w_f, w_c),
        "update_rel_err": _max_rel(upd_f, upd_c),
        "weights_bound": weights_bound(report),
        "report": report,
        "classes": classes,
    }
    tc, tf = res["step_s"]["classical"], res["step_s"]["falcon"]
    n_bwd = sum(c["phase"] == "backward" for c in classes)
    rewritten = [r.get("plan") not in (None, "classical") for r in report]
    rw_f = sum(rw for rw, c in zip(rewritten, classes) if c["phase"] == "forward")
    rw_b = sum(rw for rw, c in zip(rewritten, classes) if c["phase"] == "backward")
    res["summary"] = (
        f"{cfg.name} training step ({layers} block(s)), {cfg.tokens} tokens, {steps} steps: falcon "
        f"{fmt_s(tf)} vs classical {fmt_s(tc)} per step ({tc / tf:.2f}x); loss curves max rel. diff "
        f"{loss_rel:.1e}, final weights {res['weights_rel_err']:.1e} (bound {res['weights_bound']:.1e}); "
        f"rewritten {rw_f} of {len(report) - n_bwd} forward and {rw_b} of {n_bwd} backward contractions")
    return TrainJob(res, classes)


def print_train_contractions(report: Sequence[dict], classes: Sequence[dict], file=None) -> None:
    """One row per contraction, forward ones first, then backward ones: phase,
    role, kind, M, N, K, batch, plan and reason (plain columns)."""
    import sys

    file = file or sys.stdout
    headers = ["#", "phase", "role", "kind", "M", "N", "K", "batch", "plan", "reason"]
    rows = []
    for phase in ("forward", "backward", "?"):
        for i, (r, c) in enumerate(zip(report, classes), 1):
            if c["phase"] != phase:
                continue
            batch = r.get("batch") or []
            rows.append([str(i), phase, c["role"], str(r.get("kind", "")), str(r.get("M", "")),
                         str(r.get("N", "")), str(r.get("K", "")), "x".join(str(b) for b in batch) or "-",
                         plan_text(r), str(r.get("reason", ""))[:110]])
    widths = [max(len(h), *(len(row[j]) for row in rows)) if rows else len(h) for j, h in enumerate(headers)]
    print("contractions of the training step (falcon report; forward, then backward)", file=file)
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(), file=file)
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip(), file=file)


def train_result_lines(res: dict) -> List[str]:
    """The lines printed after the table: the loss of both per step, times
    and speed-up, the loss curves' and final weights' differences."""
    lines = ["step  loss classical   loss falcon      rel. diff"]
    for s, (a, b) in enumerate(zip(res["loss"]["classical"], res["loss"]["falcon"])):
        lines.append(f"{s:4d}  {a:<15.9g}  {b:<15.9g}  {abs(b - a) / max(abs(a), 1e-30):.2e}")
    tc, tf = res["step_s"]["classical"], res["step_s"]["falcon"]
    lines.append(f"time per step (median of {res['steps']}): classical {fmt_s(tc)}, falcon {fmt_s(tf)}, "
                 f"speed-up classical/falcon {tc / tf:.2f}x; compile classical "
                 f"{res['compile_s']['classical']:.1f} s, falcon {res['compile_s']['falcon']:.1f} s")
    lines.append(f"loss curves: max relative difference {res['loss_rel_diff']:.2e} over {res['steps']} steps")
    lines.append(f"final weights: max relative difference (max-norm, per param) {res['weights_rel_err']:.2e}, "
                 f"of the updates (final - initial) {res['update_rel_err']:.2e}; error model's bound "
                 f"{res['weights_bound']:.2e}")
    return lines
