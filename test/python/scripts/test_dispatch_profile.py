"""scripts/dispatch_profile.py: FLOP counts from dispatch names, the per-call rows, and one
profiled run of a small module (two GEMMs) on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "dispatch_profile.py"


def test_matmul_flops_from_names():
    import dispatch_profile as dp  # noqa: E402 (scripts/ is on the test path)

    assert dp.matmul_flops("main_dispatch_20_matmul_1024x14336x4096_f32") == 2.0 * 1024 * 14336 * 4096
    assert dp.matmul_flops("main_dispatch_13_batch_matmul_32x1024x1024x128_f32") == 2.0 * 32 * 1024 * 1024 * 128
    assert dp.matmul_flops("main_dispatch_14_softmax_1x1x32x1024x1024xf32_dispatch_tensor_store") == 0.0
    assert dp.matmul_flops("_encoding_6_encode_4096x14336xf32_to_4096x14336xf32") == 0.0
    assert dp.matmul_flops("main_dispatch_3_matmul_1024x4096_f32") == 0.0  # not M x N x K
    # IREE's name for a linalg.generic contraction (cpu_embed's @reference): was 0, no GFLOP/s shown
    assert dp.matmul_flops("reference_dispatch_0_matmul_like_512x256x128_f32") == 2.0 * 512 * 256 * 128
    assert dp.matmul_flops("d_0_batch_matmul_like_4x64x32x16_f32") == 2.0 * 4 * 64 * 32 * 16


def test_summarize_per_call_rows():
    import dispatch_profile as dp  # noqa: E402

    groups = [{"key": "d_0_matmul_64x32x16_f32", "count": 4, "total_ns": 8_000_000, "last_workgroup_count": [8, 1, 1]},
              {"key": "d_1_elementwise_64_f32", "count": 2, "total_ns": 24_000_000, "last_workgroup_count": [2, 1, 1]}]
    res = dp.summarize(groups, 2, [20.0, 18.0, 30.0])
    assert res["median_call_ms"] == 20.0 and res["sum_ms"] == pytest.approx(16.0)
    first, second = res["rows"]
    assert first["dispatch"] == "d_1_elementwise_64_f32" and first["ms"] == pytest.approx(12.0)
    assert first["share"] == pytest.approx(75.0) and first["gflops"] is None and first["per_call"] == 1
    assert second["per_call"] == 2 and second["ms"] == pytest.approx(4.0) and second["workgroups"] == 8
    assert second["gflops"] == pytest.approx(2 * 2 * 64 * 32 * 16 / 4e-3 / 1e9)
    with pytest.raises(ValueError):
        dp.summarize(groups, 0, [])


def test_profile_of_a_two_gemm_module(tmp_path):
    """C = (A @ B) @ D with data tiling: both GEMM dispatches appear once per call with their
    FLOP rate, the shares add up to 100%, the JSON holds the same rows."""
    from iree.compiler import compile_str

    from falcon_mlir.runner import BEST_CPU_FLAGS, CPU_FLAGS

    src = ("func.func @main(%a: tensor<256x512xf32>, %b: tensor<512x384xf32>, %d: tensor<384x128xf32>) "
           "-> tensor<256x128xf32> {\n"
           "  %z = arith.constant 0.0 : f32\n"
           "  %e0 = tensor.empty() : tensor<256x384xf32>\n"
           "  %f0 = linalg.fill ins(%z : f32) outs(%e0 : tensor<256x384xf32>) -> tensor<256x384xf32>\n"
           "  %c0 = linalg.matmul ins(%a, %b : tensor<256x512xf32>, tensor<512x384xf32>) "
           "outs(%f0 : tensor<256x384xf32>) -> tensor<256x384xf32>\n"
           "  %e1 = tensor.empty() : tensor<256x128xf32>\n"
           "  %f1 = linalg.fill ins(%z : f32) outs(%e1 : tensor<256x128xf32>) -> tensor<256x128xf32>\n"
           "  %c1 = linalg.matmul ins(%c0, %d : tensor<256x384xf32>, tensor<384x128xf32>) "
           "outs(%f1 : tensor<256x128xf32>) -> tensor<256x128xf32>\n"
           "  return %c1 : tensor<256x128xf32>\n}")
    vmfb = tmp_path / "m.vmfb"
    vmfb.write_bytes(compile_str(src, extra_args=list(CPU_FLAGS) + list(BEST_CPU_FLAGS)))
    rng = np.random.default_rng(0)
    ins = []
    for name, shape in (("a", (256, 512)), ("b", (512, 384)), ("d", (384, 128))):
        np.save(tmp_path / f"{name}.npy", rng.standard_normal(shape, dtype=np.float32))
        ins += ["--input", f"@{tmp_path / f'{name}.npy'}"]
    out = tmp_path / "p.json"
    r = subprocess.run([sys.executable, str(SCRIPT), str(vmfb), *ins, "--calls", "2", "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    mm = {row["dispatch"]: row for row in res["rows"] if "matmul" in row["dispatch"]}
    assert sorted(k.split("_matmul_")[1] for k in mm) == ["256x128x384_f32", "256x384x512_f32"], mm
    for row in mm.values():
        assert row["per_call"] == 1 and row["ms"] > 0 and row["gflops"] > 0
    assert sum(row["share"] for row in res["rows"]) == pytest.approx(100.0)
    assert res["calls"] == 2 and len(res["call_ms"]) == 2 and res["sum_ms"] > 0
    assert r.stdout.splitlines()[-1].startswith("sum of the dispatches ")


def test_missing_module_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "no.vmfb")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [f"dispatch-profile: error: {tmp_path / 'no.vmfb'}: no such file"]


#: A 64x32 @ 32x48 f32 matmul.
TINY = ("func.func @main(%a: tensor<64x32xf32>, %b: tensor<32x48xf32>) -> tensor<64x48xf32> {\n"
        "  %z = arith.constant 0.0 : f32\n"
        "  %e = tensor.empty() : tensor<64x48xf32>\n"
        "  %f = linalg.fill ins(%z : f32) outs(%e : tensor<64x48xf32>) -> tensor<64x48xf32>\n"
        "  %c = linalg.matmul ins(%a, %b : tensor<64x32xf32>, tensor<32x48xf32>) "
        "outs(%f : tensor<64x48xf32>) -> tensor<64x48xf32>\n"
        "  return %c : tensor<64x48xf32>\n}")


def _tiny_module(tmp_path):
    """A 64x32 @ 32x48 f32 matmul module and its two inputs as .npy files."""
    from iree.compiler import compile_str

    from falcon_mlir.runner import CPU_FLAGS

    src = TINY
    vmfb = tmp_path / "m.vmfb"
    vmfb.write_bytes(compile_str(src, extra_args=list(CPU_FLAGS)))
    rng = np.random.default_rng(1)
    np.save(tmp_path / "a.npy", rng.standard_normal((64, 32), dtype=np.float32))
    np.save(tmp_path / "b.npy", rng.standard_normal((32, 48), dtype=np.float32))
    np.save(tmp_path / "a64.npy", rng.standard_normal((64, 32)))  # float64
    return vmfb


@pytest.mark.parametrize("inputs, want", [
    (["a.npy"], "INVALID_ARGUMENT; input list and function mismatch; expected 2 arguments but passed 1"),
    (["a64.npy", "b.npy"], "INVALID_ARGUMENT; input0 element type mismatch; expected f32"),
])
def test_benchmark_failure_names_the_cause(tmp_path, inputs, want):
    """Were (break-it review): the line shown was iree-benchmark-module's first line, its start
    timestamp ('dispatch-profile: error: iree-benchmark-module failed: 2026-12-02T14:08:48+00:00')."""
    vmfb = _tiny_module(tmp_path)
    args = [a for i in inputs for a in ("--input", f"@{tmp_path / i}")]
    r = subprocess.run([sys.executable, str(SCRIPT), str(vmfb), *args], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dispatch-profile: error: iree-benchmark-module failed: ")
    assert want in lines[0], lines


def test_json_into_a_missing_folder_is_refused_before_the_run(tmp_path):
    """Were: the profile ran, printed its table, then 'internal error: FileNotFoundError'."""
    vmfb = _tiny_module(tmp_path)
    out = tmp_path / "no" / "p.json"
    r = subprocess.run([sys.executable, str(SCRIPT), str(vmfb), "--input", f"@{tmp_path / 'a.npy'}",
                        "--input", f"@{tmp_path / 'b.npy'}", "--json", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [f"dispatch-profile: error: --json {out}: no such folder {out.parent}"]


def test_warm_up_call_is_left_out_and_medians_taken():
    """Were (break-it review): ms per call was the mean over all profiled calls, the cold first call
    included (a 1024^3 GEMM: 13.7 ms first, 11.0 after; encodes 1.06 against 0.4 ms) and any outlier
    of the shared machine (one call of 74 ms among 11-13). Now the first of calls + 1 runs is the
    warm-up, dropped, and each dispatch's ms is the median of its per-call sums."""
    import dispatch_profile as dp  # noqa: E402

    def ev(key, t, ms, wg=8):
        return {"key": key, "start_host_time_ns": t, "duration_ns": int(ms * 1e6), "workgroup_count": [wg, 1, 1]}

    # 4 runs (1 warm-up + 3 calls); "mm" once per call, "enc" twice per call, "once" only in one call
    evs = [ev("mm", 100, 13.7), ev("mm", 200, 11.0), ev("mm", 300, 74.3), ev("mm", 400, 12.0, wg=16)]
    evs += [ev("enc", 50 + 100 * i + j, ms) for i, pair in enumerate([(1.0, 1.2), (0.4, 0.5), (0.3, 0.3), (0.4, 0.6)])
            for j, ms in enumerate(pair)]
    evs.append(ev("once", 10, 5.0))
    groups = {g["key"]: g for g in dp.groups_from_events(evs[::-1], 4)}  # any order in
    assert groups["mm"]["count"] == 3 and groups["mm"]["per_call_ns"] == [11_000_000, 74_300_000, 12_000_000]
    assert groups["mm"]["last_workgroup_count"] == [16, 1, 1]
    assert groups["enc"]["count"] == 6 and groups["enc"]["per_call_ns"] == [900_000, 600_000, 1_000_000]
    assert groups["once"]["count"] == 1 and groups["once"]["per_call_ns"] is None
    res = dp.summarize(list(groups.values()), 3, [12.0, 80.0, 13.0])
    rows = {r["dispatch"]: r for r in res["rows"]}
    assert rows["mm"]["ms"] == pytest.approx(12.0) and rows["mm"]["per_call"] == 1
    assert rows["enc"]["ms"] == pytest.approx(0.9) and rows["enc"]["per_call"] == 2
    assert rows["once"]["ms"] == pytest.approx(5.0 / 3)
    assert res["median_call_ms"] == 13.0


