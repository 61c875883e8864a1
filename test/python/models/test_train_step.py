"""The training step of falcon_mlir.models.train_step at small sizes: JAX's
gradients against a float64 reference, the forward/backward classification,
and the step compiled by plain IREE and by falcon (every contraction, the
backward ones included, rewritten with Strassen) run for a few SGD steps,
checked against each other and against a float64 trajectory.

Needs the ``models`` extra (jax, keras, keras-hub); skipped without it.
"""

import importlib.util
import os

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
for _dist in ("jax", "keras", "keras_hub"):  # checked without importing (see test_models.py)
    if importlib.util.find_spec(_dist) is None:
        pytest.skip(f"{_dist} is not installed (the models extra)", allow_module_level=True)

from falcon_mlir.compare import rel_err  # noqa: E402
from falcon_mlir.models.llama_block import SMALL  # noqa: E402

PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: the compiled test step: one small block, 32 tokens
CFG = SMALL.with_tokens(32)
LR = 0.05
STEPS = 3


def _train_step(cfg, layers, with_grads=False):
    from falcon_mlir.models.train_step import TrainStep

    try:
        return TrainStep(cfg, layers=layers, lr=LR, with_grads=with_grads)
    except RuntimeError as e:  # keras imported earlier with another backend
        pytest.skip(str(e))


def _f64_trajectory(cfg, layers, params, batches, steps):
    """float64 SGD from ``params`` (reference_loss under jax.enable_x64):
    per step the loss, and the gradients of the last step."""
    import jax
    import jax.numpy as jnp

    from falcon_mlir.models.train_step import reference_loss

    losses, grads = [], None
    with jax.enable_x64(True):
        p = [jnp.asarray(a, jnp.float64) for a in params]
        vg = jax.jit(jax.value_and_grad(lambda pp, x, t: reference_loss(cfg, layers, pp, x, t)))
        for s in range(steps):
            x, t = (jnp.asarray(a, jnp.float64) for a in batches(s))
            loss, g = vg(p, x, t)
            losses.append(float(loss))
            grads = [np.asarray(a) for a in g]
            p = [w - LR * gw for w, gw in zip(p, g)]
        return losses, grads, [np.asarray(a) for a in p]


def test_jax_step_matches_float64_reference():
    """Two stacked blocks: keras' step (loss, value_and_grad, SGD) in f32
    against the reference written from keras-hub's code in float64."""
    cfg = SMALL.with_tokens(16)
    ts = _train_step(cfg, 2, with_grads=True)
    params = ts.random_params(1)
    x, t = ts.random_batch(0, 0)
    loss, new, grads = ts.step(params, x, t)
    losses64, grads64, new64 = _f64_trajectory(cfg, 2, params, lambda s: (x, t), 1)
    assert len(grads) == len(params) == 18
    assert abs(loss - losses64[0]) / abs(losses64[0]) < 1e-5
    for g, g64 in zip(grads, grads64):
        assert g.shape == g64.shape and rel_err(g, g64) < 1e-4
    for w, w64 in zip(new, new64):
        assert rel_err(w, w64) < 1e-5
    # the update is the gradient step: new = params - lr * grads
    np.testing.assert_allclose(new[0], params[0] - np.float32(LR) * grads[0], rtol=1e-6, atol=1e-7)


def test_mixed_precision_step_matches_float64():
    """The block in bf16 with float32 master params and a loss scale (which
    the step divides out; float16's default, JAX's CPU cannot run f16 x f16 ->
    f32 dots): float32 loss, grads and params, within bf16's error of the
    float64 reference."""
    import dataclasses

    from falcon_mlir.models.train_step import LOSS_SCALE

    assert LOSS_SCALE == {"float32": 1.0, "bfloat16": 1.0, "float16": 65536.0}
    cfg = dataclasses.replace(SMALL.with_tokens(16), dtype="bfloat16")
    ts = _train_step(cfg, 1, with_grads=True)
    ts.loss_scale = 256.0
    params = ts.random_params(1)
    x, t = ts.random_batch(0, 0)
    loss, new, grads = ts.step(params, x, t)
    losses64, grads64, _ = _f64_trajectory(cfg, 1, params, lambda s: (x, t), 1)
    assert abs(loss - losses64[0]) / abs(losses64[0]) < 1e-2  # measured 1.9e-4
    for p, g, g64, w in zip(params, grads, grads64, new):
        assert g.dtype == w.dtype == np.float32 and rel_err(g, g64) < 5e-2  # measured <= 1.8e-2
        np.testing.assert_allclose(w, p - np.float32(LR) * g, rtol=1e-6, atol=1e-7)


