"""scripts/gpu_kernels.py: the bundle it prepares, and its GPU-side logic as a dry run on the CPU.

The dry run (``--cpu``) replaces the kernel by IREE's own llvm-cpu code,
torch's CUDA tensors by CPU tensors and Triton's JIT by its interpreter; what
it checks is the script's plumbing (manifest, inputs, checks, timing, tables,
JSON), not the GPU. Each mode runs in its own process, as it would there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kernel_helpers import have, skip_without

from falcon_mlir.kernels import fma_gemm

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "gpu_kernels.py"


def _run(*args, out=None, timeout=300):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("OUT", None)
    if out is not None:
        env["OUT"] = str(out)
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_bad_shape_is_one_line_error(tmp_path):
    r = _run(SCRIPT, "prepare", tmp_path / "b", "--shapes", "12x")
    assert r.returncode == 2 and "error: shape '12x': expected MxNxK" in r.stdout
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("options,message", [
    (["operands=bogus"], "error: --falcon-compile 'operands=bogus': lcma-rewrite option operands='bogus' is invalid"),
    (["auto", "auto"], "error: --falcon-compile 'auto' names the module of 'auto' again"),
    (["form=kernel"], "error: --falcon-compile 'form=kernel': form=kernel needs the falcon-kernels pass")])
def test_bad_falcon_compile_options_are_one_line_errors(tmp_path, options, message):
    """Checked before anything is built: no bundle, one line (they failed per module after the GEMM
    modules, and the same options twice wrote one module file twice)."""
    r = _run(SCRIPT, "prepare", tmp_path / "b", "--cpu", "--shapes", "64x48x80", "--dtypes", "f32",
             "--no-tune", "--falcon-compile", *options)
    assert r.returncode == 2 and r.stdout.strip().splitlines() == [r.stdout.strip()], r.stdout + r.stderr
    assert r.stdout.startswith(message) and "Traceback" not in r.stderr, r.stdout
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("counts,message", [
    (["--interleave", "-1"], "error: --interleave -1: 0 (off) to --repeat (20) rounds"),
    (["--interleave", "21"], "error: --interleave 21: 0 (off) to --repeat (20) rounds"),
    (["--repeat", "0"], "error: --repeat 0: at least 1 timed call"),
    (["--warmup", "-1"], "error: --warmup -1: at least 0")])
def test_bad_run_counts_are_one_line_errors(tmp_path, counts, message):
    """--interleave -1 timed nothing and printed nan, more rounds than --repeat made one call per round
    (ROUNDS calls each, outside --entry-budget-s), --repeat 0 failed every row; now one line before the
    bundle is read."""
    r = _run(SCRIPT, "run", tmp_path / "no-bundle", "--cpu", *counts, out=tmp_path / "out")
    assert r.returncode == 2 and r.stdout.strip().startswith(message), r.stdout + r.stderr
    assert not (tmp_path / "out").exists()


def test_dry_run_bundle(tmp_path):
    if not have("torch"):
        pytest.skip("needs torch")
    bundle, out = tmp_path / "bundle", tmp_path / "out"
    r = _run(SCRIPT, "prepare", bundle, "--cpu", "--dtypes", "f32", "--shapes", "64x48x80",
             "--configs", "table", "64x64x32,s2,w4,g8", "--tune-dtypes", "f32", "--tune-f32-shapes", "64x48x80",
             "--falcon-compile", "scheme=strassen")
    assert r.returncode == 0, r.stdout + r.stderr
    manifest = json.loads((bundle / "manifest.json").read_text())
    # The correctness modules come first: run does them first, so a budget cannot skip them. Three f32
    # checks: 1000^3 on the Triton kernel, two in whole 128 x 128 tiles on the FMA kernel (where NVRTC is).
    assert [e["kind"] for e in manifest["entries"]] == ["check"] * 3 + ["perf", "perf", "falcon-compile"]
    assert not manifest["failures"]
    fma = [e["config_label"] == "fma128x128x8,g8" for e in manifest["entries"][:3]]
    assert fma == ([False, True, True] if fma_gemm.available() else [False] * 3), fma
    fc = manifest["entries"][-1]
    assert fc["name"] == "fc_f32_64x48x80_nn_of32__scheme_strassen", fc["name"]
    assert fc["report"][0]["plan"]["schemes"] == ["strassen"]
    gpu_side = {"gpu_kernels.py", "gpu_kernels_run.py", "gpu_kernels_common.py", "gpu_kernels_plans.py",
                "gpu_kernels_jit.py", "gpu_kernels_tune.py"}
    assert gpu_side | {"falcon_triton_gemm.py"} <= {p.name for p in bundle.iterdir()}
    (job,) = manifest["tune"]["jobs"]
    assert (job["M"], job["N"], job["K"], job["dtype"], job["torch_tf32"]) == (64, 48, 80, "f32", True)
    modes = [c["f32_mode"] for c in job["candidates"]]
    assert modes.count("tf32x3") == 3 and modes[0] == "ieee"

    r = _run(bundle / "gpu_kernels.py", "check", bundle)
    assert r.returncode == 0 and "6 modules" in r.stdout, r.stdout

    r = _run(bundle / "gpu_kernels.py", "run", bundle, "--cpu", "--repeat", "2", "--warmup", "1",
             "--interleave", "2", out=out)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads((out / "gpu_kernels_run.json").read_text())
    assert result["partial"] is False
    rows = result["rows"]
    assert rows[0]["name"] == "torch.matmul" and rows[1]["kind"] == "check"  # checks first
    ours = [x for x in rows if x["name"] != "torch.matmul"]
    assert len(ours) == 6 and all(x["ok"] for x in ours)
    assert all(x["rel_err_f64"] < 1e-5 and x["reps"] == 2 and x["il_calls"] == 2 for x in ours)
    assert all(x["vs_torch_wall"] == x["torch_wall_ms"] / x["wall_ms"] for x in ours)
    check = next(x for x in ours if x["kind"] == "check")
    assert check["rel_diff_iree_reference"] == 0.0  # @main and @reference are the same code here
    assert "x wall/wall" in r.stdout and "x vs events" in r.stdout and "| torch " in r.stdout
    md = (out / "gpu_kernels_run.md").read_text()
    assert ("| IREE ms (wall) | TFLOP/s | torch ms (wall) | torch ms (events) | speed wall/wall "
            "| speed vs events |") in md

    if not have("triton"):
        pytest.skip("the tune dry run needs triton")
    r = _run(bundle / "gpu_kernels.py", "tune", bundle, "--cpu", "--configs", "128x128x32,s3,w8,g8", out=out)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads((out / "gpu_kernels_tune.json").read_text())["rows"]
    assert [(x["config"], x["spec"]["f32_mode"]) for x in rows] == [
        ("cuBLAS", "ieee"), ("128x128x32,s3,w8,g8", "ieee"), ("128x128x32,s3,w8,g8", "tf32x3")]
    assert all(x["rel_err_f64"] < 1e-5 for x in rows) and rows[1]["ok"] and rows[2]["ok"]
    assert "[tf32x3]" in r.stdout


def _tune_row(dtype, shape, config, vs, mode="ieee", ok=True):
    M, N, K = shape
    spec = {"M": M, "N": N, "K": K, "batch": 1, "a_dtype": dtype, "b_dtype": dtype, "out_dtype": dtype,
            "trans_a": False, "trans_b": False, "f32_mode": mode}
    return {"name": "falcon_gemm (JIT)", "job": f"{M}x{N}x{K}", "spec": spec, "config": config, "f32_mode": mode,
            "ms": 1.0 / vs, "vs_torch": vs, "rel_err_f64": 1e-6, "ok": ok}


def test_pick_writes_tuned_entries(tmp_path):
    from falcon_mlir.kernels import GemmSpec
    from falcon_mlir.kernels.configs import TABLE_PATH, choose_config, load_table

    small, small2, large = (8192, 1024, 4096), (8192, 576, 7168), (8192, 8192, 8192)
    rows = [{"name": "torch.matmul", "spec": {"M": 1}, "config": "cuBLAS", "ms": 1.0},
            _tune_row("bf16", small, "128x128x64,s4,w8,g8", 0.95),
            _tune_row("bf16", small2, "128x128x64,s4,w8,g8", 0.9),
            _tune_row("bf16", small, "128x64x64,s4,w4,g8", 1.2),  # measured on one of two shapes only
            _tune_row("bf16", small, "128x256x64,s3,w8,g8", 0.8),
            _tune_row("bf16", small2, "128x256x64,s3,w8,g8", 0.7),
            _tune_row("bf16", large, "128x256x64,s3,w8,g16", 1.03), _tune_row("bf16", large, "256x128x64,s3,w8,g8", 1.1,
                                                                              ok=False),
            _tune_row("f32", large, "128x128x32,s3,w8,g8", 0.85), _tune_row("f32", large, "128x128x16,s4,w8,g8", 0.8),
            _tune_row("f32", large, "128x128x32,s3,w8,g8", 2.5, mode="tf32x3")]
    res = tmp_path / "tune.json"
    res.write_text(json.dumps({"mode": "tune", "env": {"gpu": "NVIDIA H200", "triton": "3.6.0", "date": "2026-11-30"},
                           "rows": rows}))
    table = tmp_path / "configs.json"
    table.write_text(TABLE_PATH.read_text())
    before = table.read_text()
    r = _run(SCRIPT, "pick", res, "--table", table, "--dry-run")
    assert r.returncode == 0 and table.read_text() == before, r.stdout + r.stderr
    r = _run(SCRIPT, "pick", res, "--table", table)
    assert r.returncode == 0, r.stdout + r.stderr
    entries = json.loads(table.read_text())["entries"]
    names = [e["name"] for e in entries]
    tuned = [e for e in entries if e["name"].startswith("tuned-")]
    assert [e["name"] for e in tuned] == ["tuned-bf16-mn-small", "tuned-bf16-mn-large", "tuned-f32", "tuned-tf32x3"]
    # Narrow entries (small M, narrow N) stay first, the tuned ones precede every generic entry.
    narrow = [e["name"] for e in entries if e.get("max_m") is not None or e.get("max_n") is not None]
    assert "16bit-small-m" in narrow and "16bit-narrow-n" in narrow
    assert names[:len(narrow)] == narrow
    first_generic = min(i for i, e in enumerate(entries) if e["name"] not in narrow and e not in tuned)
    assert all(names.index(e["name"]) < first_generic for e in tuned)
    by = {e["name"]: e for e in tuned}
    assert by["tuned-bf16-mn-small"]["config"] == "128x128x64,s4,w8,g8"  # full coverage beats one shape's 1.2x
    assert "0.925x of cuBLAS" in by["tuned-bf16-mn-small"]["source"]  # geometric mean of 0.95 and 0.9
    assert "faster there: 8192x1024x4096 128x64x64,s4,w4,g8 1.200x" in by["tuned-bf16-mn-small"]["source"]
    assert "both by CUDA events" in by["tuned-bf16-mn-small"]["source"]
    assert "NVIDIA H200 tune 2026-11-30" in by["tuned-bf16-mn-small"]["source"]  # the result's date
    assert "8192x576x7168 0.900x" in by["tuned-bf16-mn-small"]["source"]
    assert by["tuned-bf16-mn-large"]["config"] == "128x256x64,s3,w8,g16"  # the faster one was not ok
    assert by["tuned-f32"]["config"] == "128x128x32,s3,w8,g8" and by["tuned-f32"]["inputs"] == ["f32"]
    assert by["tuned-tf32x3"]["inputs"] == ["tf32x3"] and "not IEEE FMA" in by["tuned-tf32x3"]["source"]
    load_table.cache_clear()
    assert choose_config(GemmSpec(8192, 1024, 4096), str(table)).label == "128x128x64,s4,w8,g8"
    assert choose_config(GemmSpec(8192, 1024, 4096, "f16", "f16", "f16"), str(table)).label == \
        "128x256x64,s3,w8,g8"  # f16 not tuned: the generic entry
    assert choose_config(GemmSpec(32, 1024, 4096), str(table)).block_m == 64  # small M unchanged
    # Picking again replaces the tuned entries instead of adding more.
    assert _run(SCRIPT, "pick", res, "--table", table).returncode == 0
    assert len(json.loads(table.read_text())["entries"]) == len(entries)
    res.write_text(json.dumps({"mode": "run", "rows": []}))
    r = _run(SCRIPT, "pick", res, "--table", table)
    assert r.returncode == 2 and "not a tune result" in r.stdout


def test_bad_config_is_one_line_error(tmp_path):
    r = _run(SCRIPT, "prepare", tmp_path / "b", "--configs", "128x128x64,s9,w8")
    assert r.returncode == 2 and r.stdout == "error: KernelConfig.num_stages must be an int in 1..8, got 9\n"
    assert not (tmp_path / "b").exists()


@skip_without("triton")
def test_prepare_real_bundle(tmp_path):
    bundle = tmp_path / "bundle"
    # The second configuration needs 262 KB of shared memory: listed as failed, the bundle goes on.
    r = _run(SCRIPT, "prepare", bundle, "--dtypes", "bf16", "--shapes", "256x256x128", "--no-checks",
             "--configs", "table", "128x256x64,s4,w8,g8", "--tune-dtypes", "bf16", "--tune-shapes", "256x256x128")
    assert r.returncode == 0, r.stdout + r.stderr
    manifest = json.loads((bundle / "manifest.json").read_text())
    (entry,) = manifest["entries"]
    assert entry["kernel"]["arch"] == "sm_90a" and entry["kernel"]["shared"] > 0
    assert (bundle / entry["file"]).stat().st_size == entry["vmfb_bytes"]
    (failure,) = manifest["failures"]
    assert "bytes of shared memory" in failure["error"]
    assert entry["kernel"]["stack_bytes"] == 0 and entry["kernel"]["registers"] > 0
    # Tuning candidates are compiled here first: registers, stack and shared memory noted.
    (job,) = manifest["tune"]["jobs"]
    assert job["class"] == "mn-small" and len(job["candidates"]) == 6
    assert all(c["aot"]["stack_bytes"] == 0 and c["aot"]["shared"] > 0 for c in job["candidates"])
    assert _run(bundle / "gpu_kernels.py", "check", bundle).returncode == 0


def _script_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_kernels_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_plan_items():
    gk = _script_module()
    specs = gk.parse_plan_items(["strassen,strassen^2@64x32x48/f32", "2x2x3:11@61x93x47/bf16/f32",
                                 "strassen@64x64x64/bf16/bf16/bf16"],
                                [(128, 128, 128), (256, 64, 32)], ["bf16", "f32"])
    assert [(s.scheme, s.M, s.N, s.K, s.dtype, s.product_dtype, s.operand_dtype) for s in specs] == [
        ("strassen", 128, 128, 128, "bf16", "f16", "f16"), ("strassen", 128, 128, 128, "f32", "f32", "f32"),
        ("strassen", 256, 64, 32, "bf16", "f16", "f16"), ("strassen", 256, 64, 32, "f32", "f32", "f32"),
        ("strassen^2", 64, 32, 48, "f32", "f32", "f32"), ("2x2x3:11", 61, 93, 47, "bf16", "f32", "f16"),
        ("strassen", 64, 64, 64, "bf16", "bf16", "bf16")]
    with pytest.raises(ValueError, match="operand_dtype f16 for f32 inputs"):
        gk.parse_plan_items(["strassen@64x64x64/f32/f32/f16"], [], [])
    default = gk.parse_plan_items(["default"], [], [])
    assert [s.name for s in default][:2] == ["strassen_bf16_16384x16384x16384_pf16_obf16_sf16",
                                             "strassen_bf16_16384x16384x16384_pbf16_obf16"]
    assert default[-1].name == "strassen3_f32_32768x32768x32768_pf32_of32"
    with pytest.raises(ValueError, match="unknown scheme 'nope'"):
        gk.parse_plan_items(["nope@8x8x8"], [], ["bf16"])
    with pytest.raises(ValueError, match="expected SCHEME"):
        gk.parse_plan_items(["strassen@8x8x8/f64"], [], ["bf16"])


def test_dry_run_plans(tmp_path):
    """Plan modules through prepare --cpu (IREE's own product as @main), run --cpu, and jit --cpu (the
    generated kernels under Triton's interpreter, in the script's own process)."""
    if not have("torch"):
        pytest.skip("needs torch")
    bundle, out = tmp_path / "bundle", tmp_path / "out"
    r = _run(SCRIPT, "prepare", bundle, "--cpu", "--no-gemm", "--no-checks", "--no-tune",
             "--plans", "strassen@90x70x100/bf16/bf16/bf16,2x2x3:11@61x93x47/f32,strassen@90x70x100/bf16")
    assert r.returncode == 0, r.stdout + r.stderr
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert [p["name"] for p in manifest["plans"]] == ["strassen_bf16_90x70x100_pbf16_obf16",
                                                      "2x2x3-11_f32_61x93x47_pf32_of32",
                                                      "strassen_bf16_90x70x100_pf16_obf16_sf16"]
    assert set(manifest["plans"][2]["jit"]) == {"p"}  # scaled: no JIT launches, runs from its module
    p = manifest["plans"][0]
    assert len(p["jit"]["a"]) == 4 and p["jit"]["a"][0]["config"] == "64x64,w4,l16"  # the default first
    assert all((bundle / c["source"]).is_file() for role in "abc" for c in p["jit"][role])
    assert _run(bundle / "gpu_kernels.py", "check", bundle).returncode == 0

    r = _run(bundle / "gpu_kernels.py", "run", bundle, "--cpu", "--repeat", "4", "--warmup", "1",
             "--interleave", "2", out=out)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads((out / "gpu_kernels_run.json").read_text())["rows"]
    plans = [x for x in rows if x["name"] != "torch.matmul"]
    assert [x["scheme"] for x in plans] == ["strassen", "strassen", "2x2x3:11"] and all(x["ok"] for x in plans)
    assert all(x["tflops"] == 2 * 90 * 70 * 100 / x["wall_ms"] / 1e9 for x in plans[:1])
    assert all(x["il_calls"] == 4 and x["vs_torch_interleaved"] == x["il_torch_ms"] / x["il_plan_ms"]
               for x in plans)  # two alternating rounds of 4 // 2 calls each
    assert "| eff. TFLOP/s |" in (out / "gpu_kernels_run.md").read_text()

    if not have("triton"):
        pytest.skip("the jit dry run needs triton")
    r = _run(bundle / "gpu_kernels.py", "jit", bundle, "--cpu", out=out)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [x for x in json.loads((out / "gpu_kernels_jit.json").read_text())["rows"] if x["name"] != "torch.matmul"]
    assert len(rows) == 2 and all(x["ok"] for x in rows), rows
    assert rows[0]["rel_err_f64"] < 3e-2 and rows[1]["rel_err_f64"] < 1e-5  # the generated kernels, interpreted
    k = rows[0]["kernels"]
    assert [c["default"] for c in k["combine_a"]] == [True, False, False, False] and "products" in k
    assert "Combine tile candidates" in (out / "gpu_kernels_jit.md").read_text()