def test_module_with_parameters_from_an_archive(tmp_path):
    """A module whose B is an IREE parameter runs with --parameters model=FILE.irpa (the archive
    run_model.py --save-dir writes); without the archive or with a value that is not SCOPE=FILE it is
    one line, exit 2, before the run."""
    from iree.compiler import compile_str

    from falcon_mlir.parameters import with_weight_parameters, write_archive
    from falcon_mlir.runner import CPU_FLAGS

    src = TINY
    vmfb = tmp_path / "m.vmfb"
    vmfb.write_bytes(compile_str(with_weight_parameters(src, {1: "b"}), extra_args=list(CPU_FLAGS)))
    rng = np.random.default_rng(2)
    np.save(tmp_path / "a.npy", rng.standard_normal((64, 32), dtype=np.float32))
    write_archive(str(tmp_path / "w.irpa"), {"b": rng.standard_normal((32, 48), dtype=np.float32)})
    base = [sys.executable, str(SCRIPT), str(vmfb), "--input", f"@{tmp_path / 'a.npy'}", "--calls", "1"]
    r = subprocess.run(base + ["--parameters", f"model={tmp_path / 'w.irpa'}"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "matmul_64x48x32" in r.stdout and r.stdout.splitlines()[-1].startswith("sum of the dispatches ")
    for value, want in ((f"model={tmp_path / 'no.irpa'}", f"{tmp_path / 'no.irpa'}: no such file"),
                        ("w.irpa", "give SCOPE=FILE"), (f"={tmp_path / 'w.irpa'}", "give SCOPE=FILE"),
                        (f"model=x={tmp_path / 'w.irpa'}", f"x={tmp_path / 'w.irpa'}: no such file")):
        r = subprocess.run(base + ["--parameters", value], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert want in r.stderr, r.stderr