def test_bad_arguments_raise():
    from falcon_mlir.models.train_step import TrainStep

    with pytest.raises(ValueError, match="dtype"):
        TrainStep(SMALL.__class__(**{**SMALL.__dict__, "dtype": "float64"}))
    with pytest.raises(ValueError, match="loss_scale"):
        TrainStep(SMALL, loss_scale=0.0)
    with pytest.raises(ValueError, match="layers"):
        TrainStep(SMALL, layers=0)
    with pytest.raises(ValueError, match="lr"):
        TrainStep(SMALL, lr=0.0)


def test_classification_two_blocks():
    """Every dot_general of a 2-block step gets its phase and role: per
    block and projection one forward op, one dW and one dX."""
    from falcon_mlir.models.train_step import classify_contractions

    ts = _train_step(SMALL.with_tokens(16), 2)
    text, dbg = ts.export_mlir(), ts.export_mlir(debug_info=True)
    names = [n for n, _ in ts.param_specs()]
    report = [{"location": f"step.mlir:{i + 1}:5"} for i, ln in enumerate(text.splitlines())
              if "stablehlo.dot_general" in ln]
    classes = classify_contractions(report, text, dbg, names)
    roles = [c["role"] for c in classes]
    for layer in ("layer0", "layer1"):
        for proj in PROJ:
            assert roles.count(f"{layer} {proj}") == 1, (layer, proj, roles)
            assert roles.count(f"dW {layer} {proj}") == 1, (layer, proj, roles)
            assert roles.count(f"dX via {layer} {proj}") == 1, (layer, proj, roles)
    for c in classes:
        if c["role"].startswith(("dW", "dX", "attention (grad)")):
            assert c["phase"] == "backward"
        else:
            assert c["phase"] == "forward" and "(grad)" not in c["role"]
    # 4 attention products per block backward (2 per forward product)
    assert roles.count("attention (grad)") == 8
    # a location that is no dot_general is unknown, not guessed
    assert classify_contractions([{"location": "step.mlir:1:1"}], text, dbg, names) == [
        {"phase": "?", "role": ""}]


# -- compiled: plain IREE vs falcon ------------------------------------------------
@pytest.fixture(scope="module")
def compiled():
    """The small step (with gradients) compiled both ways, falcon with
    Strassen forced on every contraction; STEPS steps of each."""
    from falcon_mlir.models.train_job import compile_step, run_steps
    from falcon_mlir.models.train_step import classify_contractions
    from falcon_mlir.runner import CPU_FLAGS

    ts = _train_step(CFG, 1, with_grads=True)
    text = ts.export_mlir()
    names = [n for n, _ in ts.param_specs()]
    vm_c, _ = compile_step(text, CPU_FLAGS, falcon=False)
    vm_f, report = compile_step(text, CPU_FLAGS, "scheme=strassen levels=1 form=grouped")
    classes = classify_contractions(report, text, ts.export_mlir(debug_info=True), names)
    params = ts.random_params(1)
    batches = lambda s: ts.random_batch(s, 0)  # noqa: E731
    losses, _, finals, grads = run_steps([vm_c, vm_f], params, batches, STEPS)
    ref = _f64_trajectory(CFG, 1, params, batches, STEPS)
    return dict(ts=ts, report=report, classes=classes, params=params, losses=losses, finals=finals,
                grads=grads, ref=ref)


def test_train_flags_stay_in_their_compile(compiled):
    """Both builds got TRAIN_FLAGS (global LLVM options) without setting
    anything process-wide: IREE's global options are as they were before (unset
    unless an earlier test in this process compiled CUDA kernels), so a later
    compile in this process (falcon-kernels' KERNEL_FLAGS included) is not
    affected, and an in-process compile of a module of the same form still
    works without them."""
    from falcon_mlir.api import compile_str
    from falcon_mlir.pipeline.capi import global_flags
    from falcon_mlir.runner import CPU_FLAGS, Module

    before = global_flags()  # the compiled fixture's two builds ran before this line
    assert before in (None, ("--iree-stream-resource-min-offset-alignment=128",)), before
    src = ("func.func @mm(%a: tensor<16x8xf32>, %b: tensor<8x4xf32>) -> tensor<16x4xf32> {\n"
           "  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : "
           "(tensor<16x8xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>\n  return %0 : tensor<16x4xf32>\n}")
    vm = compile_str(src, extra_args=CPU_FLAGS, input_type="stablehlo", lcma=None)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 8), dtype=np.float32), rng.standard_normal((8, 4), dtype=np.float32)
    np.testing.assert_allclose(np.asarray(Module(vm)("mm", a, b)), a @ b, rtol=1e-5, atol=1e-5)
    assert global_flags() == before


