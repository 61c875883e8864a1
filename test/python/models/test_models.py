"""The Llama block of falcon_mlir.models at small sizes: export, plain IREE
compile and run, checked against keras-hub's own forward pass.

Needs the ``models`` extra (jax, keras, keras-hub); skipped without it.
"""

import importlib.util
import os
import re

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Checked without importing: keras-hub loads TensorFlow, and a process that
# loaded TensorFlow aborts when torch later loads triton ("LLVM ERROR:
# inconsistency in registered CommandLine options"), which killed the whole
# suite run in the torch frontend tests when this module was collected first.
for _dist in ("jax", "keras", "keras_hub"):
    if importlib.util.find_spec(_dist) is None:
        pytest.skip(f"{_dist} is not installed (the models extra)", allow_module_level=True)

from falcon_mlir.models.llama_block import LLAMA3_8B, SMALL, LlamaBlock  # noqa: E402


@pytest.fixture(scope="module")
def block():
    try:
        return LlamaBlock(SMALL)
    except RuntimeError as e:  # keras imported earlier with another backend
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def data(block):
    return block.random_inputs(seed=0), block.random_weights(seed=1)


def test_config_llama3_8b():
    c = LLAMA3_8B
    assert (c.hidden, c.intermediate, c.heads, c.kv_heads, c.head_dim) == (4096, 14336, 32, 8, 128)
    assert c.rope_theta == 500000.0 and c.rms_norm_eps == 1e-5
    assert c.with_tokens(7).tokens == 7 and LLAMA3_8B.tokens == 1024


def test_weight_specs(block):
    c = SMALL
    shapes = [s for _, s in block.weight_specs()]
    assert shapes == [
        (c.hidden, c.heads, c.head_dim), (c.hidden, c.kv_heads, c.head_dim),
        (c.hidden, c.kv_heads, c.head_dim), (c.heads, c.head_dim, c.hidden), (c.hidden,),
        (c.hidden, c.intermediate), (c.hidden, c.intermediate), (c.intermediate, c.hidden),
        (c.hidden,),
    ]


def test_random_data_is_seeded(block, data):
    x, ws = data
    assert x.shape == (1, SMALL.tokens, SMALL.hidden) and x.dtype == np.float32
    assert all(w.dtype == np.float32 for w in ws)
    np.testing.assert_array_equal(block.random_inputs(seed=0), x)
    np.testing.assert_array_equal(block.random_weights(seed=1)[0], ws[0])
    assert abs(float(ws[0].std()) - 0.02) < 0.002


def test_export_has_weights_as_arguments(block):
    text = block.export_mlir()
    assert "func.func public @main(" in text
    assert text.count("stablehlo.dot_general") >= 9
    # Weights are arguments, not constants: the text stays small.
    assert len(text) < 100_000
    assert "dense<" not in text or text.count("dense<") < 50


def test_reference_f64_matches_library(block, data):
    x, ws = data
    y = block.forward(x, ws)
    y64 = block.reference_f64(x, ws)
    assert np.max(np.abs(y - y64)) / np.max(np.abs(y64)) < 1e-5


def test_iree_classical_matches_library(block, data):
    from iree.compiler import compile_str

    from falcon_mlir.runner import CPU_FLAGS, Module

    x, ws = data
    vmfb = compile_str(block.export_mlir(), input_type="stablehlo", extra_args=list(CPU_FLAGS))
    y = Module(vmfb)("main", x, *ws)
    ref = block.forward(x, ws)
    assert y.shape == ref.shape == (1, SMALL.tokens, SMALL.hidden)
    assert np.max(np.abs(y - ref)) / np.max(np.abs(ref)) < 1e-5


