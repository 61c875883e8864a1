"""scripts/gpu_model.py's training bundle, run side (gpu_model_run.py) on the
host: a tiny SGD step (a linear layer) compiled for local-task and exported
by jax.export stands in for the Llama step, so the loop, the per-step
timing, the loss and update comparisons and the table are checked without
the minute-long compiles of ``prepare --train --target cpu``; and the
prepare command line's one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest


def _load(name):
    import importlib.util

    from repo_paths import ROOT

    spec = importlib.util.spec_from_file_location(name + "_t", ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_train_bundle_runs_on_host(tmp_path, monkeypatch):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from falcon_mlir.runner import CPU_FLAGS, compile_mlir

    lr, shape = 0.5, (1, 8, 4)

    def step(params, x, target):
        def loss(p):
            d = jnp.einsum("btm,mn->btn", x, p[0]) * p[1] - target
            return 0.5 * jnp.mean(d * d)

        val, g = jax.value_and_grad(loss)(params)
        return val, [w - lr * gw for w, gw in zip(params, g)]

    specs = ([jax.ShapeDtypeStruct((4, 4), jnp.float32), jax.ShapeDtypeStruct((4,), jnp.float32)],
             jax.ShapeDtypeStruct(shape, jnp.float32), jax.ShapeDtypeStruct(shape, jnp.float32))
    text = jax.jit(step).lower(*specs).as_text()
    (tmp_path / "step.vmfb").write_bytes(compile_mlir(text, CPU_FLAGS))
    exp = jax.export.export(jax.jit(step), platforms=["cpu"])(*specs)
    (tmp_path / "step.bin").write_bytes(bytes(exp.serialize()))
    entry = {"input_shape": list(shape), "params": [["dense/kernel", [4, 4]], ["norm/scale", [4]]],
             "flops": 2.0 * 8 * 4 * 4 * 3, "iree": {"file": "step.vmfb"}, "falcon": {"file": "step.vmfb"},
             "jax": {"file": "step.bin"}}
    man = {"format": 1, "train": True, "tokens": 8, "steps": 3, "lr": lr, "driver": "local-task",
           "variants": {"bfloat16": entry, "float16": {**entry, "iree": {"error": "failed to distribute"}}}}
    (tmp_path / "manifest.json").write_text(json.dumps(man))

    run = _load("gpu_model_run")
    params = run.train_params(entry, 0)
    assert params[1].shape == (4,) and abs(float(params[1].mean()) - 1.0) < 0.1  # scales 1 + N(0, 0.02^2)
    x, t = run.train_batch(entry, 0, 1)
    np.testing.assert_array_equal(t, np.float32(0.5) * x + np.float32(0.1) * np.roll(x, 1, axis=1))
    assert not np.array_equal(x, run.train_batch(entry, 0, 2)[0])

    monkeypatch.setenv("OUT", str(tmp_path))
    assert run.main([str(tmp_path), "--warmup", "1"]) == 0
    res = json.loads((tmp_path / "gpu_train.json").read_text())
    rows = {(r["dtype"], r["variant"]): r for r in res["rows"]}
    assert res["steps"] == 3 and len(rows) == 6
    for name in ("iree", "falcon"):
        r = rows[("bfloat16", name)]
        assert len(r["loss"]) == len(r["times_ms"]) == 3 and r["loss"][2] < r["loss"][0]
        assert r["loss_rel_diff_vs_jax"] < 1e-5 and r["update_rel_diff_vs_jax"] < 1e-4
    assert "failed to distribute" in rows[("float16", "iree")]["error"]
    md = (tmp_path / "gpu_train.md").read_text()
    assert "ms/step (median of 3)" in md and "does not run: failed to distribute" in md
    assert "| float16 | falcon |" in md and "1.00x" in md


def test_prepare_train_bad_input_is_one_line(tmp_path, capsys):
    gm = _load("gpu_model")
    for argv, msg in ((["--train", "--steps", "0"], "--steps must be >= 1"),
                      (["--small"], "--small and --target go with --train only")):
        rc = gm.main(["prepare", str(tmp_path / "b")] + argv)
        err = capsys.readouterr().err
        assert rc != 0 and msg in err, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
