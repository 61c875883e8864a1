"""falcon-calibrate: a tiny CPU run gives a valid profile whose figures match the raw
timings; the GPU half (calibrate_run.py) runs without falcon_mlir; bad arguments
and unwritable outputs fail with one line and leave no file."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from falcon_mlir.decision.profile import Profile
from falcon_mlir.calibration.microbench import grouped_mlir, per_product_mlir
from falcon_mlir.tools import falcon_calibrate as fc

TINY = ["--quick", "--sizes", "128", "64", "--bandwidth-mb", "2", "--seconds", "0.03", "--no-progress",
        "--no-fit"]


def _check_profile(data: dict, raw: dict, name: str, sizes: list) -> Profile:
    prof = Profile.from_dict(data, where=name)
    assert prof.name == name and prof.source == "measured"
    assert prof.kind == "cpu" and prof.device == "local-task"
    assert prof.cores == (os.cpu_count() or 0) and prof.cores > 0
    assert "falcon-calibrate --quick" in prof.provenance and "iree-base-runtime" in prof.provenance
    # GEMM: one point per size, increasing n, FLOP/s = 2 n^3 / median of the raw timings.
    assert [n for n, _ in prof.gemm["f32"]] == sizes
    by_n = {p["n"]: p for p in raw["gemm"]["f32"]}
    for n, rate in prof.gemm["f32"]:
        p = by_n[int(n)]
        assert p["reps"] >= 3 and 0 < p["min_s"] <= p["median_s"]
        assert math.isclose(rate, 2 * n ** 3 / p["median_s"], rel_tol=1e-9)
        assert p["rel_err"] < 1e-4
        assert 1e6 < rate < 1e14  # a CPU: between 1 MFLOP/s and 100 TFLOP/s
    add = raw["add"]["f32"]
    assert add["dispatches"] == 1  # the chain fused: arithmetic, not dispatches
    assert math.isclose(prof.add["f32"], 8 * add["elements"] * add["chain"] / add["median_s"], rel_tol=1e-9)
    bw = raw["bandwidth"]
    assert bw["bytes"] == 12 * bw["elements"]
    assert math.isclose(prof.bandwidth, bw["bytes"] / bw["median_s"], rel_tol=1e-9)
    assert 1e8 < prof.bandwidth < 1e13
    d = raw["dispatch"]
    assert d["dispatches"] == [1, 65]
    slope = (d["median_s"][1] - d["median_s"][0]) / 64
    assert math.isclose(d["slope_s"], slope, rel_tol=1e-9) and d["floored"] == (slope <= 5e-8)
    # below the measurement's resolution (a loaded machine): the floor, not an error
    assert math.isclose(prof.dispatch_overhead, max(slope, 5e-8), rel_tol=1e-9)
    assert 0 < prof.dispatch_overhead < 1e-2
    assert set(prof.forms) == {"per_product_combine", "grouped_combine"}
    f = raw["forms"]
    b = f["per_product"]["block"]
    assert f["per_product"]["bytes"] == 3 * 4 * b * b
    assert f["grouped"]["bytes"] == (7 * 4 + 7) * 4 * b * b
    for form, key in (("per_product", "per_product_combine"), ("grouped", "grouped_combine")):
        want = f[form]["bytes"] / f[form]["median_s"] / prof.bandwidth
        assert math.isclose(prof.forms[key], want, rel_tol=1e-9) and prof.forms[key] > 0
    return prof


def test_quick_run(tmp_path, capsys):
    out, raw = tmp_path / "dev-box.json", tmp_path / "raw.json"
    assert fc.main(TINY + ["-o", str(out), "--raw", str(raw)]) == 0
    data = json.loads(out.read_text())
    _check_profile(data, json.loads(raw.read_text()), "dev-box", [64, 128])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev-box.json", "raw.json"]  # no temp files
    printed = capsys.readouterr().out
    assert "f32 gemm GFLOP/s  64:" in printed and f"wrote {out}" in printed


def test_bundle_runs_without_falcon(tmp_path):
    """--prepare, then the copied calibrate_run.py with falcon_mlir unimportable (the GPU machine's case)."""
    bundle = tmp_path / "bundle"
    assert fc.main(["--prepare", str(bundle), "--name", "boxy"] + TINY[:1] + ["--sizes", "64"] + TINY[4:]) == 0
    assert (bundle / fc.RUNNER).is_file() and (bundle / fc.MANIFEST).is_file()
    man = json.loads((bundle / fc.MANIFEST).read_text())
    assert man["device"] == "local-task" and man["name"] == "boxy"
    assert [m["role"] for m in man["modules"]] == ["gemm", "add", "bandwidth", "dispatch", "dispatch",
                                                   "per_product", "grouped"]
    out, raw = tmp_path / "p.json", tmp_path / "raw.json"
    code = ("import runpy, sys; sys.modules['falcon_mlir'] = None; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", code, str(bundle / fc.RUNNER), str(bundle), "-o", str(out),
                        "--raw", str(raw)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    _check_profile(json.loads(out.read_text()), json.loads(raw.read_text()), "boxy", [64])


@pytest.mark.parametrize("argv", [
    [],                                              # no -o
    ["--sizes", "0"],
    ["--sizes", "12x"],
    ["--dtypes", "f8"],
    ["--device", "rocm"],
    ["--seconds", "-1"],
    ["--bandwidth-mb", "0"],
    ["--frobnicate"],
    ["--device", "cuda", "--dtypes", "bf16"],
])
def test_bad_args(argv, tmp_path, capsys):
    out = tmp_path / "p.json"
    argv = argv + (["-o", str(out)] if argv else [])
    assert fc.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("falcon-calibrate: error: ") and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


def test_prepare_with_output_is_bad(tmp_path, capsys):
    assert fc.main(["--prepare", str(tmp_path / "b"), "-o", str(tmp_path / "p.json")]) == 2
    assert "--prepare" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_unwritable_output(tmp_path, capsys):
    # a folder that does not exist, and a path that is a folder: refused before measuring
    assert fc.main(TINY + ["-o", str(tmp_path / "missing" / "p.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("falcon-calibrate: error: -o ") and err.count("\n") == 1
    (tmp_path / "d").mkdir()
    assert fc.main(TINY + ["-o", str(tmp_path / "d")]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["d"] and list((tmp_path / "d").iterdir()) == []


@pytest.mark.parametrize("opt", ["-o", "--raw"])
def test_dash_output_is_refused(opt, tmp_path, capsys, monkeypatch):
    """``-`` is not stdout here (the summary goes there): one line, status 2, before measuring; it
    used to measure and write a file named '-'."""
    monkeypatch.chdir(tmp_path)
    argv = TINY + (["-o", "-"] if opt == "-o" else ["-o", str(tmp_path / "p.json"), "--raw", "-"])
    assert fc.main(argv) == 2
    err = capsys.readouterr().err
    assert err == (f"falcon-calibrate: error: {opt} -: stdout is not an output file here (the summary "
                   "goes there); give a file name\n")
    assert list(tmp_path.iterdir()) == []


def test_failed_run_leaves_nothing(tmp_path, capsys, monkeypatch):
    def boom(*a, **k):
        raise fc.CalibrationError("gemm f32 n=64: wrong result (relative error 1.00e+00)")

    monkeypatch.setattr(fc, "prepare_bundle", lambda *a, **k: {})  # compiling is not the point here
    monkeypatch.setattr(fc, "run_bundle", boom)
    out = tmp_path / "p.json"
    assert fc.main(TINY + ["--sizes", "64", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == "falcon-calibrate: error: gemm f32 n=64: wrong result (relative error 1.00e+00)\n"
    assert list(tmp_path.iterdir()) == []


def test_command_line_error_has_no_traceback(tmp_path):
    r = subprocess.run([sys.executable, "-m", "falcon_mlir.tools.falcon_calibrate", "--sizes", "-3",
                        "-o", str(tmp_path / "p.json")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.startswith("falcon-calibrate: error: ") and r.stderr.count("\n") == 1
    assert "Traceback" not in r.stderr and list(tmp_path.iterdir()) == []


def test_grouped_module_shape():
    """The grouped combine is one generic over 4 blocks with 7-entry tables indexed by r."""
    text = grouped_mlir(4)
    assert text.count("linalg.generic") == 1
    assert text.count("tensor.extract_slice") == 4
    assert text.count(": tensor<7xf32>") == 4
    assert "affine_map<(d0, d1, d2) -> (d0)>" in text
    assert "-> tensor<7x4x4xf32>" in text
    assert per_product_mlir(4).count("linalg.generic") == 1


def test_dispatch_chain_fences_as_the_rewrite_does():
    """The dispatch-cost chain was fenced with util.optimization_barrier, which IREE 3.13 turns into a
    host wait per op (70-110 us per dispatch here against the 0.05-1.4 us the rewrite's compute-barrier
    plans see); now with the rewrite's own fence, and still one dispatch per op."""
    from falcon_mlir.calibration.bundle import DEVICE_FLAGS, _count_dispatches
    from falcon_mlir.calibration.microbench import dispatch_chain_mlir
    from falcon_mlir.ir.builders import COMPUTE_BARRIER

    text = dispatch_chain_mlir(5)
    assert "util.optimization_barrier" not in text and text.count(COMPUTE_BARRIER) == 5
    assert _count_dispatches(text, DEVICE_FLAGS["local-task"]) == 5


def test_fit_solves_the_products_factor_exactly():
    """falcon_mlir.calibration.fit: measured times made from known factors are fitted back."""
    from falcon_mlir.calibration.fit import _parts, fit_forms

    prof = Profile.from_dict({"format": 1, "name": "t", "kind": "cpu", "bandwidth": 5e10,
                              "dispatch_overhead": 1e-5,
                              "dtypes": {"f32": {"gemm": [[256, 1e11], [4096, 3e11]]}},
                              "forms": {"per_product_combine": 0.5, "grouped_combine": 0.25}})
    measured = []
    for form, f in (("per-product", 1.3), ("grouped", 1.7)):
        for n in (1024, 2048):
            p, c = _parts(prof, n, form)
            e = prof.form_efficiency(form)
            measured.append({"n": n, "form": form, "seconds": f * p + c / e})
    fitted, forms = fit_forms(prof, measured)
    assert forms["per_product_products"] == pytest.approx(1.3, rel=1e-3)
    assert forms["grouped_products"] == pytest.approx(1.7, rel=1e-3)
    assert forms["per_product_combine"] == 0.5 and fitted.product_factor("grouped") == forms["grouped_products"]


def test_no_device_is_said_before_compiling(tmp_path, capsys, monkeypatch):
    """Was: --device cuda on a machine without a GPU compiled the whole bundle (13 modules) first."""
    def compiles(*a, **k):
        raise AssertionError("compiled before the device was checked")

    monkeypatch.setattr(fc, "prepare_bundle", compiles)
    monkeypatch.setattr(fc, "check_device", lambda driver: (_ for _ in ()).throw(
        fc.CalibrationError(f"cannot open IREE device '{driver}': no GPU")))
    assert fc.main(TINY + ["--device", "cuda", "-o", str(tmp_path / "p.json")]) == 1
    assert capsys.readouterr().err == "falcon-calibrate: error: cannot open IREE device 'cuda': no GPU\n"
    assert list(tmp_path.iterdir()) == []


def test_calibrate_interrupt_is_130_like_every_tool(capsys, tmp_path, monkeypatch):
    """Were: ``falcon-calibrate: error: interrupted`` with status 1; every tool says ``PROG:
    interrupted`` with 130 (``run_tool``). Nothing is written."""
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(fc, "_measure", interrupted)
    out = tmp_path / "p.json"
    rc = fc.main(["-o", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 130 and err.strip() == "falcon-calibrate: interrupted"
    assert not out.exists()