def _run_model():
    """tools/run_model.py loaded as a module (a tool, not a package: by its path)."""
    from repo_paths import ROOT

    spec = importlib.util.spec_from_file_location("run_model", ROOT / "tools" / "run_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_run_model_float16_is_refused_up_front(capsys):
    """Were: --dtype float16 was offered and failed after the export ('The
    precision F16_F16_F32 is not supported by dot_general on CPU'; break-it
    review of issue 13): the parser now refuses it with the choices, one line, exit 2."""
    mod = _run_model()
    assert mod.main(["--small", "--dtype", "float16"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid choice: 'float16'" in err, err
    assert mod.main(["--small", "--matmul-tile-bytes", "-1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--matmul-tile-bytes must be >= 0" in err, err


def test_run_model_tile_bytes_misuse_is_refused_up_front(capsys):
    """Were (break-it review): --matmul-tile-bytes 2147483648 (iree-compile reads
    it as a 32-bit int) failed after the export and the front half, 14 s in, with
    iree-compile's command line; with --train or --no-data-tiling the flag was
    silently ignored. Now each is one line, exit 2, before any work."""
    from falcon_mlir.models.main_job import MAX_MATMUL_TILE_BYTES, tile_flags

    mod = _run_model()
    assert MAX_MATMUL_TILE_BYTES == 2**31 - 1
    assert tile_flags(2**31 - 1) == ("--iree-llvmcpu-matmul-tile-bytes=2147483647",)
    with pytest.raises(ValueError, match="<= 2147483647"):
        tile_flags(2**31)
    for argv, want in ((["--matmul-tile-bytes", "2147483648"], "--matmul-tile-bytes must be <= 2147483647"),
                       (["--matmul-tile-bytes", str(2**64)], "--matmul-tile-bytes must be <= 2147483647"),
                       (["--train", "--matmul-tile-bytes", "4096"], "--matmul-tile-bytes is not used with --train"),
                       (["--no-data-tiling", "--matmul-tile-bytes", "4096"],
                        "--matmul-tile-bytes is not used with --no-data-tiling"),
                       (["--matmul-tile-bytes", "abc"], "invalid int value: 'abc'"),
                       # was: 'CompileError: Error parsing flags: option not found' 12 s in (falcon's
                       # in-process front half rejects the global option)
                       (["--iree-flag=--iree-llvmcpu-matmul-tile-bytes=1000"],
                        "--iree-flag --iree-llvmcpu-matmul-tile-bytes=1000: use --matmul-tile-bytes")):
        assert mod.main(["--small", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and want in err, (argv, err)
    args = mod.parse_args(["--small"])
    assert args.matmul_tile_bytes == 8 << 20
    assert mod.parse_args(["--small", "--matmul-tile-bytes", "0"]).matmul_tile_bytes == 0
    assert mod.parse_args(["--small", "--train"]).matmul_tile_bytes == 8 << 20  # the default, unused


def test_run_model_plain_iree(capsys, tmp_path):
    """tools/run_model.py end to end at small sizes with the rewrite off: plain
    IREE, falcon and the JAX/XLA peer side by side, JAX's output agreeing
    with both IREE outputs and with float64 to f32 rounding."""
    import json

    mod = _run_model()
    out_json = tmp_path / "res.json"
    rc = mod.main(["--small", "--tokens", "32", "--lcma", "none", "--repeat", "2", "--json", str(out_json)])
    cap = capsys.readouterr()
    out = cap.out
    assert rc == 0, out
    assert "llama-small block, 32 tokens" in out
    # the data is made twice (the reference's copy after the runtimes'), and the log says which is which
    assert cap.err.count("random inputs and weights (float32)") == 1, cap.err
    assert cap.err.count("the same inputs and weights again, for the float64 reference") == 1, cap.err
    assert "0 of " in out
    assert "JAX/XLA" in out.splitlines()[-1]
    rows = {ln.split("  ")[0]: ln for ln in out.splitlines()
            if ln.startswith(("plain IREE ", "falcon ", "JAX/XLA (jax.jit) "))}
    assert set(rows) == {"plain IREE", "falcon", "JAX/XLA (jax.jit)"}, out
    res = json.loads(out_json.read_text())
    assert res["flags"][-1] == "--iree-llvmcpu-matmul-tile-bytes=8388608"  # both builds' back halves
    assert set(res["time_s"]) == {"classical", "falcon", "jax"}
    for name, ts in res["times_s"].items():
        assert len(ts) == 2 and all(t > 0 for t in ts), name
        assert res["compile_s"][name] > 0
    tf = res["time_s"]["falcon"]
    assert f"{res['time_s']['jax'] / tf:.2f}x" in rows["JAX/XLA (jax.jit)"]
    assert f"{res['time_s']['classical'] / tf:.2f}x" in rows["plain IREE"]
    assert res["rel_err_vs_jax"]["classical"] < 1e-5 and res["rel_err_vs_jax"]["falcon"] < 1e-5
    assert res["rel_err_vs_f64"]["jax"] < 1e-5
    # the update (output - input) is smaller than the residual input: its relative error is larger
    for name, e in res["rel_err_update_vs_f64"].items():
        assert res["rel_err_vs_f64"][name] < e < 1e-5, (name, e)


def test_main_job_bf16_projections_rewritten_with_error_stated():
    """The small block in bf16 (JAX exports the projections as bf16 x bf16 ->
    bf16), Strassen forced: every projection is rewritten with f32
    accumulation and one rounding, its predicted error is stated next to
    classical's, and the block's measured error against float64 stays within
    2x of plain IREE's (bf16 activations dominate both)."""
    import io

    from falcon_mlir.decision import numerics
    from falcon_mlir.models.main_job import print_contractions, run_main_job

    job = run_main_job(small=True, tokens=64, lcma="scheme=strassen", repeat=1, dtype="bfloat16")
    res = job.data
    proj = [(r, layer) for r, layer in zip(res["report"], job.layers) if layer.endswith("_proj")]
    assert len(proj) == 7, job.layers
    for r, layer in proj:
        assert r["element_types"] == {"lhs": "bf16", "rhs": "bf16", "acc": "bf16"}, layer
        assert r["plan"]["schemes"] == ["strassen"], (layer, r["reason"])
        assert r["rounding"]["products"] == "f32" and r["rounding"]["combine_c"] == "f32"
        pe = r["predicted_error"]
        assert pe["plan"] == pytest.approx(numerics.rounded_plan_error(
            ["strassen"], r["K"], "bf16", sums=r["rounding"]["sums"]))
        assert pe["classical"] == pytest.approx(numerics.rounded_plan_error([], r["K"], "bf16"))
    e = res["rel_err_vs_f64"]
    assert 1e-3 < e["classical"] < 3e-2        # a bf16 block: errors at bf16's scale
    assert e["falcon"] <= 2 * e["classical"], e
    u = res["rel_err_update_vs_f64"]            # the block's own contribution, without the residual
    assert e["classical"] < u["classical"] < 0.2 and u["falcon"] <= 2 * u["classical"], u
    table = io.StringIO()
    print_contractions(res["report"], job.layers, file=table)
    assert "bf16->bf16" in table.getvalue() and "sums f32" in table.getvalue()


def test_analyze_states_types_errors_and_the_left_out_plan():
    """``--lcma analyze`` on a bf16 projection (1024 x 4096 x 4096, Llama-3-8B
    q/o): nothing is rewritten, the entry has the element types and the
    predicted error, and the reason names the bf16-sum plan the budget left
    out with its predicted time and error."""
    import io

    from iree.compiler import ir

    from cases import contraction_mlir
    from falcon_mlir.models.main_job import analyze_only, print_contractions

    text, _ = contraction_mlir(1024, 4096, 4096, lhs="bf16", acc="bf16")
    with ir.Context():
        module = ir.Module.parse(text)
        report = analyze_only(module.operation)
    (e,) = report
    assert e["plan"] == "classical" and e["element_types"]["acc"] == "bf16"
    assert e["predicted_error"] == {"classical": pytest.approx(3.9e-3, rel=0.01)}
    assert "with bf16 sums predicted" in e["reason"] and "error 8.7e-03" in e["reason"], e["reason"]
    table = io.StringIO()
    print_contractions(report, ["q_proj"], file=table)
    assert "bf16->bf16" in table.getvalue() and "3.9e-03" in table.getvalue()


def test_result_lines_side_by_side():
    """The printed rows: one per run measured, falcon's speed-up over each
    other run as its median / falcon's median; without the JAX peer
    (``--no-jax``) no JAX row or error line."""
    from falcon_mlir.models.main_job import result_lines

    res = {"rel_err_vs_classical": 1e-6, "compile_s": {"classical": 2.0, "falcon": 7.0, "jax": 3.0},
           "time_s": {"classical": 2.4, "falcon": 1.6, "jax": 1.2},
           "times_s": {"classical": [2.4, 2.5, 2.3], "falcon": [1.6, 1.7, 1.5], "jax": [1.2, 1.2, 1.3]},
           "rel_err_vs_jax": {"classical": 2e-6, "falcon": 3e-6},
           "rel_err_vs_f64": {"classical": 5e-6, "falcon": 6e-6, "jax": 4e-6},
           "rel_err_update_vs_f64": {"classical": 4e-5, "falcon": 7e-5, "jax": 3e-5}}
    lines = result_lines(res)
    rows = {ln.split("  ")[0]: ln.split() for ln in lines[-3:]}
    assert lines[-4].split()[:4] == ["run", "median", "of", "3"]
    assert lines[3] == ("relative error of the block's update (output - input) vs float64: "
                        "classical 4.00e-05, falcon 7.00e-05, JAX/XLA 3.00e-05")
    assert rows["plain IREE"][-1] == "1.50x" and rows["JAX/XLA (jax.jit)"][-1] == "0.75x"
    assert rows["falcon"][-1] == "-"
    assert "vs JAX/XLA: classical 2.00e-06, falcon 3.00e-06" in lines[1]
    assert lines[2].endswith("JAX/XLA 4.00e-06")
    for key in ("compile_s", "time_s", "times_s", "rel_err_vs_f64", "rel_err_update_vs_f64"):
        del res[key]["jax"]
    del res["rel_err_vs_jax"]
    lines = result_lines(res)
    assert not any("JAX" in ln for ln in lines) and len(lines) == 6


_MM_256x2048x1024 = (
    "func.func @mm(%a: tensor<256x1024xf32>, %b: tensor<1024x2048xf32>) -> tensor<256x2048xf32> {\n"
    "  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : "
    "(tensor<256x1024xf32>, tensor<1024x2048xf32>) -> tensor<256x2048xf32>\n"
    "  return %0 : tensor<256x2048xf32>\n}")


def _distribution_tiles(mlir_text: str) -> list:
    """The ``distribution`` tile lists of the data-tiled matmuls (``linalg.mmt4d``) in IR at
    ``executable-configurations``."""
    import re

    return re.findall(r"linalg\.mmt4d \{lowering_config = #iree_cpu\.lowering_config<"
                      r"distribution = \[([0-9, ]*)\]", mlir_text)


def test_tile_flags():
    from falcon_mlir.models.main_job import MATMUL_TILE_BYTES, tile_flags

    assert MATMUL_TILE_BYTES == 8388608
    assert tile_flags(0) == ()
    assert tile_flags(4 << 20) == ("--iree-llvmcpu-matmul-tile-bytes=4194304",)
    with pytest.raises(ValueError, match=">= 0"):
        tile_flags(-1)


def test_compile_split_tile_bytes_reach_both_builds():
    """The matmul tile bytes (a global LLVM option) reach the back half of both
    builds: at 256x2048x1024 with data tiling IREE's default gives each
    workgroup 1x2 16x16 tiles of C (plain) and 8x2 (Strassen's 128x1024x512
    products); 4 MiB gives 16x16 and 8x8. Nothing is set process-wide (IREE's
    global options stay as they were: unset unless an earlier test in this
    process compiled CUDA kernels). For an AVX-512 CPU (znver4), whatever the host. (The
    falcon build keeps IREE's products, kernels=None: on an AVX-512 host
    falcon's CPU kernel would take them, with no IREE matmul tiles left.)"""
    from falcon_mlir.models.main_job import BASE_FLAGS, DATA_TILING_FLAGS, compile_split, tile_flags
    from falcon_mlir.pipeline.capi import global_flags

    before = global_flags()
    # A fixed AVX-512 CPU, not the host: the tiles above are those of its 16x16 mmt4d ukernel (an
    # AVX2-only host, 2-core Zen 3, gives 2x4 and 32x32 at the two tile bytes).
    flags = [f if f != "--iree-llvmcpu-target-cpu=host" else "--iree-llvmcpu-target-cpu=znver4"
             for f in BASE_FLAGS] + list(DATA_TILING_FLAGS)
    assert "--iree-llvmcpu-target-cpu=znver4" in flags
    to = ["--compile-to=executable-configurations"]
    got = {}
    for tb in (0, 4 << 20):
        for falcon in (False, True):
            out, report = compile_split(_MM_256x2048x1024, flags, "scheme=strassen levels=1" if falcon else None,
                                        falcon=falcon, extra_flags=list(tile_flags(tb)) + to, kernels=None)
            got[tb, falcon] = _distribution_tiles(out.decode())
            assert len(report) == (1 if falcon else 0)
    assert got[0, False] == ["1, 2, 0, 0, 0, 0"] and got[4 << 20, False] == ["16, 16, 0, 0, 0, 0"], got
    assert set(got[0, True]) == {"8, 2, 0, 0, 0, 0"} and set(got[4 << 20, True]) == {"8, 8, 0, 0, 0, 0"}, got
    assert global_flags() == before


def test_compile_split_with_tile_bytes_computes_the_product():
    """Both builds with 1 MiB tiles, run: the product of random f32 matrices
    agrees with float64 to f32 rounding (Strassen's within its bound)."""
    from falcon_mlir.models.main_job import BASE_FLAGS, DATA_TILING_FLAGS, compile_split, tile_flags
    from falcon_mlir.runner import Module

    rng = np.random.default_rng(3)
    a = rng.standard_normal((256, 1024), dtype=np.float32)
    b = rng.standard_normal((1024, 2048), dtype=np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    flags = list(BASE_FLAGS) + list(DATA_TILING_FLAGS)
    for falcon in (False, True):
        vm, _ = compile_split(_MM_256x2048x1024, flags, "scheme=strassen levels=1" if falcon else None,
                              falcon=falcon, extra_flags=tile_flags(1 << 20))
        y = np.asarray(Module(vm)("mm", a, b))
        err = np.max(np.abs(y - ref)) / np.max(np.abs(ref))
        assert 0 < err < (2e-6 if not falcon else 5e-6), (falcon, err)


def test_run_model_external_transients(capsys):
    """--external-transients: both IREE builds take their transient memory in one buffer (IREE's external
    transients), the outputs agree with JAX/XLA and float64 as without it, the summary says so; with --train
    it is one usage line."""
    mod = _run_model()
    assert mod.main(["--small", "--train", "--external-transients"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--external-transients applies to the block's run, not to --train" in err, err
    rc = mod.main(["--small", "--tokens", "32", "--lcma", "scheme=strassen", "--repeat", "2",
                   "--external-transients"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "; IREE's transients in one buffer per module, allocated once;" in out.splitlines()[-1], out
    errs = {ln.split(":")[0]: ln for ln in out.splitlines() if ln.startswith("relative error")}
    vals = [float(v) for ln in errs.values() for v in re.findall(r"(\d\.\d\de-\d\d)", ln)]
    assert len(vals) == 9 and max(vals) < 1e-5, errs  # output and update errors


def test_run_model_weights_as_parameters_or_arguments(capsys, tmp_path):
    """The weights as IREE parameters (the default: loaded once, IREE's hoisted work done at load) and as
    arguments of every call give the same outputs within float32 rounding, against float64 and JAX/XLA; the
    summary says which; --weights with --train is one usage line."""
    mod = _run_model()
    assert mod.main(["--small", "--train", "--weights", "parameters"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--weights applies to the block's run, not to --train" in err, err
    (tmp_path / "bad" / "taken" / "weights.irpa").mkdir(parents=True)  # refused before the compiles, not after
    (tmp_path / "bad" / "file").write_text("")
    for folder, why in ((tmp_path / "bad" / "taken", "weights.irpa: is a directory"),
                        (tmp_path / "bad" / "file", "not a directory")):
        assert mod.main(["--small", "--save-dir", str(folder)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--save-dir {folder}: {why}" in err, err
    for extra, said in ((["--save-dir", str(tmp_path / "saved")], True), (["--weights", "arguments"], False)):
        rc = mod.main(["--small", "--tokens", "32", "--lcma", "scheme=strassen", "--repeat", "2"] + extra)
        out = capsys.readouterr().out
        assert rc == 0, out
        assert all(name in out for name in ("q_proj", "o_proj", "gate_proj", "down_proj")), out  # layer names
        last = out.splitlines()[-1]
        assert last.endswith("; weights as IREE parameters, hoisted work done at load (JAX/XLA: arguments)") is said, last
        errs = [ln for ln in out.splitlines() if ln.startswith("relative error")]
        vals = [float(v) for ln in errs for v in re.findall(r"(\d\.\d\de-\d\d)", ln)]
        assert len(vals) == 9 and max(vals) < 1e-5 and vals[0] > 0, errs  # Strassen: not bit-identical
    import iree.runtime as rt  # the saved modules' weights, for iree-run-module --parameters=model=...

    index = rt.ParameterIndex()
    index.load(str(tmp_path / "saved" / "weights.irpa"))
    assert len(index.items()) == 9 and sorted(p.name for p in (tmp_path / "saved").iterdir()) == [
        "block.mlir", "classical.vmfb", "falcon.vmfb", "report.json", "weights.irpa"]