def test_loss_curves_agree(compiled):
    (l_c, l_f), (l64, _, _) = compiled["losses"], compiled["ref"]
    assert len(l_c) == len(l_f) == STEPS
    for a, b, r in zip(l_c, l_f, l64):
        assert abs(b - a) / abs(a) < 1e-5
        assert abs(a - r) / abs(r) < 1e-5 and abs(b - r) / abs(r) < 1e-5
    assert len(set(l_c)) == STEPS  # the steps change the loss


def test_gradients_agree(compiled):
    """Gradients of the last step: falcon vs classical vs float64."""
    g_c, g_f = compiled["grads"]
    g64 = compiled["ref"][1]
    assert len(g_c) == len(g_f) == len(g64) == 9
    for a, b, r in zip(g_c, g_f, g64):
        assert rel_err(b, a) < 1e-4
        assert rel_err(a, r) < 1e-4 and rel_err(b, r) < 1e-4


def test_final_weights_within_bound(compiled):
    from falcon_mlir.models.train_job import weights_bound

    w_c, w_f = compiled["finals"]
    w64 = compiled["ref"][2]
    bound = weights_bound(compiled["report"])
    assert 0 < bound < 1e-4
    for a, b, r, p in zip(w_c, w_f, w64, compiled["params"]):
        assert rel_err(b, a) <= bound
        assert rel_err(b, r) <= bound
        assert not np.array_equal(b, p)  # SGD moved every param


def test_every_backward_contraction_reported(compiled):
    """All 9 forward and 18 backward contractions are found, classified and
    rewritten (their plan in the report), each with a reason."""
    report, classes = compiled["report"], compiled["classes"]
    assert len(report) == len(classes) == 27
    phases = [c["phase"] for c in classes]
    assert phases.count("forward") == 9 and phases.count("backward") == 18
    roles = [c["role"] for c in classes]
    for proj in PROJ:
        assert f"dW layer0 {proj}" in roles and f"dX via layer0 {proj}" in roles
    for r, c in zip(report, classes):
        assert r["plan"] != "classical" and r["plan"]["schemes"] == ["strassen"], (c, r)
        assert r["reason"]
    # dW: the reduction runs over the tokens (K = batch x tokens)
    dw = [r for r, c in zip(report, classes) if c["role"].startswith("dW")]
    assert len(dw) == 7 and all(r["K"] == CFG.tokens * CFG.batch for r in dw)


def test_run_model_train_bad_arguments(capsys):
    """run_model.py --train with a bad step count or rate: one line, exit 2."""
    import importlib.util

    from repo_paths import ROOT

    spec = importlib.util.spec_from_file_location("run_model_train", ROOT / "tools" / "run_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for argv, msg in ((["--train", "--steps", "0"], "--steps and --layers must be >= 1"),
                      (["--train", "--lr", "-1"], "--lr must be > 0")):
        rc = mod.main(argv)
        err = capsys.readouterr().err
        assert rc == 2 and msg in err, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_step_on_falcons_cpu_kernel(compiled):
    """The same step with every f32 GEMM on falcon's CPU kernel (min-flops 0), built the way
    ``run_model.py --train`` builds it (the kernel spliced in the first half, TRAIN_FLAGS in the
    second, with data tiling): the loss curve matches the classical module and float64. Were: the
    second half's stack limit changed the llvm-cpu target, the kernel's objects (keyed by the exact
    target) were dropped and the link failed ("undefined symbol: falcon_cpu_pack_b_...")."""
    import shutil

    from falcon_mlir.kernels.cpu_object import host_has_avx512
    from falcon_mlir.models.main_job import BASE_FLAGS, DATA_TILING_FLAGS
    from falcon_mlir.models.train_job import compile_step, run_steps

    if not host_has_avx512() or shutil.which("gcc") is None:
        pytest.skip("falcon's CPU kernel needs AVX-512 and gcc")
    ts = compiled["ts"]
    flags = list(BASE_FLAGS) + list(DATA_TILING_FLAGS)
    vm_k, report = compile_step(ts.export_mlir(), flags, "auto", kernels="arch=x86-avx512 min-flops=0")
    served = [k for r in report for k in (r.get("kernels") or []) if k.get("kernel") == "classical"]
    assert len(served) >= 14, [(r["M"], r["N"], r["K"], r.get("kernels")) for r in report]
    losses, _, _, _ = run_steps([vm_k], compiled["params"], lambda s: ts.random_batch(s, 0), STEPS)
    for k, c, r in zip(losses[0], compiled["losses"][0], compiled["ref"][0]):
        assert abs(k - c) / abs(c) < 1e-5 and abs(k - r) / abs(r) < 1e-5
