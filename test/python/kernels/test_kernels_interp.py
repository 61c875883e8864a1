"""Numerics of the Triton kernel under Triton's CPU interpreter, against float64 on random inputs.

All cases run in one child process (``TRITON_INTERPRET=1`` must be set before
Triton is imported, which this process must not do: the AOT tests compile).
Small tiles (32x32x16) and 3 programs make every program walk several tiles
and the K loop several steps; distinct M, N, K catch swapped indices.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_helpers import skip_without

from falcon_mlir.kernels.configs import KernelConfig, choose_config
from falcon_mlir.kernels.spec import GemmSpec

pytestmark = skip_without("triton", "torch")
ml_dtypes = pytest.importorskip("ml_dtypes")

SMALL = KernelConfig.parse("32x32x16,s2,w4,g2")
#: max|C - ref| / max|ref| allowed per output type: the output's rounding
#: (bf16 2^-9, f16 2^-12 relative) dominates; f32 outputs see only the f32
#: accumulation of K <= 112 products.
TOL = {"f32": 2e-6, "f16": 1e-3, "bf16": 8e-3}

CASES = {
    "bf16-f32out": (GemmSpec(64, 48, 80, out_dtype="f32"), SMALL),
    "bf16-bf16out": (GemmSpec(64, 48, 80), SMALL),
    "f16-f16out": (GemmSpec(64, 48, 80, "f16", "f16", "f16"), SMALL),
    "f32-ieee": (GemmSpec(64, 48, 80, "f32", "f32", "f32"), SMALL),
    # The interpreter multiplies f32 tiles in f32 whatever input_precision says: these check that
    # the tf32 modes reach the kernel and run, not their rounding (the GPU's tune measures that).
    "f32-tf32x3": (GemmSpec(64, 48, 80, "f32", "f32", "f32", f32_mode="tf32x3"), SMALL),
    "f32-tf32": (GemmSpec(64, 48, 80, "f32", "f32", "f32", f32_mode="tf32", trans_b=True), SMALL),
    "f16-bf16out": (GemmSpec(64, 48, 80, "f16", "f16", "bf16"), SMALL),
    "distinct-mnk": (GemmSpec(80, 48, 112, out_dtype="f32"), SMALL),
    "odd-m-edges": (GemmSpec(130, 72, 96, out_dtype="f32"), SMALL),
    "odd-n-masked-store": (GemmSpec(130, 70, 96, trans_b=True, out_dtype="f32"),
                           KernelConfig.parse("32x32x16,s2,w4,g2,masked")),
    "trans-a": (GemmSpec(64, 48, 80, "f32", "f32", "f32", trans_a=True), SMALL),
    "trans-b": (GemmSpec(64, 48, 80, out_dtype="f32", trans_b=True), SMALL),
    "batch3": (GemmSpec(64, 48, 80, out_dtype="f32", batch=3), SMALL),
    "batch3-trans-ab": (GemmSpec(64, 48, 80, "f16", "f16", "bf16", batch=3, trans_a=True, trans_b=True),
                        SMALL),
    "batch2-masked": (GemmSpec(40, 24, 48, out_dtype="f32", batch=2),
                      KernelConfig.parse("32x32x16,s2,w4,g2,masked")),
    "subtile": (GemmSpec(64, 64, 80), KernelConfig.parse("32x64x16,s2,w4,g2,sub")),
    "warp-specialized": (GemmSpec(64, 48, 80, out_dtype="f32"), KernelConfig.parse("32x32x16,s2,w4,g2,ws")),
    # The table's own big tiles on a small odd problem: one 128x256 tile, mostly out of bounds.
    "table-config": (GemmSpec(130, 72, 96), None),
}


def _inputs(spec: GemmSpec, seed: int):
    rng = np.random.default_rng(seed)
    dt = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
    a = rng.standard_normal(spec.a_shape).astype(dt[spec.a_dtype])
    b = rng.standard_normal(spec.b_shape).astype(dt[spec.b_dtype])
    return a, b


def _reference(spec: GemmSpec, a, b) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if spec.trans_a:
        a64 = np.swapaxes(a64, -1, -2)
    if spec.trans_b:
        b64 = np.swapaxes(b64, -1, -2)
    return a64 @ b64


@pytest.fixture(scope="module")
def results():
    from falcon_mlir.kernels.interpret import run_interpreted

    jobs, keys = [], []
    for i, (key, (spec, cfg)) in enumerate(CASES.items()):
        a, b = _inputs(spec, seed=i)
        jobs.append((spec, cfg or choose_config(spec), a, b))
        keys.append(key)
    outs = run_interpreted(jobs)
    return {k: (job, out) for k, job, out in zip(keys, jobs, outs)}


@pytest.mark.parametrize("key", list(CASES))
def test_interpreted_numerics(results, key):
    (spec, cfg, a, b), c = results[key]
    assert not isinstance(c, str), f"{key} failed in the interpreter: {c}"
    assert c.shape == spec.c_shape
    assert c.dtype == {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}[spec.out_dtype]
    ref = _reference(spec, a, b)
    err = np.max(np.abs(c.astype(np.float64) - ref)) / np.max(np.abs(ref))
    assert err < TOL[spec.out_dtype], f"{key}: relative error {err:.3e} with {cfg.label}"


def test_wrong_layout_would_be_caught(results):
    """The check has teeth: reading B as if stored transposed gives a large error."""
    (spec, _, a, b), c = results["distinct-mnk"]
    wrong = a.astype(np.float64) @ b.astype(np.float64).reshape(spec.N, spec.K).T
    ref = _reference(spec, a, b)
    assert np.max(np.abs(wrong - ref)) / np.max(np.abs(ref)) > 0.1
    assert np.max(np.abs(c.astype(np.float64) - ref)) / np.max(np.abs(ref)) < TOL["f32"]
